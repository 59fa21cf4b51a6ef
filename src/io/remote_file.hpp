// io — a remote object (s3://bucket/key, https://host/path) as an io::File of Mode::remote: the
// size and ETag are pinned at open; view() is empty (the reader takes its pread-mode paths);
// guard()/populate() are no-ops (a remote size cannot shrink under a read: every response is
// checked against the pinned size and ETag instead).
//
// will_need() schedules chunk fetches ahead of the decoder into a bounded cache (backpressure:
// chunks that would pass the cap are not scheduled), fetched by a few worker threads of the file;
// read_at() (thread-safe: decoders call it from OpenMP threads) copies out of cached chunks when
// they cover the whole range (waiting for those in flight) and otherwise is one ranged GET
// straight into the caller's span; release() drops the chunks inside a range. A failed prefetch
// is forgotten: the read then fetches directly and reports its own error. In a fork()ed child
// (vLLM forks workers) the parent's workers do not exist: the cache is bypassed there.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io/file.hpp"
#include "io/http_client.hpp"

namespace ctstream::io {

/// The read-ahead cache of one remote file.
struct RemoteCacheOptions {
  uint64_t chunk_bytes = 8ull << 20;      ///< CTSTREAM_S3_CHUNK_BYTES
  uint64_t prefetch_bytes = 64ull << 20;  ///< cap on cached + in-flight chunks (CTSTREAM_S3_PREFETCH_BYTES); 0 = off
  unsigned workers = 4;                   ///< fetch threads (CTSTREAM_S3_CONNECTIONS)
  static RemoteCacheOptions from_env();
};

class RemoteFile final : public File {
 public:
  /// Opens `url` (s3:// with the AWS configuration of load_s3_config(), or http(s)://): one probe
  /// request pins size and ETag. Error{file_not_found} for a missing object, Error{io} otherwise.
  static std::unique_ptr<RemoteFile> open(std::string_view url, HttpClient& client = default_http_client());
  /// Opens an object whose target and pinned size/ETag are already known (no request).
  RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string url,
             RemoteCacheOptions cache = RemoteCacheOptions::from_env());
  ~RemoteFile() override;

  void read_at(uint64_t offset, std::span<std::byte> out) const override;
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void guard(uint64_t) const override {}
  void will_need(uint64_t offset, uint64_t n) const noexcept override;
  void populate(uint64_t, uint64_t) const noexcept override {}
  void release(uint64_t offset, uint64_t n, bool drop_cache) const noexcept override;

  /// Bytes held by the cache (fetched or in flight) now, and the most it ever held.
  uint64_t cached_bytes() const;
  uint64_t peak_cached_bytes() const;

  const std::string& etag() const noexcept { return info_.etag; }
  const HttpTarget& target() const noexcept { return target_; }

 private:
  struct Chunk {
    std::vector<std::byte> data;
    bool ready = false, failed = false, dropped = false;
  };
  void work() const;
  bool copy_from_cache(uint64_t offset, std::span<std::byte> out) const;

  HttpTarget target_;
  ObjectInfo info_;
  HttpClient& client_;
  RemoteCacheOptions cache_opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<uint64_t, std::shared_ptr<Chunk>> chunks_;  // by chunk index
  mutable std::deque<uint64_t> queue_;                         // chunk indices to fetch
  mutable uint64_t held_ = 0, peak_ = 0;
  mutable bool stop_ = false;
  mutable std::vector<std::thread> workers_;
  int owner_pid_;  // the cache and its workers belong to this process (a fork()ed child skips them)
};

/// The request target of `url` (s3:// under load_s3_config(), or http(s)://).
HttpTarget remote_target(std::string_view url);

/// Reads a whole small remote object (config.json, index): an object larger than `max_bytes` is
/// Error{header_too_large} after one request of at most 64 KiB.
std::string read_small_remote(std::string_view url, uint64_t max_bytes, HttpClient& client = default_http_client());

}  // namespace ctstream::io
