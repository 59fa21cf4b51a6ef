// format — which objects make up a remote checkpoint (see discover_remote_shards in shards.hpp).
#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "ctstream/error.hpp"
#include "format/file_names.hpp"
#include "format/shards.hpp"
#include "io/http_response.hpp"
#include "io/remote_file.hpp"
#include "io/s3_list.hpp"
#include "io/url.hpp"

namespace ctstream::format {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether the object at `url` exists: a probe request; a missing object is absent, any other
// failure (denied, unreachable) an error, as a local probe() treats an unreadable entry.
// `may_be_denied`: an object whose absence only changes the view, loudly (decompose_config.json:
// the factors under their own names), which io::absent_object's rule also takes for absent when
// S3 denies it; never config.json.
bool exists(const std::string& url, bool may_be_denied = false) {
  try {
    io::RemoteFile::open(url);
    return true;
  } catch (const Error& e) {
    if (may_be_denied ? io::absent_object(url, e) : e.kind() == ErrorKind::file_not_found) return false;
    throw;
  }
}

std::string optional_object(const std::string& url, bool may_be_denied = false) {
  return exists(url, may_be_denied) ? url : std::string();
}

// An s3:// prefix without model.safetensors.index.json: its objects listed (ListObjectsV2), then
// the rules of the local discover_shards over a directory: one other *.safetensors.index.json is
// the index (several: refused), else every *.safetensors, in name order; nothing: refused.
void discover_listed(ShardSet& lay, const io::Url& u, const std::string& dir, const std::string& display,
                     uint64_t max_json) {
  std::string prefix = u.path;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  const io::PrefixListing listing = io::list_s3_prefix(u.host, prefix, io::default_http_client());
  if (!listing.any) throw Error(ErrorKind::file_not_found, display, "", "no such object or prefix");
  std::vector<std::string> indexes, weights;
  std::set<std::string> names;
  for (const io::ListedObject& o : listing.objects) {
    names.insert(o.key);
    if (o.key.size() > kIndexSuffix.size() && ends_with(o.key, kIndexSuffix)) indexes.push_back(o.key);
    else if (o.key.size() > kWeightsSuffix.size() && ends_with(o.key, kWeightsSuffix)) weights.push_back(o.key);
  }
  if (indexes.size() > 1)
    throw Error(ErrorKind::invalid_header, display, "",
                "prefix holds several *.safetensors.index.json objects; open one shard set's file directly");
  if (indexes.size() == 1) {
    const std::string index = dir + indexes.front();
    const std::string text = io::read_small_remote(index, max_json);
    lay.index_path = index;
    lay.index_id.path = index;
    fill_from_index(lay, text, [&](const std::string& shard) {
      const std::string p = dir + shard;
      // Listed names need no request; a shard in a sub-prefix is probed.
      return std::filesystem::path(
          names.count(shard) || (shard.find('/') != std::string::npos && exists(p)) ? p : std::string());
    });
    return;
  }
  std::sort(weights.begin(), weights.end());
  if (weights.empty())
    throw Error(ErrorKind::file_not_found, display, "", "prefix holds no *.safetensors object and no index");
  for (const std::string& w : weights) lay.files.emplace_back(dir + w);
}

}  // namespace

ShardSet discover_remote_shards(const std::string& url, uint64_t max_json) {
  const io::Url u = io::parse_url(url);  // refuses what cannot be a location
  ShardSet lay;
  const std::string display = io::redact_url(url);
  // The objects beside the one named are asked for by the URL without its query and fragment
  // (http(s): a presigned URL's signature is for its own object, and config.json cut into the
  // query was no sibling at all), built from the parsed URL, whose path `last` was taken from (an
  // s3:// key is literal text, '?' and '#' included).
  io::Url bu = u;
  bu.query.clear();
  const std::string base = io::to_string(bu);
  const std::string last = u.path.substr(u.path.rfind('/') == std::string::npos ? 0 : u.path.rfind('/') + 1);
  if (ends_with(last, kWeightsSuffix) && last.size() > kWeightsSuffix.size()) {
    if (!exists(url)) throw Error(ErrorKind::file_not_found, display, "", "no such object");
    lay.files.emplace_back(url);
    const std::string dir = base.substr(0, base.size() - last.size());
    lay.config_path = optional_object(dir + std::string(kConfigName));
    lay.decompose_path = optional_object(dir + std::string(kDecomposeConfigName), true);
    return lay;
  }
  std::string dir = base;
  if (dir.empty() || dir.back() != '/') dir += '/';
  lay.config_path = optional_object(dir + std::string(kConfigName));
  lay.decompose_path = optional_object(dir + std::string(kDecomposeConfigName), true);
  const std::string index = dir + std::string(kIndexName);
  std::optional<std::string> text;  // none: no index (the prefix is then listed)
  try {
    text = io::read_small_remote(index, max_json);
  } catch (const Error& e) {
    if (!io::absent_object(index, e)) throw;
  }
  if (text) {
    lay.index_path = index;
    lay.index_id.path = index;
    fill_from_index(lay, *text, [&](const std::string& shard) {
      // An s3:// key is literal text; an http(s) path is percent-encoded. Not probed here, one
      // shard after another: the reader opens the shards together, and says missing_shard for
      // one that is not there (read_headers).
      return std::filesystem::path(dir + (u.scheme == io::UrlScheme::s3 ? shard : io::uri_encode(shard, true)));
    });
    return lay;
  }
  if (u.scheme == io::UrlScheme::s3) {
    try {
      discover_listed(lay, u, dir, display, max_json);
    } catch (const io::http::AccessDenied& e) {
      throw Error(ErrorKind::io, e.file(), "",
                  "listing the prefix was denied (403 AccessDenied): a prefix without "
                  "model.safetensors.index.json is listed, which needs s3:ListBucket; open its *.safetensors "
                  "object directly otherwise (" +
                      std::string(e.what()) + ")");
    }
    return lay;
  }
  const std::string single = dir + "model.safetensors";
  if (!exists(single))
    throw Error(ErrorKind::file_not_found, display, "",
                "no model.safetensors.index.json and no model.safetensors under this path (an http(s) "
                "location cannot be listed: open a *.safetensors URL directly otherwise)");
  lay.files.emplace_back(single);
  return lay;
}

}  // namespace ctstream::format
