// format — which objects make up a remote checkpoint (see discover_remote_shards in shards.hpp).
#include <string>

#include "ctstream/error.hpp"
#include "format/file_names.hpp"
#include "format/shards.hpp"
#include "io/remote_file.hpp"
#include "io/url.hpp"

namespace ctstream::format {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether the object at `url` exists: a probe request; a missing object is absent, any other
// failure (denied, unreachable) an error, as a local probe() treats an unreadable entry.
bool exists(const std::string& url) {
  try {
    io::RemoteFile::open(url);
    return true;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::file_not_found) return false;
    throw;
  }
}

std::string optional_object(const std::string& url) { return exists(url) ? url : std::string(); }

}  // namespace

ShardSet discover_remote_shards(const std::string& url, uint64_t max_json) {
  const io::Url u = io::parse_url(url);  // refuses what cannot be a location
  ShardSet lay;
  const std::string display = io::redact_url(url);
  const std::string last = u.path.substr(u.path.rfind('/') == std::string::npos ? 0 : u.path.rfind('/') + 1);
  if (ends_with(last, kWeightsSuffix) && last.size() > kWeightsSuffix.size()) {
    if (!exists(url)) throw Error(ErrorKind::file_not_found, display, "", "no such object");
    lay.files.emplace_back(url);
    const std::string dir = url.substr(0, url.size() - last.size());
    lay.config_path = optional_object(dir + std::string(kConfigName));
    lay.decompose_path = optional_object(dir + std::string(kDecomposeConfigName));
    return lay;
  }
  std::string dir = url;
  if (dir.back() != '/') dir += '/';
  lay.config_path = optional_object(dir + std::string(kConfigName));
  lay.decompose_path = optional_object(dir + std::string(kDecomposeConfigName));
  const std::string index = dir + std::string(kIndexName);
  std::string text;
  try {
    text = io::read_small_remote(index, max_json);
    lay.index_path = index;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::file_not_found) throw;
  }
  if (!lay.index_path.empty()) {
    lay.index_id.path = index;
    fill_from_index(lay, text, [&](const std::string& shard) {
      // An s3:// key is literal text; an http(s) path is percent-encoded.
      const std::string p = dir + (u.scheme == io::UrlScheme::s3 ? shard : io::uri_encode(shard, true));
      return std::filesystem::path(exists(p) ? p : std::string());
    });
    return lay;
  }
  const std::string single = dir + "model.safetensors";
  if (!exists(single))
    throw Error(ErrorKind::file_not_found, display, "",
                "no model.safetensors.index.json and no model.safetensors under this prefix (remote "
                "checkpoints are found by those names; open a *.safetensors URL directly otherwise)");
  lay.files.emplace_back(single);
  return lay;
}

}  // namespace ctstream::format
