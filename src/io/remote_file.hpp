// io — a remote object (s3://bucket/key, https://host/path) as an io::File of Mode::remote: the
// size and ETag are pinned at open; view() is empty (the reader takes its pread-mode paths);
// guard()/populate() are no-ops (a remote size cannot shrink under a read: every response is
// checked against the pinned size and ETag instead).
//
// will_need() schedules fetches of exactly the bytes asked for (pieces of at most chunk_bytes,
// a piece adjacent to a still-queued one joining it up to that size: one request for a run of
// small tensors) into a bounded cache (backpressure: pieces that would pass the cap are not
// scheduled; the caller asks again later), fetched by a few worker threads of the file. read_at()
// (thread-safe: decoders call it from OpenMP threads) copies the cached parts of its range out
// (waiting for those in flight) and fetches the rest with ranged GETs straight into the caller's
// span. release() forgets the bytes of a range: a cached piece is freed once every byte of it
// has been released, so a piece shared by two tensors lives until both are done. A failed
// prefetch is forgotten: the read then fetches directly and reports its own error. In a fork()ed
// child (vLLM forks workers) the parent's workers do not exist: the cache is bypassed there.
#pragma once
#include <atomic>
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
#include "io/memory.hpp"

namespace ctstream::io {

/// The read-ahead cache of one remote file.
struct RemoteCacheOptions {
  uint64_t chunk_bytes = 8ull << 20;      ///< CTSTREAM_S3_CHUNK_BYTES
  uint64_t prefetch_bytes = 32ull << 20;  ///< cap on cached + in-flight chunks (CTSTREAM_S3_PREFETCH_BYTES); 0 = off
  unsigned workers = 4;                   ///< fetch threads (CTSTREAM_S3_CONNECTIONS)
  /// A sliced decode (a TP rank's shard) fetches the byte ranges its slice needs, two ranges
  /// joined into one request when the gap between them is under this (CTSTREAM_S3_COALESCE_GAP).
  uint64_t coalesce_gap = 1ull << 20;
  static RemoteCacheOptions from_env();
};

class RemoteFile final : public File {
 public:
  /// Opens `url` (s3:// with the AWS configuration of load_s3_config(), or http(s)://): one probe
  /// request pins size and ETag. Error{file_not_found} for a missing object, Error{io} otherwise.
  static std::unique_ptr<RemoteFile> open(std::string_view url, HttpClient& client = default_http_client());
  /// Opens an object whose target and pinned size/ETag are already known (no request). `name` is
  /// path(), what messages show: the redacted URL (target.display), never its query.
  RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string name,
             RemoteCacheOptions cache = RemoteCacheOptions::from_env());
  ~RemoteFile() override;

  void read_at(uint64_t offset, std::span<std::byte> out) const override;
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void guard(uint64_t) const override {}
  void will_need(uint64_t offset, uint64_t n) const noexcept override;
  void populate(uint64_t, uint64_t) const noexcept override {}
  void release(uint64_t offset, uint64_t n, bool drop_cache) const noexcept override;
  /// The cache's cap is the window (what fits is fetched; the rest is asked for again as decodes
  /// free it); every tensor is fetched ahead, dense ones too: no kernel reads ahead of a socket.
  AheadPolicy ahead_policy() const noexcept override {
    return {cache_opt_.prefetch_bytes, cache_opt_.coalesce_gap, false, false, true};
  }

  /// Bytes held by the cache (fetched or in flight) now, and the most it ever held.
  uint64_t cached_bytes() const;
  uint64_t peak_cached_bytes() const;
  /// The end of the run of cached (or in-flight) pieces that holds `offset`; 0 when none does.
  uint64_t cached_until(uint64_t offset) const;
  /// Ranged GETs this file sent (prefetch and direct) and the body bytes they asked for.
  uint64_t requests() const noexcept { return requests_.load(std::memory_order_relaxed); }
  uint64_t bytes_fetched() const noexcept { return fetched_.load(std::memory_order_relaxed); }
  const RemoteCacheOptions& cache_options() const noexcept { return cache_opt_; }

  const std::string& etag() const noexcept { return info_.etag; }
  const HttpTarget& target() const noexcept { return target_; }

 private:
  struct Chunk {
    uint64_t start = 0, size = 0;
    AnonBuffer data;    // mapped when a worker takes the piece, unmapped when it is freed (RSS follows)
    uint64_t live = 0;  // bytes not yet released; the chunk is freed at 0
    bool taken = false, ready = false, failed = false, dropped = false;
  };
  void work() const;
  void fetch(uint64_t offset, std::span<std::byte> out) const;  // one direct read, counted
  void drop_locked(std::map<uint64_t, std::shared_ptr<Chunk>>::iterator it) const;

  HttpTarget target_;
  ObjectInfo info_;
  HttpClient& client_;
  RemoteCacheOptions cache_opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<uint64_t, std::shared_ptr<Chunk>> chunks_;  // by start offset; never overlapping
  mutable std::deque<std::shared_ptr<Chunk>> queue_;           // to fetch, oldest first
  mutable std::atomic<uint64_t> requests_{0}, fetched_{0};
  mutable uint64_t held_ = 0, peak_ = 0;
  mutable bool stop_ = false;
  mutable std::vector<std::thread> workers_;
  int owner_pid_;  // the cache and its workers belong to this process (a fork()ed child skips them)
};

/// The request target of `url` (s3:// under load_s3_config(), or http(s)://).
HttpTarget remote_target(std::string_view url);

/// Whether the failure `e` of a request for `url` says the object is not there: a missing object,
/// or on s3:// S3's 403 AccessDenied, its answer for a missing key to a caller without
/// s3:ListBucket (a read-only policy on bucket/prefix/*). For objects whose absence is allowed
/// (decompose_config.json, the index, tokenizer files), never config.json: without it every tensor
/// would read as stored. Call it from the handler of that request's error.
bool absent_object(std::string_view url, const Error& e);
/// Reads a whole small remote object (config.json, index): an object larger than `max_bytes` is
/// Error{header_too_large} after one request of at most 64 KiB.
std::string read_small_remote(std::string_view url, uint64_t max_bytes, HttpClient& client = default_http_client());

}  // namespace ctstream::io
