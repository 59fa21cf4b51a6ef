// The fetch engine against tests/remote/hostile_server.py: body-level faults a real S3 server does
// not produce (short bodies, endless bodies, ignored ranges, a changed ETag, throttling).
#include <catch2/catch.hpp>
#include <chrono>
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
    c.read(t, io::ObjectInfo{kSize, "\"v1\"", ""}, off, out);
  } catch (const Error& e) {
    kind = e.kind();
    return e.what();
  }
  return "";
}

// message_of a read of 1000 bytes at 0, and the seconds it took.
std::pair<std::string, double> timed_message_of(io::HttpClient& c, const io::HttpTarget& t) {
  ErrorKind kind{};
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = message_of(c, t, 0, 1000, kind);
  return {std::move(msg), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
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
  c.read(h.target("short_once", 1), io::ObjectInfo{kSize, "\"v1\"", ""}, 1000, out);
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

TEST_CASE("remote: an http(s) URL's query is its own object's: siblings are asked for without it, never shown",
          "[remote][hostile]") {
  // A red-team pass: the sibling config.json's URL was cut from the raw URL, so a query or a
  // fragment lost it (a compressed checkpoint opened as its raw parts, without an error) or put
  // it inside the query; and the query -- a presigned URL's signature -- was printed by errors,
  // files() and inspect.
  REQUIRE_HOSTILE(h);
  const std::string base = "http://127.0.0.1:" + std::to_string(h.port) + "/files/";
  const std::string dir = "ct/v012_pack_w4_g32_sym_bf16";
  const auto local = ctstream::Checkpoint::open(th::fixtures() / dir / "model.safetensors");
  REQUIRE(local.config_info().compressed_tensors);
  const auto no_secret = [](const std::string& s) { return s.find("SECRET") == std::string::npos; };
  for (const std::string& tail :
       {std::string("/model.safetensors?X-Amz-Signature=SECRETSIG&X-Amz-Credential=SECRETID"),
        std::string("/model.safetensors#SECRETFRAG"), std::string("/model.safetensors?token=SECRET#frag"),
        std::string("?token=SECRET"), std::string("/?token=SECRET")}) {
    INFO(tail);
    const auto remote = ctstream::Checkpoint::open(base + dir + tail);
    CHECK(remote.config_info().compressed_tensors);
    CHECK(no_secret(remote.config_info().file.string()));
    REQUIRE(remote.tensors().size() == local.tensors().size());
    th::check_same_decodes(local, remote);
    CHECK(no_secret(remote.name()));
    CHECK(remote.name().find("/files/" + dir) != std::string::npos);
    for (const auto& f : remote.files()) CHECK(no_secret(f.string()));
    for (const auto& f : remote.source_files()) CHECK(no_secret(f.path.string()));
    try {
      remote.at("no.such.tensor");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(no_secret(e.what()));
      CHECK(no_secret(e.file()));
    }
  }
  // errors name the URL without its query: a refused option (before any request), a missing
  // object, a malformed header
  ctstream::OpenOptions many;
  many.threads = 100000;
  try {
    ctstream::Checkpoint::open(base + dir + "/model.safetensors?sig=SECRETSIG", many);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(no_secret(e.what()));
  }
  for (const std::string& name : {std::string("nothing/model.safetensors"), std::string("nothing"),
                                  std::string("../corrupt/hdr_bad_json.safetensors")}) {
    try {
      ctstream::Checkpoint::open(base + "ct/" + name + "?sig=SECRETSIG");
      FAIL("no error");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(no_secret(e.what()));
      CHECK(no_secret(e.file()));
      CHECK(std::string(e.what()).find("127.0.0.1") != std::string::npos);
    }
  }
}

TEST_CASE("remote: a caller without s3:ListBucket, to whom S3 answers a missing key with 403 AccessDenied",
          "[remote][hostile]") {
  // A red-team pass: the probes of decompose_config.json and the index took that 403 as fatal, so
  // such a caller (a read-only policy on bucket/prefix/*) could open no checkpoint at all.
  REQUIRE_HOSTILE(h);
  th::S3Env env("http://127.0.0.1:" + std::to_string(h.port), "AKIDEXAMPLE", "secret-example-0123456789");
  for (const char* name : {"st/sharded", "ct/v012_pack_w4_g32_sym_bf16/model.safetensors"}) {
    INFO(name);
    const auto local = ctstream::Checkpoint::open(th::fixtures() / name);
    const auto remote = ctstream::Checkpoint::open(std::string("s3://s3deny/") + name);
    CHECK(remote.config_info().compressed_tensors == local.config_info().compressed_tensors);
    REQUIRE(remote.tensors().size() == local.tensors().size());
    th::check_same_decodes(local, remote);
  }
  // A prefix without an index must be listed, which needs s3:ListBucket: refused, saying so.
  try {
    ctstream::Checkpoint::open("s3://s3deny/ct/v012_pack_w4_g32_sym_bf16");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("s3:ListBucket"));
  }
  // config.json denied is never taken for absent (a compressed checkpoint would then read as its
  // stored parts): beside a file without one, the 403 is the error.
  try {
    ctstream::Checkpoint::open("s3://s3deny/st/all_dtypes.safetensors");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("config.json"));
    CHECK_THAT(e.what(), Catch::Contains("403"));
    CHECK_THAT(e.what(), !Catch::Contains("unsigned"));
  }
  // No credentials anywhere: the requests go unsigned, and a refusal says so.
  env.set("AWS_ACCESS_KEY_ID", "");
  env.set("AWS_SECRET_ACCESS_KEY", "");
  try {
    ctstream::Checkpoint::open("s3://s3deny/st/all_dtypes.safetensors");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("the request was unsigned"));
  }
}

TEST_CASE("remote: a listing that repeats a key is refused as malformed", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  th::S3Env env("http://127.0.0.1:" + std::to_string(h.port), "AKIDEXAMPLE", "secret-example-0123456789");
  try {
    ctstream::Checkpoint::open("s3://listdup/x");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK_THAT(e.what(), Catch::Contains("repeats the key 'x/model.safetensors'"));
  }
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
  c2.read(h.target("slowdown_once", 1), io::ObjectInfo{kSize, "\"v1\"", ""}, 0, out);
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
    th::check_same_decodes(local, remote);
  }
  CHECK(th::error_kind([&] { ctstream::Checkpoint::open(base + "nothing/here"); }) == ErrorKind::file_not_found);
}

TEST_CASE("remote hostile: a stalled body times out, is retried, then refused", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpOptions o = fast();
  o.max_attempts = 2;
  o.stall_timeout_s = 1;  // CURLOPT_LOW_SPEED_TIME (CTSTREAM_S3_STALL_S)
  io::HttpClient c(o);
  const auto [msg, s] = timed_message_of(c, h.target("stall", 1));
  CHECK_THAT(msg, Catch::Contains("gave up after 2 attempt(s)"));
  CHECK_THAT(msg, Catch::Contains("/stall/obj1"));
  CHECK(c.stats().retries == 1);
  CHECK(s >= 1.9);  // two stalls of 1 s each: the timeout, not a refusal, ended them
  CHECK(s < 10);
}

TEST_CASE("remote hostile: a body trickled above the stall rate ends at the request's time limit",
          "[remote][hostile]") {
  // A red-team pass: max_total_s was checked only between attempts, so a server sending a byte
  // every 0.2 s (never a stall) held a read for as long as it liked.
  REQUIRE_HOSTILE(h);
  io::HttpOptions o = fast();
  o.max_total_s = 2;
  o.stall_timeout_s = 5;
  io::HttpClient c(o);
  const auto [msg, s] = timed_message_of(c, h.target("trickle", 1));
  CHECK_THAT(msg, Catch::Contains("(time limit)"));
  CHECK_THAT(msg, Catch::Contains("/trickle/obj1"));
  CHECK(s >= 1.9);
  CHECK(s < 6);  // the 1000-byte body alone takes 200 s
}

TEST_CASE("remote hostile: header floods, redirect loops and bad error bodies are refused at once",
          "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  ErrorKind kind{};
  CHECK_THAT(message_of(c, h.target("header_flood", 1), 0, 1000, kind),
             Catch::Contains("more than 256 response header lines"));
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(message_of(c, h.target("header_huge", 1), 0, 1000, kind),
             Catch::Contains("response headers larger than 65536 bytes"));
  CHECK(kind == ErrorKind::io);
  // One line over libcurl's own 100 KiB header cap: libcurl refuses it before the callback sees it.
  CHECK_THAT(message_of(c, h.target("header_line_huge", 1), 0, 1000, kind), Catch::Contains("transfer failed"));
  CHECK(kind == ErrorKind::io);
  // A redirect is followed only to https (CURLOPT_REDIR_PROTOCOLS_STR): a loop back to http ends
  // at its first hop; over https CURLOPT_MAXREDIRS (5) ends it.
  const std::string redirect = message_of(c, h.target("redirect_loop", 1), 0, 1000, kind);
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(redirect, Catch::Contains("/redirect_loop/obj1"));
  // 403 with an endless body of broken XML: read up to 8 KiB, no code extracted, no retry.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string bad = message_of(c, h.target("bad_xml", 1), 0, 1000, kind);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(bad, Catch::EndsWith("HTTP 403"));
  CHECK(c.stats().retries == 0);
  // The same 8 KiB cap in the listing's document reader.
  try {
    (void)c.get_document(h.target("bad_xml", 2), 1 << 20);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::EndsWith("/bad_xml/obj2: HTTP 403"));
  }
  CHECK(c.stats().retries == 0);
}

TEST_CASE("remote hostile: SlowDown forever ends after the attempts, within the capped backoffs", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());  // 3 attempts; throttled backoff caps 0.05 s, 0.1 s
  ErrorKind kind{};
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = message_of(c, h.target("slowdown_forever", 1), 0, 1000, kind);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(msg, Catch::Contains("gave up after 3 attempt(s)"));
  CHECK_THAT(msg, Catch::Contains("SlowDown"));
  CHECK(c.stats().retries == 2);
  CHECK(s < 0.15 + 2);  // the sum of the capped backoffs, plus the requests
}

TEST_CASE("remote hostile: negative and overflowing Content-Range, a 200 without range or length",
          "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  io::HttpClient c(fast());
  ErrorKind kind{};
  CHECK_THAT(message_of(c, h.target("cr_negative", 1), 0, 1000, kind),
             Catch::Contains("malformed Content-Range header 'bytes -1-999/262144'"));
  CHECK(kind == ErrorKind::io);
  CHECK_THAT(message_of(c, h.target("cr_overflow", 1), 0, 1000, kind),
             Catch::Contains("malformed Content-Range header 'bytes 0-18446744073709551616/262144'"));
  CHECK(kind == ErrorKind::io);
  // A 200 that ignores Range, with neither Content-Range nor Content-Length: refused for a part of
  // the object, and also for the whole (its size cannot be checked).
  CHECK_THAT(message_of(c, h.target("no_length_200", 1), 10, 1000, kind),
             Catch::Contains("200 response with neither Content-Range nor Content-Length"));
  CHECK_THAT(message_of(c, h.target("no_length_200", 2), 0, kSize, kind),
             Catch::Contains("200 response with neither Content-Range nor Content-Length"));
  CHECK(c.stats().retries == 0);
}

TEST_CASE("remote hostile: a weak or missing ETag pins Last-Modified too", "[remote][hostile]") {
  REQUIRE_HOSTILE(h);
  for (const char* mode : {"weak_etag", "no_etag"}) {
    INFO(mode);
    io::HttpClient c(fast());
    const io::ObjectInfo info = c.probe(h.target(mode, 1));
    CHECK(info.size == kSize);
    // a weak tag is pinned as well, compared weakly (it cannot be an If-Match precondition)
    CHECK(info.etag == (std::string(mode) == "weak_etag" ? "W/\"v1\"" : ""));
    CHECK(info.last_modified == "Sun, 01 Nov 2025 08:49:37 GMT");
    std::vector<std::byte> out(1000);
    c.read(h.target(mode, 1), info, 300, out);
    for (uint64_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == expected(300 + i));
    CHECK(c.stats().unpinned == 0);
    // The Last-Modified changes after the probe (a weak ETag stays W/"v1"): the object changed.
    const io::HttpTarget flip = h.target(std::string(mode) + "_flip", 1);
    const io::ObjectInfo fi = c.probe(flip);
    try {
      c.read(flip, fi, 0, out);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::io);
      CHECK_THAT(e.what(), Catch::Contains("object changed while reading (Last-Modified 'Sun, 02 Nov 2025"));
    }
  }
  // Neither: only the size is pinned, and the stats say so.
  io::HttpClient c(fast());
  const io::ObjectInfo info = c.probe(h.target("no_validators", 1));
  CHECK(info.etag.empty());
  CHECK(info.last_modified.empty());
  CHECK(c.stats().unpinned == 1);
  std::vector<std::byte> out(10);
  c.read(h.target("no_validators", 1), info, 0, out);
  CHECK(out[3] == expected(3));
}
