#include "format/shards.hpp"

#include "format/low_rank.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <system_error>

#include "ctstream/error.hpp"
#include "format/json.hpp"
#include "io/file.hpp"

namespace fs = std::filesystem;

namespace ctstream::format {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

fs::path find_index(const fs::path& dir) {
  fs::path preferred = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(preferred)) return preferred;
  std::vector<fs::path> found;
  for (const auto& de : fs::directory_iterator(dir))
    if (de.is_regular_file() && ends_with(de.path().filename().string(), ".safetensors.index.json"))
      found.push_back(de.path());
  if (found.size() > 1)
    throw Error(ErrorKind::invalid_header, dir.string(), "",
                "directory holds several *.safetensors.index.json files; open one shard set's file directly");
  return found.empty() ? fs::path{} : found.front();
}

void read_index(ShardSet& lay, const fs::path& dir, uint64_t max_json) {
  const std::string file = lay.index_path.string();
  const nlohmann::json j =
      parse_json(io::read_small_file(lay.index_path, max_json), ErrorKind::invalid_header, file, "index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(ErrorKind::invalid_header, file, "", "index has no \"weight_map\" object");
  std::map<std::string, uint32_t> shard_ids;
  std::vector<std::string> names;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw Error(ErrorKind::invalid_header, file, it.key(), "weight_map value is not a file name");
    names.push_back(it.value().get<std::string>());
  }
  std::vector<std::string> unique = names;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  for (const auto& shard : unique) {
    if (!is_contained_name(shard))
      throw Error(ErrorKind::invalid_shard, file, "", "shard name '" + shard + "' escapes the checkpoint directory");
    fs::path p = dir / shard;
    if (!fs::is_regular_file(p))
      throw Error(ErrorKind::missing_shard, file, "", "shard '" + shard + "' named by the index does not exist");
    shard_ids.emplace(shard, static_cast<uint32_t>(lay.files.size()));
    lay.files.push_back(p);
  }
  size_t i = 0;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it, ++i)
    lay.weight_map.emplace(it.key(), shard_ids.at(names[i]));
}

}  // namespace

bool is_contained_name(const std::string& name) {
  if (name.empty() || name.find('\0') != std::string::npos) return false;
  fs::path p(name);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return p.has_filename();
}

ShardSet discover_shards(const fs::path& path, uint64_t max_json) {
  ShardSet lay;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(ErrorKind::file_not_found, path.string(), "", "no such file or directory");
  if (fs::is_regular_file(st)) {
    lay.files.push_back(path);
    // A single shard of a saved model: its config.json beside it carries the scheme.
    fs::path cfg = path.parent_path().empty() ? fs::path("config.json") : path.parent_path() / "config.json";
    if (fs::is_regular_file(cfg)) lay.config_path = cfg;
    const fs::path dec = cfg.parent_path() / kDecomposeConfigName;
    if (fs::is_regular_file(dec)) lay.decompose_path = dec;
    return lay;
  }
  if (!fs::is_directory(st)) throw Error(ErrorKind::io, path.string(), "", "neither a file nor a directory");
  if (fs::is_regular_file(path / "config.json")) lay.config_path = path / "config.json";
  if (fs::is_regular_file(path / kDecomposeConfigName)) lay.decompose_path = path / kDecomposeConfigName;
  lay.index_path = find_index(path);
  if (!lay.index_path.empty()) {
    read_index(lay, path, max_json);
    return lay;
  }
  for (const auto& de : fs::directory_iterator(path))
    if (de.is_regular_file() && de.path().extension() == ".safetensors") lay.files.push_back(de.path());
  std::sort(lay.files.begin(), lay.files.end());
  if (lay.files.empty())
    throw Error(ErrorKind::not_found, path.string(), "", "directory holds no *.safetensors file and no index");
  return lay;
}

}  // namespace ctstream::format
