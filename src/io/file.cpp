#include "io/file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "ctstream/error.hpp"
#include "io/retry.hpp"

namespace ctstream::io {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::io, path, "", what + ": " + std::strerror(errno));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

uint64_t current_size(int fd, const std::string& path) {
  struct stat st {};
  if (retry_eintr([&] { return ::fstat(fd, &st); }) != 0) fail_errno(path, "fstat failed");
  return static_cast<uint64_t>(st.st_size);
}

// cachestat(2) (Linux 6.5): the page-cache state of a file range, without mapping or reading it.
// Its number is the same on every architecture (the generic table's, include/uapi/asm-generic/
// unistd.h, and arch/x86/entry/syscalls/syscall_64.tbl); older kernel headers lack the name.
#ifdef SYS_cachestat
constexpr long kSysCachestat = SYS_cachestat;
#else
constexpr long kSysCachestat = 451;
#endif
struct CachestatRange {
  uint64_t off, len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

// File::cached for a local file: `base` its mapping (nullptr in pread mode).
bool cached_range(int fd, const std::byte* base, uint64_t offset, uint64_t n) noexcept {
  if (n == 0) return true;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = offset / page, pages = (offset + n - 1) / page - first + 1;
  CachestatRange range{first * page, pages * page};
  Cachestat cs{};
  if (::syscall(kSysCachestat, fd, &range, &cs, 0) == 0) return cs.nr_cache >= pages;
  if (!base) return true;  // cannot tell
  unsigned char vec[4096];
  for (uint64_t at = 0; at < pages; at += sizeof vec) {
    const uint64_t k = std::min<uint64_t>(sizeof vec, pages - at);
    if (::mincore(const_cast<std::byte*>(base) + (first + at) * page, k * page, vec) != 0) return true;
    for (uint64_t i = 0; i < k; ++i)
      if ((vec[i] & 1) == 0) return false;
  }
  return true;
}

void pread_all(int fd, const std::string& path, uint64_t offset, std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = retry_eintr(
        [&] { return ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done)); });
    if (r < 0) {
      fail_errno(path,
                 "read of " + std::to_string(out.size()) + " bytes at offset " + std::to_string(offset) + " failed");
    }
    if (r == 0)
      throw Error(ErrorKind::truncated, path, "",
                  "file ended at byte " + std::to_string(offset + done) + " while reading up to byte " +
                      std::to_string(offset + out.size()) + " (was it truncated after open?)");
    done += static_cast<size_t>(r);
  }
}

class PreadFile final : public File {
 public:
  PreadFile(std::string path, int fd, uint64_t size) : File(std::move(path), size, Mode::pread), fd_(fd) {}
  void read_at(uint64_t offset, std::span<std::byte> out) const override { pread_all(fd_.get(), path_, offset, out); }
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  // Nothing mapped to protect (read_at detects a short read); checked anyway, so that
  // validate() reports a file truncated since open in both modes.
  void guard(uint64_t end) const override {
    const uint64_t now = current_size(fd_.get(), path_);
    if (now < end)
      throw Error(ErrorKind::truncated, path_, "",
                  "file shrank to " + std::to_string(now) + " bytes after open (was " + std::to_string(size_) + ")");
  }
  void populate(uint64_t, uint64_t) const noexcept override {}
  void will_need(uint64_t offset, uint64_t n) const noexcept override {
    ::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
  }
  bool cached(uint64_t offset, uint64_t n) const noexcept override {
    return cached_range(fd_.get(), nullptr, offset, n);
  }
  void release(uint64_t offset, uint64_t n, bool drop_cache) const noexcept override {
    if (drop_cache) ::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
  }

 private:
  Fd fd_;
};

class MappedFile final : public File {
 public:
  MappedFile(std::string path, int fd, uint64_t size) : File(std::move(path), size, Mode::mmap), fd_(fd) {
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) fail_errno(path_, "mmap failed");
    base_ = static_cast<std::byte*>(p);
    ::madvise(base_, size_, MADV_SEQUENTIAL);
  }
  ~MappedFile() override {
    if (base_) ::munmap(base_, size_);
  }

  // Copies go through pread even here: the kernel copies from the page cache without mapping
  // the pages into this process (RSS stays flat) and a truncated file gives a short read, not
  // SIGBUS. The mapping serves zero-copy views and the sparse decoders (quantized formats read
  // through windows: reader/rows.hpp RowDecoder::windowed).
  void read_at(uint64_t offset, std::span<std::byte> out) const override { pread_all(fd_.get(), path_, offset, out); }
  std::span<const std::byte> view(uint64_t offset, uint64_t n) const override { return {base_ + offset, n}; }
  void guard(uint64_t end) const override {
    uint64_t now = current_size(fd_.get(), path_);
    if (now < end)
      throw Error(ErrorKind::truncated, path_, "",
                  "file shrank to " + std::to_string(now) + " bytes after open (was " + std::to_string(size_) +
                      "); refusing to touch the mapping past its end");
  }
  void will_need(uint64_t offset, uint64_t n) const noexcept override { advise(offset, n, MADV_WILLNEED); }
  bool cached(uint64_t offset, uint64_t n) const noexcept override { return cached_range(fd_.get(), base_, offset, n); }
  void populate(uint64_t offset, uint64_t n) const noexcept override {
#ifdef MADV_POPULATE_READ
    advise(offset, n, MADV_POPULATE_READ);
#else
    (void)offset, (void)n;
#endif
  }
  void release(uint64_t offset, uint64_t n, bool drop_cache) const noexcept override {
    advise(offset, n, MADV_DONTNEED);
    if (drop_cache) ::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
  }

 private:
  void advise(uint64_t offset, uint64_t n, int advice) const noexcept {
    if (!base_ || n == 0) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t begin = offset / page * page;  // madvise needs a page-aligned start
    uint64_t end = std::min<uint64_t>(offset + n, size_);
    if (advice == MADV_DONTNEED) {
      // Only whole pages inside the range: a shared boundary page may still be in use.
      begin = (offset + page - 1) / page * page;
      end = end / page * page;
      if (end == size_ / page * page) end = size_;  // last partial page belongs to the range
    }
    if (end > begin) ::madvise(base_ + begin, end - begin, advice);
  }
  Fd fd_;
  std::byte* base_ = nullptr;
};

}  // namespace

std::unique_ptr<File> File::open(const std::filesystem::path& path, Mode mode) {
  const std::string p = path.string();
  // O_NONBLOCK: a FIFO (or a device) swapped in for a file after the caller checked it would
  // otherwise block this open() until some writer shows up; it is refused below instead. On a
  // regular file the flag changes nothing.
  const int fd = retry_eintr([&] { return ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); });
  if (fd < 0) fail_errno(p, "cannot open");
  struct stat st {};
  if (retry_eintr([&] { return ::fstat(fd, &st); }) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno(p, "fstat failed");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::io, p, "", "not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  std::unique_ptr<File> f;
  if (mode == Mode::pread) f = std::make_unique<PreadFile>(p, fd, size);
  else f = std::make_unique<MappedFile>(p, fd, size);
  f->id_ = {path, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return f;
}

std::span<const std::byte> File::fetch(uint64_t offset, uint64_t n, std::vector<std::byte>& scratch) const {
  if (mode_ == Mode::mmap) {
    guard(offset + n);
    return view(offset, n);
  }
  scratch.resize(n);
  read_at(offset, scratch);
  return scratch;
}

bool identify(const std::filesystem::path& path, FileIdentity& id) noexcept {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  id = {path, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return true;
}

std::string read_small_file(const std::filesystem::path& path, uint64_t max_bytes, FileIdentity* id) {
  auto f = File::open(path, Mode::pread);
  if (id) *id = f->identity();
  if (f->size() > max_bytes)
    throw Error(ErrorKind::header_too_large, path.string(), "",
                "file is " + std::to_string(f->size()) + " bytes, over the limit of " + std::to_string(max_bytes));
  std::string s(f->size(), '\0');
  f->read_at(0, std::as_writable_bytes(std::span<char>(s.data(), s.size())));
  return s;
}

}  // namespace ctstream::io
