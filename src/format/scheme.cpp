#include "format/scheme.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ctstream/error.hpp"
#include "format/json.hpp"

namespace ctstream::format {
namespace {

/// A format name config.json may use: compressed-tensors' own (low-rank is ctstream's name for
/// a layout that lives in decompose_config.json, never in a compression config).
std::optional<Format> compressed_tensors_format(std::string_view name) {
  const auto f = format_from_name(name);
  return f == Format::low_rank ? std::nullopt : f;
}

using json = nlohmann::json;

// Largest group / block size accepted: far above any real one, and small enough that no size
// derived from it can overflow.
constexpr uint64_t kMaxQuantDim = uint64_t{1} << 32;

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw Error(ErrorKind::invalid_config, file, "", msg);
}

std::vector<std::string> string_list(const json& j, const std::string& file, const std::string& what) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (j.is_string()) return {j.get<std::string>()};
  if (!j.is_array()) bad(file, what + " must be a list of names");
  for (const auto& t : j) {
    if (!t.is_string()) bad(file, what + " entries must be strings, got " + t.dump());
    out.push_back(t.get<std::string>());
  }
  return out;
}

TargetList parse_targets(const json& j, const std::string& file, const std::string& what) {
  return TargetList::parse(string_list(j, file, what), ErrorKind::invalid_config, file, what);
}

uint64_t get_uint(const json& j, const char* key, const std::string& file, uint64_t def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_unsigned() || it->get<uint64_t>() == 0)
    bad(file, std::string("quantization arg '") + key + "' must be a positive integer, got " + it->dump());
  return it->get<uint64_t>();
}

// A block dimension written as digits inside the older "NxM" string: a positive integer up to
// kMaxQuantDim, no sign, no spaces (std::stoull would have wrapped "-1" to 2^64 - 1).
uint64_t block_dim(std::string_view digits, const std::string& file, const std::string& whole) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v == 0 || v > kMaxQuantDim)
    bad(file, "block_structure '" + whole + "' must be two positive integers up to " + std::to_string(kMaxQuantDim));
  return v;
}

// compressed_tensors/quantization/quant_args.py `QuantizationArgs` (+ `validate_model_after`).
QuantArgs parse_args(const json& j, const std::string& file) {
  if (!j.is_object()) bad(file, "weights quantization args must be an object");
  QuantArgs a;
  const uint64_t bits = get_uint(j, "num_bits", file, 8);
  if (bits > 32) bad(file, "num_bits " + std::to_string(bits) + " out of range");
  a.num_bits = static_cast<unsigned>(bits);
  const json type_j = j.value("type", json("int"));
  if (!type_j.is_string()) bad(file, "quantization type must be \"int\" or \"float\", got " + type_j.dump());
  const std::string type = type_j.get<std::string>();
  if (type == "int") a.type = QuantType::int_;
  else if (type == "float") a.type = QuantType::float_;
  else bad(file, "quantization type '" + type + "' is neither int nor float");
  if (auto it = j.find("symmetric"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) bad(file, "symmetric must be true or false");
    a.symmetric = it->get<bool>();
  }
  // ActivationOrdering (quant_args.py): "group" (alias "dynamic") registers a weight_g_idx
  // (0.12 lifecycle/initialize.py: "only grouped activation ordering has g_idx"); "weight" (alias
  // "static") changes calibration only. 0.12 reads true as "group", false as none; 0.20 refuses
  // "group", "dynamic" and true.
  if (auto it = j.find("actorder"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      a.actorder_group = it->get<bool>();
    } else if (it->is_string()) {
      std::string v = it->get<std::string>();
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (v == "group" || v == "dynamic") a.actorder_group = true;
      else if (v != "weight" && v != "static")
        bad(file, "actorder '" + it->get<std::string>() + "' is none of group, weight, dynamic, static");
    } else {
      bad(file, "actorder must be a string, a boolean or null, got " + it->dump());
    }
  }
  int64_t gs = 0;
  if (auto it = j.find("group_size"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) bad(file, "group_size must be an integer, got " + it->dump());
    const bool ok = it->is_number_unsigned() ? it->get<uint64_t>() <= kMaxQuantDim : it->get<int64_t>() >= -1;
    if (!ok)
      bad(file,
          "group_size " + it->dump() + " out of range (-1 for channel, or 0.." + std::to_string(kMaxQuantDim) + ")");
    gs = it->get<int64_t>();
  }
  if (auto it = j.find("block_structure"); it != j.end() && !it->is_null()) {
    if (it->is_array() && it->size() == 2) {
      for (const json& v : *it)
        if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > kMaxQuantDim)
          bad(file,
              "block_structure " + it->dump() + " must be two positive integers up to " + std::to_string(kMaxQuantDim));
      a.block_rows = (*it)[0].get<uint64_t>();
      a.block_cols = (*it)[1].get<uint64_t>();
    } else if (it->is_string()) {  // older "NxM" spelling
      const std::string s = it->get<std::string>();
      const auto x = s.find('x');
      if (x == std::string::npos) bad(file, "block_structure '" + s + "' is not NxM");
      a.block_rows = block_dim(std::string_view(s).substr(0, x), file, s);
      a.block_cols = block_dim(std::string_view(s).substr(x + 1), file, s);
    } else {
      bad(file, "block_structure must be [rows, cols], got " + it->dump());
    }
  }
  const json strat_j = j.value("strategy", json());
  if (!strat_j.is_null() && !strat_j.is_string()) bad(file, "strategy must be a string, got " + strat_j.dump());
  std::string strategy = strat_j.is_string() ? strat_j.get<std::string>() : "";
  if (strategy.empty()) strategy = a.block_rows ? "block" : gs > 0 ? "group" : gs == -1 ? "channel" : "tensor";
  static const std::pair<const char*, QuantStrategy> names[] = {{"tensor", QuantStrategy::tensor},
                                                                {"channel", QuantStrategy::channel},
                                                                {"group", QuantStrategy::group},
                                                                {"block", QuantStrategy::block},
                                                                {"tensor_group", QuantStrategy::tensor_group},
                                                                {"token", QuantStrategy::token},
                                                                {"attn_head", QuantStrategy::attn_head}};
  bool known = false;
  for (const auto& [n, st] : names)
    if (strategy == n) a.strategy = st, known = true;
  if (!known) bad(file, "unknown quantization strategy '" + strategy + "'");
  // Both library lines refuse a positive group_size on any other strategy (quant_args.py
  // validate_model_after, 0.12 and 0.20: "group_size requires strategy to be set to 'group'"):
  // such a config names two layouts at once, and the scales could fit either.
  if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group) {
    if (gs <= 0) bad(file, "strategy " + strategy + " needs a positive group_size");
    a.group_size = static_cast<uint64_t>(gs);
  } else if (gs > 0) {
    bad(file, "group_size " + std::to_string(gs) + " requires strategy 'group' or 'tensor_group', not '" + strategy +
                  "' (compressed-tensors refuses this config)");
  }
  if (a.strategy == QuantStrategy::block && !a.block_rows) bad(file, "strategy block needs block_structure");
  return a;
}

const json* object_at(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() && !it->empty() ? &*it : nullptr;
}

Scheme parse_scheme_json(const json& root, const std::string& file) {
  Scheme s;
  if (!root.is_object()) bad(file, "config.json is not a JSON object");
  const json* q = nullptr;
  const char* q_key = nullptr;
  std::string other;  // a quantization config of another method, for the description
  for (const char* key : {"quantization_config", "compression_config"}) {
    auto it = root.find(key);
    if (it != root.end() && it->is_object()) {
      const json method = it->value("quant_method", json("compressed-tensors"));
      if (method.is_string() && (method == "compressed-tensors" || method == "sparseml")) q = &*it, q_key = key;
      else other = std::string(key) + ".quant_method " + method.dump() + ", not compressed-tensors";
      break;
    }
  }
  const json* sparse = q ? object_at(*q, "sparsity_config") : nullptr;
  const bool top_sparse = !sparse && object_at(root, "sparsity_config");
  if (!sparse) sparse = object_at(root, "sparsity_config");  // SparseML-style top-level block
  if (!q && !sparse) {
    s.description =
        other.empty() ? "config.json has no compressed-tensors quantization_config" : "config.json has " + other;
    return s;
  }
  s.present = true;
  s.description = q ? std::string(q_key) : "sparsity_config";
  if (q && top_sparse) s.description += " + sparsity_config";

  if (q) {
    if (auto it = q->find("version"); it != q->end() && it->is_string()) s.version = it->get<std::string>();
    // No version (the library always writes one): the layout of odd widths is not known either.
    if (s.version.empty()) s.version_unclear = true;
    if (!s.version.empty()) {
      // PEP 440 as setuptools_scm writes it: "0.20.0", "0.17.2.dev12+g66e631f6", "0.17.2a20260701"
      // (a leading "v" tolerated). The dense layout of odd widths (pack_to_int32 across word
      // boundaries, compressed-tensors #732) is in tag 0.18.0 and not in 0.17.1; builds of main in
      // between are 0.17.2 pre-releases and may be either.
      const char* v = s.version.c_str() + (s.version[0] == 'v' || s.version[0] == 'V');
      unsigned major = 0, minor = 0, patch = 0;
      int used = 0;
      const int got = std::sscanf(v, "%u.%u%n.%u%n", &major, &minor, &used, &patch, &used);
      const bool suffix = got >= 2 && v[used] != '\0';
      if (got < 2) s.version_unclear = true;
      else if (major == 0 && minor == 17 && (patch > 1 || (patch == 1 && suffix && v[used] != '+')))
        s.version_unclear = true;  // after 0.17.1 (or a build of 0.17.1 plus commits): either layout
      else s.dense_packing = major > 0 || minor >= 18;
    }
    if (auto it = q->find("format"); it != q->end() && it->is_string()) {
      const std::string f = it->get<std::string>();
      s.global_format = compressed_tensors_format(f);
      if (!s.global_format && f != "mixed-precision") bad(file, "unknown compression format '" + f + "'");
    }
    s.ignore = parse_targets(q->value("ignore", json()), file, "ignore");
    std::vector<std::string> all_targets;
    if (auto it = q->find("config_groups"); it != q->end() && !it->is_null()) {
      if (!it->is_object()) bad(file, "config_groups must be an object");
      for (auto g = it->begin(); g != it->end(); ++g) {
        if (!g.value().is_object()) bad(file, "config group '" + g.key() + "' must be an object");
        SchemeGroup sg;
        sg.name = g.key();
        sg.targets = string_list(g.value().value("targets", json()), file, "targets of config group '" + g.key() + "'");
        for (const auto& t : sg.targets) {
          all_targets.push_back(t);
          s.target_group.push_back(s.groups.size());
        }
        if (auto w = g.value().find("weights"); w != g.value().end() && !w->is_null()) {
          sg.weights = parse_args(*w, file);
        }
        auto ia = g.value().find("input_activations");
        sg.has_input_activations = ia != g.value().end() && !ia->is_null();
        if (auto f = g.value().find("format"); f != g.value().end() && !f->is_null()) {
          if (!f->is_string()) bad(file, "config group '" + g.key() + "' format must be a string, got " + f->dump());
          sg.format = compressed_tensors_format(f->get<std::string>());
          if (!sg.format)
            bad(file, "config group '" + g.key() + "' has unknown format '" + f->get<std::string>() + "'");
        }
        s.groups.push_back(std::move(sg));
      }
    }
    s.group_targets = TargetList::parse(all_targets, ErrorKind::invalid_config, file, "config group targets");
  }
  s.description += " (compressed-tensors" + (s.version.empty() ? std::string() : " " + s.version.substr(0, 40)) + ")";
  if (sparse) {
    const json f_j = sparse->value("format", json("dense"));
    if (!f_j.is_string()) bad(file, "sparsity format must be a string, got " + f_j.dump());
    const std::string f = f_j.get<std::string>();
    s.sparse_format = compressed_tensors_format(f);
    if (!s.sparse_format) bad(file, "unknown sparsity format '" + f + "'");
    s.sparse_targets = parse_targets(sparse->value("targets", json()), file, "sparsity targets");
    s.sparse_ignore = parse_targets(sparse->value("ignore", json()), file, "sparsity ignore");
  }
  return s;
}

}  // namespace

Scheme parse_scheme(const std::string& text, const std::string& file) {
  if (text.empty()) {
    Scheme s;
    s.description = "no config.json";
    return s;
  }
  const json root = parse_json(text, ErrorKind::invalid_config, file, "config.json");
  try {
    return parse_scheme_json(root, file);
  } catch (const json::exception& e) {  // a value of an unexpected JSON type somewhere
    bad(file, std::string("config.json has a value of the wrong type: ") + e.what());
  }
}

GroupMatch match_groups(const Scheme& s, const std::string& module, const ModuleClasses* classes) {
  const std::vector<std::string>* own = nullptr;
  if (classes)
    if (auto it = classes->find(module); it != classes->end()) own = &it->second;
  // compressed-tensors' _match_class (utils/match.py, 0.20.0 and 0.12.2): any class of the module's
  // MRO by name, and vLLM's LinearBase counts as "Linear".
  const TargetList::Classes known = own ? TargetList::Classes::of([own](const std::string& c) {
    return std::any_of(own->begin(), own->end(),
                       [&c](const std::string& x) { return x == c || (c == "Linear" && x == "LinearBase"); });
  })
                                        : TargetList::Classes{};
  // Without the module's class an ignored class name is nobody's (a module the library ignored
  // stores no quantized parts for the grouping to find anyway).
  if (s.ignore.matches(module, known)) return {};
  GroupMatch m;
  if (const auto hit = s.group_targets.best_match(module, known)) {
    m.groups.push_back(&s.groups[s.target_group[*hit]]);
    return m;
  }
  if (own) return m;  // its classes are known and none is targeted
  for (size_t i : s.group_targets.class_entries()) {
    const SchemeGroup* g = &s.groups[s.target_group[i]];
    if (std::find(m.groups.begin(), m.groups.end(), g) == m.groups.end()) m.groups.push_back(g);
  }
  m.by_unknown_class = !m.groups.empty();
  return m;
}

ModuleClasses parse_module_classes(std::string_view text, const std::string& what) {
  const json j = parse_json(text, ErrorKind::invalid_argument, what, "module classes");
  if (!j.is_object())
    throw Error(ErrorKind::invalid_argument, what, "",
                "module classes must be a JSON object: module name -> class names");
  ModuleClasses m;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_array())
      throw Error(ErrorKind::invalid_argument, what, it.key(),
                  "module classes: a module's classes are a list of strings");
    auto& v = m[it.key()];
    for (const auto& c : it.value()) {
      if (!c.is_string())
        throw Error(ErrorKind::invalid_argument, what, it.key(), "module classes: a class name is a string");
      v.push_back(c.get<std::string>());
    }
  }
  return m;
}

const SchemeGroup* match_group(const Scheme& s, const std::string& module) {
  const GroupMatch m = match_groups(s, module, nullptr);
  return m.groups.empty() ? nullptr : m.groups.front();
}

bool sparse_targets_module(const Scheme& s, const std::string& module) {
  if (!s.sparse_format || s.sparse_ignore.matches(module, TargetList::Classes{})) return false;
  return s.sparse_targets.matches(module, TargetList::Classes::all());
}

}  // namespace ctstream::format
