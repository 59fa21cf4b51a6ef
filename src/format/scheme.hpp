// format — config.json -> compression scheme: which modules are quantized/sparse, how, and by
// which library version (the packing of odd bit widths changed in compressed-tensors 0.18).
// Reads `quantization_config` (quant_method "compressed-tensors"), the older
// `compression_config` key (compressed-tensors <= 0.4), and a top-level SparseML-style
// `sparsity_config` block. Pure: JSON text in, scheme out.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/tensor.hpp"
#include "format/targets.hpp"

namespace ctstream::format {

struct SchemeGroup {
  std::string name;                  ///< "group_0", ...
  std::vector<std::string> targets;  ///< as written (matched through Scheme::group_targets)
  std::optional<QuantArgs> weights;
  bool has_input_activations = false;
  std::optional<Format> format;  ///< per-group format, if written
};

struct Scheme {
  /// A compressed-tensors config was found: the checkpoint's parts are grouped and decoded as it
  /// says. Otherwise every stored entry is a plain tensor, read as safetensors reads it.
  bool present = false;
  /// Which config block decided (`quantization_config (compressed-tensors 0.20.0)`), or why the
  /// file is not a compressed-tensors checkpoint (`config.json has quantization_config.quant_method
  /// 'fp8', not compressed-tensors`); for `inspect` and Checkpoint::config_info().
  std::string description;
  /// The config describes weight quantization (config groups): only then are weight_packed /
  /// weight + weight_scale entries grouped into quantized tensors.
  bool quantized() const { return !groups.empty(); }
  /// The config names a sparse format: only then are compressed / bitmask / shape / row_offsets
  /// entries grouped into sparse tensors (compressed-tensors 0.12 BaseSparseCompressor).
  bool sparse() const {
    return sparse_format && (*sparse_format == Format::sparse_bitmask || *sparse_format == Format::sparse_24_bitmask);
  }
  std::string version;  ///< compressed-tensors version that wrote the file ("" unknown)
  /// pack-quantized layout of widths other than 1/2/4/8: dense since 0.18.0 (helpers.py
  /// `pack_to_int32` "packs across int32 boundaries"), one word per 32/b codes before.
  /// nullopt when the version is unknown.
  std::optional<bool> dense_packing;
  /// The version does not tell the layout: none given, a 0.17.2 development / nightly build
  /// (main between the 0.17.1 and 0.18.0 tags switched layouts) or an unparseable string. Then
  /// only the stored width can decide, and a width both layouts share is an error.
  bool version_unclear = false;
  std::optional<Format> global_format;  ///< top-level `format` unless "mixed-precision"/absent
  std::vector<SchemeGroup> groups;
  TargetList group_targets;          ///< every group's targets, in group order
  std::vector<size_t> target_group;  ///< group_targets entry -> index into groups
  TargetList ignore;
  std::optional<Format> sparse_format;  ///< sparse-bitmask / sparse-24-bitmask / dense
  TargetList sparse_targets, sparse_ignore;
};

/// Parses config.json text (may be empty -> Scheme{present=false}), nesting-bounded
/// (format/json.hpp). Every error, JSON type errors included, is Error{invalid_config} naming
/// `file`.
Scheme parse_scheme(const std::string& config_json, const std::string& file);

/// Module name -> the class names it counts as (its class's `__mro__`, as compressed-tensors'
/// match_class tests them), when the caller knows the model (OpenOptions::module_classes).
using ModuleClasses = std::map<std::string, std::vector<std::string>>;

/// The config groups that may describe `module` (compressed_tensors/utils/match.py: ignore wins;
/// exact names first, then regexes in alphabetical order of pattern, then class names).
struct GroupMatch {
  /// The deciding group (by name, pattern or a known class), or, when `by_unknown_class`, every
  /// group with a class-name target in precedence order: the module's class is not known, so each
  /// is a candidate the stored parts must choose among. Empty: no group targets the module.
  std::vector<const SchemeGroup*> groups;
  bool by_unknown_class = false;
};
/// `classes` may be null (no model known) or lack `module` (its class unknown); class names in
/// `ignore` then never match.
GroupMatch match_groups(const Scheme& s, const std::string& module, const ModuleClasses* classes);
/// Parses module classes given as JSON text ({"model.layers.0.mlp.up_proj": ["Linear", "Module"],
/// ...}: what `--module-classes FILE` and the C ABI take): Error{invalid_argument} naming `what`
/// unless it is an object of string lists (nesting-bounded, format/json.hpp).
ModuleClasses parse_module_classes(std::string_view json_text, const std::string& what);
/// The first group match_groups() gives, or null (tests, fuzzing).
const SchemeGroup* match_group(const Scheme& s, const std::string& module);
/// Whether the sparsity config targets `module`.
bool sparse_targets_module(const Scheme& s, const std::string& module);

}  // namespace ctstream::format
