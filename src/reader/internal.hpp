// reader — private state of a Checkpoint and the decode entry points that use it.
#pragma once
#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctstream/checkpoint.hpp"
#include "io/file.hpp"
#include "io/read_ahead.hpp"
#include "reader/decode_plan.hpp"

namespace ctstream {

/// Caller-side buffer for Checkpoint::Impl::bytes (pread mode, and quantized formats in mmap
/// mode too: RowDecoder::windowed), one per call site and thread: it keeps the window it last
/// read, so walking a part row by row costs one read per kReadWindow bytes, not one per row. Keyed by the checkpoint's
/// serial number, file and offset, so it never serves bytes of another checkpoint or place.
struct ReadWindow {
  static constexpr uint64_t kReadWindow = 256u << 10;
  std::vector<std::byte> buf;
  uint64_t serial = 0;  // Impl::serial of the data in buf; 0: empty
  uint32_t file = 0;
  uint64_t begin = 0;  // file offset of buf[0]
};

struct Checkpoint::Impl {
  uint64_t serial = 0;  // unique per opened checkpoint in this process (never 0)
  OpenOptions opt;
  bool remote = false;  // s3:// or http(s)://: every file is an io::RemoteFile
  std::string opened;   // the path or URL the caller opened (names the checkpoint in errors)
  std::vector<std::filesystem::path> paths;
  std::vector<Checkpoint::SourceFile> sources;  // every file read at open (source_files())
  std::vector<std::unique_ptr<io::File>> files;
  std::vector<std::map<std::string, std::string>> metadata;
  std::vector<bool> has_metadata;
  std::string config;
  ConfigInfo config_info;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> by_name;
  // every part of `tensors`, keyed by the part's own key string (tensors never change after open)
  std::unordered_map<std::string_view, const TensorPart*> part_by_key;
  std::vector<reader::DecodePlan> plans;  // plans[i]: tensors[i]'s, built at open
  // After `files`: destroyed first, so its thread stops before the files it advises close.
  mutable io::ReadAhead read_ahead;
  mutable std::atomic<size_t> last_decoded{
      SIZE_MAX};  // tensors[] index of the last whole decode (reader/read_schedule.cpp)

  /// The index of `t` in `tensors` when it is one of them (not a TensorInfo copied out, nor a
  /// low-rank weight's factor), else SIZE_MAX.
  size_t index_of(const TensorInfo& t) const {
    const std::less<const TensorInfo*> before;
    if (!tensors.empty() && !before(&t, tensors.data()) && before(&t, tensors.data() + tensors.size()))
      return static_cast<size_t>(&t - tensors.data());
    return SIZE_MAX;
  }
  /// The decode plan of `t`: the cached one for a tensor of this checkpoint, else one built into
  /// `own`.
  const reader::DecodePlan& plan(const TensorInfo& t, reader::DecodePlan& own) const {
    if (const size_t i = index_of(t); i != SIZE_MAX) return plans[i];
    own = reader::make_plan(t);
    return own;
  }

  const io::File& file_of(const TensorPart& p) const {
    if (p.file >= files.size())
      throw Error(ErrorKind::invalid_argument, "", p.key,
                  "part names file " + std::to_string(p.file) + " of a checkpoint with " +
                      std::to_string(files.size()) + " files (a part of another checkpoint?)");
    return *files[p.file];
  }
  /// Checks a part is still fully inside its (possibly mapped) file before touching it.
  void guard(const TensorPart& p) const {
    if (p.nbytes > UINT64_MAX - p.offset)
      throw Error(ErrorKind::invalid_argument, "", p.key, "part offset + size overflows 64 bits");
    file_of(p).guard(p.offset + p.nbytes);
  }
  /// `t` when it is one of this checkpoint's tensors, else the tensor of its name when `t` equals
  /// it (a copy); else Error{invalid_argument}: an edited copy, or one of another checkpoint, would
  /// be read at places its parts do not describe here.
  const TensorInfo& owned(const TensorInfo& t) const;
  /// A stored part of this checkpoint (by its key), or a piece of one (the same file, a byte range
  /// inside it: the CUDA path stages a part in pieces); else Error{invalid_argument}.
  void check_part(const TensorPart& p) const;
  /// Bytes [off, off+n) of a part: a view in mmap mode (after guard), else from the window
  /// (read now if it does not hold them). The span lives until the window's next use.
  std::span<const std::byte> bytes(const TensorPart& p, uint64_t off, uint64_t n, ReadWindow& window,
                                   bool windowed = false) const;
  unsigned threads() const;
  /// Bytes [offset, offset + length) of files[file] (reader/read_schedule.hpp).
  struct Range {
    uint32_t file = 0;
    uint64_t offset = 0, length = 0;
  };
};

namespace reader {

/// Overrides, for the calling thread, how many threads one decode may use (Stream workers use
/// it: a batch of small tensors decodes one tensor per thread, a large tensor gets them all).
class ScopedDecodeThreads {
 public:
  explicit ScopedDecodeThreads(unsigned n);
  ~ScopedDecodeThreads();
  ScopedDecodeThreads(const ScopedDecodeThreads&) = delete;
  ScopedDecodeThreads& operator=(const ScopedDecodeThreads&) = delete;
  static unsigned current();  ///< 0 when not overridden

 private:
  unsigned prev_;
};

/// Geometry of a (possibly sliced) logical tensor viewed as [outer, dim, inner].
struct SliceGeom {
  uint64_t outer = 1, dim = 1, inner = 1;  ///< full sizes
  uint64_t start = 0, len = 1;             ///< selected range of `dim`
  uint64_t out_elems() const { return outer * len * inner; }
  bool sliced() const { return len != dim || outer != 1 || inner != 1; }
};
SliceGeom slice_geometry(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& s);

/// Bytes a decode of `g` writes as `out_dtype` (sub-byte dtypes round up); Error{buffer_too_small}
/// naming the tensor when `out` holds fewer. The one output-size check of every decoder.
uint64_t require_output(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<const std::byte> out,
                        DType out_dtype, const SliceGeom& g);

/// Runs body(i) for i in [0, n) on up to `threads` OpenMP threads; the first exception thrown
/// by any body is rethrown on the caller's thread after the loop.
void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& body);

/// Refuses (Error{invalid_argument} naming `file`) a thread count past kMaxThreads: `what` is the
/// option ("threads", "stream threads"). OpenOptions and StreamOptions are checked by this one rule.
void check_threads(unsigned threads, const char* what, const std::string& file);

/// Decodes `t` (any format) into `out`: the body of Checkpoint::decode_into, for decoders that
/// decode other tensors first (a low-rank weight's factors).
uint64_t decode(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                const std::optional<Slice>& slice);

/// Format::low_rank: the product of the factors (decode_low_rank.cpp).
uint64_t decode_low_rank(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                         const SliceGeom& g, const std::optional<Slice>& slice);

/// Remote files: a dense tensor's slice of an inner dim whose byte ranges (`ranges`, from
/// reader::decode_ranges) pass the file's cache is decoded in blocks of outer indices, each fetched
/// ahead (coalesced) and released after; false (nothing done) when that does not apply.
bool decode_remote_dense_blocks(const Checkpoint::Impl& ck, const TensorInfo& t,
                                std::span<const Checkpoint::Impl::Range> ranges, std::span<std::byte> out,
                                DType out_dtype, const std::optional<Slice>& slice, uint64_t& written);

/// Format::dense (plan.refusal() checked by the caller).
uint64_t decode_dense(const Checkpoint::Impl& ck, const DecodePlan& plan, std::span<std::byte> out, DType out_dtype,
                      const SliceGeom& g);

/// Checkpoint::validate's body: every check of the stored data a decode runs, without decoding.
void validate(const Checkpoint::Impl& ck, const TensorInfo& t);

class RowDecoder;

/// Checkpoint::decode_chunked's decodes: one tensor decoded in many calls (slices of dim 0)
/// with one plan and, for the row-decoded formats, one decoder: the data it loads (a sparse
/// mask's popcounts, zero points, act-order indices) is read and checked once, not per chunk.
class ChunkedDecode {
 public:
  /// Refuses `out_dtype` and checks the stored data (what Checkpoint::validate checks).
  ChunkedDecode(const Checkpoint::Impl& ck, const TensorInfo& t, DType out_dtype);
  ~ChunkedDecode();
  uint64_t decode(std::span<std::byte> out, const std::optional<Slice>& slice) const;

 private:
  const Checkpoint::Impl& ck_;
  const TensorInfo& t_;
  DType out_;
  DecodePlan own_;
  const DecodePlan& plan_;
  std::unique_ptr<RowDecoder> dec_;  // row-decoded formats
};

[[noreturn]] void fail(const Checkpoint::Impl& ck, const TensorInfo& t, ErrorKind kind, const std::string& msg);
/// The file a tensor's main part lives in ("" when unknown), for error messages.
std::string file_name(const Checkpoint::Impl& ck, const TensorInfo& t) noexcept;

}  // namespace reader
}  // namespace ctstream
