#include "format/scheme.hpp"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "ctstream/error.hpp"

namespace ctstream::format {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw Error(ErrorKind::invalid_config, file, "", msg);
}

std::vector<Target> parse_targets(const json& j, const std::string& file, const char* what) {
  std::vector<Target> out;
  if (j.is_null()) return out;
  if (j.is_string()) return parse_targets(json::array({j}), file, what);
  if (!j.is_array()) bad(file, std::string(what) + " must be a list of names");
  for (const auto& t : j) {
    if (!t.is_string()) bad(file, std::string(what) + " entries must be strings, got " + t.dump());
    std::string s = t.get<std::string>();
    Target tg;
    if (s.rfind("re:", 0) == 0) {
      tg.kind = Target::Kind::regex;
      tg.text = s.substr(3);
      try {
        tg.re = std::regex(tg.text, std::regex::ECMAScript | std::regex::optimize);
      } catch (const std::regex_error& e) {
        bad(file, std::string(what) + " pattern '" + tg.text + "' is not a valid regular expression: " + e.what());
      }
    } else if (!s.empty() && std::isupper(static_cast<unsigned char>(s[0])) && s.find('.') == std::string::npos) {
      tg.kind = Target::Kind::class_name;  // "Linear", "Embedding", "LlamaDecoderLayer", ...
      tg.text = s;
    } else {
      tg.text = s;
    }
    out.push_back(std::move(tg));
  }
  return out;
}

uint64_t get_uint(const json& j, const char* key, const std::string& file, uint64_t def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_unsigned() || it->get<uint64_t>() == 0)
    bad(file, std::string("quantization arg '") + key + "' must be a positive integer, got " + it->dump());
  return it->get<uint64_t>();
}

// compressed_tensors/quantization/quant_args.py `QuantizationArgs` (+ `validate_model_after`).
QuantArgs parse_args(const json& j, const std::string& file) {
  if (!j.is_object()) bad(file, "weights quantization args must be an object");
  QuantArgs a;
  a.num_bits = static_cast<unsigned>(get_uint(j, "num_bits", file, 8));
  if (a.num_bits > 32) bad(file, "num_bits " + std::to_string(a.num_bits) + " out of range");
  const std::string type = j.value("type", std::string("int"));
  if (type == "int") a.type = QuantType::int_;
  else if (type == "float") a.type = QuantType::float_;
  else bad(file, "quantization type '" + type + "' is neither int nor float");
  if (auto it = j.find("symmetric"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) bad(file, "symmetric must be true or false");
    a.symmetric = it->get<bool>();
  }
  int64_t gs = 0;
  if (auto it = j.find("group_size"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) bad(file, "group_size must be an integer");
    gs = it->get<int64_t>();
  }
  if (auto it = j.find("block_structure"); it != j.end() && !it->is_null()) {
    if (it->is_array() && it->size() == 2 && (*it)[0].is_number_unsigned() && (*it)[1].is_number_unsigned()) {
      a.block_rows = (*it)[0].get<uint64_t>();
      a.block_cols = (*it)[1].get<uint64_t>();
    } else if (it->is_string()) {  // older "NxM" spelling
      const std::string s = it->get<std::string>();
      auto x = s.find('x');
      try {
        a.block_rows = std::stoull(s.substr(0, x));
        a.block_cols = std::stoull(s.substr(x + 1));
      } catch (...) {
        bad(file, "block_structure '" + s + "' is not NxM");
      }
    } else {
      bad(file, "block_structure must be [rows, cols]");
    }
    if (!a.block_rows || !a.block_cols) bad(file, "block_structure sizes must be positive");
  }
  std::string strategy = j.value("strategy", json()).is_string() ? j["strategy"].get<std::string>() : "";
  if (strategy.empty()) strategy = a.block_rows ? "block" : gs > 0 ? "group" : gs == -1 ? "channel" : "tensor";
  static const std::pair<const char*, QuantStrategy> names[] = {
      {"tensor", QuantStrategy::tensor}, {"channel", QuantStrategy::channel}, {"group", QuantStrategy::group},
      {"block", QuantStrategy::block},   {"tensor_group", QuantStrategy::tensor_group},
      {"token", QuantStrategy::token},   {"attn_head", QuantStrategy::attn_head}};
  bool known = false;
  for (const auto& [n, st] : names)
    if (strategy == n) a.strategy = st, known = true;
  if (!known) bad(file, "unknown quantization strategy '" + strategy + "'");
  if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group) {
    if (gs <= 0) bad(file, "strategy " + strategy + " needs a positive group_size");
    a.group_size = static_cast<uint64_t>(gs);
  }
  if (a.strategy == QuantStrategy::block && !a.block_rows) bad(file, "strategy block needs block_structure");
  return a;
}

}  // namespace

bool Target::matches_name(const std::string& module) const {
  switch (kind) {
    case Kind::name: return module == text;
    case Kind::regex: return std::regex_search(module, re, std::regex_constants::match_continuous);
    case Kind::class_name: return false;
  }
  return false;
}

std::optional<Format> format_from_name(const std::string& raw) {
  // compressed_tensors/registry/registry.py `standardize_lookup_name`: '_' and ' ' -> '-', lower.
  std::string s = raw;
  for (char& c : s) c = c == '_' || c == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, Format> names[] = {
      {"dense", Format::dense},
      {"dense-sparsity", Format::dense},  // SparseML-era name of "stored dense"
      {"sparse-bitmask", Format::sparse_bitmask},
      {"sparse-24-bitmask", Format::sparse_24_bitmask},
      {"pack-quantized", Format::pack_quantized},
      {"naive-quantized", Format::naive_quantized},
      {"int-quantized", Format::int_quantized},
      {"float-quantized", Format::float_quantized},
      {"nvfp4-pack-quantized", Format::nvfp4_pack_quantized},
      {"mxfp4-pack-quantized", Format::mxfp4_pack_quantized},
      {"mxfp6-pack-quantized", Format::mxfp6_pack_quantized},
      {"mxfp8-quantized", Format::mxfp8_quantized},
      {"marlin-24", Format::marlin_24},
  };
  for (const auto& [n, f] : names)
    if (s == n) return f;
  return std::nullopt;
}

Scheme parse_scheme(const std::string& text, const std::string& file) {
  Scheme s;
  if (text.empty()) return s;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    bad(file, std::string("config.json is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) bad(file, "config.json is not a JSON object");
  const json* q = nullptr;
  for (const char* key : {"quantization_config", "compression_config"}) {
    auto it = root.find(key);
    if (it != root.end() && it->is_object()) {
      const std::string method = it->value("quant_method", json("compressed-tensors")).is_string()
                                     ? it->value("quant_method", std::string("compressed-tensors"))
                                     : "";
      if (method == "compressed-tensors" || method == "sparseml") q = &*it;
      break;
    }
  }
  const json* sparse = nullptr;
  if (q && q->contains("sparsity_config") && (*q)["sparsity_config"].is_object() && !(*q)["sparsity_config"].empty())
    sparse = &(*q)["sparsity_config"];
  else if (root.contains("sparsity_config") && root["sparsity_config"].is_object() && !root["sparsity_config"].empty())
    sparse = &root["sparsity_config"];  // SparseML-style top-level block
  if (!q && !sparse) return s;
  s.present = true;

  if (q) {
    if (auto it = q->find("version"); it != q->end() && it->is_string()) s.version = it->get<std::string>();
    if (!s.version.empty()) {
      unsigned major = 0, minor = 0;
      if (std::sscanf(s.version.c_str(), "%u.%u", &major, &minor) == 2) s.dense_packing = major > 0 || minor >= 18;
    }
    if (auto it = q->find("format"); it != q->end() && it->is_string()) {
      const std::string f = it->get<std::string>();
      s.global_format = format_from_name(f);
      if (!s.global_format && f != "mixed-precision") bad(file, "unknown compression format '" + f + "'");
    }
    s.ignore = parse_targets(q->value("ignore", json()), file, "ignore");
    if (auto it = q->find("config_groups"); it != q->end() && !it->is_null()) {
      if (!it->is_object()) bad(file, "config_groups must be an object");
      for (auto g = it->begin(); g != it->end(); ++g) {
        if (!g.value().is_object()) bad(file, "config group '" + g.key() + "' must be an object");
        SchemeGroup sg;
        sg.name = g.key();
        sg.targets = parse_targets(g.value().value("targets", json()), file, "targets");
        if (auto w = g.value().find("weights"); w != g.value().end() && !w->is_null()) {
          sg.weights = parse_args(*w, file);
          auto sd = w->find("scale_dtype");
          sg.scale_is_e8m0 = sd != w->end() && sd->is_string() && sd->get<std::string>() == "torch.uint8";
        }
        auto ia = g.value().find("input_activations");
        sg.has_input_activations = ia != g.value().end() && !ia->is_null();
        if (auto f = g.value().find("format"); f != g.value().end() && f->is_string()) {
          sg.format = format_from_name(f->get<std::string>());
          if (!sg.format) bad(file, "config group '" + g.key() + "' has unknown format '" + f->get<std::string>() + "'");
        }
        s.groups.push_back(std::move(sg));
      }
    }
  }
  if (sparse) {
    const std::string f = sparse->value("format", std::string("dense"));
    s.sparse_format = format_from_name(f);
    if (!s.sparse_format) bad(file, "unknown sparsity format '" + f + "'");
    s.sparse_targets = parse_targets(sparse->value("targets", json()), file, "sparsity targets");
    s.sparse_ignore = parse_targets(sparse->value("ignore", json()), file, "sparsity ignore");
  }
  return s;
}

namespace {
bool any_matches(const std::vector<Target>& ts, const std::string& module) {
  return std::any_of(ts.begin(), ts.end(), [&](const Target& t) { return t.matches_name(module); });
}
}  // namespace

const SchemeGroup* match_group(const Scheme& s, const std::string& module) {
  if (any_matches(s.ignore, module)) return nullptr;
  // compressed_tensors/utils/match.py `match_targets`: exact names, then regexes sorted by
  // pattern text, then class names; the first matching target picks its group.
  const SchemeGroup* best = nullptr;
  const Target* best_t = nullptr;
  auto rank = [](const Target& t) { return t.kind == Target::Kind::name ? 0 : t.kind == Target::Kind::regex ? 1 : 2; };
  for (const auto& g : s.groups) {
    for (const auto& t : g.targets) {
      const bool hit = t.kind == Target::Kind::class_name || t.matches_name(module);
      if (!hit) continue;
      if (!best_t || rank(t) < rank(*best_t) || (rank(t) == rank(*best_t) && rank(t) == 1 && t.text < best_t->text)) {
        best = &g;
        best_t = &t;
      }
    }
  }
  return best;
}

bool sparse_targets_module(const Scheme& s, const std::string& module) {
  if (!s.sparse_format || any_matches(s.sparse_ignore, module)) return false;
  for (const auto& t : s.sparse_targets)
    if (t.kind == Target::Kind::class_name || t.matches_name(module)) return true;
  return false;
}

}  // namespace ctstream::format
