// core — small text helpers shared by the parsers of what a file or a server sends.
#pragma once
#include <string_view>

namespace ctstream::detail {

/// `s` without the leading and trailing characters of `blanks` (HTTP's optional whitespace is
/// " \t"; an INI file's is every ASCII space).
inline std::string_view trim(std::string_view s, std::string_view blanks) noexcept {
  const size_t b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

/// ASCII lower case (what URL schemes, host names and HTTP field names compare in; no locale).
constexpr char ascii_lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

/// `a` and `b` equal but for ASCII case.
inline bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

/// `text` starts with `prefix` but for ASCII case.
inline bool istarts_with(std::string_view text, std::string_view prefix) noexcept {
  return text.size() >= prefix.size() && iequals(text.substr(0, prefix.size()), prefix);
}

}  // namespace ctstream::detail
