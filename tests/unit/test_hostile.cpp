// Hostile checkpoints (tests/fixtures/hostile, generator tests/fixtures/gen/gen_hostile.py): every
// case gives the expected ctstream::Error kind - naming the file and the tensor - at the expected
// stage, in both io modes, and nothing else: no other exception type, no crash, no hang. Plus the
// cases that need a running process: files truncated after open (every fixture format), and
// several threads advancing one Stream, and system calls interrupted by a signal.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"
#include "io/retry.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string name, kind, stage, tensor, why;
};

std::vector<Case> hostile_cases() {
  std::vector<Case> out;
  for (const auto& j : th::read_json(th::fixtures() / "hostile" / "manifest.json"))
    out.push_back({j["case"], j["kind"], j["stage"], j["tensor"], j["why"]});
  return out;
}

// Decodes (or validates) every tensor; the first Error, or none.
std::optional<Error> decode_all(const Checkpoint& ck, const std::string& only) {
  std::vector<std::byte> buf;
  for (const auto& t : ck.tensors()) {
    if (!only.empty() && t.name != only) continue;
    try {
      ck.validate(t);
      const DType d = is_float_output(t.dtype) || t.quantized ? DType::F32 : t.dtype;
      buf.assign(t.decoded_bytes(d), std::byte{0});
      CHECK(ck.decode_into(t, buf, d) == t.decoded_bytes(d));
    } catch (const Error& e) {
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("hostile checkpoints give their error kind, at their stage, in both io modes", "[hostile]") {
  const auto cases = hostile_cases();
  REQUIRE(cases.size() >= 80);
  for (const auto& c : cases) {
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      INFO(c.name << " (" << (io == IoMode::mmap ? "mmap" : "pread") << "): " << c.why);
      const fs::path dir = th::fixtures() / "hostile" / c.name;
      const auto t0 = std::chrono::steady_clock::now();
      std::optional<Error> err;
      bool opened = false;
      try {
        OpenOptions o;
        o.io = io;
        o.threads = 2;
        const Checkpoint ck = Checkpoint::open(dir, o);
        opened = true;
        if (c.kind == "ok") CHECK(!ck.tensors().empty());
        if (!c.tensor.empty()) CHECK(ck.find(c.tensor) != nullptr);
        err = decode_all(ck, c.kind == "ok" ? "" : c.tensor);
      } catch (const Error& e) {
        err = e;
      }
      // Linear-time parsing and matching: no case takes more than a moment.
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
      if (c.kind == "ok") {
        CHECK(opened);
        CHECK_FALSE(err.has_value());
        if (err) FAIL_CHECK(err->what());
        continue;
      }
      REQUIRE(err.has_value());
      INFO("got [" << error_kind_name(err->kind()) << "] " << err->what());
      CHECK(std::string(error_kind_name(err->kind())) == c.kind);
      CHECK(opened == (c.stage == "decode"));
      CHECK_FALSE(err->file().empty());
      if (!c.tensor.empty()) CHECK(err->tensor() == c.tensor);
    }
  }
}

TEST_CASE("a file truncated after open is an error in both io modes, never SIGBUS", "[hostile][truncate]") {
  th::TempDir tmp("trunc");
  size_t checked = 0;
  for (const auto& de : fs::directory_iterator(th::fixtures() / "ct")) {
    if (!de.is_directory()) continue;
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      for (double keep : {0.0, 0.5, 0.9}) {
        const fs::path d = tmp.path / (de.path().filename().string() + std::to_string(static_cast<int>(io)) +
                                       std::to_string(static_cast<int>(keep * 10)));
        fs::create_directories(d);
        for (const auto& f : fs::directory_iterator(de.path()))
          if (f.is_regular_file()) fs::copy_file(f.path(), d / f.path().filename());
        OpenOptions o;
        o.io = io;
        const Checkpoint ck = Checkpoint::open(d, o);
        const fs::path file = d / "model.safetensors";
        const auto size = fs::file_size(file);
        const uint64_t cut = static_cast<uint64_t>(static_cast<double>(size) * keep);
        REQUIRE(::truncate(file.c_str(), static_cast<off_t>(cut)) == 0);
        std::vector<std::byte> buf;
        for (const auto& t : ck.tensors()) {
          INFO(d << " " << t.name);
          bool beyond = false;
          for (const auto& p : t.parts) beyond |= p.offset + p.nbytes > cut;
          const DType dt = is_float_output(t.dtype) || t.quantized ? DType::BF16 : t.dtype;
          buf.resize(t.decoded_bytes(dt));
          bool validated = false;
          try {
            ck.validate(t);
            validated = true;
            ck.decode_into(t, buf, dt);
            CHECK((!beyond || t.numel() == 0));
          } catch (const Error& e) {
            INFO(e.what());
            if (t.format == Format::marlin_24) continue;  // not decodable anyway
            CHECK(beyond);
            CHECK_FALSE(validated);  // validate() runs decode's checks: it says so first, in pread mode too
            CHECK(std::string(error_kind_name(e.kind())) == "truncated");
            ++checked;
          }
          for (const auto& p : t.parts) {  // the raw-part readers too
            std::vector<std::byte> raw(p.nbytes);
            if (p.offset + p.nbytes > cut) {
              CHECK_THROWS_AS(ck.read_part(p, raw), Error);
              if (io == IoMode::mmap) CHECK_THROWS_AS(ck.part_view(p), Error);
            }
          }
        }
      }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("several threads advancing one Stream each get distinct items", "[hostile][stream]") {
  const Checkpoint ck = Checkpoint::open(th::fixtures() / "st" / "sharded");
  for (int round = 0; round < 20; ++round) {
    StreamOptions so;
    so.budget_bytes = 1024;  // tiny: the worker waits for the consumers all the time
    Stream st(ck, so);
    std::mutex mu;
    std::multiset<std::string> seen;
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; ++k)
      ts.emplace_back([&] {
        while (auto item = st.next()) {
          std::lock_guard<std::mutex> lk(mu);
          seen.insert(item->info->name);
        }
      });
    for (auto& t : ts) t.join();
    CHECK(seen.size() == ck.tensors().size());
    CHECK(std::set<std::string>(seen.begin(), seen.end()).size() == ck.tensors().size());
  }
}

TEST_CASE("names that exist but are no readable regular file are io errors naming them, never internal",
          "[hostile][fs]") {
  th::TempDir tmp("fsnames");
  const fs::path good = th::fixtures() / "ct" / "v020_pack_w4_g32_sym_bf16";
  const auto base = [&](const std::string& name, bool with_config) {
    const fs::path d = tmp.path / name;
    fs::create_directories(d);
    fs::copy_file(good / "model.safetensors", d / "model.safetensors");
    if (with_config) fs::copy_file(good / "config.json", d / "config.json");
    return d;
  };
  struct Case {
    std::string name;
    std::function<fs::path(const fs::path&)> plant;  // returns the path the error must name
  };
  const std::vector<Case> cases = {
      {"config_dangling",
       [](const fs::path& d) {
         fs::create_symlink("nowhere.json", d / "config.json");
         return d / "config.json";
       }},
      {"config_loop",
       [](const fs::path& d) {
         fs::create_symlink("config.json", d / "config.json");
         return d / "config.json";
       }},
      {"config_dir",
       [](const fs::path& d) {
         fs::create_directory(d / "config.json");
         return d / "config.json";
       }},
      {"decompose_loop",
       [](const fs::path& d) {
         fs::create_symlink("decompose_config.json", d / "decompose_config.json");
         return d / "decompose_config.json";
       }},
      {"shard_loop",
       [](const fs::path& d) {
         fs::create_symlink("x.safetensors", d / "x.safetensors");
         return d / "x.safetensors";
       }},
      {"index_loop",
       [](const fs::path& d) {
         fs::create_symlink("model.safetensors.index.json", d / "model.safetensors.index.json");
         return d / "model.safetensors.index.json";
       }},
      {"index_long_shard_name",
       [](const fs::path& d) {
         std::ofstream(d / "model.safetensors.index.json")
             << R"({"weight_map": {"a": ")" << std::string(300, 'a') << R"(.safetensors"}})";
         return d / (std::string(300, 'a') + ".safetensors");
       }},
  };
  for (const auto& c : cases) {
    const fs::path d = base(c.name, c.name.rfind("config", 0) != 0);
    const fs::path named = c.plant(d);
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      INFO(c.name);
      OpenOptions o;
      o.io = io;
      try {
        (void)Checkpoint::open(d, o);
        FAIL("opened " << d);
      } catch (const Error& e) {
        INFO(e.what());
        CHECK((e.kind() == ErrorKind::io || e.kind() == ErrorKind::missing_shard));
        CHECK(e.file() == named.string());
      }
    }
  }
}

namespace {
std::atomic<int> g_usr1{0};
void on_usr1(int) { g_usr1.fetch_add(1); }
}  // namespace

TEST_CASE("a system call interrupted by a signal (no SA_RESTART, as CPython installs them) is retried",
          "[hostile][eintr]") {
  // A real interruption, not a simulated errno: a read blocked on an empty pipe is hit by SIGUSR1
  // until the kernel has returned EINTR at least once (the call was made twice), then data comes.
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the blocked read returns -1 / EINTR
  REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::atomic<int> calls{0};
  std::atomic<bool> returned{false};  // a helper that gave up early must fail the test, not hang it
  ssize_t wrote = 0;
  const pthread_t reader = ::pthread_self();
  std::thread poke([&] {
    while (calls.load() < 2 && !returned.load()) {
      ::pthread_kill(reader, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const char one = 'x';
    wrote = ::write(p[1], &one, 1);  // checked on the test's thread (Catch2 asserts are not thread-safe)
  });
  char got = 0;
  const ssize_t r = io::retry_eintr([&] {
    calls.fetch_add(1);
    return ::read(p[0], &got, 1);
  });
  returned = true;
  poke.join();
  CHECK(wrote == 1);
  CHECK(r == 1);
  CHECK(got == 'x');
  CHECK(calls.load() >= 2);
  CHECK(g_usr1.load() >= 1);
  // A real error is returned at once, errno intact.
  int n = 0;
  const int fd = io::retry_eintr([&] {
    ++n;
    return ::open("/nonexistent-ctstream-eintr-test", O_RDONLY);
  });
  const int err = errno;
  CHECK(fd == -1);
  CHECK(err == ENOENT);
  CHECK(n == 1);
  ::close(p[0]);
  ::close(p[1]);
  ::sigaction(SIGUSR1, &old, nullptr);
}
