// ctstream — open a checkpoint, iterate its tensors' metadata, decode each into caller memory.
//
//   auto ckpt = ctstream::Checkpoint::open("model_dir");        // file or directory
//   std::vector<std::byte> buf;
//   for (const ctstream::TensorInfo& t : ckpt.tensors()) {      // metadata only, no data read
//     buf.resize(t.decoded_bytes(ctstream::DType::BF16));
//     ckpt.decode_into(t, buf, ctstream::DType::BF16);          // reads + decodes now
//   }
//
// Opening reads only headers, the shard index and config.json (bounded by the options); tensor
// bytes are touched only by decode_into / stored_view / read_part. Every method is safe to call
// from several threads at once on the same Checkpoint.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/error.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream {

/// How file bytes are reached.
enum class IoMode : uint8_t {
  mmap,   ///< map each file read-only (default; zero-copy views available, with their risk:
          ///< see part_view)
  pread,  ///< positional reads into small scratch buffers (network filesystems; immune to
          ///< SIGBUS when a file is truncated by someone else while open)
};

/// Iteration order of tensors().
enum class Order : uint8_t {
  file,  ///< by file, then by offset: sequential I/O (default)
  name,  ///< lexicographic by logical name
};

/// How a low-rank checkpoint (ptdeco: `decompose_config.json` beside the weights) is presented.
enum class LowRank : uint8_t {
  original,  ///< as the original architecture: `m.weight` = `m.1.weight` @ `m.0.weight`
             ///< (Format::low_rank, computed on demand in fp32), `m.bias` = `m.1.bias` (default)
  stored,    ///< the factors under their own names (decompose_config.json is not read)
};

/// The most decode threads a Checkpoint or Stream accepts (OpenOptions / StreamOptions::threads).
inline constexpr unsigned kMaxThreads = 1024;

struct OpenOptions {
  IoMode io = IoMode::mmap;
  Order order = Order::file;
  /// Largest safetensors JSON header accepted (safetensors' own cap is 100,000,000).
  uint64_t max_header_bytes = 100'000'000;
  /// Largest index / config.json accepted.
  uint64_t max_json_bytes = 64ull << 20;
  /// Threads used to decode one large tensor (0 = OpenMP default, i.e. all cores); at most
  /// kMaxThreads (more is an invalid_argument error: GNU OpenMP ends the process when it cannot
  /// make a team's threads).
  unsigned threads = 0;
  LowRank low_rank = LowRank::original;
  /// Opening one file that an index beside it names (a shard of a saved model, as safetensors'
  /// safe_open and per-shard loaders do): the parts of its modules stored in other shards (a save
  /// that cut a module between shards) are read from them, and the file lists the tensors whose
  /// values it stores -- every shard opened in turn lists each tensor once. Only where config.json
  /// is compressed-tensors' (the index unreadable: the file alone); a low-rank model's factors are
  /// not gathered this way. false: the file alone (a module cut between shards is then an error).
  bool sibling_shards = true;
  /// Every stored safetensors entry as a tensor of its own, under its own key, as safetensors
  /// lists them (`weight_packed`, `weight_scale`, ... not grouped): config.json, decompose_config.json
  /// and the shards beside a file opened alone are not read (nor do `sibling_shards`, `low_rank` or
  /// `module_classes` apply). A checkpoint is then read as a plain safetensors one.
  bool stored_entries = false;
  /// The model's module classes, for config groups that target class names (`Linear`,
  /// `Embedding`, `LlamaAttention`, ...): module name -> the class names it counts as (its class and
  /// base classes, `type(m).__mro__`, as compressed-tensors' `match_class` tests them). A module
  /// without an entry has an unknown class: of the class-name groups, those that cannot describe its
  /// stored parts drop out, and if the rest would decode it differently it is refused
  /// (Error{unsupported} naming the groups), never guessed.
  std::map<std::string, std::vector<std::string>> module_classes;
};

/// What the reader took the checkpoint to be. A checkpoint is a compressed-tensors one when its
/// config.json has a `quantization_config` (or the older `compression_config`) whose quant_method
/// is "compressed-tensors" (or "sparseml", or none given), or a top-level `sparsity_config`; then
/// its parts are grouped and decoded as that config says, and only as it says. Anything else (no
/// config.json, AutoFP8's "fp8", GPTQ, ...) reads entry by entry exactly as safetensors reads it.
struct ConfigInfo {
  bool compressed_tensors = false;
  std::filesystem::path file;  ///< the config.json read (empty when there is none)
  /// e.g. "quantization_config (compressed-tensors 0.20.0)", "no config.json",
  /// "config.json has quantization_config.quant_method \"fp8\", not compressed-tensors".
  std::string description;
};

/// OpenOptions::module_classes from JSON text (`{"model.embed_tokens": ["Embedding", "Module"]}`:
/// module name -> the class names of `type(m).__mro__`); Error{invalid_argument} naming `what`
/// (a file name, "--module-classes") unless it is an object of string lists.
std::map<std::string, std::vector<std::string>> module_classes_from_json(std::string_view json_text,
                                                                         const std::string& what);
/// The same from a file, read as the reader reads config.json: a regular file (a FIFO or a device
/// is refused, never waited on or read without end) of at most `max_bytes`; Error naming it.
std::map<std::string, std::vector<std::string>> module_classes_from_file(const std::filesystem::path& file,
                                                                         uint64_t max_bytes = 64ull << 20);

class Checkpoint {
 public:
  /// Opens a single `.safetensors` file, or a directory holding `model.safetensors.index.json`,
  /// or a directory holding one or more `*.safetensors` files (with or without config.json).
  /// Throws ctstream::Error on any malformed input.
  static Checkpoint open(const std::filesystem::path& path, const OpenOptions& options = {});

  /// A moved-from Checkpoint holds nothing: it may be assigned to or destroyed, and nothing else
  /// (as a moved-from std::unique_ptr may not be dereferenced).
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  /// Logical tensors in the order chosen by OpenOptions::order.
  std::span<const TensorInfo> tensors() const noexcept;
  /// Lookup by logical name; nullptr when absent.
  const TensorInfo* find(std::string_view name) const noexcept;
  /// Lookup by logical name; throws Error{not_found}.
  const TensorInfo& at(std::string_view name) const;

  /// Decodes `t` (or the slice of it) into `out` as `out_dtype`. `t` is one of this checkpoint's
  /// tensors (at(), tensors()) or a copy equal to it; an edited copy, or one of another
  /// checkpoint, is Error{invalid_argument} (so are read_part / part_view of a part that is none of
  /// its parts nor a byte range of one).
  /// Compressed tensors and floating tensors (F64, F32, F16, BF16, F8_*, F4; not F6, whose
  /// element order safetensors does not define) convert to F32/F16/BF16 (round-to-nearest-even,
  /// NaN/Inf kept; F64 to F16/BF16 goes through F32, as torch's casts do: two roundings); any
  /// other dtype is copied as is and needs out_dtype == t.dtype (Error{unsupported} otherwise;
  /// output_dtype() gives the dtype to ask for). `out` must hold at least decoded_bytes (of the
  /// slice); the bytes after that are left untouched. In IoMode::mmap a file truncated by another
  /// process while a decode reads its mapping can still raise SIGBUS (a truncation found before the
  /// read is Error{truncated}); IoMode::pread gives Error{truncated} in every case.
  /// @return the number of bytes written.
  uint64_t decode_into(const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                       const std::optional<Slice>& slice = std::nullopt) const;

  /// Decodes `t` as `out_dtype` in pieces of whole leading-dim slices of about `max_bytes` each
  /// (one slice when a single one is larger; the whole tensor at once for 0-d and sub-byte
  /// outputs), calling `sink` with each piece in order: memory is one piece, whatever the size
  /// the file claims (a low-rank product can be ~in/2 times its factors). For callers that
  /// stream a tensor somewhere (verify, decompress) rather than keep it.
  /// @return the number of bytes decoded.
  uint64_t decode_chunked(const TensorInfo& t, DType out_dtype, uint64_t max_bytes,
                          const std::function<void(std::span<const std::byte>)>& sink) const;

  /// Shape of `slice` of `t` (t.shape without one): `stop` clamps to the dimension size; a dim
  /// out of range or a start past the clamped stop is Error{invalid_argument} naming the file and
  /// the tensor. The slice rule decode_into() applies, for callers that shape its output (the
  /// Python module, the C ABI): one rule on every surface.
  std::vector<uint64_t> output_shape(const TensorInfo& t, const std::optional<Slice>& slice = std::nullopt) const;
  /// Bytes decode_into() writes for `slice` of `t` as `out_dtype`: the size of its output buffer.
  /// Checks the slice as output_shape() does, and refuses (Error{unsupported}) a dtype or slice
  /// that decode_into() refuses for `t`.
  uint64_t output_bytes(const TensorInfo& t, DType out_dtype, const std::optional<Slice>& slice = std::nullopt) const;

  /// Runs every check decode_into() would run on `t`'s data (bitmask popcounts against the
  /// stored values, row_offsets, act-order indices, a file truncated since open, ...) without
  /// decoding or allocating its decoded size: check a tensor before sizing a buffer for it.
  /// Throws the Error decode_into() would throw.
  void validate(const TensorInfo& t) const;

  /// Zero-copy view of a dense tensor's stored bytes (mmap mode only; throws otherwise).
  /// Valid while the Checkpoint lives. The same risk as part_view().
  std::span<const std::byte> stored_view(const TensorInfo& t) const;
  /// Zero-copy view of one stored part (mmap mode only): keep-packed passthrough. An opt-in with
  /// a risk no check can remove: the span points into the shared mapping of the file, so if any
  /// process truncates or shrinks the file while you still read the span, the kernel raises
  /// SIGBUS on the first touched page past the new end, which kills the process (no Error is
  /// possible). The Error{truncated} this throws covers only a truncation before the call. Use
  /// read_part() / decode_into() (copies by pread: a truncation is Error{truncated}) unless
  /// nobody can modify the file while it is open (read-only filesystem, immutable store).
  std::span<const std::byte> part_view(const TensorPart& p) const;
  /// Copies one stored part's raw bytes into `out` (any io mode). @return bytes written.
  uint64_t read_part(const TensorPart& p, std::span<std::byte> out) const;

  /// The files that make up the checkpoint (shards), index = TensorPart::file. A remote one by its
  /// URL without query or fragment (a presigned URL's signature is never shown).
  std::span<const std::filesystem::path> files() const noexcept;
  /// The path or URL the checkpoint was opened from, as messages name it (a URL without its query
  /// or fragment).
  const std::string& name() const noexcept;
  /// A file open() read, with the identity (st_dev, st_ino) it had when it was read.
  struct SourceFile {
    std::filesystem::path path;
    uint64_t device = 0, inode = 0;
  };
  /// Every file the checkpoint was opened from: its shards, its index, config.json and
  /// decompose_config.json (also when the factors are read as stored). Writers refuse an output
  /// that is one of them (decompress_to_file), whatever path names it.
  std::span<const SourceFile> source_files() const noexcept;
  /// `__metadata__` of one file ({} when the file has none).
  const std::map<std::string, std::string>& file_metadata(uint32_t file) const;
  /// Whether the file's header has a `__metadata__` object (safetensors' `metadata()` is None
  /// otherwise, and {} for an empty one).
  bool file_has_metadata(uint32_t file) const noexcept;
  /// Raw text of config.json, empty if the checkpoint has none.
  const std::string& config_json() const noexcept;
  /// Which config, if any, decided how the stored entries are grouped and decoded.
  const ConfigInfo& config_info() const noexcept;
  const OpenOptions& options() const noexcept;

  /// Hint that this tensor will be decoded soon (readahead). Advisory.
  void will_need(const TensorInfo& t) const;
  /// Hint that this tensor is done: its mapped pages leave the process (RSS). With
  /// `drop_page_cache` they are evicted from the OS page cache as well (cold-start measurements;
  /// other processes reading the same files then re-read them from disk). Advisory.
  void release(const TensorInfo& t, bool drop_page_cache = false) const;

  /// Counters of a remote checkpoint's files (s3://, https://); all zero for local files.
  struct RemoteStats {
    uint64_t requests = 0;           ///< ranged GETs sent (open's header reads included)
    uint64_t bytes_fetched = 0;      ///< body bytes those requests asked for
    uint64_t cached_bytes = 0;       ///< read-ahead cache held now (fetched or in flight)
    uint64_t peak_cached_bytes = 0;  ///< the most each file's cache held at once, summed over files
    uint64_t file_bytes = 0;         ///< total size of the files
  };
  /// What reading this checkpoint has cost so far. A decode on a remote source fetches the byte
  /// ranges it needs ahead of its decoders into each file's bounded cache (CTSTREAM_S3_PREFETCH_BYTES,
  /// in requests of up to CTSTREAM_S3_CHUNK_BYTES; for a slice, only the slice's rows or columns
  /// where the layout says where they are, ranges closer than CTSTREAM_S3_COALESCE_GAP joined)
  /// and frees them when it ends.
  RemoteStats remote_stats() const;

  struct Impl;  ///< opaque; defined in src/ only
  /// The opaque state, for ctstream's own sources (the CUDA path reads the decode plans there).
  const Impl& impl() const noexcept { return *impl_; }

 private:
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  static Checkpoint open_impl(const std::filesystem::path& path, const OpenOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctstream
