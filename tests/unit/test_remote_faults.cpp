// The fetch engine and Checkpoint::open against a real S3 server (rclone, remote_server.hpp) behind
// tests/remote/fault_proxy.py, which forwards every request verbatim (signatures stay valid) and
// injects the scripted faults of docs/design/object_storage.md section 5.1: dropped connections,
// truncated and stalled bodies, SlowDown with and without Retry-After, a rate limit.
#include <curl/curl.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ctstream/checkpoint.hpp"
#include "io/aws_config.hpp"
#include "io/http_client.hpp"
#include "io/url.hpp"
#include "remote_server.hpp"

namespace fs = std::filesystem;
using ctstream::Checkpoint;
using ctstream::Error;
using ctstream::ErrorKind;
namespace io = ctstream::io;

namespace {

size_t to_string_cb(char* p, size_t size, size_t n, void* s) {
  static_cast<std::string*>(s)->append(p, size * n);
  return size * n;
}

/// One proxy per test case, in front of the shared rclone server, killed by its pid at the end.
struct FaultProxy {
  pid_t pid = -1;
  int port = 0;
  std::string why_not;
  FaultProxy(const th::S3Server& upstream, const std::vector<std::string>& extra = {}) {
    port = th::free_port();
    const std::string script = (th::fixtures() / "../remote/fault_proxy.py").string();
    std::vector<std::string> args = {"python3",           script,   "--upstream",
                                     upstream.endpoint(), "--port", std::to_string(port)};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = th::spawn_listening(args, port, why_not);
  }
  ~FaultProxy() { th::stop_child(pid); }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }
  /// A control request (answered by the proxy itself): arm?SPEC, clear, stats.
  std::string control(const std::string& what) const {
    std::string out;
    CURL* h = curl_easy_init();
    const std::string url = endpoint() + "/__proxy__/" + what;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &to_string_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    REQUIRE(rc == CURLE_OK);
    return out;
  }
  void arm(const std::string& spec) const { REQUIRE(control("arm?" + spec) == "armed"); }
};

io::HttpOptions fast() {
  io::HttpOptions o;
  o.max_attempts = 3;
  o.backoff_base_s = 0.005;  // throttled: 0.05 s
  o.max_total_s = 20;
  o.stall_timeout_s = 1;
  return o;
}

// blob.bin as test_remote_fetch.cpp's populate() writes it (read back from the server's directory).
std::vector<std::byte> local_blob(const th::S3Server& s) {
  std::ifstream f(s.root.path / "bkt/blob.bin", std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

#define REQUIRE_PROXY(srv, proxy, ...)                    \
  th::S3Server& srv = th::S3Server::get();                \
  if (!srv.why_not.empty()) REMOTE_SKIP(srv.why_not);     \
  FaultProxy proxy(srv __VA_OPT__(, ) __VA_ARGS__);       \
  if (!proxy.why_not.empty()) REMOTE_SKIP(proxy.why_not); \
  th::S3Env env(srv);                                     \
  env.set("AWS_ENDPOINT_URL", proxy.endpoint());

TEST_CASE("remote faults: dropped, truncated and stalled bodies are resumed byte-equal", "[remote][faults]") {
  REQUIRE_PROXY(srv, proxy);
  const std::vector<std::byte> want = local_blob(srv);
  const io::HttpTarget t = io::s3_target(io::parse_url("s3://bkt/blob.bin"), io::load_s3_config());
  // The probe (1 byte) passes; the 1 MiB read is faulted once.
  // A stall: libcurl's low-speed check averages over its last 5 s, so silence after the head is
  // seen after CURLOPT_LOW_SPEED_TIME (1 s here), silence after body bytes only once they leave
  // that window (~5 s + 1 s): the stall of 8 s after 5000 bytes is cut at ~6 s.
  for (const char* fault :
       {"drop,bytes=1000", "drop,bytes=0", "truncate", "stall,bytes=0,secs=2.5", "stall,bytes=5000,secs=8"}) {
    INFO(fault);
    REQUIRE(proxy.control("clear") == "cleared");
    proxy.arm(std::string(fault) + ",path=blob,min_len=2");
    io::HttpClient c(fast());
    const io::ObjectInfo info = c.probe(t);
    REQUIRE(info.size == want.size());
    std::vector<std::byte> got(1 << 20);
    c.read(t, info, 12345, got);
    CHECK(std::memcmp(got.data(), want.data() + 12345, got.size()) == 0);
    CHECK(c.stats().retries == 1);
    CHECK(c.stats().requests == 3);  // probe, faulted read, resumed read
  }
  CHECK_THAT(proxy.control("stats"), Catch::Contains("faults=5"));
}

TEST_CASE("remote faults: SlowDown honours Retry-After", "[remote][faults]") {
  REQUIRE_PROXY(srv, proxy);
  const std::vector<std::byte> want = local_blob(srv);
  const io::HttpTarget t = io::s3_target(io::parse_url("s3://bkt/blob.bin"), io::load_s3_config());
  for (const bool retry_after : {true, false}) {
    INFO("Retry-After: " << retry_after);
    REQUIRE(proxy.control("clear") == "cleared");
    proxy.arm(retry_after ? "slowdown,after=1,path=blob" : "slowdown,path=blob");
    io::HttpClient c(fast());
    std::vector<std::byte> got(4096);
    const auto t0 = std::chrono::steady_clock::now();
    c.read(t, io::ObjectInfo{want.size(), "", ""}, 100, got);
    const double s = seconds_since(t0);
    CHECK(std::memcmp(got.data(), want.data() + 100, got.size()) == 0);
    CHECK(c.stats().retries == 1);
    if (retry_after) CHECK(s >= 0.95);  // the server's 1 s, not the client's 0.05 s backoff
    else CHECK(s < 0.9);                // 0.05 s of backoff, far from the 1 s Retry-After (room for a loaded 2-core VM)
  }
}

TEST_CASE("remote faults: the proxy's rate limit paces the body (the benchmark's slow link)", "[remote][faults]") {
  REQUIRE_PROXY(srv, proxy, std::vector<std::string>{"--rate", "262144"});
  const std::vector<std::byte> want = local_blob(srv);
  const io::HttpTarget t = io::s3_target(io::parse_url("s3://bkt/blob.bin"), io::load_s3_config());
  io::HttpClient c(fast());
  std::vector<std::byte> got(128 << 10);
  const auto t0 = std::chrono::steady_clock::now();
  c.read(t, io::ObjectInfo{want.size(), "", ""}, 0, got);
  CHECK(seconds_since(t0) >= 0.4);  // 128 KiB at 256 KiB/s
  CHECK(std::memcmp(got.data(), want.data(), got.size()) == 0);
}

TEST_CASE("remote faults: a checkpoint read through faults decodes equal, or names the URL and the tensor",
          "[remote][faults]") {
  REQUIRE_PROXY(srv, proxy);
  const Checkpoint local = Checkpoint::open(th::fixtures() / "st/sharded");
  const Checkpoint remote = Checkpoint::open("s3://bkt/ck/st/sharded");
  io::HttpClient& client = io::default_http_client();
  // Three dropped connections on shard reads: retried, resumed, equal. How many retries that takes
  // depends on the process-wide client's attempt limit (fixed by whichever test first used it): a
  // read-ahead whose attempts all drop is forgotten and the decode's own read fetches afresh.
  proxy.arm("drop,bytes=0,times=3,path=safetensors$");
  const uint64_t retries0 = client.stats().retries;
  th::check_same_decodes(local, remote);
  CHECK(client.stats().retries - retries0 >= 1);
  CHECK(client.stats().retries - retries0 <= 3);
  CHECK_THAT(proxy.control("stats"), Catch::Contains("faults=3"));
  // Every attempt dropped: the error names the object (no credentials) and the tensor.
  proxy.arm("drop,bytes=0,times=-1,path=safetensors$");
  const auto& t = remote.tensors().back();
  std::vector<std::byte> out(t.decoded_bytes(t.dtype));
  try {
    remote.decode_into(t, out, t.dtype);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);  // no body byte ever came (a body cut short would be truncated)
    CHECK(e.tensor() == t.name);
    CHECK_THAT(e.file(), Catch::StartsWith("s3://bkt/ck/st/sharded/model-0000"));
    CHECK_THAT(e.what(), Catch::Contains("tensor '" + t.name + "'"));
    CHECK_THAT(e.what(), Catch::Contains("gave up after"));
    CHECK_THAT(e.what(), !Catch::Contains(th::S3Server::secret));
  }
}
