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

}  // namespace ctstream::detail
