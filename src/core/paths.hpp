// Path containment on resolved paths: the one rule the writers use to keep an output out of its
// input (compress --overwrite, decompress) and a followed link inside the input (compress).
#pragma once
#include <filesystem>
#include <string>

namespace ctstream::detail {

/// Whether `inner` is `outer` or lies below it, component-wise on the paths as given (callers
/// pass canonical ones). An empty `outer` contains nothing.
inline bool path_within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  std::string i = inner.generic_string(), o = outer.generic_string();
  if (o.empty()) return false;
  while (o.size() > 1 && o.back() == '/') o.pop_back();
  while (i.size() > 1 && i.back() == '/') i.pop_back();
  return i == o || (i.size() > o.size() && i.compare(0, o.size(), o) == 0 && (o == "/" || i[o.size()] == '/'));
}

}  // namespace ctstream::detail
