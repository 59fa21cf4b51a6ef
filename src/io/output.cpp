#include "io/output.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "ctstream/error.hpp"

namespace ctstream::io {
namespace {

[[noreturn]] void fail_errno(const std::filesystem::path& p, const std::string& what, int err) {
  throw Error(ErrorKind::io, p.string(), "", what + ": " + std::strerror(err));
}

// Fixed storage the signal handler can walk without allocating: a slot is claimed (state 1),
// filled, published (state 2); the handler unlinks published slots.
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

int register_temp(const std::filesystem::path& p) noexcept {
  const std::string& s = p.native();
  if (s.size() + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expect = 0;
    if (g_slots[i].state.compare_exchange_strong(expect, 1)) {
      std::memcpy(g_slots[i].path, s.c_str(), s.size() + 1);
      g_slots[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) noexcept {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0);
}

void remove_registered_temps() noexcept {
  for (auto& s : g_slots)
    if (s.state.load() == 2) ::unlink(s.path);
}

TempFile::TempFile(const std::filesystem::path& dir, const std::string& stem) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    path_ = dir / ("." + stem + ".ctstream-tmp-" + random_token());
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
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
