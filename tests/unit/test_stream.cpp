// Stream: delivers exactly what decode_into gives, in order, within its budget — through ring
// wrap-around, oversize tensors, caller-owned destinations and caller-given orders; and in a
// fork()ed child.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/fork.hpp"
#include "ctstream/ctstream.hpp"
#include "helpers.hpp"
#include "reader/internal.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

fs::path write_model(const fs::path& dir, const std::vector<std::pair<std::string, Shape>>& specs) {
  std::vector<SafetensorsWriter::Entry> e;
  for (const auto& [n, s] : specs) e.push_back({n, DType::BF16, s});
  SafetensorsWriter w(dir / "m.safetensors", e);
  uint64_t seed = 1;
  for (const auto& [n, s] : specs) {
    uint64_t count = 1;
    for (auto d : s) count *= d;
    auto bytes = th::random_bytes(count * 2, seed++);
    for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= std::byte{0x3F};  // finite bf16 values
    w.write(bytes);
  }
  w.commit();
  return dir / "m.safetensors";
}

std::vector<std::byte> direct(const Checkpoint& ck, const TensorInfo& t, DType d) {
  std::vector<std::byte> out(t.decoded_bytes(d));
  ck.decode_into(t, out, d);
  return out;
}

// Waits up to `limit_s` for a forked child: its wait status, or nullopt when it hung (then it is
// killed and reaped).
std::optional<int> wait_child(pid_t child, int limit_s) {
  int status = 0;
  for (int waited_ms = 0; waited_ms < limit_s * 1000; waited_ms += 10) {
    if (::waitpid(child, &status, WNOHANG) != 0) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  return std::nullopt;
}

std::string describe(int status) {
  return WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                             : "exit code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

TEST_CASE("Stream delivers every tensor as decode_into does, within the budget", "[stream]") {
  th::TempDir tmp("stream");
  // 4 KiB .. 512 KiB tensors (fp32 output doubles them); a budget of 600 KiB forces wrap-around
  // and one oversize tensor.
  auto p = write_model(tmp.path, {{"a", {32, 64}},
                                  {"b", {256, 512}},
                                  {"c", {7, 3}},
                                  {"big", {512, 512}},
                                  {"d", {100, 100}},
                                  {"e", {1, 1}},
                                  {"f", {300, 300}},
                                  {"g", {0, 4}}});
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    OpenOptions oo;
    oo.io = io;
    auto ck = Checkpoint::open(p, oo);
    for (uint64_t budget : {uint64_t(600) << 10, uint64_t(64) << 20, uint64_t(0)}) {
      for (DType d : {DType::BF16, DType::F32}) {
        INFO("budget " << budget << " dtype " << dtype_name(d) << " io " << int(io));
        StreamOptions so;
        so.dtype = d;
        so.budget_bytes = budget;
        Stream s(ck, so);
        REQUIRE(s.size() == ck.tensors().size());
        size_t i = 0;
        uint64_t largest = 0;
        while (auto item = s.next()) {
          const TensorInfo& t = ck.tensors()[i++];
          REQUIRE(item->info == &t);
          REQUIRE(item->dtype == d);
          const auto want = direct(ck, t, d);
          REQUIRE(std::equal(want.begin(), want.end(), item->data.begin(), item->data.end()));
          largest = std::max(largest, t.decoded_bytes(d));
        }
        REQUIRE(i == ck.tensors().size());
        REQUIRE_FALSE(s.next().has_value());
        // Ring bytes stay within the budget; one tensor larger than the budget may be held on top.
        CHECK(s.peak_held_bytes() <= budget + largest);
      }
    }
  }
}

TEST_CASE("Stream into caller-owned buffers, in a caller-given order", "[stream]") {
  th::TempDir tmp("stream2");
  auto p = write_model(tmp.path, {{"x", {64, 64}}, {"y", {16, 8}}, {"z", {128, 32}}});
  auto ck = Checkpoint::open(p);
  std::map<std::string, std::vector<std::byte>> params;  // "engine parameters"
  for (const auto& t : ck.tensors()) params[t.name].resize(t.decoded_bytes(DType::F16));
  StreamOptions so;
  so.dtype = DType::F16;
  so.budget_bytes = 10000;
  so.order = {"z", "x", "y"};
  so.destination = [&](const TensorInfo& t, uint64_t bytes) {
    REQUIRE(params[t.name].size() == bytes);
    return std::span<std::byte>(params[t.name]);
  };
  Stream s(ck, so);
  std::vector<std::string> seen;
  while (auto item = s.next()) {
    seen.push_back(item->info->name);
    REQUIRE(item->data.data() == params[item->info->name].data());  // decoded in place
  }
  REQUIRE(seen == so.order);
  for (const auto& t : ck.tensors()) REQUIRE(params[t.name] == direct(ck, t, DType::F16));
  so.order = {"nope"};
  CHECK_THROWS_AS(Stream(ck, so), Error);
}

TEST_CASE("thread counts past kMaxThreads are refused, not attempted", "[stream]") {
  // 100000 made 2048 OS threads that stayed for the life of the process; where threads cannot be
  // made (an address-space or pids limit), GNU OpenMP ended the process instead of failing.
  th::TempDir tmp("stream_threads");
  const fs::path p = write_model(tmp.path, {{"x", {64, 64}}});
  OpenOptions o;
  o.threads = kMaxThreads + 1;
  try {
    (void)Checkpoint::open(p, o);
    FAIL("opened");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("at most 1024") != std::string::npos);
  }
  o.threads = kMaxThreads;
  auto ck = Checkpoint::open(p, o);
  StreamOptions so;
  so.threads = 100000;
  CHECK_THROWS_AS(Stream(ck, so), Error);
  so.threads = 2;
  Stream s(ck, so);
  CHECK(s.next());
}

TEST_CASE("an exception the destination throws comes out of next() as thrown, and the stream goes on", "[stream]") {
  // It came out as Error{internal} "internal error (please report): ...", blaming the library.
  struct Refused : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  th::TempDir tmp("stream_dest");
  auto ck = Checkpoint::open(write_model(tmp.path, {{"x", {64, 64}}, {"y", {16, 8}}, {"z", {128, 32}}}));
  std::map<std::string, std::vector<std::byte>> params;
  StreamOptions so;
  so.destination = [&](const TensorInfo& t, uint64_t bytes) {
    if (t.name == "y") throw Refused("no room for y");
    params[t.name].resize(bytes);
    return std::span<std::byte>(params[t.name]);
  };
  Stream s(ck, so);
  std::vector<std::string> seen;
  for (size_t i = 0; i < s.size(); ++i) {
    try {
      auto item = s.next();
      REQUIRE(item);
      seen.push_back(item->info->name);
      CHECK(std::vector<std::byte>(item->data.begin(), item->data.end()) == direct(ck, *item->info, item->dtype));
    } catch (const Refused& e) {
      seen.push_back(std::string("refused: ") + e.what());
    }
  }
  CHECK(!s.next());
  CHECK(seen == std::vector<std::string>{"x", "refused: no room for y", "z"});
}

TEST_CASE("a decode error surfaces at its tensor and the stream goes on", "[stream]") {
  auto ck = Checkpoint::open(th::fixtures() / "ct" / "v012_marlin24_w4_g128_bf16");
  Stream s(ck);
  size_t ok = 0, errors = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    try {
      if (!s.next()) break;
      ++ok;
    } catch (const Error& e) {
      ++errors;
      CHECK(e.kind() == ErrorKind::unsupported);
    }
  }
  CHECK(errors >= 1);
  CHECK(ok + errors == s.size());
}

TEST_CASE("byte counts parse with decimal and binary units", "[stream]") {
  CHECK(parse_bytes("512MB") == 512000000ull);
  CHECK(parse_bytes("2GiB") == 2147483648ull);
  CHECK(parse_bytes("1.5G") == 1500000000ull);
  CHECK(parse_bytes("4096") == 4096ull);
  CHECK(parse_bytes("64 MiB") == 67108864ull);
  CHECK_THROWS_AS(parse_bytes("lots"), Error);
  CHECK_THROWS_AS(parse_bytes("5XB"), Error);
  // Only plain decimal numbers: what std::stod also took is refused, not converted.
  for (const char* bad : {"nan", "NaN MB", "inf", "infGB", "1e30GB", "1e3", "-1", "-0.5GB", "+5MB", "0x10", "", "  ",
                          "1.5.5", ".", "MB", "4611686018427387905", "5000000000GB", "1 2",
                          // 20 digits: the product wrapped modulo 2^64 before the cap was checked
                          "18446744073709551616", "18446744073709551617", "20000000000000000000",
                          "18446744073709551616MB", "36893488147419103232GiB", "99999999999999999999999"})
    CHECK_THROWS_AS(parse_bytes(bad), Error);
  CHECK(parse_bytes(".5KiB") == 512ull);
  CHECK(parse_bytes("4611686018427387904") == (1ull << 62));
  CHECK(parse_bytes(" 3 kb ") == 3000ull);
}

TEST_CASE("a fork()ed child decodes on its own thread and refuses the parent's Stream, never hangs", "[stream][fork]") {
  // GNU OpenMP's pool does not survive fork(): a parallel region in the child reuses the parent's
  // pool threads, which do not exist there (SIGSEGV without the guard). The parent builds pools (a Stream decoding
  // batches of small tensors on 4 threads; a large decode_into on this thread), keeps a Stream running, and forks; the
  // child must decode everything (same bytes) and get an error, not a hang, from the parent's Stream.
  th::TempDir tmp("fork");
  std::vector<std::pair<std::string, Shape>> specs;
  for (int i = 0; i < 24; ++i) {
    char name[8];  // not "t" + to_string(i): GCC 12's -Wrestrict false positive on it
    std::snprintf(name, sizeof name, "t%02d", i);
    specs.push_back({name, {64, 96}});
  }
  specs.push_back({"big", {1024, 2048}});  // 8 MiB as F32: decode_into splits it across the team
  OpenOptions o;
  o.threads = 4;
  auto ck = Checkpoint::open(write_model(tmp.path, specs), o);
  std::vector<std::vector<std::byte>> want;
  StreamOptions so;
  so.threads = 4;
  so.dtype = DType::F32;
  {
    Stream warm(ck, so);
    while (auto it = warm.next()) want.emplace_back(it->data.begin(), it->data.end());
  }
  REQUIRE(want.size() == specs.size());
  // ... and on this thread, whose pool is the one a child's decode_into would reuse
  REQUIRE(direct(ck, ck.at("big"), DType::F32) == want.back());
  Stream parents(ck, so);
  REQUIRE(parents.next());  // its worker runs (and may hold its locks) when the fork happens

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // exit codes say what failed; _exit: no atexit handlers, no Catch2 teardown
    int code = 0;
    try {
      (void)parents.next();
      code = 10;  // the parent's Stream answered
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::unsupported || std::string(e.what()).find("fork") == std::string::npos) code = 11;
    } catch (...) {
      code = 12;
    }
    size_t i = 0;
    try {
      Stream mine(ck, so);
      for (; auto it = mine.next(); ++i)
        if (i >= want.size() || !std::equal(it->data.begin(), it->data.end(), want[i].begin(), want[i].end()))
          code = code ? code : 20;
      if (direct(ck, ck.at("big"), DType::F32) != want.back()) code = code ? code : 21;
    } catch (...) {
      code = code ? code : 22;
    }
    if (i != want.size()) code = code ? code : 23;
    // This thread opened teams in the parent: here it opens none (team() is 1), and hands a
    // decode's team to a fresh thread instead, so the rows still run on several threads.
    if (!core::on_fork_survivor() || core::team(4) != 1) code = code ? code : 24;
    std::set<std::thread::id> ran;
    std::mutex ran_mu;
    reader::parallel_for(64, 4, [&](size_t) {
      std::lock_guard<std::mutex> lk(ran_mu);
      ran.insert(std::this_thread::get_id());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    if (ran.size() < 2 || ran.count(std::this_thread::get_id())) code = code ? code : 25;
    // ... the same host thread and pool every time: no thread made per decode
    const auto tasks = [] {
      return std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator{});
    };
    const auto before = tasks();
    for (int k = 0; k < 50; ++k) reader::parallel_for(8, 4, [](size_t) {});
    if (tasks() != before) code = code ? code : 27;
    std::thread other([&] {  // a thread made in the child is no survivor
      if (core::on_fork_survivor() || core::team(4) != 4) code = code ? code : 26;
    });
    other.join();
    ::_exit(code);  // the parent's Stream is left alone (its destructor, run here, would leak it)
  }
  const std::optional<int> status = wait_child(child, 120);
  if (!status) FAIL("the forked child hung (killed after 120 s)");
  INFO("child: " << describe(*status));
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
}

TEST_CASE("a Stream made before fork() is destroyed in the child without waiting on the parent's worker",
          "[stream][fork]") {
  th::TempDir tmp("forkdtor");
  auto ck = Checkpoint::open(write_model(tmp.path, {{"a", {256, 256}}, {"b", {256, 256}}, {"c", {256, 256}}}));
  auto s = std::make_unique<Stream>(ck);
  REQUIRE(s->next());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    (void)s->peak_held_bytes();
    s.reset();  // joining the parent's worker here would hang
    ::_exit(0);
  }
  const std::optional<int> status = wait_child(child, 60);
  if (!status) FAIL("the child hung destroying the parent's Stream (killed after 60 s)");
  INFO("child: " << describe(*status));
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
}

TEST_CASE("an empty order delivers nothing; no order delivers every tensor", "[stream]") {
  th::TempDir tmp("stream_empty");
  auto p = write_model(tmp.path, {{"x", {64, 64}}, {"y", {16, 8}}});
  auto ck = Checkpoint::open(p);
  StreamOptions so;
  so.order = std::vector<std::string>{};  // e.g. vLLM's lazy iterator when every tensor is lazy
  Stream none(ck, so);
  CHECK(none.size() == 0);
  CHECK_FALSE(none.next().has_value());
  CHECK(none.peak_held_bytes() == 0);  // nothing was decoded ahead either
  so.order.reset();
  Stream all(ck, so);
  CHECK(all.size() == 2);
  size_t n = 0;
  while (all.next()) ++n;
  CHECK(n == 2);
}
