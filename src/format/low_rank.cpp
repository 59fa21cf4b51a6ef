#include "format/low_rank.hpp"

#include <algorithm>
#include <unordered_map>

#include "core/checked.hpp"
#include "ctstream/error.hpp"
#include "format/json.hpp"

namespace ctstream::format {
namespace {

using json = nlohmann::json;
using Kind = LowRankModule::Kind;

// Dimensions above this are refused: no real layer comes close, and every product of three of
// them fits in 64 bits.
constexpr uint64_t kMaxDim = uint64_t{1} << 20;

[[noreturn]] void bad(ErrorKind k, const std::string& file, const std::string& module, const std::string& msg) {
  throw Error(k, file, module, msg);
}

const json& field(const json& j, const char* key, const std::string& file, const std::string& module) {
  auto it = j.find(key);
  if (it == j.end()) bad(ErrorKind::invalid_config, file, module, std::string("has no \"") + key + "\"");
  return *it;
}

uint64_t dim(const json& j, const char* key, const std::string& file, const std::string& module) {
  const json& v = field(j, key, file, module);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<uint64_t>() > kMaxDim)
    bad(ErrorKind::invalid_config, file, module,
        std::string("\"") + key + "\" must be an integer in [1, " + std::to_string(kMaxDim) + "], got " + v.dump());
  return v.get<uint64_t>();
}

bool flag(const json& j, const char* key, const std::string& file, const std::string& module) {
  const json& v = field(j, key, file, module);
  if (!v.is_boolean()) bad(ErrorKind::invalid_config, file, module, std::string("\"") + key + "\" must be a boolean");
  return v.get<bool>();
}

/// A pair [a, b] of integers (torch stores kernel_size / stride / padding / dilation as tuples).
std::pair<int64_t, int64_t> pair(const json& j, const char* key, const std::string& file, const std::string& module) {
  const json& v = field(j, key, file, module);
  if (v.is_number_integer()) return {v.get<int64_t>(), v.get<int64_t>()};
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    bad(ErrorKind::invalid_config, file, module,
        std::string("\"") + key + "\" must be a pair of integers, got " + v.dump());
  return {v[0].get<int64_t>(), v[1].get<int64_t>()};
}

std::string type_of(const json& j, const std::string& file, const std::string& module) {
  const json& t = field(j, "type", file, module);
  if (!t.is_string()) bad(ErrorKind::invalid_config, file, module, "\"type\" must be a string");
  return t.get<std::string>();
}

LowRankModule parse_module(const std::string& name, const json& cfg, const std::string& file) {
  if (!cfg.is_object()) bad(ErrorKind::invalid_config, file, name, "module entry must be an object");
  const std::string type = type_of(cfg, file, name);
  if (type != "Sequential")
    bad(ErrorKind::unsupported, file, name,
        "replaced by a " + type + "; ctstream reads two-factor Sequential decompositions (ptdeco falor/dwain)");
  const json& mods = field(cfg, "modules", file, name);
  if (!mods.is_object()) bad(ErrorKind::invalid_config, file, name, "\"modules\" must be an object");
  std::vector<std::string> keys;
  for (auto it = mods.begin(); it != mods.end(); ++it) keys.push_back(it.key());
  if (keys != std::vector<std::string>{"0", "1"})
    bad(ErrorKind::unsupported, file, name,
        "a Sequential of " + std::to_string(keys.size()) +
            " modules other than {\"0\", \"1\"}; ctstream reads two-factor decompositions");
  const json& a = mods.at("0");
  const json& b = mods.at("1");
  if (!a.is_object() || !b.is_object()) bad(ErrorKind::invalid_config, file, name, "factor entries must be objects");
  const std::string ta = type_of(a, file, name + ".0"), tb = type_of(b, file, name + ".1");
  LowRankModule m;
  m.name = name;
  // Both kinds chain in -> rank -> out through `in_key` / `out_key` (features or channels), and
  // the module's bias can only be the second factor's.
  const auto chain = [&](const char* in_key, const char* out_key, const std::string& what) {
    m.in = dim(a, in_key, file, name + ".0");
    m.rank = dim(a, out_key, file, name + ".0");
    if (dim(b, in_key, file, name + ".1") != m.rank)
      bad(ErrorKind::invalid_config, file, name,
          "the second " + what + "'s " + in_key + " is not the first's " + out_key);
    m.out = dim(b, out_key, file, name + ".1");
    if (flag(a, "bias", file, name + ".0"))
      bad(ErrorKind::unsupported, file, name, "the first factor has a bias (ptdeco's never does)");
    m.bias = flag(b, "bias", file, name + ".1");
  };
  if (ta == "Linear" && tb == "Linear") {
    m.kind = Kind::linear;
    chain("in_features", "out_features", "Linear");
    return m;
  }
  if (ta == "Conv2d" && tb == "Conv2d") {
    m.kind = Kind::conv2d;
    chain("in_channels", "out_channels", "conv");
    const auto [kh, kw] = pair(a, "kernel_size", file, name + ".0");
    if (kh < 1 || kw < 1 || kh > 1024 || kw > 1024)
      bad(ErrorKind::invalid_config, file, name, "kernel_size out of range");
    m.kh = static_cast<uint64_t>(kh), m.kw = static_cast<uint64_t>(kw);
    if (dim(a, "groups", file, name + ".0") != 1 || dim(b, "groups", file, name + ".1") != 1)
      bad(ErrorKind::unsupported, file, name, "grouped convolutions are not a product of two factors");
    // The second conv must be a pointwise linear map for the product to be one conv.
    if (pair(b, "kernel_size", file, name + ".1") != std::pair<int64_t, int64_t>{1, 1} ||
        pair(b, "stride", file, name + ".1") != std::pair<int64_t, int64_t>{1, 1} ||
        pair(b, "padding", file, name + ".1") != std::pair<int64_t, int64_t>{0, 0} ||
        pair(b, "dilation", file, name + ".1") != std::pair<int64_t, int64_t>{1, 1})
      bad(ErrorKind::unsupported, file, name, "the second conv is not 1 x 1 with stride 1, padding 0, dilation 1");
    json attrs = json::object();
    for (const char* k : {"stride", "padding", "dilation", "padding_mode"})
      if (auto it = a.find(k); it != a.end()) attrs[k] = *it;
    m.conv_attrs = attrs.dump();
    return m;
  }
  bad(ErrorKind::unsupported, file, name,
      "factors " + ta + " -> " + tb + "; ctstream reads Linear -> Linear and Conv2d -> Conv2d");
}

}  // namespace

Shape LowRankModule::a_shape() const { return kind == Kind::linear ? Shape{rank, in} : Shape{rank, in, kh, kw}; }
Shape LowRankModule::b_shape() const { return kind == Kind::linear ? Shape{out, rank} : Shape{out, rank, 1, 1}; }
Shape LowRankModule::weight_shape() const { return kind == Kind::linear ? Shape{out, in} : Shape{out, in, kh, kw}; }

std::vector<LowRankModule> parse_decompose_config(std::string_view text, const std::string& file) {
  const json j = parse_json(text, ErrorKind::invalid_config, file, "decompose config");
  if (!j.is_object()) throw Error(ErrorKind::invalid_config, file, "", "decompose config must be a JSON object");
  std::vector<LowRankModule> mods;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__meta__") continue;  // ptdeco MODCONFIG_META_KEY: statistics only
    if (it.key().empty()) throw Error(ErrorKind::invalid_config, file, "", "empty module name");
    LowRankModule m = parse_module(it.key(), it.value(), file);
    const auto n = detail::checked_numel(m.weight_shape());
    if (!n || !detail::checked_mul(*n, 64))
      throw Error(ErrorKind::overflow, file, m.name, "original weight's shape product overflows 64 bits");
    mods.push_back(std::move(m));
  }
  return mods;
}

void merge_low_rank(std::vector<TensorInfo>& tensors, const std::vector<LowRankModule>& modules,
                    const std::string& file) {
  if (modules.empty()) return;
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < tensors.size(); ++i) at.emplace(tensors[i].name, i);
  auto find = [&](const std::string& key) -> TensorInfo* {
    auto it = at.find(key);
    return it == at.end() ? nullptr : &tensors[it->second];
  };
  std::vector<bool> drop(tensors.size(), false);
  std::vector<TensorInfo> merged;
  for (const LowRankModule& m : modules) {
    TensorInfo* a = find(m.a_key());
    TensorInfo* b = find(m.b_key());
    if (!a || !b)
      throw Error(ErrorKind::not_found, file, m.name,
                  "decomposed module has no " + std::string(!a ? m.a_key() : m.b_key()) + " in the checkpoint");
    for (const auto& [f, want] : {std::pair{a, m.a_shape()}, std::pair{b, m.b_shape()}}) {
      if (f->shape != want)
        throw Error(
            ErrorKind::corrupt_tensor, file, f->name,
            "factor of " + m.name + " has shape " + shape_str(f->shape) + ", decompose config says " + shape_str(want));
      if (!is_float_output(f->dtype))
        throw Error(ErrorKind::unsupported, file, f->name,
                    "factor of " + m.name + " is " + std::string(dtype_name(f->dtype)) + ", not F32/F16/BF16");
      if (drop[static_cast<size_t>(f - tensors.data())])
        throw Error(ErrorKind::invalid_config, file, f->name, "factor claimed by two decomposed modules");
    }
    const std::string wname = m.name + ".weight", bname = m.name + ".bias";
    if (find(wname) || find(bname))
      throw Error(ErrorKind::invalid_config, file, m.name,
                  "decomposed module also stores " + std::string(find(wname) ? wname : bname) + " itself");
    TensorInfo* bias = find(m.bias_key());
    if (m.bias != (bias != nullptr))
      throw Error(ErrorKind::invalid_config, file, m.name,
                  m.bias ? "config says the module has a bias but " + m.bias_key() + " is missing"
                         : "config says the module has no bias but " + m.bias_key() + " is stored");
    TensorInfo w;
    w.name = wname;
    w.shape = m.weight_shape();
    w.dtype = b->dtype;
    w.format = Format::low_rank;
    w.parts = a->parts;
    w.parts.insert(w.parts.end(), b->parts.begin(), b->parts.end());
    w.factors = {*a, *b};
    drop[static_cast<size_t>(a - tensors.data())] = true;
    drop[static_cast<size_t>(b - tensors.data())] = true;
    merged.push_back(std::move(w));
    if (bias) bias->name = bname;  // the module's own bias, stored under the second factor
  }
  std::vector<TensorInfo> out;
  out.reserve(tensors.size() - 2 * modules.size() + merged.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!drop[i]) out.push_back(std::move(tensors[i]));
  for (auto& w : merged) out.push_back(std::move(w));
  tensors = std::move(out);
}

std::string decompose_config_json(const std::vector<LowRankModule>& modules) {
  json j = json::object();
  for (const LowRankModule& m : modules) {
    json a, b;
    if (m.kind == Kind::linear) {
      a = {{"type", "Linear"}, {"in_features", m.in}, {"out_features", m.rank}, {"bias", false}};
      b = {{"type", "Linear"}, {"in_features", m.rank}, {"out_features", m.out}, {"bias", m.bias}};
    } else {
      const json attrs = m.conv_attrs.empty() ? json::object() : json::parse(m.conv_attrs);
      auto conv = [](uint64_t in, uint64_t out, json k, bool bias) {
        return json{{"type", "Conv2d"}, {"in_channels", in}, {"out_channels", out}, {"kernel_size", std::move(k)},
                    {"bias", bias},     {"groups", 1},       {"padding", {0, 0}},   {"padding_mode", "zeros"},
                    {"stride", {1, 1}}, {"dilation", {1, 1}}};
      };
      a = conv(m.in, m.rank, {m.kh, m.kw}, false);
      for (auto it = attrs.begin(); it != attrs.end(); ++it) a[it.key()] = it.value();
      b = conv(m.rank, m.out, {1, 1}, m.bias);
    }
    j[m.name] = {{"type", "Sequential"}, {"modules", {{"0", a}, {"1", b}}}};
  }
  return j.dump(2) + "\n";
}

}  // namespace ctstream::format
