// io — read-only access to one file: memory-mapped (RAII, madvise) or positional reads.
// No format knowledge here: offsets and lengths in, bytes out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ctstream::io {

/// `remote`: an object read by ranged GETs (io/remote_file.hpp); never produced by File::open.
enum class Mode : uint8_t { mmap, pread, remote };

/// Which file a path named when it was opened: (st_dev, st_ino) of the open descriptor. Writers
/// compare an output against the identities a reader recorded (io/output.hpp): a link, a hard
/// link or another spelling of the same file is the same identity, and a file replaced under the
/// same name since is not.
struct FileIdentity {
  std::filesystem::path path;
  uint64_t device = 0, inode = 0;
};

/// How the read schedule (reader/read_schedule.hpp) asks a source for bytes ahead of the decodes:
/// the one place where a local file and a remote object differ in it.
struct AheadPolicy {
  /// Stored bytes of the tensors after a decode that are asked for while decodes walk an order.
  uint64_t window = 32ull << 20;
  /// Two ranges of a decode closer than this are asked for (and fetched) as one.
  uint64_t coalesce_gap = 0;
  /// The source reads a long contiguous copy ahead by itself -- a local file: the kernel's
  /// readahead follows a dense tensor's populate / pread stream -- so dense tensors are left to it
  /// and the look-ahead stops before a large one (a second stream of advice over the same pages
  /// measured slower: bench/RESULTS.md, "Cold loads").
  bool streams_dense = true;
  /// Whole decodes that follow each other in file order are taken to go on in it (a plain loop
  /// over the tensors) and read ahead. A wrong guess costs a local file some page cache; a remote
  /// cache would hold the bytes until the checkpoint closes, so there only a Stream, which states
  /// its order, reads ahead.
  bool guess_order = true;
  /// What is read ahead is held in this process's memory (a remote cache), not in the page cache:
  /// a Stream's budget then bounds the window too, as it bounds what the Stream holds decoded.
  bool holds_bytes = false;
};

class File {
 public:
  /// Opens `path` read-only; mmap mode maps the whole file (an empty file maps nothing).
  /// Throws ctstream::Error{io} naming the path on failure.
  static std::unique_ptr<File> open(const std::filesystem::path& path, Mode mode);
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  /// Size at open time; every later access is bounds-checked against it.
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  Mode mode() const noexcept { return mode_; }
  /// The opened file's identity (fstat of the descriptor at open).
  const FileIdentity& identity() const noexcept { return id_; }

  /// Copies [offset, offset+out.size()) into out. Throws Error{truncated} if the file
  /// became shorter, Error{io} on a read error.
  virtual void read_at(uint64_t offset, std::span<std::byte> out) const = 0;
  /// Zero-copy view (mmap mode only; nullptr span in pread mode). Caller checks bounds.
  virtual std::span<const std::byte> view(uint64_t offset, uint64_t n) const = 0;
  /// Bytes [offset, offset+n) either viewed in place or read into `scratch` (resized).
  std::span<const std::byte> fetch(uint64_t offset, uint64_t n, std::vector<std::byte>& scratch) const;
  /// Before touching mapped pages: verifies the file has not shrunk below `end` since open
  /// (a truncated mapping raises SIGBUS on access). One fstat; a residual race with a
  /// concurrent truncation remains, which is why pread mode exists.
  virtual void guard(uint64_t end) const = 0;
  /// Advisory: start reading this range (MADV_WILLNEED / POSIX_FADV_WILLNEED).
  virtual void will_need(uint64_t offset, uint64_t n) const noexcept = 0;
  /// Before a decoder walks a mapped range: map all its pages in one call (MADV_POPULATE_READ,
  /// Linux 5.14+) instead of taking a page fault per 4 KiB; a no-op where unsupported or unmapped.
  virtual void populate(uint64_t offset, uint64_t n) const noexcept = 0;
  /// Advisory: this range is consumed; unmap its pages from the process (RSS) and, with
  /// `drop_cache`, evict them from the page cache too (cold-start benchmarks; it costs other
  /// readers of the same file, e.g. tensor-parallel ranks, a re-read).
  virtual void release(uint64_t offset, uint64_t n, bool drop_cache) const noexcept = 0;
  /// Whether every page of [offset, offset+n) is in the page cache now: cachestat (Linux 6.5+),
  /// else mincore of the mapping (mmap mode). A remote object, or a kernel that can say neither
  /// (a seccomp filter, an older kernel in pread mode): true.
  virtual bool cached(uint64_t offset, uint64_t n) const noexcept {
    (void)offset, (void)n;
    return true;
  }
  /// How the read schedule reads this file ahead (local files: the defaults).
  virtual AheadPolicy ahead_policy() const noexcept { return {}; }

 protected:
  File(std::string path, uint64_t size, Mode mode) : path_(std::move(path)), size_(size), mode_(mode) {}
  std::string path_;
  uint64_t size_;
  Mode mode_;
  FileIdentity id_;
};

/// The identity of the file `path` names (stat: a link is followed); false when there is none.
bool identify(const std::filesystem::path& path, FileIdentity& id) noexcept;

/// Reads a whole small file (index, config.json) with a size cap; `id`, when given, receives the
/// identity of the file read. Throws Error.
std::string read_small_file(const std::filesystem::path& path, uint64_t max_bytes, FileIdentity* id = nullptr);

}  // namespace ctstream::io
