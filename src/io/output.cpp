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

std::string describe_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

namespace {

bool same_file(const struct stat& st, const OutputSnapshot& s) {
  return static_cast<uint64_t>(st.st_dev) == s.device && static_cast<uint64_t>(st.st_ino) == s.inode;
}

[[noreturn]] void appeared(const std::filesystem::path& final) {
  throw Error(ErrorKind::io, final.string(), "",
              "appeared while the output was being written (it was absent at the start); left as it is, "
              "nothing written: remove it or choose another path");
}

[[noreturn]] void replaced(const std::filesystem::path& final) {
  throw Error(ErrorKind::io, final.string(), "",
              "was replaced by another file while the output was being written; left as it is, nothing written");
}

bool is_empty_dir(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_empty(p, ec) && !ec;
}

}  // namespace

OutputSnapshot check_output(const std::filesystem::path& final, OutputKind kind, bool replace_dir,
                            std::span<const FileIdentity> inputs) {
  OutputSnapshot snap;
  struct stat ls {};
  if (::lstat(final.c_str(), &ls) != 0) {
    if (errno != ENOENT) fail_errno(final, "cannot inspect the output path", errno);
    return snap;  // absent (a dangling link is not: lstat sees it)
  }
  snap = {true, static_cast<uint64_t>(ls.st_dev), static_cast<uint64_t>(ls.st_ino)};
  struct stat st = ls;
  std::string via;
  if (S_ISLNK(ls.st_mode)) {
    if (::stat(final.c_str(), &st) != 0) return snap;  // a dangling link: replaced, nothing behind it
    via = "is a symbolic link to ";
  } else {
    via = "is ";
  }
  const bool want_dir = kind == OutputKind::directory;
  if (S_ISDIR(st.st_mode) && !want_dir)
    throw Error(ErrorKind::io, final.string(), "", via + "a directory; give a file name for the output");
  if (!(want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)))
    throw Error(ErrorKind::io, final.string(), "",
                via + describe_file_type(st.st_mode) + ", not a " + (want_dir ? "directory" : "regular file") +
                    ": ctstream writes its output as a new " + (want_dir ? "directory" : "file") +
                    " renamed into place, which would replace it; give another path");
  for (const FileIdentity& in : inputs)
    if (static_cast<uint64_t>(st.st_dev) == in.device && static_cast<uint64_t>(st.st_ino) == in.inode)
      throw Error(ErrorKind::invalid_argument, final.string(), "",
                  "the output is one of the checkpoint's own files (" + in.path.string() + "); choose another path");
  if (want_dir && !replace_dir && !is_empty_dir(final))
    throw Error(ErrorKind::io, final.string(), "",
                "output directory exists and is not empty (pass --overwrite to replace it)");
  return snap;
}

void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& final, const OutputSnapshot& was) {
  const char* t = tmp.c_str();
  const char* f = final.c_str();
  if (!was.existed) {
    if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_NOREPLACE) == 0) return;
    if (errno == EEXIST) appeared(final);
    // renameat2(2): EINVAL where the filesystem does not support the flag (older NFS, some FUSE
    // and overlay setups). link(2) never replaces either; where hard links are not supported
    // (vfat: EPERM), a second look then rename() is the best left (a window of one system call).
    if (errno != EINVAL && errno != ENOSYS) fail_errno(final, "cannot rename the finished file into place", errno);
    if (::link(t, f) == 0) {
      ::unlink(t);
      return;
    }
    if (errno == EEXIST) appeared(final);
    struct stat st {};
    if (::lstat(f, &st) == 0) appeared(final);
    if (::rename(t, f) != 0) fail_errno(final, "cannot rename the finished file into place", errno);
    return;
  }
  // It existed at the start: replaced, but only if the name still holds that file. Exchanged
  // atomically first, so that the file swapped out can be checked and, if it is someone else's,
  // swapped back (the name never goes missing in between).
  if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_EXCHANGE) == 0) {
    struct stat st {};
    if (::lstat(t, &st) == 0 && same_file(st, was)) {
      ::unlink(t);  // the old output, now under the temporary name
      return;
    }
    if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_EXCHANGE) != 0)
      fail_errno(
          final,
          "was replaced while the output was being written, and putting it back failed (it is at " + tmp.string() + ")",
          errno);
    replaced(final);
  }
  if (errno == ENOENT) {  // removed during the run: now absent, created without replacing
    commit_file(tmp, final, OutputSnapshot{});
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) fail_errno(final, "cannot rename the finished file into place", errno);
  struct stat st {};
  if (::lstat(f, &st) != 0) {
    if (errno != ENOENT) fail_errno(final, "cannot inspect the output path", errno);
    commit_file(tmp, final, OutputSnapshot{});
    return;
  }
  if (!same_file(st, was)) replaced(final);
  if (::rename(t, f) != 0) fail_errno(final, "cannot rename the finished file into place", errno);
}

bool commit_directory(const std::filesystem::path& tmp, const std::filesystem::path& final, bool replace) {
  const char* t = tmp.c_str();
  const char* f = final.c_str();
  if (!replace) {
    if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_NOREPLACE) == 0) return false;
    // EEXIST: OUT exists (empty at the start, or created since); EINVAL/ENOSYS: no flag support.
    // rename(2) puts a directory only over an empty directory (ENOTEMPTY or EEXIST otherwise,
    // ENOTDIR over anything but a directory): "OUT absent or empty" is checked by the kernel at
    // the instant of the rename, not only at the start.
    if (errno != EEXIST && errno != EINVAL && errno != ENOSYS)
      fail_errno(final, "cannot rename the finished output into place", errno);
    if (::rename(t, f) == 0) return false;
    struct stat ls {};
    if (errno == ENOTDIR && ::lstat(f, &ls) == 0 && S_ISLNK(ls.st_mode)) {
      // A link at OUT (to an empty directory, as check_output() allowed): the link is replaced,
      // never its target, as for file outputs; nothing is lost by removing a link.
      if (::unlink(f) != 0) fail_errno(final, "cannot replace the link at the output path", errno);
      if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_NOREPLACE) == 0 ||
          ((errno == EINVAL || errno == ENOSYS) && ::rename(t, f) == 0))
        return false;
    }
    if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR)
      throw Error(ErrorKind::io, final.string(), "",
                  "output directory was created or filled while the output was being written; left as it is, "
                  "nothing written (pass --overwrite to replace it)");
    fail_errno(final, "cannot rename the finished output into place", errno);
  }
  struct stat ls {};
  if (::lstat(f, &ls) == 0 && !is_empty_dir(final)) {
    // One atomic step: OUT is the old or the new output at every instant, even if this process
    // is killed here (the two-rename fallback below has an instant with no OUT).
    if (::renameat2(AT_FDCWD, t, AT_FDCWD, f, RENAME_EXCHANGE) == 0) return true;
  }
  std::error_code ec;
  std::filesystem::path old;
  if (::lstat(f, &ls) == 0) {
    if (S_ISDIR(ls.st_mode) && is_empty_dir(final)) {
      std::filesystem::remove(final, ec);
    } else {
      std::string name = final.filename().string();  // appended, not "." + ...: GCC 12's -Wrestrict misfires
      name.insert(0, 1, '.');
      name += ".ctstream-old-" + random_token();
      old = tmp.parent_path() / name;
      std::filesystem::rename(final, old, ec);
    }
    if (ec)
      throw Error(ErrorKind::io, final.string(), "", "cannot replace the existing output directory: " + ec.message());
  }
  std::filesystem::rename(tmp, final, ec);
  if (ec) {
    if (!old.empty()) std::filesystem::rename(old, final, ec);
    throw Error(ErrorKind::io, final.string(), "", "cannot rename the finished output into place: " + ec.message());
  }
  if (!old.empty()) std::filesystem::remove_all(old, ec);
  return false;
}

OutputFile::OutputFile(const std::filesystem::path& final, std::span<const FileIdentity> inputs) : final_(final) {
  if (final.filename().empty())
    throw Error(ErrorKind::invalid_argument, final.string(), "", "the output path names no file");
  was_ = check_output(final, OutputKind::file, false, inputs);
  const std::filesystem::path dir = final.has_parent_path() ? final.parent_path() : std::filesystem::path(".");
  const std::string stem = final.filename().string();
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

OutputFile::~OutputFile() {
  if (f_) std::fclose(f_);
  if (!done_) ::unlink(path_.c_str());
  unregister_temp(slot_);
}

void OutputFile::commit() {
  // Named after the output: the temporary file is gone once this throws (the destructor).
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) fail_errno(final_, "write failed", errno);
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail_errno(final_, "write failed (close)", errno);
  commit_file(path_, final_, was_);
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
