// reader — private state of a Checkpoint and the decode entry points that use it.
#pragma once
#include <exception>
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ctstream/checkpoint.hpp"
#include "io/file.hpp"

namespace ctstream {

struct Checkpoint::Impl {
  OpenOptions opt;
  std::vector<std::filesystem::path> paths;
  std::vector<std::unique_ptr<io::File>> files;
  std::vector<std::map<std::string, std::string>> metadata;
  std::string config;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> by_name;

  const io::File& file_of(const TensorPart& p) const { return *files.at(p.file); }
  /// Checks a part is still fully inside its (possibly mapped) file before touching it.
  void guard(const TensorPart& p) const { file_of(p).guard(p.offset + p.nbytes); }
  /// Bytes [off, off+n) of a part: a view in mmap mode (after guard), else read into scratch.
  std::span<const std::byte> bytes(const TensorPart& p, uint64_t off, uint64_t n,
                                   std::vector<std::byte>& scratch) const;
  unsigned threads() const;
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
};
SliceGeom slice_geometry(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& s);

/// Runs body(i) for i in [0, n) on up to `threads` OpenMP threads; the first exception thrown
/// by any body is rethrown on the caller's thread after the loop.
void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& body);

uint64_t decode_dense(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                      const SliceGeom& g);

[[noreturn]] void fail(const Checkpoint::Impl& ck, const TensorInfo& t, ErrorKind kind, const std::string& msg);

}  // namespace reader
}  // namespace ctstream
