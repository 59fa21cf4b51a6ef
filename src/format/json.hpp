// format — bounded JSON parsing for everything a file controls (config.json, shard index).
// nlohmann's parser is iterative, but its DOM is not: copying, comparing, dumping and
// destroying a value recurse once per nesting level, so a file of a few hundred bytes of `[[[[`
// would overflow the stack. parse_json() first walks the text with the (iterative) SAX parser,
// refusing nesting deeper than kMaxJsonDepth and any syntax error, and only then builds the DOM.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ctstream/error.hpp"

namespace ctstream::format {

/// Deepest nesting accepted (real config.json files stay under 10).
inline constexpr size_t kMaxJsonDepth = 64;

/// Parses `text` as one JSON value. Malformed text or nesting deeper than `max_depth` throws
/// Error{kind, file} saying "<what> is not valid JSON: ..." / "... nested deeper than ...".
nlohmann::json parse_json(std::string_view text, ErrorKind kind, const std::string& file, const std::string& what,
                          size_t max_depth = kMaxJsonDepth);

/// True if `text` is valid JSON nested no deeper than `max_depth`
/// (never builds a DOM; for callers that parse with their own SAX handler).
bool json_depth_ok(std::string_view text, size_t max_depth);

}  // namespace ctstream::format
