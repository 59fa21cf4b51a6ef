// The read-ahead a checkpoint's decodes feed (io/read_ahead.hpp, reader/read_schedule.cpp):
// which bytes are handed to its worker. What the kernel then does with the advice is not
// observable here (and timing is not tested: bench/cold_loads.py measures the effect).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"
#include "reader/internal.hpp"

using namespace ctstream;

namespace {

uint64_t advised(const Checkpoint& ck) { return ck.impl().read_ahead.advised_bytes(); }

uint64_t decode(const Checkpoint& ck, const TensorInfo& t, const std::optional<Slice>& s = {}) {
  std::vector<std::byte> out(ck.output_bytes(t, t.dtype, s));
  return ck.decode_into(t, out, t.dtype, s);
}

}  // namespace

TEST_CASE("read-ahead: in-order decodes advise the compressed tensors' bytes once each; dense, slices and jumps less",
          "[read_ahead]") {
  const auto dir = th::fixtures() / "ct" / "v020_pack_w4_g32_sym_bf16";
  const uint64_t file_size = std::filesystem::file_size(dir / "model.safetensors");
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    INFO((io == IoMode::mmap ? "mmap" : "pread"));
    OpenOptions o;
    o.io = io;
    uint64_t compressed = 0, dense = 0;
    {
      const auto ck = Checkpoint::open(dir, o);
      for (const TensorInfo& t : ck.tensors()) (t.format == Format::dense ? dense : compressed) += t.stored_bytes();
      REQUIRE(compressed > 0);
      REQUIRE(dense > 0);
      for (const TensorInfo& t : ck.tensors()) decode(ck, t);  // file order: each compressed byte at least once
      CHECK(advised(ck) >= compressed);
      CHECK(advised(ck) <= file_size);
    }
    {  // dense tensors only: their copy reads its own pages, nothing is advised
      const auto ck = Checkpoint::open(dir, o);
      for (const TensorInfo& t : ck.tensors())
        if (t.format == Format::dense) decode(ck, t);
      CHECK(advised(ck) == 0);
    }
    {  // row slices (a tensor-parallel rank): their own rows only, no look-ahead, no neighbours' rows
      const auto ck = Checkpoint::open(dir, o);
      uint64_t sliced = 0;
      for (const TensorInfo& t : ck.tensors())
        if (t.format != Format::dense && t.shape.size() == 2) {
          decode(ck, t, Slice{0, 0, t.shape[0] / 2});
          sliced += t.stored_bytes();
        }
      REQUIRE(sliced > 0);
      CHECK(advised(ck) > 0);
      CHECK(advised(ck) <= sliced / 2 + sliced / 10);  // half of every row-shaped part, and the small ones
    }
    {  // backwards: no look-ahead, each compressed tensor's own bytes only
      const auto ck = Checkpoint::open(dir, o);
      const auto ts = ck.tensors();
      for (size_t k = ts.size(); k-- > 0;) decode(ck, ts[k]);
      CHECK(advised(ck) == compressed);
    }
  }
}

TEST_CASE("read-ahead: a Stream's own order is read ahead, whatever it is (the schedule remote files use too)",
          "[read_ahead][stream]") {
  const auto dir = th::fixtures() / "ct" / "v020_pack_w4_g32_sym_bf16";
  const auto ck = Checkpoint::open(dir);
  StreamOptions so;
  so.dtype = std::nullopt;
  so.order.emplace();  // backwards: no decode follows the one before it in file order
  uint64_t compressed = 0, first = 0;
  for (auto it = ck.tensors().rbegin(); it != ck.tensors().rend(); ++it) {
    so.order->push_back(it->name);
    if (it->format != Format::dense) compressed += it->stored_bytes();
  }
  REQUIRE(compressed > 0);
  Stream s(ck, so);
  auto x = s.next();
  REQUIRE(x.has_value());
  if (x->info->format != Format::dense) first = x->info->stored_bytes();
  // Before the consumer moves on, the worker has asked for more than the first tensor's bytes.
  CHECK(advised(ck) > first);
  while (s.next()) {
  }
  CHECK(advised(ck) >= compressed);  // every compressed byte, though no decode was in file order
  CHECK(advised(ck) <= std::filesystem::file_size(dir / "model.safetensors"));
}

TEST_CASE(
    "read-ahead: a fork()ed child decodes the parent's checkpoint without advice and closes it without joining "
    "the parent's worker; one it opens advises",
    "[read_ahead][fork]") {
  const auto dir = th::fixtures() / "ct" / "v020_pack_w4_g32_sym_bf16";
  std::vector<std::vector<std::byte>> want;
  std::optional<Checkpoint> ck(Checkpoint::open(dir));
  for (const TensorInfo& t : ck->tensors()) {
    want.emplace_back(ck->output_bytes(t, t.dtype));
    ck->decode_into(t, want.back(), t.dtype);
  }
  REQUIRE(advised(*ck) > 0);  // the worker thread exists
  // ... and, its jobs done, waits on its condition variable when the fork happens (a child that
  // destroyed that condition variable would wait for the waiter forever).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // exit codes say what failed; _exit: no Catch2 teardown
    int code = 0;
    const uint64_t before = advised(*ck);
    size_t i = 0;
    for (const TensorInfo& t : ck->tensors()) {
      std::vector<std::byte> got(ck->output_bytes(t, t.dtype));
      ck->decode_into(t, got, t.dtype);
      if (got != want[i++]) code = 20;
    }
    if (advised(*ck) != before) code = code ? code : 21;  // no advice (and no thread) in a child
    ck.reset();                                           // ~ReadAhead: must neither join nor hang
    {  // a checkpoint opened in the child has a read-ahead of its own, which advises
      auto mine = Checkpoint::open(dir);
      i = 0;
      for (const TensorInfo& t : mine.tensors()) {
        std::vector<std::byte> got(mine.output_bytes(t, t.dtype));
        mine.decode_into(t, got, t.dtype);
        if (got != want[i++]) code = code ? code : 22;
      }
      if (advised(mine) == 0) code = code ? code : 23;
    }
    ::_exit(code);
  }
  int status = 0;
  bool reaped = false;
  for (int waited_ms = 0; waited_ms < 60000 && !reaped; waited_ms += 10) {
    reaped = ::waitpid(child, &status, WNOHANG) == child;
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL("the forked child hung (killed after 60 s)");
  }
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}
