#include "format/shards.hpp"

#include "format/low_rank.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>

#include "ctstream/error.hpp"
#include "format/file_names.hpp"
#include "format/grouping.hpp"
#include "format/json.hpp"
#include "format/scheme.hpp"
#include "io/file.hpp"

namespace fs = std::filesystem;

namespace ctstream::format {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What a name in (or beside) the checkpoint is: absent, a regular file (links followed), or
// something that cannot be read as one - a directory, a FIFO, a dangling or looping link, a name
// too long - which is an Error{io}: silently skipping a config.json or a shard would yield other
// tensors than the checkpoint holds.
enum class Kind { absent, file };
Kind probe(const fs::path& p, std::string_view what) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (!ec && fs::is_regular_file(st)) return Kind::file;
  std::error_code lec;
  const fs::file_status link = fs::symlink_status(p, lec);
  if (lec == std::errc::no_such_file_or_directory || (!lec && !fs::exists(link))) return Kind::absent;
  throw Error(ErrorKind::io, p.string(), "",
              std::string(what) + " exists but is not a readable regular file (" +
                  (ec                                        ? ec.message()
                   : fs::is_directory(st)                    ? "a directory"
                   : fs::is_symlink(link) && !fs::exists(st) ? "a dangling link"
                                                             : "a special file") +
                  ")");
}
fs::path optional_file(const fs::path& p, std::string_view what) {
  return probe(p, what) == Kind::file ? p : fs::path{};
}
// The entries of `dir` whose names end with `suffix`; each must be a regular file.
std::vector<fs::path> files_ending(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const std::string name = it->path().filename().string();
        name.size() > suffix.size() && ends_with(name, suffix) && probe(it->path(), "a checkpoint file") == Kind::file)
      out.push_back(it->path());
  if (ec) throw Error(ErrorKind::io, dir.string(), "", "cannot list the directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

fs::path find_index(const fs::path& dir) {
  fs::path preferred = optional_file(dir / kIndexName, "the index");
  if (!preferred.empty()) return preferred;
  const std::vector<fs::path> found = files_ending(dir, std::string(kIndexSuffix));
  if (found.size() > 1)
    throw Error(ErrorKind::invalid_header, dir.string(), "",
                "directory holds several *.safetensors.index.json files; open one shard set's file directly");
  return found.empty() ? fs::path{} : found.front();
}

void read_index(ShardSet& lay, const fs::path& dir, uint64_t max_json) {
  const std::string text = io::read_small_file(lay.index_path, max_json, &lay.index_id);
  fill_from_index(lay, text, [&](const std::string& shard) {
    fs::path p = dir / shard;
    return probe(p, "a shard named by the index") == Kind::file ? p : fs::path{};
  });
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

namespace {
// A shard name as messages show it: control bytes (a NUL would cut the message) as \xNN.
std::string shown(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Error missing_shard(const std::string& index_file, const std::string& name) {
  return Error(ErrorKind::missing_shard, index_file, "",
               "shard '" + shown(name) + "' named by the index does not exist");
}

void fill_from_index(ShardSet& lay, std::string_view text,
                     const std::function<std::filesystem::path(const std::string&)>& resolve) {
  const std::string file = lay.index_path.string();
  const nlohmann::json j = parse_json(text, ErrorKind::invalid_header, file, "index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(ErrorKind::invalid_header, file, "", "index has no \"weight_map\" object");
  std::map<std::string, uint32_t> shard_ids, by_path;  // name as written / lexically normal -> file
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
      throw Error(ErrorKind::invalid_shard, file, "",
                  "shard name '" + shown(shard) + "' " +
                      (shard.find('\0') != std::string::npos ? "holds a NUL byte"
                       : shard.empty()                       ? "is empty"
                                                             : "escapes the checkpoint directory"));
    // One file under two spellings ("s1.safetensors", "./s1.safetensors") is one shard.
    const std::string same = fs::path(shard).lexically_normal().string();
    if (auto at = by_path.find(same); at != by_path.end()) {
      shard_ids.emplace(shard, at->second);
      continue;
    }
    fs::path p = resolve(shard);
    if (p.empty()) throw missing_shard(file, shard);
    by_path.emplace(same, static_cast<uint32_t>(lay.files.size()));
    shard_ids.emplace(shard, static_cast<uint32_t>(lay.files.size()));
    lay.files.push_back(std::move(p));
  }
  size_t i = 0;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it, ++i)
    lay.weight_map.emplace(it.key(), shard_ids.at(names[i]));
}

ShardSet discover_shards(const fs::path& path, uint64_t max_json) {
  ShardSet lay;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(ErrorKind::file_not_found, path.string(), "", "no such file or directory");
  if (fs::is_regular_file(st)) {
    lay.files.push_back(path);
    // A single shard of a saved model: its config.json beside it carries the scheme.
    fs::path cfg = path.parent_path().empty() ? fs::path(kConfigName) : path.parent_path() / kConfigName;
    lay.config_path = optional_file(cfg, kConfigName);
    lay.decompose_path = optional_file(cfg.parent_path() / kDecomposeConfigName, kDecomposeConfigName);
    return lay;
  }
  if (!fs::is_directory(st)) throw Error(ErrorKind::io, path.string(), "", "neither a file nor a directory");
  lay.config_path = optional_file(path / kConfigName, kConfigName);
  lay.decompose_path = optional_file(path / kDecomposeConfigName, kDecomposeConfigName);
  lay.index_path = find_index(path);
  if (!lay.index_path.empty()) {
    read_index(lay, path, max_json);
    return lay;
  }
  lay.files = files_ending(path, ".safetensors");
  if (lay.files.empty())
    throw Error(ErrorKind::file_not_found, path.string(), "", "directory holds no *.safetensors file and no index");
  return lay;
}

void add_sibling_shards(ShardSet& lay, const fs::path& path, const std::string& config_json, uint64_t max_json) {
  if (config_json.empty()) return;
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  ShardSet full;
  try {
    if (!parse_scheme(config_json, lay.config_path.string()).present) return;
    full.index_path = find_index(dir);
    if (full.index_path.empty()) return;
    // Shards are not probed here: only those this file needs must exist (one shard of a partly
    // downloaded model opens as before).
    const std::string text = io::read_small_file(full.index_path, max_json, &full.index_id);
    fill_from_index(full, text, [&](const std::string& shard) { return dir / shard; });
  } catch (const Error&) {  // the open reports a bad config itself; a bad index: the file alone
    return;
  }
  std::optional<uint32_t> mine;
  for (uint32_t i = 0; i < full.files.size() && !mine; ++i) {
    std::error_code ec;
    if (fs::equivalent(full.files[i], path, ec)) mine = i;
  }
  if (!mine) return;
  std::set<std::string> modules;
  for (const auto& [key, fi] : full.weight_map)
    if (fi == *mine)
      if (auto m = module_of_key(key)) modules.insert(std::move(*m));
  // The other shards holding parts of those modules; only their entries of those modules are
  // checked against the index (read_headers), the file asked for is taken as it is.
  std::map<uint32_t, uint32_t> renumber;
  std::map<std::string, uint32_t> checked;
  for (const auto& [key, fi] : full.weight_map) {
    if (fi == *mine) continue;
    const auto m = module_of_key(key);
    if (!m || !modules.count(*m)) continue;
    if (!renumber.count(fi)) {
      std::error_code ec;
      if (!fs::is_regular_file(full.files[fi], ec))
        throw Error(ErrorKind::missing_shard, full.index_path.string(), key,
                    "shard '" + full.files[fi].filename().string() + "' that the index names for '" + key +
                        "' does not exist: it holds parts of module '" + *m + "', whose other parts " +
                        path.filename().string() + " stores (open the file alone: sibling_shards = false)");
      renumber.emplace(fi, static_cast<uint32_t>(renumber.size() + 1));
    }
    checked.emplace(key, renumber.at(fi));
  }
  lay.files.resize(renumber.size() + 1);  // files[0] stays `path`
  for (const auto& [fi, to] : renumber) lay.files[to] = full.files[fi];
  lay.weight_map = std::move(checked);
  lay.index_path = full.index_path;
  lay.index_id = full.index_id;
  lay.one_shard = true;
  lay.modules = std::move(modules);
}

}  // namespace ctstream::format
