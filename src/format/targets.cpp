#include "format/targets.hpp"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <cctype>

namespace ctstream::format {

struct TargetList::Compiled {
  explicit Compiled(const RE2::Options& o) : set(o, RE2::ANCHOR_START) {}
  RE2::Set set;
  std::vector<size_t> entry;                 // set index -> entry index
  std::vector<std::unique_ptr<RE2>> single;  // the same patterns one by one (fallback)
};

namespace {
RE2::Options re2_options() {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(64 << 20);  // bounds the compiled program and the DFA cache of the whole set
  return o;
}
}  // namespace

TargetList::TargetList() = default;

TargetList TargetList::parse(const std::vector<std::string>& entries, ErrorKind kind, const std::string& file,
                             const std::string& what) {
  TargetList l;
  const RE2::Options opt = re2_options();
  std::shared_ptr<Compiled> c;
  for (const std::string& s : entries) {
    Target t;
    if (s.rfind("re:", 0) == 0) {
      t.kind = Target::Kind::regex;
      t.text = s.substr(3);
      if (t.text.size() > kMaxPatternBytes)
        throw Error(kind, file, "",
                    what + " pattern of " + std::to_string(t.text.size()) + " bytes is longer than the " +
                        std::to_string(kMaxPatternBytes) + "-byte limit");
      if (!c) c = std::make_shared<Compiled>(opt);
      if (c->entry.size() >= kMaxPatterns)
        throw Error(kind, file, "", what + " holds more than " + std::to_string(kMaxPatterns) + " re: patterns");
      auto one = std::make_unique<RE2>(t.text, opt);
      std::string err;
      if (!one->ok() || c->set.Add(t.text, &err) < 0)
        throw Error(kind, file, "",
                    what + " pattern '" + t.text + "' is not a regular expression ctstream can match (" +
                        (one->ok() ? err : one->error()) +
                        "; patterns use RE2 syntax: Python's without backreferences or lookaround)");
      c->entry.push_back(l.targets_.size());
      c->single.push_back(std::move(one));
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
    if (!c->set.Compile())
      throw Error(kind, file, "", what + " patterns are too large to compile together (RE2 memory limit)");
    l.patterns_ = std::move(c);
  }
  return l;
}

std::optional<size_t> TargetList::best_match(std::string_view module, const IsClass& is_class) const {
  if (auto it = names_.find(std::string(module)); it != names_.end()) return it->second;
  std::optional<size_t> best;
  auto better = [&](size_t i) {  // alphabetical by text; equal text: the later entry
    return !best || targets_[i].text < targets_[*best].text || (targets_[i].text == targets_[*best].text && i > *best);
  };
  if (patterns_) {
    std::vector<int> hits;
    RE2::Set::ErrorInfo info{};
    if (patterns_->set.Match(re2::StringPiece(module.data(), module.size()), &hits, &info)) {
      for (int h : hits)
        if (better(patterns_->entry[static_cast<size_t>(h)])) best = patterns_->entry[static_cast<size_t>(h)];
    } else if (info.kind != RE2::Set::kNoError) {
      // The set's DFA ran out of its memory budget: match the patterns one by one (still linear).
      for (size_t k = 0; k < patterns_->single.size(); ++k)
        if (patterns_->single[k]->Match(re2::StringPiece(module.data(), module.size()), 0, module.size(),
                                        RE2::ANCHOR_START, nullptr, 0) &&
            better(patterns_->entry[k]))
          best = patterns_->entry[k];
    }
    if (best) return best;
  }
  for (size_t i : classes_)
    if (is_class(targets_[i].text) && better(i)) best = i;
  return best;
}

}  // namespace ctstream::format
