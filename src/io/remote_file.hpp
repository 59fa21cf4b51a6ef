// io — a remote object (s3://bucket/key, https://host/path) as an io::File of Mode::remote: the
// size and ETag are pinned at open, read_at() is a ranged GET straight into the caller's span
// (thread-safe: decoders call it from OpenMP threads), view() is empty (the reader takes its
// pread-mode paths), guard()/populate() are no-ops (a remote size cannot shrink under a read:
// every response is checked against the pinned size and ETag instead).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "io/file.hpp"
#include "io/http_client.hpp"

namespace ctstream::io {

class RemoteFile final : public File {
 public:
  /// Opens `url` (s3:// with the AWS configuration of load_s3_config(), or http(s)://): one probe
  /// request pins size and ETag. Error{file_not_found} for a missing object, Error{io} otherwise.
  static std::unique_ptr<RemoteFile> open(std::string_view url, HttpClient& client = default_http_client());
  /// Opens an object whose target and pinned size/ETag are already known (no request).
  RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string url);

  void read_at(uint64_t offset, std::span<std::byte> out) const override;
  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void guard(uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const noexcept override {}
  void populate(uint64_t, uint64_t) const noexcept override {}
  void release(uint64_t, uint64_t, bool) const noexcept override {}

  const std::string& etag() const noexcept { return info_.etag; }
  const HttpTarget& target() const noexcept { return target_; }

 private:
  HttpTarget target_;
  ObjectInfo info_;
  HttpClient& client_;
};

/// The request target of `url` (s3:// under load_s3_config(), or http(s)://).
HttpTarget remote_target(std::string_view url);

/// Reads a whole small remote object (config.json, index): an object larger than `max_bytes` is
/// Error{header_too_large} after one request of at most 64 KiB.
std::string read_small_remote(std::string_view url, uint64_t max_bytes, HttpClient& client = default_http_client());

}  // namespace ctstream::io
