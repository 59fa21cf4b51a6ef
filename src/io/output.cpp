#include "io/output.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "ctstream/error.hpp"
#include "io/retry.hpp"

namespace ctstream::io {
namespace {

[[noreturn]] void fail_errno(const std::filesystem::path& p, const std::string& what, int err) {
  throw Error(ErrorKind::io, p.string(), "", what + ": " + std::strerror(err));
}

// Fixed storage the signal handler can walk without allocating: a slot is claimed (state 1),
// filled, published (kFile or kDir); the handler unlinks published files, then empties and
// removes published directories.
constexpr int kFile = 2, kDir = 3;
constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax];
};
std::array<Slot, kSlots> g_slots;

}  // namespace

std::string random_token() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    v = rng();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

namespace {

int publish(const std::filesystem::path& p, int kind) noexcept {
  const std::string& s = p.native();
  if (s.size() + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expect = 0;
    if (g_slots[i].state.compare_exchange_strong(expect, 1)) {
      std::memcpy(g_slots[i].path, s.c_str(), s.size() + 1);
      g_slots[i].state.store(kind);
      return i;
    }
  }
  return -1;
}

/// Removes everything in the open directory `dirfd` (subdirectories `depth` levels down) with
/// system calls only (getdents64, unlinkat): no allocation, async-signal-safe. Entries are read
/// again from the start until a pass removes nothing, as removing while reading may skip some.
void empty_dir(int dirfd, int depth) noexcept {
  alignas(8) char buf[2048];
  for (int pass = 0; pass < 16; ++pass) {
    if (::lseek(dirfd, 0, SEEK_SET) != 0) return;
    bool removed = false;
    for (;;) {
      const long n = ::syscall(SYS_getdents64, dirfd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
        unsigned short reclen = 0;
        std::memcpy(&reclen, buf + off + 16, sizeof reclen);
        const unsigned char type = static_cast<unsigned char>(buf[off + 18]);
        const char* name = buf + off + 19;
        off += reclen;
        if (reclen == 0) return;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        if (type != DT_DIR && ::unlinkat(dirfd, name, 0) == 0) {
          removed = true;
          continue;
        }
        if (depth > 0) {
          const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (fd >= 0) {
            empty_dir(fd, depth - 1);
            ::close(fd);
          }
        }
        removed = ::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || removed;
      }
    }
    if (!removed) return;
  }
}

}  // namespace

int register_temp(const std::filesystem::path& p) noexcept { return publish(p, kFile); }
int register_temp_dir(const std::filesystem::path& p) noexcept { return publish(p, kDir); }

void unregister_temp(int slot) noexcept {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0);
}

void remove_registered_temps() noexcept {
  for (auto& s : g_slots)
    if (s.state.load() == kFile) ::unlink(s.path);
  for (auto& s : g_slots) {
    if (s.state.load() != kDir) continue;
    const int fd = ::open(s.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    empty_dir(fd, 8);
    ::close(fd);
    ::rmdir(s.path);
  }
}

TempFile::TempFile(const std::filesystem::path& dir, const std::string& stem) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    path_ = dir / ("." + stem + ".ctstream-tmp-" + random_token());
    const int fd =
        retry_eintr([&] { return ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666); });
    if (fd < 0) {
      if (errno == EEXIST) continue;  // someone else's name: draw another
      fail_errno(path_, "cannot create a temporary file", errno);
    }
    slot_ = register_temp(path_);
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
      const int err = errno;
      ::close(fd);
      ::unlink(path_.c_str());
      unregister_temp(slot_);
      fail_errno(path_, "cannot open a temporary file", err);
    }
    return;
  }
  throw Error(ErrorKind::io, dir.string(), "", "cannot create a temporary file: every name tried exists");
}

TempFile::~TempFile() {
  if (f_) std::fclose(f_);
  if (!done_) ::unlink(path_.c_str());
  unregister_temp(slot_);
}

void TempFile::commit_to(const std::filesystem::path& final) {
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) fail_errno(path_, "flush failed", errno);
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail_errno(path_, "close failed", errno);
  if (::rename(path_.c_str(), final.c_str()) != 0)
    throw Error(ErrorKind::io, final.string(), "",
                std::string("cannot rename the finished file into place: ") + std::strerror(errno));
  done_ = true;
}

std::filesystem::path make_temp_dir(const std::filesystem::path& parent, const std::string& stem, const char* kind) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::filesystem::path p = parent / ("." + stem + ".ctstream-" + kind + "-" + random_token());
    if (::mkdir(p.c_str(), 0777) == 0) return p;
    if (errno != EEXIST) fail_errno(p, "cannot create a temporary directory", errno);
  }
  throw Error(ErrorKind::io, parent.string(), "", "cannot create a temporary directory: every name tried exists");
}

}  // namespace ctstream::io
