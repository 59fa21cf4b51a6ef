// io — the fetch engine: see http_client.hpp.
#include "io/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include <unistd.h>

#include "ctstream/error.hpp"
#include "io/http_response.hpp"

namespace ctstream::io {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::optional<double> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (*end != '\0' || !(d > 0) || d > 1e6)
    throw Error(ErrorKind::invalid_argument, "", "", std::string(name) + " must be a positive number");
  return d;
}

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
  void add(const std::string& h) {
    curl_slist* n = curl_slist_append(list, h.c_str());
    if (!n) throw Error(ErrorKind::out_of_memory, "", "", "curl_slist_append failed");
    list = n;
  }
};

}  // namespace

HttpTarget s3_target(const Url& url, const S3Config& cfg) {
  HttpTarget t;
  const AddressingStyle style = resolve_addressing(cfg.endpoint, url.host, cfg.addressing);
  t.request_url = object_url(cfg.endpoint, url.host, url.path, style);
  t.display = redact_url("s3://" + url.host + "/" + url.path);
  t.s3 = true;
  t.sign = !cfg.anonymous;
  t.region = cfg.region;
  t.credentials = cfg.credentials;
  return t;
}

HttpTarget http_target(const Url& url) {
  HttpTarget t;
  t.request_url = to_string(url);
  t.display = redact_url(t.request_url);
  return t;
}

HttpTarget s3_bucket_target(std::string_view bucket, std::string_view query, const S3Config& cfg,
                            std::string_view display_url) {
  HttpTarget t;
  const AddressingStyle style = resolve_addressing(cfg.endpoint, bucket, cfg.addressing);
  t.request_url = object_url(cfg.endpoint, bucket, "", style, query);
  t.display = redact_url(display_url);
  t.s3 = true;
  t.sign = !cfg.anonymous;
  t.region = cfg.region;
  t.credentials = cfg.credentials;
  return t;
}

HttpOptions HttpOptions::from_env() {
  HttpOptions o;
  if (auto v = env_number("CTSTREAM_S3_MAX_ATTEMPTS")) o.max_attempts = std::max(1, static_cast<int>(*v));
  if (auto v = env_number("CTSTREAM_S3_MAX_TOTAL_S")) o.max_total_s = *v;
  if (auto v = env_number("CTSTREAM_S3_STALL_S")) o.stall_timeout_s = std::max(1L, static_cast<long>(*v));
  return o;
}

HttpClient::HttpClient(HttpOptions opt) : opt_(opt), owner_pid_(static_cast<int>(getpid())) { global_init(); }

HttpClient::~HttpClient() {
  if (getpid() == owner_pid_)
    for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::acquire() {
  {
    std::lock_guard lock(mu_);
    if (const int pid = static_cast<int>(getpid()); pid != owner_pid_) {
      // A fork()ed child: the parent's handles share its sockets (and TLS state); leave them.
      idle_.clear();
      owner_pid_ = pid;
    }
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  CURL* h = curl_easy_init();
  if (!h) throw Error(ErrorKind::out_of_memory, "", "", "curl_easy_init failed");
  return h;
}

void HttpClient::give_back(void* h) noexcept {
  std::lock_guard lock(mu_);
  try {
    idle_.push_back(h);
  } catch (...) {
    curl_easy_cleanup(static_cast<CURL*>(h));
  }
}

HttpStats HttpClient::stats() const noexcept {
  return {requests_.load(), retries_.load(), bytes_.load(), unpinned_.load()};
}

// libcurl's header callback for a transfer whose state `A` collects its head in `acc` (under
// http_response's caps; a refused line ends the transfer).
template <class A>
static size_t on_header_line(char* p, size_t size, size_t n, void* self) {
  const size_t len = size * n;
  return static_cast<A*>(self)->acc.add_line(std::string_view(p, len)) ? len : 0;
}

/// The state of one transfer, shared with libcurl's callbacks.
struct HttpClient::Attempt {
  http::RangeRequest req;
  http::HeaderAccumulator acc;
  std::byte* dst = nullptr;
  uint64_t room = 0;      // bytes dst can take
  uint64_t expected = 0;  // accept: the range's length
  uint64_t received = 0;  // body bytes written
  bool checked = false;   // the head was judged (first body byte, or end of transfer)
  bool accepted = false;  // a 2xx head passed the rules
  bool too_long = false;  // the body ran past its range
  bool error_body_full = false;
  std::optional<http::Verdict> early;  // a 2xx head refused before its body
  http::Verdict accepted_verdict;
  std::string error_body;

  static size_t on_body(char* p, size_t size, size_t n, void* self) {
    auto* a = static_cast<Attempt*>(self);
    const size_t len = size * n;
    const int status = a->acc.head().status;
    if (!a->checked) {
      a->checked = true;
      if (status >= 200 && status < 300) {
        http::Verdict v = http::judge(a->req, a->acc.head(), 0, {}, static_cast<int64_t>(std::time(nullptr)));
        if (v.action != http::Action::accept) {
          a->early = std::move(v);
          return 0;
        }
        a->accepted = true;
        a->expected = std::min<uint64_t>(v.count, a->room);
        a->accepted_verdict = std::move(v);
      }
    }
    if (!a->accepted) {  // an error body: its first max_error_body bytes, then the transfer ends
      const size_t take = std::min(len, http::max_error_body - a->error_body.size());
      a->error_body.append(p, take);
      if (a->error_body.size() >= http::max_error_body) {
        a->error_body_full = true;
        return 0;
      }
      return len;
    }
    if (len > a->expected - a->received) {
      a->too_long = true;
      return 0;
    }
    std::memcpy(a->dst + a->received, p, len);
    a->received += len;
    return len;
  }
};

// One request's options: `range` "A-B", or nullptr for a HEAD (`head`) or a plain GET. `sigv4`
// must outlive the transfer; the callbacks get `a`.
template <class A>
static void configure(CURL* h, const HttpTarget& t, A& a, HeaderList& headers, const std::string& etag,
                      const char* range, std::string& sigv4, const HttpOptions& opt, bool head = true) {
  if (t.s3) {
    headers.add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (t.sign && !t.credentials.session_token.empty())
      headers.add("x-amz-security-token: " + t.credentials.session_token);
  }
  // The version opened, as a precondition (412 when it changed) for S3 and HTTP servers alike; a
  // weak ETag cannot be one (If-Match compares strongly). Servers that ignore it are still checked
  // by the answer's own ETag (http_response.cpp judge_success).
  if (!etag.empty() && etag.rfind("W/", 0) != 0) headers.add("If-Match: " + etag);
  sigv4 = "aws:amz:" + t.region + ":s3";

  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, t.request_url.c_str());
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (t.s3) {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  } else {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "https");
  }
  if (range) curl_easy_setopt(h, CURLOPT_RANGE, range);
  else if (head) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (headers.list) curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  if (t.sign) {
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, t.credentials.access_key_id.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, t.credentials.secret_access_key.c_str());
  }
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, opt.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, opt.stall_timeout_s);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header_line<A>);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &A::on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
}

// The validators an answer pins its object by: its ETag (strong; or weak, then compared weakly and
// never sent as If-Match) and, without a strong one, its Last-Modified (design 3.4).
static void pin_validators(const http::ResponseHead& hd, std::string& etag, std::string& last_modified) {
  if (hd.etag)
    if (auto e = http::parse_etag(*hd.etag)) etag = e->value;
  if ((etag.empty() || etag.rfind("W/", 0) == 0) && hd.last_modified) last_modified = *hd.last_modified;
}

// The time left before `deadline` as the transfer's own limit: a server that trickles its answer
// (above the stall rate) is cut off there, not only between attempts.
template <class Deadline>
static void limit_transfer(CURL* h, Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, left.count())));
}

uint64_t HttpClient::fetch(const HttpTarget& t, uint64_t offset, std::span<std::byte> out, ObjectInfo* pinned,
                           ObjectInfo& seen) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(opt_.max_total_s);
  uint64_t done = 0;
  std::optional<uint64_t> known_size = pinned ? std::optional<uint64_t>(pinned->size) : std::nullopt;
  std::string etag = pinned ? pinned->etag : std::string();
  std::string last_modified = pinned ? pinned->last_modified : std::string();
  bool last_short = false;
  CURL* h = static_cast<CURL*>(acquire());
  struct Return {
    HttpClient* c;
    CURL* h;
    ~Return() { c->give_back(h); }
  } ret{this, h};

  for (int attempt = 0;; ++attempt) {
    Attempt a;
    a.req.start = offset + done;
    a.req.length = out.size() - done;
    a.req.size = known_size;
    a.req.etag = etag;
    a.req.last_modified = last_modified;
    a.dst = out.data() + done;
    a.room = out.size() - done;

    HeaderList headers;
    const std::string range = std::to_string(a.req.start) + "-" + std::to_string(a.req.start + a.req.length - 1);
    std::string sigv4;
    configure(h, t, a, headers, etag, range.c_str(), sigv4, opt_);
    limit_transfer(h, deadline);
    requests_.fetch_add(1, std::memory_order_relaxed);
    const CURLcode rc = curl_easy_perform(h);
    bytes_.fetch_add(a.received, std::memory_order_relaxed);

    http::Verdict v;
    if (a.early) {
      v = std::move(*a.early);
    } else if (a.too_long) {
      v.action = http::Action::fail;
      v.reason = "response refused: the body is longer than the requested range";
    } else if (a.accepted ||
               (!a.checked && rc == CURLE_OK && a.acc.head().status >= 200 && a.acc.head().status < 300)) {
      if (!a.accepted) {  // an empty 2xx body: judge the head now
        v = http::judge(a.req, a.acc.head(), 0, {}, static_cast<int64_t>(std::time(nullptr)));
        if (v.action == http::Action::accept) {
          a.accepted = true;
          a.expected = std::min<uint64_t>(v.count, a.room);
          a.accepted_verdict = v;
        }
      }
      if (a.accepted) {
        const http::Verdict& av = a.accepted_verdict;
        if (!known_size) {  // the first response pins the object
          known_size = av.total;
          pin_validators(a.acc.head(), etag, last_modified);
          if (etag.empty() && last_modified.empty()) unpinned_.fetch_add(1, std::memory_order_relaxed);
        }
        done += a.received;
        if (a.received == a.expected) {
          seen.size = *known_size;
          seen.etag = etag;
          seen.last_modified = last_modified;
          return done;
        }
        // A short body: resume from where it stopped.
        v.action = rc == CURLE_OK ? http::Action::retry : http::classify_transport(rc);
        v.reason = "the body ended after " + std::to_string(a.received) + " of " + std::to_string(a.expected) +
                   " bytes" + (rc == CURLE_OK ? std::string() : std::string(" (") + curl_easy_strerror(rc) + ")");
        last_short = true;
      }
    } else {
      const int code = (a.error_body_full && rc == CURLE_WRITE_ERROR) ? 0 : static_cast<int>(rc);
      v = http::judge(a.req, a.acc.head(), code, a.error_body, static_cast<int64_t>(std::time(nullptr)));
      // A head refused by the header rules aborted the transfer itself (CURLE_WRITE_ERROR): its
      // reason, not libcurl's "Failed writing received data", is what the message says.
      if (code != 0 && v.action != http::Action::accept && !a.acc.head().overflow)
        v.reason = std::string("transfer failed: ") + curl_easy_strerror(rc);
      last_short = false;
    }
    if (v.action == http::Action::truncated && !known_size && a.req.start == 0 && a.acc.head().status == 416) {
      // rclone answers any range of an empty object with 416 and no Content-Range: a HEAD tells.
      Attempt ha;
      HeaderList hh;
      std::string sig;
      configure(h, t, ha, hh, {}, nullptr, sig, opt_);
      limit_transfer(h, deadline);
      requests_.fetch_add(1, std::memory_order_relaxed);
      const CURLcode hrc = curl_easy_perform(h);
      const http::ResponseHead& hd = ha.acc.head();
      if (hrc == CURLE_OK && !hd.overflow && hd.status == 200 && hd.content_length &&
          http::parse_content_length(*hd.content_length) == uint64_t{0}) {
        seen.size = 0;
        pin_validators(hd, seen.etag, seen.last_modified);
        return 0;
      }
    }
    if (v.action == http::Action::accept) {  // a 200/206 with nothing wrong but nothing written
      seen.size = known_size.value_or(v.total);
      seen.etag = etag;
      seen.last_modified = last_modified;
      return done;
    }
    retry_or_throw(t, v, attempt, deadline, last_short ? ErrorKind::truncated : ErrorKind::io);
  }
}

void HttpClient::retry_or_throw(
    const HttpTarget& t, http::Verdict& v, int attempt,
    std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<double>> deadline, ErrorKind exhausted) {
  thread_local std::minstd_rand rng(std::random_device{}());
  // the reason may quote the server (its error <Message>, a header): never a credential it echoes
  v.reason = redact_secrets(
      std::move(v.reason), {t.credentials.access_key_id, t.credentials.secret_access_key, t.credentials.session_token});
  if (v.action != http::Action::retry && v.action != http::Action::retry_throttled) {
    // S3 refusing a request that went unsigned: say so (the server's words name no cause).
    if (t.s3 && !t.sign && (v.action == http::Action::denied || !v.s3_code.empty()))
      v.reason +=
          " (the request was unsigned: no AWS credentials were found in the environment, the profile or "
          "the shared files, or CTSTREAM_S3_ANONYMOUS is set)";
    http::throw_verdict(v, t.display);
  }
  const bool throttled = v.action == http::Action::retry_throttled;
  const double base = opt_.backoff_base_s * (throttled ? 10 : 1);
  const double cap = std::min(opt_.backoff_cap_s, base * std::ldexp(1.0, std::min(attempt, 30)));
  double wait = std::uniform_real_distribution<double>(0, cap)(rng);
  if (v.retry_after_s) wait = std::min<double>(opt_.backoff_cap_s, std::max<double>(wait, *v.retry_after_s));
  const bool out_of_time = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait) > deadline;
  if (attempt + 1 >= opt_.max_attempts || out_of_time)
    throw Error(exhausted, t.display, "",
                "gave up after " + std::to_string(attempt + 1) + " attempt(s)" + (out_of_time ? " (time limit)" : "") +
                    ": " + v.reason);
  retries_.fetch_add(1, std::memory_order_relaxed);
  std::this_thread::sleep_for(std::chrono::duration<double>(wait));
}

ObjectInfo HttpClient::probe(const HttpTarget& t) {
  std::byte b{};
  ObjectInfo info;
  fetch(t, 0, std::span<std::byte>(&b, 1), nullptr, info);
  return info;
}

void HttpClient::read(const HttpTarget& t, const ObjectInfo& pinned, uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return;
  if (offset > pinned.size || out.size() > pinned.size - offset)
    throw Error(ErrorKind::truncated, t.display, "",
                "read of " + std::to_string(out.size()) + " bytes at " + std::to_string(offset) +
                    " runs past the object's end (" + std::to_string(pinned.size) + " bytes)");
  ObjectInfo p = pinned, seen;
  const uint64_t got = fetch(t, offset, out, &p, seen);
  if (got != out.size()) throw Error(ErrorKind::truncated, t.display, "", "the object is shorter than at open");
}

std::string HttpClient::read_head(const HttpTarget& t, uint64_t max_bytes, ObjectInfo& info) {
  // One request of at most 64 KiB learns the size: a small object costs one request, and memory
  // follows the object, not the cap.
  constexpr uint64_t first_request = 64 * 1024;
  std::string s(std::clamp<uint64_t>(max_bytes, 1, first_request), '\0');
  const uint64_t got = fetch(t, 0, std::as_writable_bytes(std::span<char>(s.data(), s.size())), nullptr, info);
  s.resize(got);
  if (got < first_request || info.size <= got || info.size > max_bytes) return s;
  s.resize(info.size);
  read(t, info, got, std::as_writable_bytes(std::span<char>(s.data() + got, s.size() - got)));
  return s;
}

namespace {
// One plain GET of a document: the head under http_response's caps, the body up to a cap.
struct DocAttempt {
  http::HeaderAccumulator acc;
  std::string body;
  uint64_t cap = 0;
  bool too_long = false;
  static size_t on_body(char* p, size_t size, size_t n, void* self) {
    auto* a = static_cast<DocAttempt*>(self);
    const size_t len = size * n;
    const int status = a->acc.head().status;
    // An error body is kept to its first max_error_body bytes; a document to the cap.
    const uint64_t cap = status == 200 ? a->cap : http::max_error_body;
    if (len > cap - std::min<uint64_t>(cap, a->body.size())) {
      a->body.append(p, cap - std::min<uint64_t>(cap, a->body.size()));
      a->too_long = true;
      return 0;
    }
    a->body.append(p, len);
    return len;
  }
};
}  // namespace

std::string HttpClient::get_document(const HttpTarget& t, uint64_t max_bytes) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(opt_.max_total_s);
  CURL* h = static_cast<CURL*>(acquire());
  struct Return {
    HttpClient* c;
    CURL* h;
    ~Return() { c->give_back(h); }
  } ret{this, h};
  for (int attempt = 0;; ++attempt) {
    DocAttempt a;
    a.cap = max_bytes;
    HeaderList headers;
    std::string sigv4;
    configure(h, t, a, headers, {}, nullptr, sigv4, opt_, false);
    limit_transfer(h, deadline);
    requests_.fetch_add(1, std::memory_order_relaxed);
    const CURLcode rc = curl_easy_perform(h);
    bytes_.fetch_add(a.body.size(), std::memory_order_relaxed);
    const http::ResponseHead& hd = a.acc.head();
    if (a.too_long && hd.status == 200)
      throw Error(ErrorKind::header_too_large, t.display, "",
                  "the server's answer is longer than " + std::to_string(max_bytes) + " bytes");
    if (rc == CURLE_OK && !hd.overflow && !hd.conflict && hd.status == 200) return std::move(a.body);
    http::RangeRequest req;  // judged as a whole-object request: only the error rules apply
    req.whole_object = true;
    req.length = 1;
    const int code = (a.too_long && rc == CURLE_WRITE_ERROR) ? 0 : static_cast<int>(rc);
    http::Verdict v = http::judge(req, hd, code, a.body, static_cast<int64_t>(std::time(nullptr)));
    if (code != 0 && !hd.overflow) v.reason = std::string("transfer failed: ") + curl_easy_strerror(rc);
    if (v.action == http::Action::accept) {  // a 2xx other than 200, or 200 refused: not a document
      v.action = http::Action::fail;
      v.reason = "unexpected HTTP status " + std::to_string(hd.status);
    }
    retry_or_throw(t, v, attempt, deadline, ErrorKind::io);
  }
}

HttpClient& default_http_client() {
  static HttpClient client;
  return client;
}

}  // namespace ctstream::io
