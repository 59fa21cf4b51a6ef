// The names of a saved checkpoint's files (transformers' save_pretrained layout, ptdeco's low-rank
// config), named once for the reader (format/shards.cpp) and the writer (writer/job.cpp,
// writer/source.*).
#pragma once
#include <string_view>

namespace ctstream::format {

inline constexpr std::string_view kConfigName = "config.json";                     ///< model config
inline constexpr std::string_view kIndexName = "model.safetensors.index.json";     ///< the shard index
inline constexpr std::string_view kIndexSuffix = ".safetensors.index.json";        ///< any shard index
inline constexpr std::string_view kWeightsSuffix = ".safetensors";                 ///< a weights file
inline constexpr std::string_view kDecomposeConfigName = "decompose_config.json";  ///< ptdeco's config

}  // namespace ctstream::format
