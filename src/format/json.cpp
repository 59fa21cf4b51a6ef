#include "format/json.hpp"

namespace ctstream::format {
namespace {

using json = nlohmann::json;

// Counts nesting; stops the (iterative) SAX parse as soon as it is exceeded.
class DepthCheck final : public nlohmann::json_sax<json> {
 public:
  explicit DepthCheck(size_t max) : max_(max) {}
  bool too_deep = false;
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool key(string_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = ex.what();
    return false;
  }

 private:
  bool enter() {
    if (++depth_ > max_) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool leave() {
    --depth_;
    return true;
  }
  size_t max_, depth_ = 0;
};

}  // namespace

bool json_depth_ok(std::string_view text, size_t max_depth) {
  if (text.find('\0') != std::string_view::npos) return false;  // see parse_json
  DepthCheck c(max_depth);
  return json::sax_parse(text.begin(), text.end(), &c, nlohmann::detail::input_format_t::json, true) && !c.too_deep;
}

json parse_json(std::string_view text, ErrorKind kind, const std::string& file, const std::string& what,
                size_t max_depth) {
  // JSON has no raw NUL anywhere (RFC 8259: control characters are escaped inside strings), and
  // nlohmann's lexer takes one for the end of the input: whatever followed it - garbage, a second
  // document - would be ignored. Refused outright, as serde_json (safetensors) and Python do.
  if (const size_t at = text.find('\0'); at != std::string_view::npos)
    throw Error(kind, file, "", what + " is not valid JSON: a NUL byte at offset " + std::to_string(at));
  DepthCheck c(max_depth);
  const bool ok = json::sax_parse(text.begin(), text.end(), &c, nlohmann::detail::input_format_t::json, true);
  if (c.too_deep)
    throw Error(kind, file, "", what + " nests objects/arrays deeper than " + std::to_string(max_depth) + " levels");
  if (!ok) throw Error(kind, file, "", what + " is not valid JSON: " + (c.error.empty() ? "parse error" : c.error));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // not expected after the SAX pass; kept as a safety net
    throw Error(kind, file, "", what + " is not valid JSON: " + e.what());
  }
}

}  // namespace ctstream::format
