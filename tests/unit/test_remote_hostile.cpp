// The fetch engine against tests/remote/hostile_server.py: body-level faults a real S3 server does
// not produce (short bodies, endless bodies, ignored ranges, a changed ETag, throttling).
#include <catch2/catch.hpp>
#include <cstring>

#include "ctstream/checkpoint.hpp"
#include "io/http_client.hpp"
#include "io/url.hpp"
#include "remote_server.hpp"

using ctstream::Error;
using ctstream::ErrorKind;
namespace io = ctstream::io;

namespace {
constexpr uint64_t kSize = 256 * 1024;
std::byte expected(uint64_t i) { return static_cast<std::byte>((i * 7) % 251); }

struct Hostile {
  pid_t pid = -1;
  int port = 0;
  std::string why_not;
  Hostile() {
    port = th::free_port();
    const std::string script = (th::fixtures() / "../remote/hostile_server.py").string();
    pid = th::spawn_listening({"python3", script, std::to_string(port), th::fixtures().string()}, port, why_not);
  }
  ~Hostile() { th::stop_child(pid); }
  static Hostile& get() {
    static Hostile h;
    return h;
  }
  io::HttpTarget target(const std::string& mode, int n) const {
    return io::http_target(
        io::parse_url("http://127.0.0.1:" + std::to_string(port) + "/" + mode + "/obj" + std::to_string(n)));
  }
};

io::HttpOptions fast() {
  io::HttpOptions o;
  o.max_attempts = 3;
  o.backoff_base_s = 0.005;
  o.max_total_s = 10;
  o.stall_timeout_s = 5;
  return o;
}

std::string message_of(io::HttpClient& c, const io::HttpTarget& t, uint64_t off, uint64_t n, ErrorKind& kind) {
  std::vector<std::byte> out(n);
  try {
    c.read(t, io::ObjectInfo{kSize, "\"v1\""}, off, out);
  } catch (const Error& e) {
    kind = e.kind();
    return e.what();
  }
  return "";
}
}  // namespace

#define REQUIRE_HOSTILE(h)     \
  Hostile& h = Hostile::get(); \
  if (!h.why_not.empty()) REMOTE_SKIP(h.why_not);

TEST_CASE("remote hostile: probe and reads of a well-behaved server", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  const io::ObjectInfo info = c.probe(h.target("ok", 0));
  CHECK(info.size == kSize);
  CHECK(info.etag == "\"v1\"");
  std::vector<std::byte> out(1000);
  c.read(h.target("ok", 0), info, 5000, out);
  for (uint64_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == expected(5000 + i));
}

TEST_CASE("remote hostile: a short body is resumed where it stopped", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  std::vector<std::byte> out(100000);
  c.read(h.target("short_once", 1), io::ObjectInfo{kSize, "\"v1\""}, 1000, out);
  for (uint64_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == expected(1000 + i));
  const auto st = c.stats();
  CHECK(st.requests == 2);
  CHECK(st.retries == 1);
  CHECK(st.bytes_received == out.size());  // the second request asked only for the rest
  ErrorKind kind{};
  const std::string msg = message_of(c, h.target("short_always", 1), 0, 1000, kind);
  CHECK(kind == ErrorKind::truncated);
  CHECK_THAT(msg, Catch::Contains("gave up after 3 attempt(s)"));
}

TEST_CASE("remote hostile: endless, long and range-ignoring bodies are refused", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  ErrorKind kind{};
  CHECK_THAT(message_of(c, h.target("endless", 1), 0, 1000, kind), Catch::Contains("longer than the requested range"));
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(message_of(c, h.target("long_body", 1), 0, 1000, kind), Catch::Contains("Content-Length 1010"));
  CHECK_THAT(message_of(c, h.target("ignore_range", 1), 10, 1000, kind), Catch::Contains("range"));
  CHECK(c.stats().retries == 0);  // a hostile answer is not retried
}

TEST_CASE("remote hostile: a changed ETag, throttling", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  const io::HttpTarget flip = h.target("etag_flip", 1);
  const io::ObjectInfo info = c.probe(flip);
  std::vector<std::byte> out(10);
  try {
    c.read(flip, info, 0, out);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("changed"));
  }
  io::HttpClient c2(fast());
  c2.read(h.target("slowdown_once", 1), io::ObjectInfo{kSize, "\"v1\""}, 0, out);
  CHECK(c2.stats().retries == 1);
}

TEST_CASE("remote: Checkpoint::open on an http:// URL (no S3, no signing)", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  const std::string base = "http://127.0.0.1:" + std::to_string(h.port) + "/files/";
  for (const char* name :
       {"ct/v012_pack_w4_g32_sym_bf16", "st/sharded", "ct/v012_sparse_bitmask_bf16/model.safetensors"}) {
    INFO(name);
    const auto local = ctstream::Checkpoint::open(th::fixtures() / name);
    const auto remote = ctstream::Checkpoint::open(base + name);
    REQUIRE(remote.tensors().size() == local.tensors().size());
    for (const auto& t : local.tensors()) {
      const auto* r = remote.find(t.name);
      REQUIRE(r != nullptr);
      std::vector<std::byte> want(t.decoded_bytes(t.dtype)), got(want.size());
      local.decode_into(t, want, t.dtype);
      remote.decode_into(*r, got, r->dtype);
      CHECK(got == want);
    }
  }
  CHECK(th::error_kind([&] { ctstream::Checkpoint::open(base + "nothing/here"); }) == ErrorKind::file_not_found);
}
