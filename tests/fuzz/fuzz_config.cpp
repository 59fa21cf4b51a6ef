// libFuzzer target: config.json -> scheme (quantization / sparsity configs, `re:` targets) and
// module matching. Input: the config text; its last line doubles as a list of module names to
// match. Bounded parsing and matching: RE2 patterns in linear time, the others (lookaround,
// backreferences) on PCRE2 under step limits that end in an Error; -timeout catches either
// running away.
#include <cstdint>
#include <string>
#include <vector>

#include "ctstream/error.hpp"
#include "format/scheme.hpp"
#include "format/targets.hpp"

using namespace ctstream::format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> names = {"model.layers.0.mlp.down_proj",
                                    "lm_head",
                                    "",
                                    std::string(300, 'a'),
                                    std::string(40, 'a') + "b",
                                    "a\n",
                                    "m\xc3\xb3"
                                    "dulo.\xff"};
  const auto nl = text.rfind('\n');
  if (nl != std::string::npos) names.push_back(text.substr(nl + 1));
  // The same text as module classes (--module-classes, the C ABI's module_classes_json).
  ModuleClasses classes;
  try {
    classes = parse_module_classes(text, "module classes");
  } catch (const ctstream::Error&) {
  }
  try {
    const Scheme s = parse_scheme(text, "config.json");
    for (const auto& n : names) {
      const SchemeGroup* g = match_group(s, n);
      if (g && (g < s.groups.data() || g >= s.groups.data() + s.groups.size())) __builtin_trap();
      (void)sparse_targets_module(s, n);
      for (const ModuleClasses* c :
           {static_cast<const ModuleClasses*>(nullptr), static_cast<const ModuleClasses*>(&classes)})
        for (const SchemeGroup* h : match_groups(s, n, c).groups)
          if (h < s.groups.data() || h >= s.groups.data() + s.groups.size()) __builtin_trap();
    }
  } catch (const ctstream::Error&) {
  }
  // The same text as a target list, one entry per line.
  std::vector<std::string> entries;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == '\n') {
      entries.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  try {
    const TargetList l = TargetList::parse(entries, ctstream::ErrorKind::invalid_config, "config.json", "targets");
    for (const auto& n : names)
      for (const auto& cls : {TargetList::Classes{}, TargetList::Classes::all()})
        if (auto i = l.best_match(n, cls); i && *i >= l.targets().size()) __builtin_trap();
  } catch (const ctstream::Error&) {
  }
  return 0;
}
