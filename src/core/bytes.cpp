// core — byte counts as users type them ("64MiB", "5GB"): one grammar for the CLI's --budget /
// --shard-size, Python's budget= / shard_size= and stream budgets (ctstream/bytes.hpp).
#include "ctstream/bytes.hpp"

#include <cctype>
#include <utility>

#include "ctstream/error.hpp"

namespace ctstream {

uint64_t parse_bytes(const std::string& text) {
  // Grammar: DIGITS [. DIGITS] [spaces] [UNIT]. No sign, exponent, hex, "nan" or "inf" (std::stod
  // took them all, and 1e30GB then converted out of range to an undefined integer).
  auto bad = [&](const std::string& why) -> uint64_t {
    throw Error(ErrorKind::invalid_argument, "", "", "'" + text + "' is not a byte count: " + why);
  };
  size_t i = 0;
  const size_t n = text.size();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t int_begin = i;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string int_part = text.substr(int_begin, i - int_begin);
  std::string frac_part;
  if (i < n && text[i] == '.') {
    const size_t f = ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    frac_part = text.substr(f, i - f);
  }
  if (int_part.empty() && frac_part.empty()) return bad("expected a number such as 512MB or 1.5GiB");
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, uint64_t> units[] = {{"", 1},
                                                           {"B", 1},
                                                           {"K", 1000},
                                                           {"KB", 1000},
                                                           {"M", 1000000},
                                                           {"MB", 1000000},
                                                           {"G", 1000000000},
                                                           {"GB", 1000000000},
                                                           {"T", 1000000000000},
                                                           {"TB", 1000000000000},
                                                           {"KIB", 1ull << 10},
                                                           {"MIB", 1ull << 20},
                                                           {"GIB", 1ull << 30},
                                                           {"TIB", 1ull << 40}};
  uint64_t mult = 0;
  for (const auto& [u, m] : units)
    if (unit == u) mult = m;
  if (!mult) return bad("unknown unit '" + text.substr(i) + "' (use B, KB/MB/GB/TB or KiB/MiB/GiB/TiB)");
  // Exact integer arithmetic: int_part * mult + frac_part * mult / 10^digits, capped at 2^62.
  constexpr uint64_t kMax = uint64_t{1} << 62;
  __extension__ typedef unsigned __int128 u128;
  uint64_t whole = 0;
  for (char c : int_part) {
    const auto d = static_cast<uint64_t>(c - '0');
    if (whole > (kMax - d) / 10) return bad("larger than 2^62 bytes");  // before the product could wrap
    whole = whole * 10 + d;
  }
  u128 total = static_cast<u128>(whole) * mult;
  u128 frac_num = 0, frac_den = 1;
  for (size_t k = 0; k < frac_part.size() && k < 18; ++k) {
    frac_num = frac_num * 10 + static_cast<unsigned>(frac_part[k] - '0');
    frac_den *= 10;
  }
  total += frac_num * mult / frac_den;
  if (total > kMax) return bad("larger than 2^62 bytes");
  return static_cast<uint64_t>(total);
}

}  // namespace ctstream
