// format — which files make up a checkpoint: one file, a directory with a shard index
// (`*.safetensors.index.json` weight_map), or a directory of `*.safetensors` files.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/error.hpp"
#include "io/file.hpp"

namespace ctstream::format {

struct ShardSet {
  std::vector<std::filesystem::path> files;    ///< shard files, in shard-name order
  std::filesystem::path index_path;            ///< empty when there is no index
  io::FileIdentity index_id;                   ///< the index as read (when there is one)
  std::map<std::string, uint32_t> weight_map;  ///< tensor key -> index into files (index only)
  std::filesystem::path config_path;           ///< config.json beside the files, empty if none
  std::filesystem::path decompose_path;        ///< decompose_config.json (low_rank.hpp), empty if none
  /// A file opened on its own that an index beside it names (a shard of a saved model): files[0]
  /// is that file, the other files hold the rest of its modules' parts (a save that cut a module
  /// between shards), and `modules` names those modules. Of the other files only those modules'
  /// entries count, and only the tensors whose values (parts[0]) are in files[0] are its own.
  bool one_shard = false;
  std::set<std::string> modules;
};

/// Finds the files of the checkpoint at `path`. Shard names from an index must stay inside the
/// directory (no absolute paths, no `..`) and must exist. Throws ctstream::Error.
ShardSet discover_shards(const std::filesystem::path& path, uint64_t max_json_bytes);

/// `lay` is discover_shards() of one file, `file`, and `config_json` its config.json as read
/// (empty: none). Where that config is compressed-tensors' (only then are parts grouped) and an
/// index beside the file names it, the shards holding the other parts of its modules join it
/// (ShardSet::one_shard). No such config, an index that cannot be read or does not name the file,
/// several indexes: `lay` is left as it is (the file alone; it still refuses a module it holds
/// only part of). A needed shard that does not exist is Error{missing_shard}.
void add_sibling_shards(ShardSet& lay, const std::filesystem::path& file, const std::string& config_json,
                        uint64_t max_json_bytes);

/// Error{missing_shard}: the shard `name` the index `index_file` names does not exist (the name
/// shown with its control bytes escaped). Thrown by fill_from_index, and by the reader for a
/// remote shard, which is found missing when it is opened.
Error missing_shard(const std::string& index_file, const std::string& name);

/// The shards of an index (`*.safetensors.index.json` text; lay.index_path names it in errors):
/// every shard name contained (Error{invalid_shard}), `resolve(name)` gives its path, or an empty
/// path when it does not exist (Error{missing_shard}). Fills lay.files and lay.weight_map.
void fill_from_index(ShardSet& lay, std::string_view text,
                     const std::function<std::filesystem::path(const std::string&)>& resolve);

/// The files of a remote checkpoint (s3://bucket/prefix, http(s)://host/path; `url` as given): a
/// URL whose last segment ends in ".safetensors" is one file (with config.json beside it when
/// present), anything else a directory prefix holding config.json (optional), then
/// model.safetensors.index.json and the shards it names; else, for s3://, the prefix listed
/// (ListObjectsV2) under the local rules (another single *.safetensors.index.json, several refused,
/// else every *.safetensors in name order), and for http(s):// (no listing) model.safetensors.
/// ShardSet paths hold the URLs. Same error kinds as discover_shards. Remote builds only
/// (CTSTREAM_REMOTE).
ShardSet discover_remote_shards(const std::string& url, uint64_t max_json_bytes);

/// True when `name` is a relative path that cannot leave its directory.
bool is_contained_name(const std::string& name);

}  // namespace ctstream::format
