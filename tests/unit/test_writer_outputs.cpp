// What every writer refuses to write over (issue 27, section 2), on each public surface:
// SafetensorsWriter, decompress_to_file, compress_checkpoint / compress, write_report_json.
//   * a path that is not a regular file (a directory for compress): FIFO, socket, character
//     device, or a link to one - refused, the node untouched;
//   * an output absent at the start that appears during the run (the user, a second writer):
//     not replaced, the call fails, nothing of ours is left;
//   * an output that is one of the checkpoint's files, by identity (shards in a subdirectory of
//     the index, hard links);
//   * a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) and a full disk (ENOSPC on a small
//     tmpfs, where this process may mount one): Error{io}, no temporary left.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

bool no_temp_left(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".ctstream-") != std::string::npos) {
      UNSCOPED_INFO("left behind: " << e.path());
      return false;
    }
  return true;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

/// The error a call throws (kind and message), or nothing.
struct Thrown {
  bool thrown = false;
  ErrorKind kind = ErrorKind::io;
  std::string what;
};
Thrown catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {true, e.kind(), e.what()};
  }
  return {};
}

/// A small dense checkpoint (one shard, config.json) to decompress and compress.
void write_small_model(const fs::path& dir, uint64_t rows = 64) {
  fs::create_directories(dir);
  const uint64_t cols = 128;  // one group of the default pack-quantized scheme
  SafetensorsWriter w(dir / "model.safetensors", {{"model.layers.0.mlp.up_proj.weight", DType::F32, {rows, cols}},
                                                  {"model.norm.weight", DType::F32, {cols}}});
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 97) - 48) / 64.f;
  w.write(std::as_bytes(std::span(v)));
  w.write(std::as_bytes(std::span(v).first(cols)));
  w.commit();
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
}

/// Non-regular nodes in `dir`: FIFO, unix socket, and (as root) a character device with
/// /dev/null's numbers - a private copy, so that a writer that wrongly replaced it replaces
/// nothing of the system's. Each with a link to it.
struct Nodes {
  std::vector<std::pair<fs::path, std::string>> paths;  // path, what the error must say
  int sock = -1;
  explicit Nodes(const fs::path& dir) {
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    paths.push_back({dir / "fifo", "FIFO"});
    sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(sock >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string sp = (dir / "sock").string();
    REQUIRE(sp.size() < sizeof a.sun_path);
    std::memcpy(a.sun_path, sp.c_str(), sp.size() + 1);
    REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    paths.push_back({dir / "sock", "socket"});
    if (::mknod((dir / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0)
      paths.push_back({dir / "null", "character device"});
    else WARN("mknod not permitted here (not root?): the character-device case is skipped");
    const size_t n = paths.size();
    for (size_t i = 0; i < n; ++i) {
      const fs::path link = dir / (paths[i].first.filename().string() + "_link");
      fs::create_symlink(paths[i].first, link);
      paths.push_back({link, "symbolic link to a " + paths[i].second});
    }
  }
  ~Nodes() {
    if (sock >= 0) ::close(sock);
  }
  /// Each node is still what it was (nothing renamed over it).
  void check_untouched() const {
    struct stat st {};
    REQUIRE(::lstat(paths[0].first.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    REQUIRE(::lstat(paths[1].first.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    for (const auto& [p, what] : paths) {
      if (what.rfind("symbolic", 0) == 0) CHECK(fs::is_symlink(p));
      if (what == "character device") {
        REQUIRE(::lstat(p.c_str(), &st) == 0);
        CHECK(S_ISCHR(st.st_mode));
        CHECK(st.st_rdev == makedev(1, 3));
      }
    }
  }
};

}  // namespace

TEST_CASE("writers refuse outputs that are not regular files: FIFO, socket, device, a link to one",
          "[writer][outputs]") {
  th::TempDir tmp("nonreg");
  write_small_model(tmp.path / "m");
  auto c = Checkpoint::open(tmp.path / "m");
  th::TempDir nodes_dir("nodes");
  Nodes nodes(nodes_dir.path);
  struct stat dev_null_before {};
  const bool have_null = ::stat("/dev/null", &dev_null_before) == 0;
  for (const auto& node : nodes.paths) {
    const auto& p = node.first;  // not a structured binding: clang 14 lets no lambda capture one
    const auto& what = node.second;
    INFO(p << " (" << what << ")");
    const auto checks = [&](const Thrown& t) {
      CHECK(t.thrown);
      CHECK(t.kind == ErrorKind::io);
      CHECK(t.what.find(p.string()) != std::string::npos);
      CHECK(t.what.find(what) != std::string::npos);
    };
    checks(catch_error([&] { SafetensorsWriter w(p, {{"a", DType::F32, {1}}}); }));
    checks(catch_error([&] { decompress_to_file(c, p); }));
    checks(catch_error([&] { write_report_json(p, CompressReport{}, {}); }));
    // compress writes a directory: anything else at OUT (a link to one too) is refused.
    const Thrown t = catch_error([&] { compress_checkpoint(tmp.path / "m", p); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find(what) != std::string::npos);
  }
  nodes.check_untouched();
  CHECK(no_temp_left(nodes_dir.path));
  // The real /dev/null is never written to by this test; it must simply still be the device.
  if (have_null) {
    struct stat after {};
    REQUIRE(::stat("/dev/null", &after) == 0);
    CHECK(after.st_ino == dev_null_before.st_ino);
    CHECK(after.st_rdev == dev_null_before.st_rdev);
    CHECK(S_ISCHR(after.st_mode));
  }
  // A dangling link is still replaced (nothing behind it), a link to a regular file too, its
  // target untouched: the documented behaviour stays.
  fs::create_symlink(nodes_dir.path / "nowhere", nodes_dir.path / "dangling");
  decompress_to_file(c, nodes_dir.path / "dangling");
  CHECK(fs::is_regular_file(fs::symlink_status(nodes_dir.path / "dangling")));
  CHECK(!fs::exists(nodes_dir.path / "nowhere"));
}

TEST_CASE("a single-file output that appears during the run is not replaced", "[writer][outputs]") {
  th::TempDir tmp("appear");
  const fs::path out = tmp.path / "x.safetensors";
  const std::vector<std::byte> four = th::random_bytes(4, 3);
  SECTION("SafetensorsWriter: absent at the start, created before commit") {
    SafetensorsWriter w(out, {{"a", DType::F32, {1}}});
    w.write(four);
    std::ofstream(out) << "someone else's";
    const Thrown t = catch_error([&] { w.commit(); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find("appeared") != std::string::npos);
    CHECK(slurp(out) == "someone else's");
  }
  SECTION("SafetensorsWriter: existing at the start, replaced by another file before commit") {
    std::ofstream(out) << "old output";
    SafetensorsWriter w(out, {{"a", DType::F32, {1}}});
    w.write(four);
    std::ofstream(tmp.path / "other") << "someone else's";
    fs::rename(tmp.path / "other", out);
    const Thrown t = catch_error([&] { w.commit(); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find("replaced") != std::string::npos);
    CHECK(slurp(out) == "someone else's");
  }
  SECTION("SafetensorsWriter: an existing output still there is replaced (documented)") {
    std::ofstream(out) << "old output";
    SafetensorsWriter w(out, {{"a", DType::F32, {1}}});
    w.write(four);
    w.commit();
    CHECK(Checkpoint::open(out).tensors().size() == 1);
  }
  SECTION("decompress_to_file: the output created from the progress callback") {
    write_small_model(tmp.path / "m");
    auto c = Checkpoint::open(tmp.path / "m");
    DecompressOptions o;
    o.progress = [&](size_t, size_t, const TensorInfo&) {
      if (!fs::exists(out)) std::ofstream(out) << "someone else's";
    };
    const Thrown t = catch_error([&] { decompress_to_file(c, out, o); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find(out.string()) != std::string::npos);
    CHECK(slurp(out) == "someone else's");
  }
  CHECK(no_temp_left(tmp.path));
}

TEST_CASE("compress without overwrite does not replace an OUT created and filled during the run", "[writer][outputs]") {
  th::TempDir tmp("race");
  write_small_model(tmp.path / "in", 256);
  const fs::path out = tmp.path / "out";
  SECTION("filled by the user") {
    CompressOptions o;
    o.progress = [&](const CompressProgress&) {
      if (fs::exists(out)) return;
      fs::create_directories(out);
      std::ofstream(out / "keep.txt") << "precious";
    };
    const Thrown t = catch_error([&] { compress_checkpoint(tmp.path / "in", out, o); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find(out.string()) != std::string::npos);
    CHECK(slurp(out / "keep.txt") == "precious");
    CHECK(!fs::exists(out / "model.safetensors"));
  }
  SECTION("by a second compress to the same OUT: the second one wins, the first one fails") {
    CompressOptions second;
    second.format = Format::int_quantized;
    second.num_bits = 8;
    second.strategy = QuantStrategy::channel;
    bool ran = false;
    CompressOptions first;
    first.progress = [&](const CompressProgress&) {
      if (ran) return;
      ran = true;
      compress_checkpoint(tmp.path / "in", out, second);
    };
    const Thrown t = catch_error([&] { compress_checkpoint(tmp.path / "in", out, first); });
    CHECK(ran);
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    // OUT is the second run's output, complete.
    auto c = Checkpoint::open(out);
    CHECK(c.at("model.layers.0.mlp.up_proj.weight").format == Format::int_quantized);
  }
  SECTION("an OUT that stays empty is still used; with overwrite, a filled one is replaced") {
    CompressOptions o;
    o.progress = [&](const CompressProgress&) { fs::create_directories(out); };
    compress_checkpoint(tmp.path / "in", out, o);
    CHECK(fs::exists(out / "model.safetensors"));
    o.overwrite = true;
    o.progress = [&](const CompressProgress&) { std::ofstream(out / "stale.txt") << "x"; };
    compress_checkpoint(tmp.path / "in", out, o);
    CHECK(!fs::exists(out / "stale.txt"));
    CHECK(fs::exists(out / "model.safetensors"));
  }
  SECTION("a link at OUT to an empty directory is replaced, its target untouched") {
    fs::create_directories(tmp.path / "target");
    fs::create_directory_symlink(tmp.path / "target", out);
    compress_checkpoint(tmp.path / "in", out);
    CHECK(!fs::is_symlink(out));
    CHECK(fs::exists(out / "model.safetensors"));
    CHECK(fs::is_empty(tmp.path / "target"));
  }
  CHECK(no_temp_left(tmp.path));
}

TEST_CASE("decompress refuses every file the checkpoint was opened from, by identity", "[writer][outputs]") {
  // Shards in a subdirectory of the index: config.json and the index are not beside the first
  // shard, yet they are the checkpoint's files.
  th::TempDir tmp("ident");
  const fs::path m = tmp.path / "m";
  fs::create_directories(m / "sub");
  {
    SafetensorsWriter w(m / "sub" / "a.safetensors", {{"a", DType::F32, {2}}});
    w.write(th::random_bytes(8, 1));
    w.commit();
  }
  std::ofstream(m / "model.safetensors.index.json") << R"({"weight_map": {"a": "sub/a.safetensors"}})";
  std::ofstream(m / "config.json") << R"({"model_type": "llama"})";
  const std::string cfg = slurp(m / "config.json");
  auto c = Checkpoint::open(m);
  REQUIRE(c.source_files().size() == 3);
  fs::create_hard_link(m / "config.json", tmp.path / "hard.json");
  fs::create_symlink(m / "model.safetensors.index.json", tmp.path / "idx_link.json");
  for (const fs::path& bad : {m / "config.json", m / "model.safetensors.index.json", m / "sub" / "a.safetensors",
                              tmp.path / "hard.json", tmp.path / "idx_link.json", m / "new.safetensors"}) {
    INFO(bad);
    const Thrown t = catch_error([&] { decompress_to_file(c, bad); });
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::invalid_argument);
  }
  CHECK(slurp(m / "config.json") == cfg);
  CHECK(fs::is_symlink(tmp.path / "idx_link.json"));
  decompress_to_file(c, tmp.path / "dense.safetensors");
  CHECK(Checkpoint::open(tmp.path / "dense.safetensors").tensors().size() == 1);
  CHECK(no_temp_left(tmp.path));
  CHECK(no_temp_left(m));
}

namespace {

/// Runs `body` in a fork()ed child and returns its exit status (0: body returned true).
int in_child(const std::function<bool()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("a file-size limit is an io error with nothing left, when SIGXFSZ is ignored", "[writer][outputs][fork]") {
  th::TempDir tmp("fsize");
  write_small_model(tmp.path / "m", 1024);  // 512 KiB of weights, 64 KiB at 4 bits
  auto c = Checkpoint::open(tmp.path / "m");
  const fs::path outdir = tmp.path / "out";
  fs::create_directories(outdir);
  const auto limited = [&](const std::function<void()>& write) {
    return in_child([&] {
      std::signal(SIGXFSZ, SIG_IGN);  // what the CLI does (and CPython); see safetensors_writer.hpp
      const rlimit lim{16 << 10, 16 << 10};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return false;
      const Thrown t = catch_error(write);
      return t.thrown && t.kind == ErrorKind::io && t.what.find("File too large") != std::string::npos;
    });
  };
  const int d = limited([&] { decompress_to_file(c, outdir / "x.safetensors"); });
  CHECK((WIFEXITED(d) && WEXITSTATUS(d) == 0));
  const int k = limited([&] { compress_checkpoint(tmp.path / "m", outdir / "c"); });
  CHECK((WIFEXITED(k) && WEXITSTATUS(k) == 0));
  CHECK(fs::is_empty(outdir));
}

TEST_CASE("a full disk is an io error with nothing left (tmpfs, where mounting is permitted)",
          "[writer][outputs][mount]") {
  th::TempDir tmp("enospc");
  write_small_model(tmp.path / "m", 4096);  // 2 MiB of weights, 256 KiB at 4 bits
  auto c = Checkpoint::open(tmp.path / "m");
  const fs::path mnt = tmp.path / "mnt";
  fs::create_directories(mnt);
  if (::mount("ctstream-test", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("cannot mount a tmpfs here (" << std::strerror(errno) << "): the ENOSPC test is skipped");
    return;
  }
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  std::ofstream(mnt / "already-here") << "x";
  for (const auto& write :
       std::vector<std::function<void()>>{[&] { decompress_to_file(c, mnt / "x.safetensors"); },
                                          [&] { compress_checkpoint(tmp.path / "m", mnt / "c"); }}) {
    const Thrown t = catch_error(write);
    INFO(t.what);
    CHECK(t.thrown);
    CHECK(t.kind == ErrorKind::io);
    CHECK(t.what.find("No space left on device") != std::string::npos);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(mnt)) left.push_back(e.path().filename().string());
    CHECK(left == std::vector<std::string>{"already-here"});
  }
}
