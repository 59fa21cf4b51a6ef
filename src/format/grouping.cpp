#include "format/grouping.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "core/checked.hpp"
#include "core/packing.hpp"
#include "ctstream/error.hpp"
#include "format/scheme.hpp"

namespace ctstream::format {
namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Local names of the parts that make up one compressed weight. Sources:
// compressed_tensors/compressors/pack_quantized/base.py (weight_packed, weight_shape,
// weight_scale, weight_zero_point), nvfp4/base.py (weight_global_scale), 0.12
// quantized_compressors (weight_g_idx), sparse_compressors (compressed, bitmask, shape,
// row_offsets: the `.weight` suffix is dropped), marlin_24.py (scale_packed, meta).
constexpr const char* kQuantLocals[] = {"weight_packed", "weight_shape", "weight_scale", "weight_zero_point",
                                        "weight_g_idx", "weight_global_scale", "scale_packed", "meta"};
constexpr const char* kSparseLocals[] = {"compressed", "bitmask", "shape", "row_offsets"};

struct Module {
  std::map<std::string, const RawTensor*> parts;  // local name -> entry
  const RawTensor* get(const std::string& l) const {
    auto it = parts.find(l);
    return it == parts.end() ? nullptr : it->second;
  }
};

class Grouper {
 public:
  Grouper(const std::vector<RawTensor>& raw, const Scheme& s, const std::string& cfg_file, const SmallReader& rd,
          const std::function<std::string(uint32_t)>& file_of)
      : raw_(raw), s_(s), cfg_file_(cfg_file), read_(rd), file_of_(file_of) {}

  std::vector<TensorInfo> run();

 private:
  [[noreturn]] void fail(const RawTensor& r, const std::string& logical, const std::string& msg) const {
    throw Error(ErrorKind::corrupt_tensor, file_of_(r.file), logical, msg);
  }
  Shape read_shape(const RawTensor& r, const std::string& logical) const;
  TensorPart part(const std::string& role, const RawTensor& r) const {
    return TensorPart{role, r.key, r.dtype, r.shape, r.file, r.offset, r.nbytes};
  }
  void add_part(TensorInfo& t, const Module& m, const std::string& local, std::set<const RawTensor*>& used) const {
    if (const RawTensor* r = m.get(local)) {
      t.parts.push_back(part(local, *r));
      used.insert(r);
    }
  }
  QuantArgs args_for(const std::string& module, const TensorInfo& t, const RawTensor& main, Format* fmt) const;
  void check_scales(TensorInfo& t, const Module& m, const RawTensor& main) const;
  TensorInfo sparse_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const;
  TensorInfo packed_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const;
  TensorInfo naive_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const;

  const std::vector<RawTensor>& raw_;
  const Scheme& s_;
  const std::string& cfg_file_;
  const SmallReader& read_;
  const std::function<std::string(uint32_t)>& file_of_;
};

Shape Grouper::read_shape(const RawTensor& r, const std::string& logical) const {
  const auto numel = detail::checked_numel(r.shape).value_or(0);
  if ((r.dtype != DType::I64 && r.dtype != DType::I32) || numel < 1 || numel > 8)
    fail(r, logical, "shape part '" + r.key + "' must be 1..8 integers (I64/I32), got " +
                         std::string(dtype_name(r.dtype)) + " with " + std::to_string(numel) + " elements");
  const auto bytes = read_(r);
  Shape out;
  const size_t esz = r.dtype == DType::I64 ? 8 : 4;
  for (size_t i = 0; i < numel; ++i) {
    int64_t v = 0;
    if (esz == 8) std::memcpy(&v, bytes.data() + 8 * i, 8);
    else {
      int32_t w;
      std::memcpy(&w, bytes.data() + 4 * i, 4);
      v = w;
    }
    if (v < 0) fail(r, logical, "shape part '" + r.key + "' holds a negative dimension " + std::to_string(v));
    out.push_back(static_cast<uint64_t>(v));
  }
  if (!detail::checked_numel(out) || !detail::checked_mul(*detail::checked_numel(out), 64))
    fail(r, logical, "shape part '" + r.key + "' describes a tensor whose size overflows");
  return out;
}

// Quantization args for `module`: its config group's, else inferred from the scale's shape as
// compressed-tensors 0.12 does when args are absent (forward.py `_process_quantization`).
QuantArgs Grouper::args_for(const std::string& module, const TensorInfo& t, const RawTensor& main,
                            Format* fmt) const {
  const SchemeGroup* g = s_.present ? match_group(s_, module) : nullptr;
  if (s_.present && !s_.groups.empty() && (!g || !g->weights))
    fail(main, t.name,
         "stored quantized, but " + (cfg_file_.empty() ? std::string("config.json") : cfg_file_) +
             (g ? " gives its config group no weight quantization" : " has no config group targeting this module (or ignores it)"));
  if (g && g->format) *fmt = *g->format;
  else if (s_.global_format && *s_.global_format != Format::dense && *s_.global_format != Format::sparse_bitmask &&
           *s_.global_format != Format::sparse_24_bitmask)
    *fmt = *s_.global_format;
  if (g) return *g->weights;
  QuantArgs a;  // no config group: check_scales infers the strategy from the scale's shape
  a.num_bits = 8;
  a.strategy = QuantStrategy::token;
  return a;
}

TensorInfo Grouper::sparse_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const {
  TensorInfo t;
  t.name = p + ".weight";
  const RawTensor& values = *m.get("compressed");
  const RawTensor& mask = *m.get("bitmask");
  const RawTensor* shape = m.get("shape");
  if (!shape) fail(values, t.name, "sparse tensor has no '" + p + ".shape' part");
  t.shape = read_shape(*shape, t.name);
  if (t.shape.size() != 2) fail(*shape, t.name, "sparse weights must be 2-D, shape part says " + std::to_string(t.shape.size()) + "-D");
  const uint64_t R = t.shape[0], C = t.shape[1];
  // 2:4 writes `shape` as [2, 1] and values as [R, C/2]; bitmask writes [2] and [nnz].
  const bool is24 = s_.sparse_format ? *s_.sparse_format == Format::sparse_24_bitmask
                                     : (values.shape.size() == 2 || shape->shape.size() == 2);
  t.format = is24 ? Format::sparse_24_bitmask : Format::sparse_bitmask;
  if (mask.dtype != DType::U8 || mask.shape != Shape{R, (C + 7) / 8})
    fail(mask, t.name, "bitmask must be U8 [" + std::to_string(R) + ", " + std::to_string((C + 7) / 8) + "]");
  if (is24) {
    if (C % 4 != 0) fail(values, t.name, "2:4 sparsity needs columns divisible by 4, shape has " + std::to_string(C));
    if (values.shape != Shape{R, C / 2})
      fail(values, t.name, "2:4 values must be [" + std::to_string(R) + ", " + std::to_string(C / 2) + "]");
  } else {
    if (values.shape.size() != 1 || values.shape[0] > R * C)
      fail(values, t.name, "bitmask values must be 1-D with at most rows x cols elements");
    if (const RawTensor* ro = m.get("row_offsets"); ro && (ro->dtype != DType::I64 || ro->shape != Shape{R}))
      fail(*ro, t.name, "row_offsets must be I64 [" + std::to_string(R) + "]");
  }
  t.parts.push_back(part("compressed", values));
  t.parts.push_back(part("bitmask", mask));
  t.parts.push_back(part("shape", *shape));
  used.insert(&values), used.insert(&mask), used.insert(shape);
  if (!is24) add_part(t, m, "row_offsets", used);
  t.dtype = values.dtype;
  if (m.get("weight_scale")) {  // sparse on top of quantized values (0.12 stacking)
    Format qfmt = Format::naive_quantized;
    t.quant = args_for(p, t, values, &qfmt);
    t.quantized = true;
    if (values.dtype != DType::F8_E4M3 && values.dtype != DType::I8)
      fail(values, t.name, "sparse values of a quantized weight must be I8 or F8_E4M3");
    add_part(t, m, "weight_scale", used);
    add_part(t, m, "weight_zero_point", used);
    t.dtype = m.get("weight_scale")->dtype;
    check_scales(t, m, values);
  }
  return t;
}

// Scale / zero-point shapes for strategy (compressed_tensors/quantization/lifecycle/initialize.py
// `initialize_qparams`): tensor [1], channel [R,1], group [R, C/gs], block [ceil(R/bh), ceil(C/bw)].
void Grouper::check_scales(TensorInfo& t, const Module& m, const RawTensor& main) const {
  const RawTensor* sc = m.get("weight_scale");
  if (!sc) fail(main, t.name, "quantized weight has no weight_scale part");
  const uint64_t C = t.shape.back();
  uint64_t rows = 1;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  QuantArgs& q = t.quant;
  if (q.strategy == QuantStrategy::token) {
    // compressed-tensors 0.12 with args=None (forward.py `_process_quantization`): ndim <= 1 or
    // one element -> tensor; [R, 1] -> channel; [R, G] with G | C -> group C/G.
    const uint64_t n = detail::checked_numel(sc->shape).value_or(0);
    if (n == 1) q.strategy = QuantStrategy::tensor;
    else if (sc->shape.size() >= 2 && sc->shape.back() == 1) q.strategy = QuantStrategy::channel;
    else if (sc->shape.size() >= 2 && sc->shape.back() > 0 && C % sc->shape.back() == 0)
      q.strategy = QuantStrategy::group, q.group_size = C / sc->shape.back();
    else fail(*sc, t.name, "no config group describes this weight and its scale shape does not tell the strategy");
  }
  uint64_t sr = 0, sc_cols = 0;
  switch (q.strategy) {
    case QuantStrategy::tensor: sr = 1, sc_cols = 1; break;
    case QuantStrategy::channel: sr = rows, sc_cols = 1; break;
    case QuantStrategy::group:
    case QuantStrategy::tensor_group:
      if (C % q.group_size != 0)
        fail(*sc, t.name, "group_size " + std::to_string(q.group_size) + " does not divide " + std::to_string(C) + " columns");
      sr = rows, sc_cols = C / q.group_size;
      break;
    case QuantStrategy::block:
      if (t.shape.size() != 2) fail(*sc, t.name, "block strategy needs a 2-D weight");
      sr = (rows + q.block_rows - 1) / q.block_rows, sc_cols = (C + q.block_cols - 1) / q.block_cols;
      break;
    default: fail(*sc, t.name, "weight strategy '" + std::string(strategy_name(q.strategy)) + "' is not a weight layout");
  }
  auto numel = detail::checked_numel(sc->shape).value_or(0);
  if (numel != sr * sc_cols || (sc->shape.size() >= 2 && sc->shape.back() != sc_cols))
    fail(*sc, t.name, "weight_scale shape " + [&] {
      std::string s = "[";
      for (size_t i = 0; i < sc->shape.size(); ++i) s += (i ? ", " : "") + std::to_string(sc->shape[i]);
      return s + "]";
    }() + " does not match " + std::string(strategy_name(q.strategy)) + " layout [" + std::to_string(sr) + ", " +
                                  std::to_string(sc_cols) + "]");
  if (const RawTensor* zp = m.get("weight_zero_point"); zp && zp->dtype != DType::I32) {
    if (detail::checked_numel(zp->shape).value_or(0) != sr * sc_cols)
      fail(*zp, t.name, "weight_zero_point must have one entry per scale (" + std::to_string(sr * sc_cols) + ")");
  }
}

TensorInfo Grouper::packed_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const {
  TensorInfo t;
  t.name = p + ".weight";
  const RawTensor& packed = *m.get("weight_packed");
  t.parts.push_back(part("weight_packed", packed));
  used.insert(&packed);
  for (const char* l : {"weight_scale", "weight_zero_point", "weight_global_scale", "weight_g_idx", "weight_shape",
                        "scale_packed", "meta"})
    add_part(t, m, l, used);
  t.quantized = true;
  const RawTensor* sc = m.get("weight_scale");
  // Which packed format: the config's, else what the parts say.
  Format fmt = packed.dtype == DType::I32 ? Format::pack_quantized
               : m.get("weight_global_scale")                       ? Format::nvfp4_pack_quantized
                                                                    : Format::mxfp4_pack_quantized;
  if (fmt == Format::mxfp4_pack_quantized && sc && sc->shape.size() == 2 && packed.shape.size() == 2 &&
      sc->shape[1] * 32 != packed.shape[1] * 2 && packed.shape[1] % 3 == 0 && sc->shape[1] * 32 == packed.shape[1] / 3 * 4)
    fmt = Format::mxfp6_pack_quantized;  // 4 codes per 3 bytes
  if (m.get("scale_packed") && m.get("meta")) fmt = Format::marlin_24;
  t.quant = args_for(p, t, packed, &fmt);
  t.format = fmt;
  if (fmt == Format::marlin_24) {  // recognised, passed through packed (no decoder exists anywhere)
    const RawTensor* ws = m.get("weight_shape");
    t.shape = ws ? read_shape(*ws, t.name) : packed.shape;
    t.dtype = m.get("scale_packed")->dtype;
    return t;
  }
  if (packed.shape.size() < 2) fail(packed, t.name, "weight_packed must be at least 2-D");
  const uint64_t R = packed.shape[0], W = packed.shape.back();
  if (fmt == Format::pack_quantized) {
    if (packed.dtype != DType::I32) fail(packed, t.name, "pack-quantized weight_packed must be I32");
    const RawTensor* ws = m.get("weight_shape");
    if (!ws) fail(packed, t.name, "pack-quantized weight has no weight_shape part");
    t.shape = read_shape(*ws, t.name);
    if (t.quant.type != QuantType::int_ || t.quant.num_bits < 1 || t.quant.num_bits > 8)
      fail(packed, t.name, "pack-quantized needs int weights of 1..8 bits");
    const unsigned b = t.quant.num_bits;
    const uint64_t C = t.shape.back();
    const uint64_t dense_w = detail::packed_words(C, b, true), old_w = detail::packed_words(C, b, false);
    bool legacy = false;
    if (dense_w != old_w || (b != 1 && b != 2 && b != 4 && b != 8)) {
      if (s_.dense_packing) legacy = !*s_.dense_packing;
      else legacy = W == old_w && W != dense_w ? true : W == dense_w && W != old_w ? false : true;
    }
    t.quant.legacy_packing = legacy && !(b == 1 || b == 2 || b == 4 || b == 8);
    const uint64_t want_w = legacy ? old_w : dense_w;
    Shape want = t.shape;
    want.back() = want_w;
    if (packed.shape != want)
      fail(packed, t.name, "weight_packed shape does not hold " + std::to_string(C) + " columns of " +
                               std::to_string(b) + "-bit codes (" + (legacy ? "<= 0.17" : "0.18+") +
                               " layout needs " + std::to_string(want_w) + " words per row)");
    t.quant.actorder = m.get("weight_g_idx") != nullptr;
    if (const RawTensor* gi = m.get("weight_g_idx"); gi && (gi->dtype != DType::I32 || gi->shape != Shape{C}))
      fail(*gi, t.name, "weight_g_idx must be I32 [" + std::to_string(C) + "]");
  } else {
    if (packed.dtype != DType::U8) fail(packed, t.name, std::string(format_name(fmt)) + " weight_packed must be U8");
    if (packed.shape.size() != 2) fail(packed, t.name, "weight_packed must be 2-D");
    if (fmt == Format::mxfp6_pack_quantized) {
      if (W % 3) fail(packed, t.name, "mxfp6 packs 4 codes in 3 bytes: width must be a multiple of 3");
      t.shape = {R, W / 3 * 4};
    } else if (fmt == Format::nvfp4_pack_quantized || fmt == Format::mxfp4_pack_quantized) {
      t.shape = {R, W * 2};
    } else {
      fail(packed, t.name, "format " + std::string(format_name(fmt)) + " does not store weight_packed");
    }
    // Fixed layouts whatever the config says (nvfp4: group 16, mx: group 32).
    t.quant.num_bits = fmt == Format::mxfp6_pack_quantized ? 6 : 4;
    t.quant.type = QuantType::float_;
    t.quant.strategy = QuantStrategy::group;
    t.quant.group_size = fmt == Format::nvfp4_pack_quantized ? 16 : 32;
    t.quant.symmetric = true;
    if (fmt == Format::nvfp4_pack_quantized) {
      t.quant.strategy = QuantStrategy::tensor_group;
      const RawTensor* gs = m.get("weight_global_scale");
      if (!gs || gs->dtype != DType::F32 || detail::checked_numel(gs->shape).value_or(0) != 1)
        fail(packed, t.name, "nvfp4 needs weight_global_scale F32 [1]");
      if (!sc || sc->dtype != DType::F8_E4M3) fail(packed, t.name, "nvfp4 weight_scale must be F8_E4M3");
    } else if (!sc || sc->dtype != DType::U8) {
      fail(packed, t.name, "mx weight_scale must be U8 (E8M0)");
    }
  }
  // Reference output dtype: the scale's (pack-quantized); always bf16 for nvfp4 and mx formats
  // (nvfp4/base.py and mx_utils.py decompress to bfloat16).
  t.dtype = fmt == Format::pack_quantized ? sc ? sc->dtype : DType::BF16 : DType::BF16;
  if (fmt == Format::pack_quantized && sc && !is_float_output(sc->dtype))
    fail(*sc, t.name, "pack-quantized weight_scale must be BF16, F16 or F32");
  check_scales(t, m, packed);
  if (const RawTensor* zp = m.get("weight_zero_point"); zp && zp->dtype == DType::I32 && fmt == Format::pack_quantized) {
    // Packed along rows: [words over R rows, scale columns] (pack_to_int32(packed_dim=0)).
    const uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 0;
    const uint64_t G = sc->shape.back();
    const uint64_t zw = detail::packed_words(rows, t.quant.num_bits, !t.quant.legacy_packing);
    if (zp->shape != Shape{zw, G})
      fail(*zp, t.name, "packed weight_zero_point must be I32 [" + std::to_string(zw) + ", " + std::to_string(G) + "]");
  }
  return t;
}

TensorInfo Grouper::naive_tensor(const std::string& p, const Module& m, std::set<const RawTensor*>& used) const {
  TensorInfo t;
  t.name = p + ".weight";
  const RawTensor& w = *m.get("weight");
  t.shape = w.shape;
  t.parts.push_back(part("weight", w));
  used.insert(&w);
  add_part(t, m, "weight_scale", used);
  add_part(t, m, "weight_zero_point", used);
  add_part(t, m, "weight_global_scale", used);
  t.quantized = true;
  const RawTensor* sc = m.get("weight_scale");
  Format fmt = sc->dtype == DType::U8 ? Format::mxfp8_quantized
               : w.dtype == DType::F8_E4M3 ? Format::float_quantized
                                           : Format::naive_quantized;
  t.quant = args_for(p, t, w, &fmt);
  t.format = fmt;
  if (t.shape.empty()) fail(w, t.name, "a quantized weight cannot be a scalar");
  if (fmt == Format::mxfp8_quantized) {
    t.quant.strategy = QuantStrategy::group;
    t.quant.group_size = 32;
    t.dtype = DType::BF16;  // mx formats decompress to bfloat16
  } else {
    if (!is_float_output(sc->dtype)) fail(*sc, t.name, "weight_scale must be BF16, F16 or F32");
    t.dtype = sc->dtype;
  }
  if (w.dtype == DType::F8_E4M3) t.quant.type = QuantType::float_;
  check_scales(t, m, w);
  return t;
}

std::vector<TensorInfo> Grouper::run() {
  // Module -> parts, by local-name suffix.
  std::map<std::string, Module> mods;
  for (const auto& r : raw_) {
    for (const char* l : kQuantLocals)
      if (ends_with(r.key, std::string(".") + l)) mods[r.key.substr(0, r.key.size() - std::strlen(l) - 1)].parts[l] = &r;
    for (const char* l : kSparseLocals)
      if (ends_with(r.key, std::string(".") + l)) mods[r.key.substr(0, r.key.size() - std::strlen(l) - 1)].parts[l] = &r;
    if (ends_with(r.key, ".weight")) mods[r.key.substr(0, r.key.size() - 7)].parts["weight"] = &r;
  }
  std::set<const RawTensor*> used;
  std::vector<TensorInfo> out;
  for (const auto& [p, m] : mods) {
    // Parts that only make sense together: an incomplete set is a damaged checkpoint, not a
    // bunch of dense tensors to pass through.
    const bool sparse_any = m.get("compressed") || m.get("bitmask") || m.get("row_offsets");
    if (sparse_any && !(m.get("compressed") && m.get("bitmask"))) {
      const RawTensor& r = *(m.get("compressed") ? m.get("compressed") : m.get("bitmask") ? m.get("bitmask") : m.get("row_offsets"));
      fail(r, p + ".weight", std::string("incomplete sparse tensor: '") + p + (m.get("compressed") ? ".bitmask" : ".compressed") + "' is missing");
    }
    if (const RawTensor* ws = m.get("weight_shape"); ws && !m.get("weight_packed"))
      fail(*ws, p + ".weight", "weight_shape without weight_packed: the packed weight is missing");
    if (m.get("compressed") && m.get("bitmask")) {
      out.push_back(sparse_tensor(p, m, used));
    } else if (m.get("weight_packed")) {
      out.push_back(packed_tensor(p, m, used));
    } else if (const RawTensor* w = m.get("weight"); w && m.get("weight_scale") &&
                                                     (w->dtype == DType::I8 || w->dtype == DType::F8_E4M3)) {
      out.push_back(naive_tensor(p, m, used));
    }
  }
  for (const auto& r : raw_) {
    if (used.count(&r)) continue;
    TensorInfo t;
    t.name = r.key;
    t.shape = r.shape;
    t.dtype = r.dtype;
    t.parts.push_back(part("weight", r));
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

std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& config_json,
                                      const std::string& config_file, const SmallReader& read_small,
                                      const std::function<std::string(uint32_t)>& file_of) {
  const Scheme s = parse_scheme(config_json, config_file);
  return Grouper(raw, s, config_file, read_small, file_of).run();
}

}  // namespace ctstream::format
