#include "format/grouping.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/checked.hpp"
#include "core/packing.hpp"
#include "ctstream/error.hpp"
#include "format/format_table.hpp"
#include "format/scheme.hpp"

namespace ctstream::format {
namespace {

// INT codes wider than 8 bits: how the library stores INT weights of 9..32 bits naive-quantized
// (QuantizationArgs.pytorch_dtype: int16 / int32; pack-quantized takes 1..8 bits).
bool wide_int_codes(DType d) { return d == DType::I16 || d == DType::I32 || d == DType::I64; }

// The FP4 formats whose scales a stored weight_global_scale divides (the format table's row).
bool global_scaled(Format f) { return part_rule(f, Role::weight_global_scale) != nullptr; }

// The module of `key` as a part of role `role` (`<module>.<role>`).
std::optional<std::string> module_of(std::string_view key, Role role) {
  const std::string_view suffix = role_name(role);
  if (key.size() > suffix.size() + 1 && key.substr(key.size() - suffix.size()) == suffix &&
      key[key.size() - suffix.size() - 1] == '.')
    return std::string(key.substr(0, key.size() - suffix.size() - 1));
  return std::nullopt;
}

// The stored entries of one module, by role (`<module>.<role>`; sparse formats drop `.weight`).
struct Module {
  std::map<Role, const RawTensor*> parts;
  const RawTensor* get(Role r) const {
    auto it = parts.find(r);
    return it == parts.end() ? nullptr : it->second;
  }
};

class Grouper {
 public:
  Grouper(const std::vector<RawTensor>& raw, const Scheme& s, const std::string& cfg_file, const SmallReader& rd,
          const std::function<std::string(uint32_t)>& file_of, const ModuleClasses* classes)
      : raw_(raw), s_(s), cfg_file_(cfg_file), read_(rd), file_of_(file_of), classes_(classes) {}

  std::vector<TensorInfo> run();

 private:
  [[noreturn]] void fail(const RawTensor& r, const std::string& logical, const std::string& msg) const {
    throw Error(ErrorKind::corrupt_tensor, file_of_(r.file), logical, msg);
  }
  Shape read_shape(const RawTensor& r, const std::string& logical) const;
  std::optional<Format> classify(const std::string& p, const Module& m) const;
  QuantArgs args_for(const SchemeGroup* g, const std::string& logical, const RawTensor& main, Format* fmt) const;
  TensorInfo build_module(const std::string& p, const Module& m, Format fmt, std::set<const RawTensor*>& used) const;
  TensorInfo build(const std::string& p, const Module& m, Format fmt, const SchemeGroup* group,
                   std::set<const RawTensor*>& used) const;
  bool legacy_packing(const TensorInfo& t, const RawTensor& main) const;
  void refuse_undecodable(const std::string& p, const Module& m, Format fmt, QuantStrategy strategy) const;

  const std::vector<RawTensor>& raw_;
  const Scheme& s_;
  const std::string& cfg_file_;
  const SmallReader& read_;
  const std::function<std::string(uint32_t)>& file_of_;
  const ModuleClasses* classes_;
};

// A stored shape vector (`weight_shape`, sparse `shape`): 1..8 non-negative integers, checked
// before a byte of it is read.
Shape Grouper::read_shape(const RawTensor& r, const std::string& logical) const {
  const uint64_t n = detail::checked_numel(r.shape).value_or(0);
  const bool vec = r.shape.size() == 1 || (r.shape.size() == 2 && r.shape[1] == 1);
  if ((r.dtype != DType::I64 && r.dtype != DType::I32) || !vec || n < 1 || n > 8)
    fail(r, logical,
         "shape part '" + r.key + "' must be a vector of 1..8 integers (I64/I32), got " +
             std::string(dtype_name(r.dtype)) + " " + shape_str(r.shape));
  const auto bytes = read_(r);
  const size_t esz = r.dtype == DType::I64 ? 8 : 4;
  if (bytes.size() < n * esz) fail(r, logical, "shape part '" + r.key + "' is shorter than its header says");
  Shape out;
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    if (esz == 8) {
      std::memcpy(&v, bytes.data() + 8 * i, 8);
    } else {
      int32_t w;
      std::memcpy(&w, bytes.data() + 4 * i, 4);
      v = w;
    }
    if (v < 0) fail(r, logical, "shape part '" + r.key + "' holds a negative dimension " + std::to_string(v));
    out.push_back(static_cast<uint64_t>(v));
  }
  return out;
}

// Quantization args for `module`: its config group's. A quantized module no group describes
// (none targets it, it is ignored, or its group quantizes no weights) is refused: decoding it
// would mean guessing its strategy from the scale's shape.
QuantArgs Grouper::args_for(const SchemeGroup* g, const std::string& logical, const RawTensor& main,
                            Format* fmt) const {
  if (!g || !g->weights)
    fail(main, logical,
         "stored quantized, but " + (cfg_file_.empty() ? std::string("config.json") : cfg_file_) +
             (g ? " gives its config group no weight quantization"
                : " has no config group targeting this module (or ignores it)"));
  if (g->format) *fmt = *g->format;
  else if (s_.global_format && *s_.global_format != Format::dense && *s_.global_format != Format::sparse_bitmask &&
           *s_.global_format != Format::sparse_24_bitmask)
    *fmt = *s_.global_format;
  return *g->weights;
}

// Which format a module's parts are stored in (before the config group has its say), or nullopt
// for a module of plain tensors. Only what the config describes is grouped: sparse parts under a
// sparse format (compressed-tensors 0.12 BaseSparseCompressor groups them by key suffix), quantized
// parts under config groups; anything else is a plain entry, as safetensors reads it.
std::optional<Format> Grouper::classify(const std::string& p, const Module& m) const {
  if (s_.sparse()) {
    const RawTensor* values = m.get(Role::compressed);
    const RawTensor* mask = m.get(Role::bitmask);
    // Parts that only make sense together: an incomplete set is a damaged checkpoint, not a
    // bunch of dense tensors to pass through.
    if ((values || mask || m.get(Role::row_offsets)) && !(values && mask)) {
      const RawTensor& r = *(values ? values : mask ? mask : m.get(Role::row_offsets));
      fail(r, p + ".weight",
           std::string("incomplete sparse tensor: '") + p + (values ? ".bitmask" : ".compressed") + "' is missing");
    }
    if (values && mask) return *s_.sparse_format;
  }
  if (!s_.quantized()) return std::nullopt;
  const RawTensor* packed = m.get(Role::weight_packed);
  if (const RawTensor* ws = m.get(Role::weight_shape); ws && !packed)
    fail(*ws, p + ".weight", "weight_shape without weight_packed: the packed weight is missing");
  if (packed) {
    if (m.get(Role::scale_packed) && m.get(Role::meta)) return Format::marlin_24;
    if (packed->dtype == DType::I32) return Format::pack_quantized;
    if (m.get(Role::weight_global_scale)) return Format::nvfp4_pack_quantized;
    const RawTensor* sc = m.get(Role::weight_scale);
    if (sc && sc->shape.size() == 2 && packed->shape.size() == 2 && packed->shape[1] % 3 == 0 &&
        sc->shape[1] * 32 != packed->shape[1] * 2 && sc->shape[1] * 32 == packed->shape[1] / 3 * 4)
      return Format::mxfp6_pack_quantized;  // 4 codes per 3 bytes
    return Format::mxfp4_pack_quantized;
  }
  const RawTensor* w = m.get(Role::weight);
  const RawTensor* sc = m.get(Role::weight_scale);
  if (w && sc && (w->dtype == DType::I8 || w->dtype == DType::F8_E4M3)) {
    if (sc->dtype == DType::U8 || sc->dtype == DType::F8_E8M0) return Format::mxfp8_quantized;
    return w->dtype == DType::F8_E4M3 ? Format::float_quantized : Format::naive_quantized;
  }
  // INT weights of 9..32 bits: quantized, whatever build() then says of them: never a plain
  // tensor of codes.
  if (w && sc && wide_int_codes(w->dtype)) {
    const GroupMatch gm = match_groups(s_, p, classes_);
    if (std::any_of(gm.groups.begin(), gm.groups.end(), [](const SchemeGroup* g) { return g->weights.has_value(); }))
      return Format::naive_quantized;  // else plain tensors, as the library leaves a module no group quantizes
  }
  return std::nullopt;
}

// Whether a pack-quantized weight of b-bit codes uses the <= 0.17 packing. Widths other than
// 1/2/4/8 changed layout in compressed-tensors 0.18 (pack_to_int32 "packs across int32
// boundaries"): the config's version decides, else the stored width.
bool Grouper::legacy_packing(const TensorInfo& t, const RawTensor& main) const {
  const unsigned b = t.quant.num_bits;
  if (b == 1 || b == 2 || b == 4 || b == 8) return false;
  const uint64_t C = t.shape.back();
  const uint64_t W = main.shape.empty() ? 0 : main.shape.back();
  const uint64_t dense_w = detail::packed_words(C, b, true), old_w = detail::packed_words(C, b, false);
  if (s_.dense_packing) return !*s_.dense_packing;
  if (s_.version_unclear && W == dense_w && W == old_w)
    fail(main, t.name,
         (s_.version.empty() ? std::string("config.json gives no compressed-tensors version, which would tell")
                             : "config.json version '" + s_.version + "' does not tell") +
             " the layout of " + std::to_string(b) +
             "-bit codes (compressed-tensors changed it between 0.17.1 and 0.18.0) and " + std::to_string(C) +
             " columns take " + std::to_string(W) + " words in both");
  return !(W == dense_w && W != old_w);
}

// Layouts today's library writes whose values ctstream would not decode as the library does:
// refused, naming why (unsupported, not damaged: the file is the library's own).
void Grouper::refuse_undecodable(const std::string& p, const Module& m, Format fmt, QuantStrategy strategy) const {
  const std::string name = p + ".weight";
  const RawTensor* scale = m.get(Role::weight_scale);
  auto refuse = [&](const RawTensor& r, const std::string& msg) {
    throw Error(ErrorKind::unsupported, file_of_(r.file), name, msg);
  };
  // `scale_dtype: float8_e8m0fnu`: compress_mx_scale converts the biased exponent (an int32)
  // to that dtype by value, and decompress_mx_scale reads the value back as the exponent
  // (compressors/mx_utils.py), which is not the E8M0 encoding of the MX formats (the stored bits
  // are the biased exponent, as vLLM's kernels read them). The two readings give different
  // weights, and neither is the original: refused, not guessed. U8 scales (the default) are read.
  const bool mx =
      fmt == Format::mxfp4_pack_quantized || fmt == Format::mxfp6_pack_quantized || fmt == Format::mxfp8_quantized;
  if (mx && scale && scale->dtype == DType::F8_E8M0)
    refuse(*scale,
           "weight_scale is stored as F8_E8M0 (scale_dtype float8_e8m0fnu), which compressed-tensors "
           "writes and reads by value (mx_utils.py), not as the E8M0 exponent encoding MX formats define: "
           "the two readings differ, so neither is guessed (U8 scales, the library's default, are read)");
  if (fmt == Format::nvfp4_pack_quantized && scale && (scale->dtype == DType::F16 || scale->dtype == DType::F32))
    refuse(*scale, "nvfp4 weight_scale stored as " + std::string(dtype_name(scale->dtype)) +
                       " (scale_dtype): only F8_E4M3 (the default) and BF16 scales are decoded");
  // A tensor_group FP4 weight is scaled by its global scale (nvfp4/base.py decompress divides by
  // it); without it every value would be off by that factor. (Groups of FP4 under strategy
  // "group" have none: the library then divides by nothing.)
  if (global_scaled(fmt) && strategy == QuantStrategy::tensor_group && !m.get(Role::weight_global_scale))
    fail(*m.get(Role::weight_packed), name,
         std::string(format_name(fmt)) +
             " weight of strategy tensor_group has no 'weight_global_scale' part (its scales are divided by it)");
  const RawTensor* w = m.get(Role::weight);
  if (w && wide_int_codes(w->dtype))
    refuse(*w, std::string(format_name(fmt)) + " weight of " + std::string(dtype_name(w->dtype)) +
                   " codes (INT weights of more than 8 bits): only 8-bit codes (I8 / F8_E4M3) are decoded");
}

TensorInfo Grouper::build(const std::string& p, const Module& m, Format fmt, const SchemeGroup* group,
                          std::set<const RawTensor*>& used) const {
  TensorInfo t;
  t.name = p + ".weight";
  const bool sparse = fmt == Format::sparse_bitmask || fmt == Format::sparse_24_bitmask;
  const RawTensor& main = *(sparse                       ? m.get(Role::compressed)
                            : m.get(Role::weight_packed) ? m.get(Role::weight_packed)
                                                         : m.get(Role::weight));
  const RawTensor* scale = m.get(Role::weight_scale);

  // 1. Quantization arguments (and the final format: the config's group format wins).
  // Sparse values with a weight_scale are sparse-on-quantized (0.12 stacking) when the config also
  // quantizes; without quantization groups the scale is a plain entry of its own, as the library's
  // sparse decompression leaves it.
  t.quantized = !sparse || (scale != nullptr && s_.quantized());
  if (t.quantized) {
    Format cfg_fmt = sparse ? Format::naive_quantized : fmt;
    t.quant = args_for(group, t.name, main, &cfg_fmt);
    if (!sparse) fmt = cfg_fmt;
  }
  t.format = fmt;
  const QuantStrategy cfg_strategy = t.quant.strategy;  // before a format's fixed layout replaces it
  if (t.quantized && !sparse) refuse_undecodable(p, m, fmt, cfg_strategy);

  // 2. The logical shape, from the parts that define it.
  auto packed_shape = [&](uint64_t num, uint64_t den) {
    if (main.shape.size() != 2)
      fail(main, t.name,
           std::string(format_name(fmt)) + " weight_packed must be 2-D, shape is " + shape_str(main.shape));
    if (main.shape[1] % den != 0)
      fail(main, t.name,
           std::string(format_name(fmt)) + " weight_packed width " + std::to_string(main.shape[1]) +
               " is not a multiple of " + std::to_string(den));
    return Shape{main.shape[0], main.shape[1] / den * num};
  };
  const FormatFacts& ff = facts(fmt);
  switch (ff.shape_from) {
    case ShapeFrom::shape_part: {
      const RawTensor* sh = m.get(Role::shape);
      if (!sh) fail(main, t.name, "sparse tensor has no '" + p + ".shape' part");
      t.shape = read_shape(*sh, t.name);
      break;
    }
    case ShapeFrom::weight_shape: {
      const RawTensor* ws = m.get(Role::weight_shape);
      if (!ws) fail(main, t.name, "pack-quantized weight has no weight_shape part");
      t.shape = read_shape(*ws, t.name);
      break;
    }
    case ShapeFrom::marlin_tiles: {
      // [cols/32, rows*bits/2] tiles (marlin_24.py `pack_weight_24`); weight_shape, when
      // present, must agree.
      const unsigned b = t.quant.num_bits;
      if (main.shape.size() != 2 || (b != 4 && b != 8) || (main.shape[1] * 2) % b != 0)
        fail(main, t.name,
             "marlin-24 weight_packed " + shape_str(main.shape) + " does not hold " + std::to_string(b) +
                 "-bit Marlin tiles");
      t.shape = Shape{main.shape[1] * 2 / b, main.shape[0] * 32};
      if (const RawTensor* ws = m.get(Role::weight_shape)) {
        const Shape stated = read_shape(*ws, t.name);
        if (stated != t.shape)
          fail(*ws, t.name,
               "weight_shape " + shape_str(stated) + " disagrees with the " + shape_str(t.shape) +
                   " that weight_packed " + shape_str(main.shape) + " holds");
      }
      break;
    }
    case ShapeFrom::packed_bytes: t.shape = packed_shape(ff.pack_num, ff.pack_den); break;
    case ShapeFrom::main_part: t.shape = main.shape; break;
    case ShapeFrom::stored:  // dense / low-rank: never a config's format (scheme.cpp refuses it)
      fail(main, t.name,
           "config says " + std::string(format_name(fmt)) + ", but the module stores compressed-tensors parts");
  }

  // 3. The pack-quantized bit layout.
  if (t.quantized && fmt == Format::pack_quantized && t.quant.type == QuantType::int_ && t.quant.num_bits >= 1 &&
      t.quant.num_bits <= 8 && !t.shape.empty())
    t.quant.legacy_packing = legacy_packing(t, main);

  // 4. The geometry, and every part against the format's table.
  Why why;
  const auto geo = geometry(fmt, t.shape, t.quantized ? &t.quant : nullptr, why);
  if (!geo) fail(main, t.name, why);
  t.quant = geo->quant;
  std::set<Role> seen;
  // FP4 scales are divided by a global scale under strategy tensor_group only: the library
  // registers weight_global_scale for that strategy alone (lifecycle/initialize.py) and its
  // decompress reads the module's own parameters, so under "group" a stored one is left alone.
  for (const PartRule& rule : part_rules(fmt)) {
    if (sparse && !t.quantized && (rule.role == Role::weight_scale || rule.role == Role::weight_zero_point)) continue;
    if (rule.role == Role::weight_global_scale && cfg_strategy != QuantStrategy::tensor_group) continue;
    const RawTensor* r = m.get(rule.role);
    if (!r) {
      if (rule.required)
        fail(main, t.name,
             std::string(format_name(fmt)) + " tensor has no '" + std::string(role_name(rule.role)) + "' part");
      continue;
    }
    if (Why w = check_part(rule, r->dtype, r->shape, *geo); !w.empty()) {
      if (rule.role == Role::weight_packed && fmt == Format::pack_quantized)
        w += " (" + std::to_string(t.shape.back()) + " columns of " + std::to_string(t.quant.num_bits) +
             "-bit codes, " + (t.quant.legacy_packing ? "<= 0.17" : "0.18+") + " layout)";
      fail(*r, t.name, w);
    }
    t.parts.push_back(
        TensorPart{std::string(role_name(rule.role)), r->key, r->dtype, r->shape, r->file, r->offset, r->nbytes});
    used.insert(r);
  }
  // parts[0] is the main payload.
  std::stable_partition(t.parts.begin(), t.parts.end(), [&](const TensorPart& q) { return q.key == main.key; });

  // 5. Rules across parts, and the dtype the reference decompression returns.
  // Asymmetric group / channel pack-quantized codes need their zero points: the library refuses
  // such a tensor without them ("Asymmetric quant requires zero-point values"), so decoding it
  // with zero points of 0 would be a tensor the reference never produces.
  if (fmt == Format::pack_quantized && !t.quant.symmetric && !m.get(Role::weight_zero_point) &&
      (t.quant.strategy == QuantStrategy::group || t.quant.strategy == QuantStrategy::channel))
    fail(main, t.name,
         "asymmetric " + std::string(strategy_name(t.quant.strategy)) +
             " pack-quantized weight has no weight_zero_point part");
  if (sparse && t.quantized && main.dtype != DType::I8 && main.dtype != DType::F8_E4M3)
    fail(main, t.name,
         "sparse values of a quantized weight must be I8 or F8_E4M3, not " + std::string(dtype_name(main.dtype)));
  t.quant.actorder = t.quantized && !sparse && m.get(Role::weight_g_idx) != nullptr;
  // compressed-tensors stores weight_g_idx for group act-order only; 0.12 applies a stored one,
  // 0.20 ignores it. Under any other actorder the file does not say which: refuse.
  if (t.quant.actorder && !t.quant.actorder_group)
    fail(*m.get(Role::weight_g_idx), t.name,
         "weight_g_idx is stored, but the scheme's actorder is not \"group\" (compressed-tensors writes it "
         "only for group act-order; 0.12 applies one, 0.20 ignores it): which columns use which scales is not said");
  // A symmetric pack-quantized weight has no zero points: the library then leaves a stored one
  // packed and subtracts the packed int32 words (or fails on their shape), a tensor nobody meant.
  if (fmt == Format::pack_quantized && t.quant.symmetric && m.get(Role::weight_zero_point))
    fail(*m.get(Role::weight_zero_point), t.name,
         "a weight_zero_point is stored, but the scheme is symmetric (compressed-tensors neither writes nor unpacks "
         "one then): the file contradicts its config");
  switch (ff.natural) {
    case NaturalDType::scale_or_values: t.dtype = t.quantized ? scale->dtype : main.dtype; break;
    case NaturalDType::scale: t.dtype = scale->dtype; break;
    case NaturalDType::f16: t.dtype = DType::F16; break;
    case NaturalDType::bf16:
    case NaturalDType::stored: t.dtype = DType::BF16; break;
  }
  if (t.quantized && t.quant.type == QuantType::int_ && main.dtype == DType::F8_E4M3) t.quant.type = QuantType::float_;
  return t;
}

// Two readings of the same stored parts that give the same values: same format and arguments
// (the parts, shape and dtype follow from those and the file).
bool same_decode(const TensorInfo& a, const TensorInfo& b) {
  const QuantArgs &x = a.quant, &y = b.quant;
  return a.format == b.format && a.quantized == b.quantized && a.shape == b.shape && a.dtype == b.dtype &&
         a.parts.size() == b.parts.size() &&
         (!a.quantized ||
          (x.num_bits == y.num_bits && x.type == y.type && x.strategy == y.strategy && x.symmetric == y.symmetric &&
           x.group_size == y.group_size && x.block_rows == y.block_rows && x.block_cols == y.block_cols &&
           x.actorder == y.actorder && x.legacy_packing == y.legacy_packing));
}

// A module's tensor under the config group that describes it. Where groups target class names and
// the module's class is not known (no model), every such group is a candidate: one whose scheme
// cannot describe the stored parts (no weight quantization, another format, scales of another
// geometry) drops out; the survivors must agree, or the module is refused naming them. Never the
// alphabetically first class name for every module (compressed-tensors matches classes against
// the model: utils/match.py `match_class`), which decoded Linear weights with an Embedding group.
TensorInfo Grouper::build_module(const std::string& p, const Module& m, Format fmt,
                                 std::set<const RawTensor*>& used) const {
  const bool sparse = fmt == Format::sparse_bitmask || fmt == Format::sparse_24_bitmask;
  if (sparse && !(m.get(Role::weight_scale) && s_.quantized())) return build(p, m, fmt, nullptr, used);
  const GroupMatch gm = match_groups(s_, p, classes_);
  if (!gm.by_unknown_class || gm.groups.size() == 1)
    return build(p, m, fmt, gm.groups.empty() ? nullptr : gm.groups.front(), used);
  struct Fit {
    const SchemeGroup* g;
    TensorInfo t;
    std::set<const RawTensor*> used;
  };
  std::vector<Fit> fits;
  std::optional<Error> first;
  for (const SchemeGroup* g : gm.groups) {
    Fit f{g, {}, {}};
    try {
      f.t = build(p, m, fmt, g, f.used);
      fits.push_back(std::move(f));
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (fits.empty()) throw *first;  // the error of the first candidate in precedence order
  // FP4 parts without a global scale fit a "group" candidate, and would fit a tensor_group one had
  // the scale not been lost (a shard opened alone, a damaged file): which one applies decides
  // whether the scales are divided, so the missing part is not a reason to prefer the other.
  if (global_scaled(fmt) && !m.get(Role::weight_global_scale))
    for (const SchemeGroup* g : gm.groups)
      if (g->weights && g->weights->strategy == QuantStrategy::tensor_group &&
          std::none_of(fits.begin(), fits.end(), [&](const Fit& f) { return f.g == g; }))
        throw Error(ErrorKind::unsupported, file_of_(m.parts.begin()->second->file), p + ".weight",
                    "config group " + g->name +
                        " (module classes) would scale these FP4 weights by a "
                        "weight_global_scale, which is not stored, and another group fits them without one; the "
                        "module's class is not known: pass module classes (OpenOptions::module_classes, "
                        "--module-classes FILE, Python module_classes= / a transformers model)");
  for (const Fit& f : fits)
    if (!same_decode(f.t, fits.front().t)) {
      std::string names;
      for (const Fit& c : fits) {
        std::string cls;
        for (size_t i : s_.group_targets.class_entries())
          if (&s_.groups[s_.target_group[i]] == c.g)
            cls += (cls.empty() ? "" : ", ") + s_.group_targets.targets()[i].text;
        names += (names.empty() ? "" : "; ") + c.g->name + " (" + cls + ")";
      }
      throw Error(ErrorKind::unsupported, file_of_(m.parts.begin()->second->file), p + ".weight",
                  "config groups " + names +
                      " target module classes and each can describe the stored parts, but they decode them "
                      "differently; the module's class is not known: pass module classes (OpenOptions::"
                      "module_classes, --module-classes FILE, Python module_classes= / a transformers model)");
    }
  used.insert(fits.front().used.begin(), fits.front().used.end());
  return std::move(fits.front().t);
}

std::vector<TensorInfo> Grouper::run() {
  std::map<std::string, Module> mods;
  if (s_.present)
    for (const auto& r : raw_)
      for (Role role : kAllRoles)
        if (const auto m = module_of(r.key, role)) mods[*m].parts[role] = &r;
  std::set<const RawTensor*> used;
  std::vector<TensorInfo> out;
  for (const auto& [p, m] : mods)
    if (const auto fmt = classify(p, m)) out.push_back(build_module(p, m, *fmt, used));
  for (const auto& r : raw_) {
    if (used.count(&r)) continue;
    TensorInfo t;
    t.name = r.key;
    t.shape = r.shape;
    t.dtype = r.dtype;
    t.parts.push_back(TensorPart{"weight", r.key, r.dtype, r.shape, r.file, r.offset, r.nbytes});
    out.push_back(std::move(t));
  }
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < out.size(); ++i)
    if (!seen.emplace(out[i].name, i).second)
      throw Error(ErrorKind::corrupt_tensor, file_of_(out[i].parts[0].file), out[i].name,
                  "logical tensor is stored both compressed and as a plain entry");
  return out;
}

}  // namespace

std::optional<std::string> module_of_key(std::string_view key) {
  for (Role role : kAllRoles)
    if (auto m = module_of(key, role)) return m;
  return std::nullopt;
}

std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& config_json,
                                      const std::string& config_file, const SmallReader& read_small,
                                      const std::function<std::string(uint32_t)>& file_of, ConfigUse* use,
                                      const ModuleClasses* classes) {
  const Scheme s = parse_scheme(config_json, config_file);
  if (use) *use = ConfigUse{s.present, s.description};
  return Grouper(raw, s, config_file, read_small, file_of, classes).run();
}

}  // namespace ctstream::format
