#include "io/url.hpp"

#include <algorithm>

#include "ctstream/error.hpp"

namespace ctstream::io {

namespace {

constexpr char hex_digits[] = "0123456789ABCDEF";
constexpr size_t max_key_bytes = 1024;  // S3's limit on an object key
constexpr size_t max_host_bytes = 253;  // a DNS name
constexpr size_t max_redacted_bytes = 512;

bool is_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_hex(char c) noexcept { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_unreserved(char c) noexcept {
  return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}
using detail::ascii_lower;
using detail::istarts_with;

void append_escaped(std::string& out, unsigned char c) {
  out += '%';
  out += hex_digits[c >> 4];
  out += hex_digits[c & 15];
}

[[noreturn]] void refuse(ErrorKind kind, std::string_view text, const std::string& why) {
  throw Error(kind, redact_url(text), "", why);
}

// Whether `s` is valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF).
bool valid_utf8(std::string_view s) noexcept {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

bool has_control(std::string_view s) noexcept {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; });
}

// host[:port] of an http(s) URL or endpoint; false when malformed.
bool parse_authority(std::string_view auth, std::string& host, uint16_t& port) {
  std::string_view h = auth, p;
  if (!auth.empty() && auth[0] == '[') {  // IPv6 literal
    const size_t close = auth.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : auth.substr(1, close - 1))
      if (!is_hex(c) && c != ':' && c != '.') return false;
    h = auth.substr(0, close + 1);
    const std::string_view rest = auth.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return false;
      p = rest.substr(1);
      if (p.empty()) return false;
    }
  } else {
    const size_t colon = auth.find(':');
    if (colon != std::string_view::npos) {
      h = auth.substr(0, colon);
      p = auth.substr(colon + 1);
      if (p.empty()) return false;
    }
    if (h.empty() || h.size() > max_host_bytes || h.front() == '.' || h.front() == '-') return false;
    for (char c : h)
      if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.') return false;
  }
  host.clear();
  for (char c : h) host += ascii_lower(c);
  port = 0;
  if (!p.empty()) {
    if (p.size() > 5) return false;
    uint32_t v = 0;
    for (char c : p) {
      if (!is_digit(c)) return false;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    if (v == 0 || v > 65535) return false;
    port = static_cast<uint16_t>(v);
  }
  return true;
}

// An HTTP path as a request may carry it: pchar, '/' and valid %XX kept, every other byte escaped.
std::string encode_http_path(std::string_view path, bool query = false) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    static constexpr std::string_view keep = "/:@!$&'()*+,;=";
    if (query && c == '?') out += c;
    else if (c == '%' && i + 2 < path.size() && is_hex(path[i + 1]) && is_hex(path[i + 2])) out += c;
    else if (is_unreserved(c) || keep.find(c) != std::string_view::npos) out += c;
    else append_escaped(out, static_cast<unsigned char>(c));
  }
  return out;
}

std::string authority(const std::string& host, uint16_t port) {
  std::string s = host;
  if (port) {  // (not ":" + to_string: GCC 12's -Wrestrict false positive, PR 105329)
    s += ':';
    s += std::to_string(port);
  }
  return s;
}

}  // namespace

Url parse_url(std::string_view text) {
  if (text.size() > max_url_bytes)
    refuse(ErrorKind::invalid_argument, text, "URL longer than " + std::to_string(max_url_bytes) + " bytes");
  Url url;
  std::string_view rest;
  if (istarts_with(text, "s3://")) {
    url.scheme = UrlScheme::s3;
    rest = text.substr(5);
  } else if (istarts_with(text, "https://")) {
    url.scheme = UrlScheme::https;
    rest = text.substr(8);
  } else if (istarts_with(text, "http://")) {
    url.scheme = UrlScheme::http;
    rest = text.substr(7);
  } else {
    refuse(ErrorKind::invalid_argument, text, "not a remote URL (s3://, http:// or https://)");
  }
  if (url.scheme == UrlScheme::s3) {
    const size_t slash = rest.find('/');
    const std::string_view bucket = rest.substr(0, slash);
    const std::string_view key = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (bucket.find('@') != std::string_view::npos)
      refuse(ErrorKind::invalid_argument, text,
             "credentials in an s3:// URL are not accepted (use AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a "
             "profile)");
    if (bucket.empty()) refuse(ErrorKind::invalid_argument, text, "no bucket name in the s3:// URL");
    // S3-compatible servers (rclone: a bucket is a folder) take more than AWS's DNS names; the
    // request only needs a name that is one path segment of safe characters.
    if (bucket.size() > 255) refuse(ErrorKind::invalid_argument, text, "bucket name longer than 255 bytes");
    for (char c : bucket)
      if (!is_alpha(c) && !is_digit(c) && c != '.' && c != '-' && c != '_')
        refuse(ErrorKind::invalid_argument, text,
               "bucket name has a character other than letters, digits, '.', '-' and '_'");
    if (bucket == "." || bucket == "..") refuse(ErrorKind::invalid_argument, text, "bucket name is a dot segment");
    if (key.size() > max_key_bytes)
      refuse(ErrorKind::invalid_argument, text, "object key longer than " + std::to_string(max_key_bytes) + " bytes");
    if (has_control(key)) refuse(ErrorKind::invalid_argument, text, "object key has a control character");
    if (!valid_utf8(key)) refuse(ErrorKind::invalid_argument, text, "object key is not valid UTF-8");
    url.host = std::string(bucket);
    url.path = std::string(key);
    return url;
  }
  if (has_control(rest)) refuse(ErrorKind::invalid_argument, text, "URL has a control character");
  const size_t end_auth = rest.find_first_of("/?#");
  const std::string_view auth = rest.substr(0, end_auth);
  if (auth.find('@') != std::string_view::npos)
    refuse(ErrorKind::invalid_argument, text, "credentials in an http(s) URL are not accepted");
  if (!parse_authority(auth, url.host, url.port))
    refuse(ErrorKind::invalid_argument, text, "malformed host or port in the URL");
  std::string_view tail = end_auth == std::string_view::npos ? std::string_view{} : rest.substr(end_auth);
  if (const size_t hash = tail.find('#'); hash != std::string_view::npos) tail = tail.substr(0, hash);
  std::string_view path = tail, query;
  if (const size_t q = tail.find('?'); q != std::string_view::npos) {
    path = tail.substr(0, q);
    query = tail.substr(q + 1);
  }
  url.path = path.empty() ? "/" : encode_http_path(path);
  url.query = encode_http_path(query, true);  // '/' and '?' are legal in a query; '#' is gone
  return url;
}

std::string to_string(const Url& url) {
  if (url.scheme == UrlScheme::s3) return "s3://" + url.host + "/" + url.path;
  std::string s = url.scheme == UrlScheme::https ? "https://" : "http://";
  s += authority(url.host, url.port);
  s += url.path;
  if (!url.query.empty()) s += "?" + url.query;
  return s;
}

std::string redact_url(std::string_view text) {
  std::string_view t = text;
  // Query and fragment go first: nothing after the first '?' or '#' is ever printed.
  if (const size_t q = t.find_first_of("?#"); q != std::string_view::npos) t = t.substr(0, q);
  std::string head;
  if (const size_t sep = t.find("://"); sep != std::string_view::npos) {
    head = std::string(t.substr(0, sep + 3));
    t = t.substr(sep + 3);
    const size_t end_auth = std::min(t.find('/'), t.size());
    // userinfo: everything up to the last '@' of the authority
    if (const size_t at = t.substr(0, end_auth).rfind('@'); at != std::string_view::npos) t = t.substr(at + 1);
  }
  head.append(t);
  std::string out;
  out.reserve(std::min(max_redacted_bytes, head.size()) + 8);
  for (char c : head) {
    if (out.size() >= max_redacted_bytes) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F) append_escaped(out, u);
    else out += c;
  }
  return out;
}

std::string redact_secrets(std::string text, std::initializer_list<std::string_view> secrets) {
  constexpr size_t min_piece = 8;
  const auto in_run = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
           c == '=' || c == '_' || c == '-';
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (!in_run(text[i])) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && in_run(text[j])) ++j;
    const std::string_view run(text.data() + i, j - i);
    bool secret = false;
    for (std::string_view s : secrets) {
      if (s.empty()) continue;
      if (run.find(s) != std::string_view::npos || (run.size() >= min_piece && s.find(run) != std::string_view::npos)) {
        secret = true;
        break;
      }
    }
    out += secret ? std::string_view("<redacted>") : run;
    i = j;
  }
  return out;
}

bool aws_bucket_name_ok(std::string_view b) noexcept {
  // "General purpose bucket naming rules" (Amazon S3 User Guide).
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!(c >= 'a' && c <= 'z') && !is_digit(c) && c != '.' && c != '-') return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || is_digit(c); };
  if (!alnum(b.front()) || !alnum(b.back())) return false;
  if (b.find("..") != std::string_view::npos || b.find(".-") != std::string_view::npos ||
      b.find("-.") != std::string_view::npos)
    return false;
  for (std::string_view p : {"xn--", "sthree-", "amzn-s3-demo-"})
    if (b.substr(0, p.size()) == p) return false;
  for (std::string_view s : {"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"})
    if (b.size() >= s.size() && b.substr(b.size() - s.size()) == s) return false;
  // Not formatted as an IPv4 address (four dot-separated all-digit labels).
  int labels = 1;
  bool digits_only = true;
  for (char c : b) {
    if (c == '.') ++labels;
    else if (!is_digit(c)) digits_only = false;
  }
  return !(digits_only && labels == 4);
}

std::string uri_encode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (char c : text) {
    if (is_unreserved(c) || (keep_slash && c == '/')) out += c;
    else append_escaped(out, static_cast<unsigned char>(c));
  }
  return out;
}

std::string canonical_query(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [name, value] : params) {
    name = uri_encode(name, false);
    value = uri_encode(value, false);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

Endpoint parse_endpoint(std::string_view text, std::string_view what) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(ErrorKind::invalid_config, redact_url(text), "", std::string(what) + ": " + why);
  };
  Endpoint e;
  std::string_view rest;
  if (istarts_with(text, "https://")) {
    rest = text.substr(8);
  } else if (istarts_with(text, "http://")) {
    e.https = false;
    rest = text.substr(7);
  } else {
    throw bad("an endpoint URL must start with http:// or https://");
  }
  if (text.size() > max_url_bytes || has_control(rest)) throw bad("malformed endpoint URL");
  if (rest.find_first_of("?#") != std::string_view::npos) throw bad("an endpoint URL takes no query or fragment");
  const size_t slash = rest.find('/');
  const std::string_view auth = rest.substr(0, slash);
  if (auth.find('@') != std::string_view::npos) throw bad("credentials in an endpoint URL are not accepted");
  if (!parse_authority(auth, e.host, e.port)) throw bad("malformed host or port in the endpoint URL");
  if (slash != std::string_view::npos) {
    e.base = encode_http_path(rest.substr(slash));
    while (!e.base.empty() && e.base.back() == '/') e.base.pop_back();
  }
  return e;
}

Endpoint aws_endpoint(std::string_view region) {
  Endpoint e;
  e.host = "s3." + std::string(region) + ".amazonaws.com";
  if (region.substr(0, 3) == "cn-") e.host += ".cn";
  return e;
}

bool is_aws_endpoint(const Endpoint& e) noexcept {
  auto ends = [&](std::string_view s) {
    return e.host.size() > s.size() && std::string_view(e.host).substr(e.host.size() - s.size()) == s;
  };
  return ends(".amazonaws.com") || ends(".amazonaws.com.cn");
}

AddressingStyle resolve_addressing(const Endpoint& e, std::string_view bucket, AddressingStyle wanted) {
  const bool dns_ok = aws_bucket_name_ok(bucket) && (!e.https || bucket.find('.') == std::string_view::npos);
  switch (wanted) {
    case AddressingStyle::path: return AddressingStyle::path;
    case AddressingStyle::virtual_hosted:
      if (!aws_bucket_name_ok(bucket) || e.host.front() == '[')
        throw Error(ErrorKind::invalid_argument, "s3://" + redact_url(bucket), "",
                    "virtual-hosted addressing needs a bucket name that is a DNS name (and a host name "
                    "endpoint); use path-style addressing (CTSTREAM_S3_ADDRESSING=path)");
      return AddressingStyle::virtual_hosted;
    case AddressingStyle::automatic: break;
  }
  return is_aws_endpoint(e) && dns_ok ? AddressingStyle::virtual_hosted : AddressingStyle::path;
}

std::string object_url(const Endpoint& e, std::string_view bucket, std::string_view key, AddressingStyle style,
                       std::string_view query) {
  std::string s = e.https ? "https://" : "http://";
  if (style == AddressingStyle::virtual_hosted) {
    s += std::string(bucket) + "." + authority(e.host, e.port) + e.base + "/";
  } else {
    s += authority(e.host, e.port) + e.base + "/" + uri_encode(bucket, false) + "/";
  }
  s += uri_encode(key, true);
  if (!query.empty()) {
    s += '?';
    s += query;
  }
  return s;
}

}  // namespace ctstream::io
