// `re:` targets RE2 refuses (lookaround, backreferences, `\Z`, possessive repeats), matched by
// bounded PCRE2 exactly as Python's `re.match` answers (compressed_tensors/utils/match.py
// match_name), or refused. Expectations: tests/fixtures/regex/re_match.json, written by Python
// (tests/fixtures/gen/gen_regex.py) with the library's own match_targets for precedence.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ctstream/ctstream.hpp"
#include "format/targets.hpp"
#include "helpers.hpp"

using namespace ctstream;
using namespace ctstream::format;

namespace {
const nlohmann::json& table() {
  static const nlohmann::json j = [] {
    std::ifstream f(th::fixtures() / "regex" / "re_match.json");
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
  }();
  return j;
}
TargetList parse_list(const std::vector<std::string>& e) {
  return TargetList::parse(e, ErrorKind::invalid_config, "config.json", "targets");
}
}  // namespace

TEST_CASE("re: patterns with lookaround and backreferences match as Python's re.match", "[scheme][regex]") {
  const auto& cases = table().at("cases");
  REQUIRE(cases.size() > 1000);
  size_t pcre = 0, re2 = 0;
  for (const auto& c : cases) {
    const std::string pattern = c[0], name = c[1];
    const bool expected = c[2];
    const TargetList l = parse_list({"re:" + pattern});
    // RE2's `$` is the very end, Python's also before a final newline: a difference of the RE2
    // path (names never end in '\n' in practice), not of PCRE2, which the newline names are for.
    if (!l.targets()[0].backtracking && name.find('\n') != std::string::npos) continue;
    (l.targets()[0].backtracking ? pcre : re2)++;
    INFO("pattern " << pattern << " name " << nlohmann::json(name).dump());
    CHECK(l.matches(name, TargetList::Classes{}) == expected);
  }
  CHECK(pcre > 0);
  CHECK(re2 > 0);
}

TEST_CASE("re: lists mixing RE2 and PCRE2 patterns keep the library's precedence", "[scheme][regex]") {
  for (const auto& c : table().at("lists")) {
    const std::vector<std::string> targets = c[0];
    const std::string name = c[1];
    const int expected = c[2];
    INFO("targets " << c[0].dump() << " name " << nlohmann::json(name).dump());
    const auto got = parse_list(targets).best_match(name, TargetList::Classes{});
    CHECK((got ? static_cast<int>(*got) : -1) == expected);
  }
}

TEST_CASE("re: patterns Python's re and PCRE2 read differently are refused", "[scheme][regex]") {
  for (const auto& c : table().at("refused")) {
    const std::string pattern = c[0];
    INFO("pattern " << pattern);
    CHECK(th::error_kind([&] { (void)parse_list({"re:" + pattern}); }) == ErrorKind::invalid_config);
  }
}

TEST_CASE("RE2 keeps every pattern it accepts; PCRE2 only takes the others", "[scheme][regex]") {
  const TargetList l = parse_list({"re:.*mlp.*", "re:(a+)+$", "re:.*(?!.*gate).*proj$", "re:(\\w+)\\.\\1$"});
  CHECK_FALSE(l.targets()[0].backtracking);
  CHECK_FALSE(l.targets()[1].backtracking);  // catastrophic for a backtracker, linear on RE2
  CHECK(l.targets()[2].backtracking);
  CHECK(l.targets()[3].backtracking);
  CHECK(l.matches(std::string(100000, 'a'), TargetList::Classes{}));
}

TEST_CASE("costly PCRE2 matches end as invalid_config in bounded time", "[scheme][regex]") {
  const auto t0 = std::chrono::steady_clock::now();
  // Nested repeats under a lookahead: exponential for a backtracker; the step limit stops it.
  const TargetList hostile = parse_list({"re:(?=(a+)+$)a"});
  REQUIRE(hostile.targets()[0].backtracking);
  const std::string name = std::string(40, 'a') + "b";
  try {
    (void)hostile.best_match(name, TargetList::Classes{});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_config);
    CHECK(std::string(e.what()).find("too costly") != std::string::npos);
    CHECK(std::string(e.what()).find("config.json") != std::string::npos);
    CHECK(std::string(e.what()).find("(?=(a+)+$)a") != std::string::npos);
  }
  // Short names stay cheap and exact.
  CHECK(hostile.matches("aaaa", TargetList::Classes{}));
  CHECK_FALSE(hostile.matches("aaab", TargetList::Classes{}));
  // Backreferences that backtrack over a long name: an error, not "no match".
  CHECK(th::error_kind([] {
          (void)parse_list({"re:(?=(a*)*\\1b)"}).best_match(std::string(5000, 'a'), TargetList::Classes{});
        }) == ErrorKind::invalid_config);
  // Many names, each within its limit: the list's budget ends them.
  const TargetList quad = parse_list({"re:(?=(a|aa)*c)"});
  CHECK(th::error_kind([&] {
          for (int i = 0; i < 100000; ++i) (void)quad.best_match(std::string(24, 'a'), TargetList::Classes{});
        }) == ErrorKind::invalid_config);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 60.0);
  WARN("hostile PCRE2 cases took " << s << " s");
}
