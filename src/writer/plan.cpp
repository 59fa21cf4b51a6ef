#include "writer/plan.hpp"
#include "writer/quantize.hpp"
#include "writer/svd.hpp"

#include <cstring>
#include <map>
#include <set>

#include "ctstream/error.hpp"
#include "format/config_writer.hpp"
#include "format/grouping.hpp"
#include "format/json.hpp"

namespace ctstream::writer {
namespace {

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
std::string last_component(const std::string& module) {
  const auto dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}
bool embedding_like(const std::string& module) {
  const std::string last = lower(last_component(module));
  return last.find("embed") != std::string::npos || last == "wte" || last == "wpe";
}
bool head_like(const std::string& module) {
  const std::string last = last_component(module);
  return last == "lm_head" || last == "embed_out";
}
/// "Linear" heuristic: a 2-D `.weight` that is neither an embedding, a norm nor the output head.
bool linear_like(const std::string& module, const TensorInfo& t) {
  if (t.shape.size() != 2 || !ends_with(t.name, ".weight")) return false;
  return !embedding_like(module) && !head_like(module) && lower(module).find("norm") == std::string::npos;
}

}  // namespace

bool is_quantized_format(Format f) { return format::quantized_format(f); }

bool is_sparse_format(Format f) { return f == Format::sparse_bitmask || f == Format::sparse_24_bitmask; }

Resolved resolve(const CompressOptions& o) {
  Resolved r;
  r.format = o.format;
  auto bad = [](const std::string& m) { fail(ErrorKind::invalid_argument, "", "", m); };
  const std::string fname(format_name(o.format));
  // Every format converts to (or quantizes in) the chosen dtype: a float one.
  if (o.dtype && !is_float_output(*o.dtype))
    bad("dtype must be bfloat16, float16 or float32; got '" + std::string(dtype_name(*o.dtype)) + "'");
  switch (o.format) {
    case Format::dense: r.scheme = o.dtype ? "dense " + std::string(dtype_name(*o.dtype)) : "dense copy"; return r;
    case Format::low_rank:
      // energy first: a NaN or negative one is not "unset" (it is neither > 0 nor 0)
      if (o.energy != 0 && !(o.energy > 0 && o.energy <= 1.0))
        bad("low-rank: energy must be a fraction in (0, 1]; got " + std::to_string(o.energy));
      if ((o.rank > 0) == (o.energy > 0)) bad("low-rank: give exactly one of rank and energy");
      r.rank = o.rank;
      r.energy = o.energy;
      r.scheme = o.rank ? "rank " + std::to_string(o.rank) : "energy " + std::to_string(o.energy);
      return r;
    case Format::sparse_bitmask: r.scheme = "bitmask"; return r;
    case Format::sparse_24_bitmask: r.scheme = "2:4"; return r;
    case Format::pack_quantized:
    case Format::int_quantized:
      r.args.type = QuantType::int_;
      r.args.num_bits = o.num_bits ? o.num_bits : (o.format == Format::pack_quantized ? 4 : 8);
      r.args.strategy =
          o.strategy.value_or(o.format == Format::pack_quantized ? QuantStrategy::group : QuantStrategy::channel);
      if (r.args.num_bits < 1 || r.args.num_bits > 8) bad(fname + ": bits must be 1..8");
      break;
    case Format::float_quantized:
      r.args.type = QuantType::float_;
      r.args.num_bits = o.num_bits ? o.num_bits : 8;
      r.args.strategy = o.strategy.value_or(QuantStrategy::channel);
      if (r.args.num_bits != 8) bad("float-quantized: only 8-bit (FP8 E4M3) weights");
      break;
    case Format::nvfp4_pack_quantized:
      r.args.type = QuantType::float_;
      r.args.num_bits = o.num_bits ? o.num_bits : 4;
      r.args.strategy = o.strategy.value_or(QuantStrategy::tensor_group);
      if (r.args.num_bits != 4) bad("nvfp4-pack-quantized: weights are 4-bit FP4");
      if (r.args.strategy != QuantStrategy::tensor_group)
        bad("nvfp4-pack-quantized: strategy is tensor_group (group 16)");
      break;
    case Format::mxfp4_pack_quantized:
    case Format::mxfp8_quantized: {  // the MXFP4A16 / MXFP8A16 presets (ct20 quant_scheme.py)
      const unsigned bits = o.format == Format::mxfp8_quantized ? 8 : 4;
      r.args.type = QuantType::float_;
      r.args.num_bits = o.num_bits ? o.num_bits : bits;
      r.args.strategy = o.strategy.value_or(QuantStrategy::group);
      if (r.args.num_bits != bits) bad(fname + ": weights are " + std::to_string(bits) + "-bit");
      if (r.args.strategy != QuantStrategy::group) bad(fname + ": strategy is group (32, E8M0 scales)");
      break;
    }
    default:
      fail(ErrorKind::unsupported, "", "",
           "the writer cannot produce format '" + fname + "' (supported: " + writer_format_names() + ")");
  }
  auto& a = r.args;
  a.symmetric = o.symmetric;
  if (!a.symmetric && a.type == QuantType::float_)
    bad(fname +
        ": asymmetric quantization is only supported for INT weights (compressed-tensors "
        "raises for FP4 and has no asymmetric FP8 kernels)");
  // A size the strategy does not read is refused, not ignored (what the caller asked for would
  // not be what is written).
  if (o.group_size && a.strategy != QuantStrategy::group)
    bad(fname + ": a group size applies to the group strategy, not '" + std::string(strategy_name(a.strategy)) + "'" +
        (a.strategy == QuantStrategy::tensor_group ? " (nvfp4 groups are 16)" : ""));
  if ((o.block_rows || o.block_cols) && a.strategy != QuantStrategy::block)
    bad(fname + ": block dimensions apply to the block strategy, not '" + std::string(strategy_name(a.strategy)) + "'");
  switch (a.strategy) {
    case QuantStrategy::tensor:
    case QuantStrategy::channel: break;
    case QuantStrategy::group:
      if (o.group_size == 0u) bad("group size must be positive");
      // MX scales are per 32 values: the library takes E8M0 scales only with group_size 32.
      if (scale_form(o.format) == ScaleForm::e8m0) {
        if (o.group_size && *o.group_size != 32)
          bad(fname + ": groups are 32 values (E8M0 scales); got group size " + std::to_string(*o.group_size));
        a.group_size = 32;
      } else {
        a.group_size = o.group_size.value_or(128);
      }
      break;
    case QuantStrategy::tensor_group:
      if (o.format != Format::nvfp4_pack_quantized) bad("tensor_group strategy is nvfp4 only");
      a.group_size = 16;
      break;
    case QuantStrategy::block:
      if (o.block_rows == 0u || o.block_cols == 0u) bad("block dimensions must be positive");
      if (o.format == Format::pack_quantized) bad("pack-quantized: block strategy is not supported (use group)");
      a.block_rows = o.block_rows.value_or(128);
      a.block_cols = o.block_cols.value_or(128);
      break;
    default: bad(fname + ": strategy '" + std::string(strategy_name(a.strategy)) + "' cannot quantize weights");
  }
  r.activations = (o.format == Format::int_quantized || o.format == Format::float_quantized) && o.input_activations;
  std::string s = (a.type == QuantType::int_ ? "int" : "fp") + std::to_string(a.num_bits) + " " +
                  std::string(strategy_name(a.strategy));
  if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group)
    s += std::to_string(a.group_size);
  if (a.strategy == QuantStrategy::block) s += std::to_string(a.block_rows) + "x" + std::to_string(a.block_cols);
  s += a.symmetric ? " sym" : " asym";
  r.scheme = s;
  return r;
}

Selector::Selector(const std::vector<std::string>& entries, const char* what, const Classes& classes)
    : classes_(classes) {
  for (const auto& s : entries)
    if (s.empty()) fail(ErrorKind::invalid_argument, "", "", std::string(what) + " entry is empty");
  list_ = format::TargetList::parse(entries, ErrorKind::invalid_argument, "", what);
  if (!classes.empty()) return;
  for (const auto& t : list_.targets())
    if (t.kind == format::Target::Kind::class_name && t.text != "Linear" && t.text != "Embedding")
      fail(ErrorKind::unsupported, "", "",
           std::string(what) + " class '" + t.text +
               "' cannot be matched without the model; use module names or re: patterns (\"Linear\" and "
               "\"Embedding\" are matched by name heuristics)");
}

bool Selector::matches(const std::string& module, const TensorInfo& t) const {
  return list_.matches(
      module, format::TargetList::Classes::of([&](const std::string& cls) {
        if (!classes_.empty()) {  // the model is known: its classes, as compressed-tensors matches them
          const auto f = classes_.find(module);
          if (f == classes_.end()) return false;
          bool is = false;
          for (const auto& c : f->second) is = is || c == cls || (cls == "Linear" && c == "LinearBase");
          return is && !(cls == "Linear" && head_like(module));
        }
        if (cls == "Linear") return linear_like(module, t);
        if (cls == "Embedding") return t.shape.size() == 2 && embedding_like(module);
        return false;
      }));
}

namespace {
uint64_t bytes_of(DType d, const Shape& s) {
  uint64_t n = 1;
  for (auto v : s) n *= v;
  return (n * dtype_bits(d) + 7) / 8;
}
}  // namespace

namespace {
/// The output keys an item will be written under, known before scan(): the parts' names do
/// not depend on what scan() measures (sparse nnz, low-rank energy only change shapes).
std::vector<std::string> planned_keys(const Item& it, const Resolved& r) {
  if (!it.compress) return {it.out.front().key};
  if (r.format == Format::low_rank) return {it.module + ".0.weight", it.module + ".1.weight"};
  const QuantArgs& q = r.args;
  format::Why why;
  const auto g = format::geometry(r.format, it.t->shape, is_quantized_format(r.format) ? &q : nullptr, why);
  std::vector<std::string> keys;
  if (g)
    for (const auto& p : format::plan_parts(*g, it.work, 0))
      keys.push_back(it.module + "." + std::string(format::role_name(p.role)));
  return keys;
}

/// Refuses a plan whose output names collide, before anything is read or written: two tensors
/// written under one key (an input `X.weight_scale` beside a quantized `X.weight`, an input
/// `m.1.bias` beside the bias a low-rank `m` moves there), or a key the reader would take for
/// a part of a compressed module (`X.weight_zero_point` beside a symmetric `X`, `m.0.*` /
/// `m.1.*` beside a low-rank `m`).
void check_output_keys(const Plan& plan, const Resolved& r, const std::set<std::string>& compressed_modules,
                       const std::function<std::string(size_t)>& origin) {
  std::map<std::string, const Item*> owner;
  const auto what = [](const Item& it) {
    return it.compress ? "the compressed parts of " + it.t->name : "the input tensor " + it.t->name;
  };
  for (const Item& it : plan.items)
    for (const std::string& key : planned_keys(it, r)) {
      const auto [f, fresh] = owner.emplace(key, &it);
      if (!fresh)
        fail(ErrorKind::invalid_argument, origin(it.index), it.t->name,
             "output tensor '" + key + "' would be written twice: for " + what(*f->second) + " and for " + what(it) +
                 "; rename or drop one of the input tensors, or leave the module out (--ignore / ignore=)");
    }
  // A key inside another compressed module's namespace (its own parts and a moved bias aside).
  for (const auto& [key, owner_it] : owner) {
    const Item& it = *owner_it;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
      const std::string module = key.substr(0, dot), rest = key.substr(dot + 1);
      if (!compressed_modules.count(module) || (it.compress && module == it.module)) continue;
      if (!it.compress && r.format == Format::low_rank && rest == "1.bias" && it.t->name == module + ".bias")
        continue;  // the module's own bias, moved to its second factor
      const bool part = r.format == Format::low_rank ? rest.rfind("0.", 0) == 0 || rest.rfind("1.", 0) == 0
                                                     : format::role_from_name(rest).has_value();
      if (part)
        fail(ErrorKind::invalid_argument, origin(it.index), it.t->name,
             "output tensor '" + key + "' (" + what(it) + ") is named like a part of the compressed module '" + module +
                 "', and a reader would take it for one; rename the input tensor, or leave '" + module +
                 "' out (--ignore / ignore=)");
    }
  }
}
}  // namespace

Plan make_plan(std::span<const TensorInfo> tensors, const CompressOptions& o, const Resolved& r,
               const Selector::Classes& classes, const std::map<std::string, std::string>& convs,
               const std::function<std::string(size_t)>& origin) {
  const Selector targets(o.targets.empty() ? std::vector<std::string>{"Linear"} : o.targets, "targets", classes);
  const Selector ignore(o.ignore, "ignore", classes);
  Plan plan;
  std::set<std::string> compressed_modules;
  const QuantArgs& q = r.args;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    Item it;
    it.t = &t;
    it.index = i;
    it.work = t.dtype;
    if (o.dtype && is_float_output(t.dtype)) {
      it.work = *o.dtype;
      it.convert = it.work != t.dtype;
    }
    plan.input_bytes += t.stored_bytes();
    const std::string module = ends_with(t.name, ".weight") ? t.name.substr(0, t.name.size() - 7) : "";
    const auto conv = r.format == Format::low_rank && t.shape.size() == 4 ? convs.find(module) : convs.end();
    if (r.format != Format::dense && (t.shape.size() == 2 || conv != convs.end()) && !module.empty() && t.numel() > 0) {
      it.module = module;
      if (targets.matches(it.module, t) && !ignore.matches(it.module, t)) {
        it.compress = true;
        const std::string fname(format_name(r.format));
        if (!is_float_output(it.work))
          fail(ErrorKind::unsupported, origin(i), t.name,
               "dtype " + std::string(dtype_name(t.dtype)) + " cannot be stored as " + fname +
                   " (needs F32, F16 or BF16 weights); leave the module out (--ignore / ignore=)");
        if (r.format == Format::low_rank) {
          // Decomposed only where the factors hold fewer values than the weight (ptdeco's rule);
          // a conv as [out, in * kh * kw], and only an ungrouped one.
          const uint64_t useful = max_useful_rank(t.shape[0], t.numel() / t.shape[0]);
          it.rank = r.rank;
          it.compress = useful > 0 && r.rank <= useful;
          if (conv != convs.end()) {
            const auto attrs = format::parse_json(conv->second, ErrorKind::invalid_argument, origin(i),
                                                  "attributes of conv " + module);
            const auto g = attrs.find("groups");
            if (g != attrs.end() && !(g->is_number_integer() && g->get<int64_t>() == 1)) it.compress = false;
            nlohmann::json keep = nlohmann::json::object();
            for (const char* k : {"stride", "padding", "dilation", "padding_mode"})
              if (auto f = attrs.find(k); f != attrs.end()) keep[k] = *f;
            it.conv_attrs = keep.dump();
          }
        } else {
          // The format table decides what the format can hold, exactly as the reader will.
          format::Why why;
          if (!format::geometry(r.format, t.shape, is_quantized_format(r.format) ? &q : nullptr, why))
            fail(ErrorKind::invalid_argument, origin(i), t.name,
                 fname + " cannot store this weight: " + why +
                     "; choose other arguments, or leave the module out (--ignore / ignore=)");
        }
        if (it.compress) compressed_modules.insert(it.module);
      }
    }
    if (!it.compress) it.out.push_back({t.name, it.work, t.shape, bytes_of(it.work, t.shape)});
    plan.items.push_back(std::move(it));
  }
  if (r.format == Format::low_rank)  // the module's bias moves to its second factor
    for (Item& it : plan.items)
      if (!it.compress && ends_with(it.t->name, ".bias") &&
          compressed_modules.count(it.t->name.substr(0, it.t->name.size() - 5)))
        it.out.front().key = it.t->name.substr(0, it.t->name.size() - 5) + ".1.bias";
  check_output_keys(plan, r, compressed_modules, origin);
  if (r.format != Format::dense && compressed_modules.empty())
    fail(ErrorKind::invalid_argument, tensors.empty() ? "" : origin(0), "",
         "no tensor matches the targets (2-D `.weight` tensors of modules matched by --targets and not by --ignore); "
         "nothing to compress");
  // Config `ignore`: the user's patterns, plus every module holding an uncompressed `.weight`
  // (so that no loader - class-based or the library's name-based model-free converter - takes
  // it for a quantized one). Modules ending in "norm" are skipped: never Linear, and the
  // library's name matching skips them itself (utils/match.py `match_quantizable_tensors`).
  plan.config_ignore = o.ignore;
  std::set<std::string> seen(o.ignore.begin(), o.ignore.end());
  for (const Item& it : plan.items) {
    const TensorInfo& t = *it.t;
    if (!ends_with(t.name, ".weight")) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    if (compressed_modules.count(module) || ends_with(module, "norm") || ignore.matches(module, t)) continue;
    if (seen.insert(module).second) plan.config_ignore.push_back(module);
  }
  return plan;
}

namespace {
format::LowRankModule low_rank_module(const Item& it) {
  format::LowRankModule m;
  m.name = it.module;
  const Shape& s = it.t->shape;
  m.out = s.at(0);
  m.in = s.at(1);
  m.rank = it.rank;
  if (s.size() == 4) {
    m.kind = format::LowRankModule::Kind::conv2d;
    m.kh = s[2];
    m.kw = s[3];
    m.conv_attrs = it.conv_attrs;
  }
  return m;
}
}  // namespace

std::vector<format::LowRankModule> low_rank_modules(const Plan& plan) {
  std::set<std::string> biases;
  for (const Item& it : plan.items)
    if (!it.compress && ends_with(it.t->name, ".bias")) biases.insert(it.t->name.substr(0, it.t->name.size() - 5));
  std::vector<format::LowRankModule> mods;
  for (const Item& it : plan.items) {
    if (!it.compress) continue;
    format::LowRankModule m = low_rank_module(it);
    m.bias = biases.count(it.module) > 0;
    mods.push_back(std::move(m));
  }
  return mods;
}

void plan_parts(Item& it, const Resolved& r) {
  if (r.format == Format::low_rank) {
    const format::LowRankModule m = low_rank_module(it);
    it.out = {{m.a_key(), it.work, m.a_shape(), bytes_of(it.work, m.a_shape())},
              {m.b_key(), it.work, m.b_shape(), bytes_of(it.work, m.b_shape())}};
    return;
  }
  const QuantArgs& q = r.args;
  format::Why why;
  const auto g = format::geometry(r.format, it.t->shape, is_quantized_format(r.format) ? &q : nullptr, why);
  if (!g) fail(ErrorKind::internal, "", it.t->name, "planned tensor has no geometry: " + why);
  it.out.clear();
  for (const auto& p : format::plan_parts(*g, it.work, it.nnz))
    it.out.push_back({it.module + "." + std::string(format::role_name(p.role)), p.dtype, p.shape,
                      bytes_of(p.dtype, p.shape), p.role});
}

void check_plan(const Plan& plan, const Resolved& r, const std::string& config_text) {
  // The planned entries as the reader would see them (offsets are irrelevant to grouping), with
  // the shape vectors' contents as the encoders will write them.
  std::vector<format::RawTensor> raw;
  std::map<std::string, std::vector<int64_t>> shapes;
  uint64_t off = 0;
  for (const Item& it : plan.items)
    for (const OutEntry& e : it.out) {
      raw.push_back({e.key, e.dtype, e.shape, 0, off, e.bytes});
      off += e.bytes;
      if (it.compress && (e.role == format::Role::weight_shape || e.role == format::Role::shape))
        shapes[e.key] = std::vector<int64_t>(it.t->shape.begin(), it.t->shape.end());
    }
  const auto read_small = [&](const format::RawTensor& t) {
    const auto& v = shapes.at(t.key);
    std::vector<std::byte> b(v.size() * 8);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::vector<TensorInfo> got;
  try {
    got = format::group_tensors(raw, config_text, "config.json (planned)", read_small,
                                [](uint32_t) { return std::string("(planned)"); });
    if (r.format == Format::low_rank)
      format::merge_low_rank(got, low_rank_modules(plan), "decompose_config.json (planned)");
  } catch (const Error& e) {
    throw Error(ErrorKind::internal, e.file(), e.tensor(),
                std::string("the writer planned a checkpoint its own reader refuses (please report): ") + e.what());
  }
  std::map<std::string, const TensorInfo*> by_name;
  for (const auto& t : got) by_name[t.name] = &t;
  for (const Item& it : plan.items) {
    if (!it.compress) continue;
    auto f = by_name.find(it.t->name);
    if (f == by_name.end() || f->second->format != r.format || f->second->shape != it.t->shape)
      throw Error(ErrorKind::internal, "(planned)", it.t->name,
                  "the writer planned parts its own reader would not read back as " +
                      std::string(format_name(r.format)) + " of the input's shape (please report)");
  }
}

}  // namespace ctstream::writer
