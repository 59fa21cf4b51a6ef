#include "format/targets.hpp"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <atomic>
#include <cctype>

namespace ctstream::format {

struct TargetList::Compiled {
  explicit Compiled(const RE2::Options& o) : set(o, RE2::ANCHOR_START) {}
  RE2::Set set;
  size_t program = 0;                                 // instructions of the distinct patterns
  mutable std::atomic<uint64_t> work{0};              // name bytes x program matched so far
  std::vector<size_t> entry;                          // set index -> entry index (the last of equal patterns)
  std::unordered_map<std::string, size_t> set_index;  // pattern text -> set index
};

namespace {
RE2::Options re2_options(int64_t max_mem) {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(max_mem);
  return o;
}
// The whole set: its program (at most kMaxProgramSize instructions) and its DFA cache.
constexpr int64_t kSetMemory = int64_t{64} << 20;
// One pattern compiled alone, to check its syntax and measure it: RE2 stops compiling a program
// that outgrows this (about a tenth of it in instructions), so a huge pattern costs no time.
constexpr int64_t kPatternMemory = int64_t{8} << 20;

std::string shortened(std::string_view s) {
  return s.size() <= 80 ? std::string(s) : std::string(s.substr(0, 80)) + "...";
}
}  // namespace

TargetList::TargetList() = default;

TargetList TargetList::parse(const std::vector<std::string>& entries, ErrorKind kind, const std::string& file,
                             const std::string& what) {
  TargetList l;
  l.kind_ = kind, l.file_ = file, l.what_ = what;
  std::shared_ptr<Compiled> c;
  size_t program = 0;  // instructions of the distinct patterns so far
  for (const std::string& s : entries) {
    Target t;
    if (s.rfind("re:", 0) == 0) {
      t.kind = Target::Kind::regex;
      t.text = s.substr(3);
      if (t.text.size() > kMaxPatternBytes)
        throw Error(kind, file, "",
                    what + " pattern of " + std::to_string(t.text.size()) + " bytes is longer than the " +
                        std::to_string(kMaxPatternBytes) + "-byte limit");
      if (!c) c = std::make_shared<Compiled>(re2_options(kSetMemory));
      if (auto same = c->set_index.find(t.text); same != c->set_index.end()) {
        c->entry[same->second] = l.targets_.size();  // equal patterns: the later entry decides
      } else {
        if (c->entry.size() >= kMaxPatterns)
          throw Error(kind, file, "", what + " holds more than " + std::to_string(kMaxPatterns) + " re: patterns");
        const RE2 one(t.text, re2_options(kPatternMemory));
        std::string err;
        if (one.ok()) program += static_cast<size_t>(std::max(0, one.ProgramSize()));
        if (one.error_code() == RE2::ErrorPatternTooLarge || program > kMaxProgramSize)
          throw Error(kind, file, "",
                      what + " re: patterns compile to more than " + std::to_string(kMaxProgramSize) +
                          " RE2 instructions (at '" + shortened(t.text) + "')");
        if (!one.ok() || c->set.Add(t.text, &err) < 0)
          throw Error(kind, file, "",
                      what + " pattern '" + shortened(t.text) + "' is not a regular expression ctstream can match (" +
                          (one.ok() ? err : one.error()) +
                          "; patterns use RE2 syntax: Python's without backreferences or lookaround)");
        c->set_index.emplace(t.text, c->entry.size());
        c->entry.push_back(l.targets_.size());
      }
    } else if (!s.empty() && std::isupper(static_cast<unsigned char>(s[0])) && s.find('.') == std::string::npos) {
      t.kind = Target::Kind::class_name;  // "Linear", "Embedding", "LlamaDecoderLayer", ...
      t.text = s;
      l.classes_.push_back(l.targets_.size());
    } else {
      t.text = s;
      l.names_[s] = l.targets_.size();
    }
    l.targets_.push_back(std::move(t));
  }
  if (c) {
    c->program = program;
    if (!c->set.Compile())
      throw Error(kind, file, "", what + " patterns are too large to compile together (RE2 memory limit)");
    l.patterns_ = std::move(c);
  }
  // Class names in precedence order (alphabetical; equal names: the later entry first), so that
  // the first one a module counts as decides: one step for the reader, which counts every one.
  std::stable_sort(l.classes_.begin(), l.classes_.end(), [&l](size_t a, size_t b) {
    const std::string &ta = l.targets_[a].text, &tb = l.targets_[b].text;
    return ta < tb || (ta == tb && a > b);
  });
  return l;
}

std::optional<size_t> TargetList::best_match(std::string_view module, const Classes& classes) const {
  if (auto it = names_.find(std::string(module)); it != names_.end()) return it->second;
  std::optional<size_t> best;
  if (patterns_) {
    const uint64_t cost = (module.size() + 1) * std::max<uint64_t>(1, patterns_->program);
    if (patterns_->work.fetch_add(cost) + cost > kMaxMatchWork)
      throw Error(kind_, file_, shortened(module),
                  "matching module names against " + what_ + " re: patterns would pass the work budget of " +
                      std::to_string(kMaxMatchWork) + " (name bytes x " + std::to_string(patterns_->program) +
                      " RE2 instructions): use shorter names or fewer patterns");
    std::vector<int> hits;
    RE2::Set::ErrorInfo info{};
    if (!patterns_->set.Match(re2::StringPiece(module.data(), module.size()), &hits, &info) &&
        info.kind != RE2::Set::kNoError)
      throw Error(kind_, file_, shortened(module),
                  what_ + " re: patterns could not be matched within RE2's memory budget");
    for (int h : hits) {  // alphabetical by text; equal text is one set entry (its last list entry)
      const size_t i = patterns_->entry[static_cast<size_t>(h)];
      if (!best || targets_[i].text < targets_[*best].text) best = i;
    }
    if (best) return best;
  }
  switch (classes.kind) {
    case Classes::Kind::none: return std::nullopt;
    case Classes::Kind::any: return classes_.empty() ? std::nullopt : std::optional<size_t>(classes_.front());
    case Classes::Kind::some:
      for (size_t i : classes_)
        if (classes.pred(targets_[i].text)) return i;
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ctstream::format
