// The fetch engine and RemoteFile against a real S3 server (rclone serve s3, started by
// remote_server.hpp; the tests SKIP when rclone is not installed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "io/http_client.hpp"
#include "io/remote_file.hpp"
#include "io/url.hpp"
#include "remote_server.hpp"

namespace fs = std::filesystem;
using ctstream::Error;
using ctstream::ErrorKind;

namespace {
constexpr size_t blob_size = (3 << 20) + 17;
const std::vector<std::byte>& blob() {
  static const std::vector<std::byte> b = th::random_bytes(blob_size, 29);
  return b;
}
}  // namespace

void th::S3Server::populate(const fs::path& bucket) {
  th::write_file(bucket / "blob.bin", blob());
  th::write_file(bucket / "empty.bin", {});
  fs::create_directories(bucket / "dir");
  th::write_file(bucket / "dir/sp ace+plus.json", th::random_bytes(100, 1));
  th::copy_remote_fixtures(bucket);
}

namespace {
ctstream::io::HttpOptions fast() {
  ctstream::io::HttpOptions o;
  o.max_attempts = 2;
  o.backoff_base_s = 0.01;
  o.max_total_s = 10;
  return o;
}
}  // namespace

TEST_CASE("remote: size/ETag probe and ranged reads equal the local bytes", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  ctstream::io::HttpClient client(fast());
  auto f = ctstream::io::RemoteFile::open("s3://bkt/blob.bin", client);
  CHECK(f->size() == blob_size);
  CHECK(f->mode() == ctstream::io::Mode::remote);
  CHECK(f->etag().size() == 34);  // "md5"
  CHECK(f->view(0, 10).empty());
  std::mt19937_64 rng(7);
  // Random ranges (the end of the object included), from 4 threads at once.
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, seed = rng()] {
      std::mt19937_64 r(seed);
      for (int i = 0; i < 12; ++i) {
        const uint64_t off = r() % blob_size;
        const uint64_t n = 1 + r() % std::min<uint64_t>(blob_size - off, 700000);
        std::vector<std::byte> out(n);
        f->read_at(off, out);
        if (std::memcmp(out.data(), blob().data() + off, n) != 0) ++bad;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  std::vector<std::byte> all(blob_size);
  f->read_at(0, all);
  CHECK(all == blob());
  const auto st = client.stats();
  CHECK(st.requests == 1 + 48 + 1);
  CHECK(st.retries == 0);
  // Past the end: refused before any request.
  std::vector<std::byte> two(2);
  CHECK(th::error_kind([&] { f->read_at(blob_size - 1, two); }) == ErrorKind::truncated);
  CHECK(client.stats().requests == st.requests);
}

TEST_CASE("remote: empty object, encoded key, small-object reads", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  ctstream::io::HttpClient client(fast());
  auto e = ctstream::io::RemoteFile::open("s3://bkt/empty.bin", client);
  CHECK(e->size() == 0);
  auto k = ctstream::io::RemoteFile::open("s3://bkt/dir/sp ace+plus.json", client);
  CHECK(k->size() == 100);
  CHECK(ctstream::io::read_small_remote("s3://bkt/dir/sp ace+plus.json", 100, client).size() == 100);
  CHECK(th::error_kind([&] { ctstream::io::read_small_remote("s3://bkt/dir/sp ace+plus.json", 99, client); }) ==
        ErrorKind::header_too_large);
  CHECK(ctstream::io::read_small_remote("s3://bkt/empty.bin", 10, client).empty());
  // Larger than the first 64 KiB request: the rest in a second one, pinned to the first's ETag.
  const auto before = client.stats().requests;
  const std::string whole = ctstream::io::read_small_remote("s3://bkt/blob.bin", 4 << 20, client);
  CHECK(client.stats().requests == before + 2);
  REQUIRE(whole.size() == blob_size);
  CHECK(std::memcmp(whole.data(), blob().data(), blob_size) == 0);
  CHECK(th::error_kind([&] { ctstream::io::read_small_remote("s3://bkt/blob.bin", 1 << 20, client); }) ==
        ErrorKind::header_too_large);
}

TEST_CASE("remote: a missing object is file_not_found, a wrong secret a clear error", "[remote][s3]") {
  REQUIRE_S3(srv);
  {
    th::S3Env env(srv);
    ctstream::io::HttpClient client(fast());
    try {
      ctstream::io::RemoteFile::open("s3://bkt/nope.bin", client);
      FAIL("no error");
    } catch (const Error& err) {
      CHECK(err.kind() == ErrorKind::file_not_found);
      CHECK_THAT(err.what(), Catch::Contains("s3://bkt/nope.bin"));
    }
  }
  th::S3Env env(srv, "wrong-SECRET-sentinel");
  ctstream::io::HttpClient client(fast());
  try {
    ctstream::io::RemoteFile::open("s3://bkt/blob.bin", client);
    FAIL("no error");
  } catch (const Error& err) {
    const std::string msg = err.what();
    INFO(msg);
    CHECK(err.kind() == ErrorKind::io);
    CHECK_THAT(msg, Catch::Contains("s3://bkt/blob.bin") && Catch::Contains("403"));
    CHECK(msg.find("SECRET") == std::string::npos);
    CHECK(msg.find(th::S3Server::key) == std::string::npos);
  }
  CHECK(client.stats().retries == 0);
}

TEST_CASE("remote: nothing listening is retried, then an io error naming the URL", "[remote]") {
  ctstream::io::HttpClient client(fast());
  ctstream::io::HttpTarget t =
      ctstream::io::http_target(ctstream::io::parse_url("http://127.0.0.1:" + std::to_string(th::free_port()) + "/x"));
  try {
    client.probe(t);
    FAIL("no error");
  } catch (const Error& err) {
    CHECK(err.kind() == ErrorKind::io);
    CHECK_THAT(err.what(), Catch::Contains("gave up after 2 attempt(s)") && Catch::Contains("127.0.0.1"));
  }
  CHECK(client.stats().retries == 1);
}

TEST_CASE("remote: will_need fills a bounded chunk cache that read_at and release use", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  ctstream::io::HttpClient client(fast());
  const auto target = ctstream::io::remote_target("s3://bkt/blob.bin");
  const auto info = client.probe(target);
  ctstream::io::RemoteCacheOptions co;
  co.chunk_bytes = 256 << 10;
  co.prefetch_bytes = 1 << 20;
  co.workers = 2;
  {
    ctstream::io::RemoteFile f(target, info, client, "s3://bkt/blob.bin", co);
    f.will_need(0, blob_size);  // only the first 4 chunks fit the cap
    CHECK(f.cached_bytes() == (1u << 20));
    std::vector<std::byte> out(1000000);
    f.read_at(100, out);  // within the 4 cached chunks: waits for them all
    CHECK(std::memcmp(out.data(), blob().data() + 100, out.size()) == 0);
    CHECK(client.stats().requests == 1 + 4);  // probe + 4 chunks; the read came from the cache
    f.read_at(900000, out);                   // runs past the cached chunks: one direct GET
    CHECK(std::memcmp(out.data(), blob().data() + 900000, out.size()) == 0);
    CHECK(client.stats().requests == 1 + 4 + 1);
    f.release(0, 512 << 10, false);
    CHECK(f.cached_bytes() == (512u << 10));
    f.release(0, blob_size, false);  // a chunk still in flight is dropped when its fetch ends
    for (int i = 0; i < 200 && f.cached_bytes() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(f.cached_bytes() == 0);
    // Readers, prefetch and release racing: every read still equals the object.
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, seed = t] {
        std::mt19937_64 r(seed);
        for (int i = 0; i < 20; ++i) {
          const uint64_t off = r() % blob_size, n = 1 + r() % std::min<uint64_t>(blob_size - off, 400000);
          f.will_need(off, n);
          std::vector<std::byte> o(n);
          f.read_at(off, o);
          if (std::memcmp(o.data(), blob().data() + off, n) != 0) ++bad;
          f.release(off, n, false);
        }
      });
    for (auto& t : threads) t.join();
    CHECK(bad == 0);
    CHECK(f.peak_cached_bytes() <= co.prefetch_bytes);
  }
  CHECK(client.stats().retries == 0);
}

TEST_CASE("remote: a fork()ed child reads without the parent's cache and connections", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  ctstream::io::HttpClient client(fast());
  auto f = ctstream::io::RemoteFile::open("s3://bkt/blob.bin", client);
  f->will_need(0, blob_size);               // workers and chunks in flight in the parent
  const bool idle = GENERATE(false, true);  // workers fetching, or waiting on their condition variable
  if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    try {
      f->will_need(0, 1 << 20);
      std::vector<std::byte> out(300000);
      f->read_at(12345, out);
      code = std::memcmp(out.data(), blob().data() + 12345, out.size()) == 0 ? 0 : 1;
    } catch (...) {
      code = 2;
    }
    f.reset();  // the parent's workers do not exist here: neither joined nor waited for
    _exit(code);
  }
  int status = -1;
  bool reaped = false;
  for (int waited_ms = 0; waited_ms < 30000 && !reaped; waited_ms += 10) {
    reaped = waitpid(pid, &status, WNOHANG) == pid;
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("the forked child hung closing the parent's RemoteFile (killed after 30 s)");
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::vector<std::byte> out(1000);
  f->read_at(5, out);
  CHECK(std::memcmp(out.data(), blob().data() + 5, out.size()) == 0);
}
