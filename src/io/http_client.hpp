// io — the fetch engine of remote checkpoints: ranged GETs over libcurl, signed with
// CURLOPT_AWS_SIGV4 for s3:// (plus the headers libcurl 7.88.1 does not add itself: design note
// docs/design/object_storage.md section 3.2), every response judged by http_response's rules,
// transient faults retried with capped exponential backoff and full jitter (bounded attempts and
// total time), a partially received range resumed where it stopped, the ETag recorded at open
// pinned on every later response, bodies written straight into the caller's buffer and never
// beyond the requested length.
//
// Concurrency: a pool of libcurl easy handles, each transfer run with curl_easy_perform on the
// calling thread. Callers that need parallel fetches (the decoders' OpenMP threads, a prefetcher)
// are already threads, so a blocking read_at needs no hand-off to a fetch thread and back; idle
// easy handles keep their connections (and TLS sessions) for the next request. The multi
// interface of the design note (one fetch thread) is the later step for read-ahead.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"
#include "io/url.hpp"

namespace ctstream::io {

namespace http {
struct Verdict;  // io/http_response.hpp
}

/// Where a request goes and how it is signed.
struct HttpTarget {
  std::string request_url;  ///< what libcurl is sent (query included; never printed)
  std::string display;      ///< redacted, for messages: "s3://bucket/key" or the https URL
  bool s3 = false;
  bool sign = false;  ///< SigV4 (s3 with credentials)
  std::string region;
  AwsCredentials credentials;  ///< never printed
};

/// The target of an s3:// URL under `cfg` (endpoint, addressing, credentials).
HttpTarget s3_target(const Url& url, const S3Config& cfg);
/// The target of an http(s):// URL (unsigned).
HttpTarget http_target(const Url& url);
/// The target of a bucket-level request (ListObjectsV2) to `bucket` with `query` (canonical, see
/// canonical_query); `display` names `display_url` (the prefix listed).
HttpTarget s3_bucket_target(std::string_view bucket, std::string_view query, const S3Config& cfg,
                            std::string_view display_url);

struct HttpOptions {
  int max_attempts = 5;             ///< CTSTREAM_S3_MAX_ATTEMPTS
  double backoff_base_s = 0.1;      ///< first backoff cap (throttling: 10x)
  double backoff_cap_s = 20;        ///< largest single wait
  double max_total_s = 300;         ///< a request gives up after this long, attempts left or not
  long connect_timeout_ms = 10000;  ///< CURLOPT_CONNECTTIMEOUT_MS
  long stall_timeout_s = 30;        ///< under 1 byte/s for this long: a stalled transfer (retried)
  /// The defaults with CTSTREAM_S3_MAX_ATTEMPTS / CTSTREAM_S3_MAX_TOTAL_S / CTSTREAM_S3_STALL_S applied.
  static HttpOptions from_env();
};

struct HttpStats {
  uint64_t requests = 0, retries = 0, bytes_received = 0;
  /// Objects opened with neither a strong ETag nor a Last-Modified: only their size is pinned.
  uint64_t unpinned = 0;
};

/// What a read learnt about the object, and what every later response must repeat: the size, and
/// the strong ETag, or, when the server gives a weak one (`W/"..."`, which may stay equal across
/// byte changes) or none, the Last-Modified date.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;           ///< quotes kept, weak ones with their W/; "" when the server sends none
  std::string last_modified;  ///< set only when etag is "" or weak: the Last-Modified at open ("" = none)
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions opt = HttpOptions::from_env());
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// The size and ETag of the object (a 1-byte ranged GET: answered by every server that serves
  /// ranges, with the S3 error body a HEAD lacks). Error{file_not_found} for a missing object.
  ObjectInfo probe(const HttpTarget& t);

  /// Reads bytes [offset, offset + out.size()) of an object opened as `pinned` into `out`: every
  /// response must report that size and ETag ("object changed while reading" otherwise).
  /// Thread-safe. Error{truncated} when the range runs past pinned.size.
  void read(const HttpTarget& t, const ObjectInfo& pinned, uint64_t offset, std::span<std::byte> out);

  /// Reads a whole object whose size is not known yet (config.json, the index): `info` receives
  /// size and ETag. The first request asks for at most 64 KiB; an object larger than `max_bytes`
  /// is not read further (the caller refuses it by info.size), so memory follows the object.
  std::string read_head(const HttpTarget& t, uint64_t max_bytes, ObjectInfo& info);

  /// A plain GET (no Range) of a small answer that is not an object's bytes (an S3 listing): the
  /// body, at most `max_bytes` (a longer one is Error{header_too_large}, read no further).
  /// Retried and refused like read(): an error status is the same Error.
  std::string get_document(const HttpTarget& t, uint64_t max_bytes);

  HttpStats stats() const noexcept;
  const HttpOptions& options() const noexcept { return opt_; }

  struct Attempt;  ///< one transfer's state (http_client.cpp)

 private:
  /// One request with retries: fills out[0, n) from offset; returns bytes received (< out.size()
  /// only for a request with unknown size whose object ends sooner).
  uint64_t fetch(const HttpTarget& t, uint64_t offset, std::span<std::byte> out, ObjectInfo* pinned, ObjectInfo& seen);
  /// After an attempt the verdict `v` refused: its reason redacted (it may quote the server: never a
  /// credential it echoes); a verdict that is not retried thrown; else a full-jitter backoff
  /// (Retry-After honoured) slept and counted, or Error{exhausted} when attempts or time run out.
  void retry_or_throw(const HttpTarget& t, http::Verdict& v, int attempt,
                      std::chrono::time_point<std::chrono::steady_clock, std::chrono::duration<double>> deadline,
                      ErrorKind exhausted);
  void* acquire();
  void give_back(void* h) noexcept;

  HttpOptions opt_;
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* easy handles
  int owner_pid_;            // idle handles (and their connections) belong to this process
  std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_{0}, unpinned_{0};
};

/// The process-wide client the remote files share (its handles' connections are reused).
HttpClient& default_http_client();

}  // namespace ctstream::io
