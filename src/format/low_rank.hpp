// format — low-rank checkpoints (ptdeco): a module `m` decomposed into
// Sequential(Linear(in, r, bias=False), Linear(r, out, bias)) - or, for a conv,
// Sequential(Conv2d(in, r, k x k), Conv2d(r, out, 1 x 1)) - stored as `m.0.weight` [r, in(, kh, kw)],
// `m.1.weight` [out, r(, 1, 1)] and `m.1.bias`, with `decompose_config.json` beside the weights
// mapping each module name to its new structure (ptdeco 0.5.0 utils/modconfig.py
// `get_module_config`: {"type": "Sequential", "modules": {"0": {...}, "1": {...}}}, Linear entries
// {"type", "in_features", "out_features", "bias"}, Conv2d entries {"type", "in_channels",
// "out_channels", "kernel_size", "bias", "groups", "padding", "padding_mode", "stride",
// "dilation"}; "__meta__" keys carry decomposition statistics and are ignored).
// This file is the one description of that layout: the reader merges the factors into the
// original module's tensors with it, the writer writes through it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/tensor.hpp"
#include "format/file_names.hpp"

namespace ctstream::format {

/// One decomposed module: original weight [out, in(, kh, kw)] = B [out, r] @ A [r, in * kh * kw].
struct LowRankModule {
  enum class Kind : uint8_t { linear, conv2d };
  std::string name;  ///< module name, e.g. "encoder.layer.0.attention.self.query"
  Kind kind = Kind::linear;
  uint64_t in = 0, out = 0, rank = 0;  ///< in_features / in_channels, out_*, r
  uint64_t kh = 1, kw = 1;             ///< conv: the first conv's kernel (the second is 1 x 1)
  bool bias = false;                   ///< the second factor has a bias (= the module's bias)
  /// conv: the first conv's stride / padding / dilation / padding_mode as ptdeco writes them
  /// (JSON text, kept so a writer can round-trip them); empty for linear.
  std::string conv_attrs;

  std::string a_key() const { return name + ".0.weight"; }  ///< [r, in(, kh, kw)]
  std::string b_key() const { return name + ".1.weight"; }  ///< [out, r(, 1, 1)]
  std::string bias_key() const { return name + ".1.bias"; }
  Shape a_shape() const;
  Shape b_shape() const;
  Shape weight_shape() const;  ///< the original module's weight
};

/// Parses decompose_config.json. Any structure other than the two-factor Sequentials above
/// (with consistent features / channels, groups 1, a 1 x 1 second conv) is Error{unsupported};
/// malformed JSON or types Error{invalid_config}, naming `file` and the module.
std::vector<LowRankModule> parse_decompose_config(std::string_view text, const std::string& file);

/// Original-architecture view: for every module, replaces the tensors `m.0.weight` and
/// `m.1.weight` (each dense or itself compressed) by one logical tensor `m.weight`
/// (Format::low_rank, factors = {A, B}, parts = A's then B's) and renames `m.1.bias` to `m.bias`.
/// Every factor's logical shape must be the one the config describes and both factors floating
/// point; a missing factor or a clash with an existing `m.weight` is an error naming `file`.
void merge_low_rank(std::vector<TensorInfo>& tensors, const std::vector<LowRankModule>& modules,
                    const std::string& file);

/// decompose_config.json text for `modules` (ptdeco's layout; what parse_decompose_config reads).
std::string decompose_config_json(const std::vector<LowRankModule>& modules);

}  // namespace ctstream::format
