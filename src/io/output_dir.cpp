#include "io/output_dir.hpp"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/paths.hpp"
#include "ctstream/error.hpp"
#include "io/output.hpp"
#include "io/retry.hpp"

namespace ctstream::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& msg) { throw Error(k, file, "", msg); }

void fsync_dir(const fs::path& d) {
  const int fd = retry_eintr([&] { return ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

/// OUT may neither be IN, contain IN (replacing OUT would delete the input) nor lie inside IN
/// (the output would be read back as input); compared on resolved paths, links followed.
void check_not_nested(const fs::path& in, const fs::path& out) {
  std::error_code ec;
  const fs::path in_c = fs::weakly_canonical(in, ec), out_c = fs::weakly_canonical(out, ec);
  if (detail::path_within(in_c, out_c))
    fail(ErrorKind::invalid_argument, out.string(),
         in_c == out_c
             ? "output directory is the input"
             : "output directory contains the input " + in.string() + " (replacing it would delete the input)");
  if (detail::path_within(out_c, in_c))
    fail(ErrorKind::invalid_argument, out.string(), "output directory lies inside the input " + in.string());
}

struct Closer {
  int fd;
  ~Closer() { ::close(fd); }
};

}  // namespace

OutputDir::OutputDir(const fs::path& final, bool replace, const fs::path& input) : replace_(replace) {
  final_ = fs::absolute(final).lexically_normal();
  if (final_.filename().empty()) final_ = final_.parent_path();
  const fs::path parent = final_.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    fail(ErrorKind::io, final_.string(), "parent directory " + parent.string() + " does not exist");
  if (!input.empty()) check_not_nested(input, final_);
  // A device, FIFO or socket (or a link to one) is refused, and a non-empty directory unless
  // replacing; commit() checks the latter again at the rename.
  (void)check_output(final_, OutputKind::directory, replace_);
  try {
    tmp_ = make_temp_dir(parent, final_.filename().string(), "tmp");
  } catch (const Error& e) {
    fail(ErrorKind::io, final_.string(), std::string("output directory is not writable: ") + e.what());
  }
  // While registered, a process killed by a second Ctrl-C leaves neither the directory nor the
  // finished files in it behind.
  slot_ = register_temp_dir(tmp_);
}

OutputDir::~OutputDir() {
  if (!keep_ && !tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  unregister_temp(slot_);
}

void OutputDir::write_text(const fs::path& rel, const std::string& text) const {
  const fs::path p = tmp_ / rel;
  OutputFile f(p);
  if (std::fwrite(text.data(), 1, text.size(), f.stream()) != text.size())
    fail(ErrorKind::io, p.string(), std::string("write failed: ") + std::strerror(errno));
  f.commit();
}

void OutputDir::copy_file(const fs::path& src, const struct stat& expect, const fs::path& rel,
                          const std::function<void()>& poll) const {
  const fs::path dst = tmp_ / rel;
  std::error_code ec;
  fs::create_directories(dst.parent_path(), ec);
  if (ec) fail(ErrorKind::io, dst.string(), "cannot create directory: " + ec.message());
  // O_NONBLOCK: were `src` swapped for a FIFO since stat(), opening it does not wait for a writer;
  // the fstat below refuses anything but the regular file that was checked.
  const int in = retry_eintr([&] { return ::open(src.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); });
  if (in < 0) fail(ErrorKind::io, src.string(), std::string("cannot open: ") + std::strerror(errno));
  const Closer close_in{in};
  struct stat st {};
  if (retry_eintr([&] { return ::fstat(in, &st); }) != 0 || !S_ISREG(st.st_mode) || st.st_dev != expect.st_dev ||
      st.st_ino != expect.st_ino)
    fail(ErrorKind::io, src.string(), "changed while being copied (no longer the regular file listed)");
  // Created exclusively inside the temporary directory: a name written already is an error,
  // never overwritten.
  const int out =
      retry_eintr([&] { return ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666); });
  if (out < 0)
    fail(ErrorKind::io, dst.string(),
         std::string("cannot create the copy of ") + src.string() + ": " + std::strerror(errno));
  const Closer close_out{out};
  std::vector<char> buf(1 << 20);
  for (;;) {
    if (poll) poll();
    const ssize_t n = retry_eintr([&] { return ::read(in, buf.data(), buf.size()); });
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN) continue;
      fail(ErrorKind::io, src.string(), std::string("read failed: ") + std::strerror(errno));
    }
    for (ssize_t w = 0; w < n;) {
      const ssize_t k = retry_eintr([&] { return ::write(out, buf.data() + w, static_cast<size_t>(n - w)); });
      if (k <= 0) fail(ErrorKind::io, dst.string(), std::string("write failed: ") + std::strerror(errno));
      w += k;
    }
  }
  if (::fsync(out) != 0) fail(ErrorKind::io, dst.string(), std::string("fsync failed: ") + std::strerror(errno));
}

void OutputDir::commit() {
  fsync_dir(tmp_);
  // Without `replace`, an output created or filled during the run is not replaced (the io rule).
  // After an exchange, tmp_ holds the old output, which the destructor removes.
  if (!commit_directory(tmp_, final_, replace_)) {
    keep_ = true;
    unregister_temp(slot_);
    slot_ = -1;
  }
  fsync_dir(final_.parent_path());
}

bool on_pseudo_fs(const fs::path& p) {
  struct statfs sf {};
  if (::statfs(p.c_str(), &sf) != 0) return true;
  constexpr long kProc = 0x9fa0, kSysfs = 0x62656572, kDebugfs = 0x64626720, kSecurityfs = 0x73636673,
                 kTracefs = 0x74726163, kCgroup = 0x27e0eb, kCgroup2 = 0x63677270;
  for (long m : {kProc, kSysfs, kDebugfs, kSecurityfs, kTracefs, kCgroup, kCgroup2})
    if (static_cast<long>(sf.f_type) == m) return true;
  return false;
}

}  // namespace ctstream::io
