// io — remote objects as files: see remote_file.hpp.
#include "io/remote_file.hpp"

#include <utility>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"
#include "io/url.hpp"

namespace ctstream::io {

HttpTarget remote_target(std::string_view url) {
  const Url u = parse_url(url);
  if (u.scheme == UrlScheme::s3) return s3_target(u, load_s3_config());
  return http_target(u);
}

RemoteFile::RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string url)
    : File(std::move(url), info.size, Mode::remote),
      target_(std::move(target)),
      info_(std::move(info)),
      client_(client) {
  id_.path = path_;
}

std::unique_ptr<RemoteFile> RemoteFile::open(std::string_view url, HttpClient& client) {
  HttpTarget t = remote_target(url);
  ObjectInfo info = client.probe(t);
  return std::make_unique<RemoteFile>(std::move(t), std::move(info), client, std::string(url));
}

void RemoteFile::read_at(uint64_t offset, std::span<std::byte> out) const { client_.read(target_, info_, offset, out); }

std::string read_small_remote(std::string_view url, uint64_t max_bytes, HttpClient& client) {
  const HttpTarget t = remote_target(url);
  ObjectInfo info;
  std::string s = client.read_head(t, max_bytes, info);
  if (info.size > max_bytes)
    throw Error(ErrorKind::header_too_large, t.display, "",
                "object is " + std::to_string(info.size) + " bytes, over the limit of " + std::to_string(max_bytes));
  return s;
}

}  // namespace ctstream::io
