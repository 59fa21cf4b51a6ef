#include "io/http_response.hpp"

#include <curl/curl.h>  // CURLcode values only: nothing here calls libcurl

#include <algorithm>

#include "core/text.hpp"
#include "io/url.hpp"

namespace ctstream::io::http {

namespace {

constexpr std::string_view blanks = " \t";

std::string_view trim(std::string_view s) noexcept { return detail::trim(s, blanks); }

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
using detail::iequals;

// A header field name: RFC 9110 token characters.
bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  static constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || extra.find(c) != std::string_view::npos;
  });
}

// Printable ASCII copy, at most `cap` bytes (then "...").
std::string printable(std::string_view s, size_t cap) {
  std::string out;
  for (char c : s) {
    if (out.size() >= cap) {
      out += "...";
      break;
    }
    out += (c >= 0x20 && c < 0x7F) ? c : '?';
  }
  return out;
}

std::string range_text(uint64_t first, uint64_t end_excl) {
  return std::to_string(first) + "-" + (end_excl == 0 ? std::string("?") : std::to_string(end_excl - 1));
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" -> seconds since the epoch.
std::optional<int64_t> parse_imf_fixdate(std::string_view s) noexcept {
  if (s.size() != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[19] != ':' ||
      s[22] != ':' || s[25] != ' ' || s.substr(26) != "GMT")
    return std::nullopt;
  auto num = [&](size_t at, size_t n) -> std::optional<unsigned> {
    unsigned v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!is_digit(s[i])) return std::nullopt;
      v = v * 10 + static_cast<unsigned>(s[i] - '0');
    }
    return v;
  };
  static constexpr std::string_view months = "JanFebMarAprMayJunJulAugSepOctNovDec";
  const size_t mpos = months.find(s.substr(8, 3));
  const auto day = num(5, 2), year = num(12, 4), hh = num(17, 2), mm = num(20, 2), ss = num(23, 2);
  if (mpos == std::string_view::npos || mpos % 3 || !day || !year || !hh || !mm || !ss || *day < 1 || *day > 31 ||
      *hh > 23 || *mm > 59 || *ss > 60)
    return std::nullopt;
  const int64_t days = days_from_civil(*year, static_cast<unsigned>(mpos / 3 + 1), *day);
  return days * 86400 + *hh * 3600 + *mm * 60 + *ss;
}

Verdict make(Action a, std::string reason) {
  Verdict v;
  v.action = a;
  v.reason = std::move(reason);
  return v;
}

bool is_throttling_code(std::string_view c) noexcept {
  for (std::string_view t : {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
                             "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded",
                             "BandwidthLimitExceeded", "ProvisionedThroughputExceededException"})
    if (c == t) return true;
  return false;
}

// Verdict for a 2xx head (design note 3.4), but for a missing ETag (judge_success).
Verdict judge_range(const RangeRequest& req, const ResponseHead& head) {
  const int status = head.status;
  if (status != 200 && status != 206)
    return make(Action::fail, "unexpected HTTP status " + std::to_string(status) + " for a ranged GET");
  const uint64_t end = req.whole_object ? UINT64_MAX : req.start + req.length;  // exclusive; checked by judge
  std::optional<ETag> etag;
  if (head.etag) {
    etag = parse_etag(*head.etag);
    if (!etag) return make(Action::fail, "malformed ETag header");
    // A weak ETag at open is compared weakly (RFC 9110 8.8.3.2: the opaque values).
    const auto opaque = [](std::string_view e) { return e.substr(0, 2) == "W/" ? e.substr(2) : e; };
    const bool weak = req.etag.substr(0, 2) == "W/";
    if (!req.etag.empty() && (weak ? opaque(etag->value) != opaque(req.etag) : etag->value != req.etag))
      return make(Action::object_changed, "object changed while reading (ETag " + printable(etag->value, 80) +
                                              ", opened as " + printable(req.etag, 80) + ")");
  }
  if (!req.last_modified.empty()) {
    // No strong ETag at open: the Last-Modified recorded then pins the object (with its size).
    const std::string_view lm = head.last_modified ? trim(*head.last_modified) : std::string_view();
    if (lm != req.last_modified) {
      std::string why = "object changed while reading (Last-Modified ";
      if (head.last_modified) why.append("'").append(printable(lm, 64)).append("'");
      else why.append("missing");
      why.append(", opened as '").append(printable(req.last_modified, 64)).append("')");
      return make(Action::object_changed, std::move(why));
    }
  }
  std::optional<uint64_t> length;
  if (head.content_length) {
    length = parse_content_length(*head.content_length);
    if (!length) return make(Action::fail, "malformed Content-Length header");
  }
  const std::string asked = req.whole_object ? std::string("the whole object") : "bytes " + range_text(req.start, end);
  if (head.content_range) {
    const auto cr = parse_content_range(*head.content_range);
    if (!cr) return make(Action::fail, "malformed Content-Range header '" + printable(*head.content_range, 80) + "'");
    if (cr->unsatisfied)
      return make(Action::fail, "Content-Range 'bytes */N' in a " + std::to_string(status) + " response");
    if (!cr->total) return make(Action::fail, "Content-Range without the object size ('/*')");
    const uint64_t total = *cr->total;
    if (req.size && total != *req.size)
      return make(Action::object_changed, "object changed while reading (size " + std::to_string(total) +
                                              ", opened with " + std::to_string(*req.size) + ")");
    if (req.start >= total)
      return make(Action::fail, "the server answered " + asked + " of a " + std::to_string(total) +
                                    "-byte object with " + std::to_string(status) + " instead of 416");
    const uint64_t last = std::min(end, total) - 1;
    if (cr->first != req.start || cr->last != last)
      return make(Action::fail, "Content-Range bytes " + std::to_string(cr->first) + "-" + std::to_string(cr->last) +
                                    "/" + std::to_string(total) + " does not answer " + asked);
    const uint64_t count = last - req.start + 1;
    if (length && *length != count)
      return make(Action::fail, "Content-Length " + std::to_string(*length) + " does not match Content-Range (" +
                                    std::to_string(count) + " bytes)");
    Verdict v;
    v.action = Action::accept;
    v.first = req.start;
    v.count = count;
    v.total = total;
    return v;
  }
  if (status == 206) return make(Action::fail, "206 response without Content-Range");
  // 200 without Content-Range: the whole object, which only a request for the whole object may get.
  if (!length) return make(Action::fail, "200 response with neither Content-Range nor Content-Length");
  const uint64_t total = *length;
  const bool whole = req.whole_object || (req.start == 0 && end >= (req.size ? *req.size : total));
  if (!whole)
    return make(Action::fail,
                "the server does not support range requests (200 with the whole object for " + asked + ")");
  if (req.size && total != *req.size)
    return make(Action::object_changed, "object changed while reading (size " + std::to_string(total) +
                                            ", opened with " + std::to_string(*req.size) + ")");
  Verdict v;
  v.action = Action::accept;
  v.first = 0;
  v.count = total;
  v.total = total;
  return v;
}

Verdict judge_success(const RangeRequest& req, const ResponseHead& head) {
  Verdict v = judge_range(req, head);
  // The version was pinned by its ETag: an answer that carries none cannot be told from another
  // version's (said once the answer is otherwise sound, so a malformed one says what is wrong).
  if (v.action == Action::accept && !req.etag.empty() && !head.etag)
    return make(Action::object_changed,
                "object changed while reading (no ETag in the answer, opened as " + printable(req.etag, 80) + ")");
  return v;
}

}  // namespace

std::optional<uint64_t> parse_u64(std::string_view text) noexcept {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (!is_digit(c)) return std::nullopt;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v))
      return std::nullopt;
  }
  return v;
}

std::optional<ContentRange> parse_content_range(std::string_view value) noexcept {
  std::string_view s = trim(value);
  if (s.size() < 6 || !iequals(s.substr(0, 5), "bytes") || s[5] != ' ') return std::nullopt;
  s = s.substr(6);
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view range = s.substr(0, slash), total = s.substr(slash + 1);
  ContentRange cr;
  if (total != "*") {
    cr.total = parse_u64(total);
    if (!cr.total) return std::nullopt;
  }
  if (range == "*") {
    if (!cr.total) return std::nullopt;  // "bytes */*" says nothing
    cr.unsatisfied = true;
    return cr;
  }
  const size_t dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto first = parse_u64(range.substr(0, dash)), last = parse_u64(range.substr(dash + 1));
  if (!first || !last || *first > *last || (cr.total && *last >= *cr.total)) return std::nullopt;
  cr.first = *first;
  cr.last = *last;
  return cr;
}

std::optional<uint64_t> parse_content_length(std::string_view value) noexcept { return parse_u64(trim(value)); }

std::optional<ETag> parse_etag(std::string_view value) {
  std::string_view s = trim(value);
  ETag e;
  if (s.substr(0, 2) == "W/") {
    e.weak = true;
    s = s.substr(2);
  }
  std::string_view inner = s;
  if (!s.empty() && s.front() == '"') {
    if (s.size() < 2 || s.back() != '"') return std::nullopt;
    inner = s.substr(1, s.size() - 2);
  }
  if (inner.empty() || inner.size() > max_etag_bytes) return std::nullopt;
  for (char c : inner)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7F || c == '"') return std::nullopt;
  e.value = std::string(e.weak ? "W/\"" : "\"") + std::string(inner) + "\"";
  return e;
}

std::optional<uint64_t> parse_retry_after(std::string_view value, int64_t now_epoch, uint64_t cap_s) noexcept {
  const std::string_view s = trim(value);
  if (!s.empty() && is_digit(s.front())) {
    // delta-seconds; a number too large for 64 bits is still "a long time": the cap
    if (std::all_of(s.begin(), s.end(), is_digit)) {
      const auto v = parse_u64(s);
      return v ? std::min(*v, cap_s) : cap_s;
    }
    return std::nullopt;
  }
  const auto at = parse_imf_fixdate(s);
  if (!at) return std::nullopt;
  if (*at <= now_epoch) return 0;
  return std::min(static_cast<uint64_t>(*at - now_epoch), cap_s);
}

bool HeaderAccumulator::refuse(std::string why) {
  head_.overflow = true;
  head_.problem = std::move(why);
  return false;
}

bool HeaderAccumulator::add_line(std::string_view line) {
  if (head_.overflow) return false;
  bytes_ += line.size();
  if (bytes_ > max_header_bytes)
    return refuse("response headers larger than " + std::to_string(max_header_bytes) + " bytes");
  if (++lines_ > max_header_lines)
    return refuse("more than " + std::to_string(max_header_lines) + " response header lines");
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, 5) == "HTTP/") {  // a status line: a new head begins
    head_ = ResponseHead{};
    complete_ = false;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.size() < sp + 4 || (line.size() > sp + 4 && line[sp + 4] != ' '))
      return refuse("malformed status line");
    const auto code = parse_u64(line.substr(sp + 1, 3));
    if (!code || *code < 100 || *code > 599) return refuse("malformed status line");
    head_.status = static_cast<int>(*code);
    return true;
  }
  if (line.empty()) {
    complete_ = true;
    return true;
  }
  if (head_.status == 0 || complete_) return refuse("a header line outside a response head");
  if (line.front() == ' ' || line.front() == '\t') return refuse("obsolete header line folding");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return refuse("malformed header line");
  const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
  for (char c : value)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7F)
      return refuse("a control character in a header value");
  std::optional<std::string>* slot = nullptr;
  if (iequals(name, "content-range")) slot = &head_.content_range;
  else if (iequals(name, "content-length")) slot = &head_.content_length;
  else if (iequals(name, "etag")) slot = &head_.etag;
  else if (iequals(name, "last-modified")) slot = &head_.last_modified;
  else if (iequals(name, "retry-after")) slot = &head_.retry_after;
  else if (iequals(name, "x-amz-bucket-region")) slot = &head_.bucket_region;
  if (!slot) return true;
  if (*slot && **slot != value) {
    head_.conflict = true;
    head_.problem = "header " + printable(name, 40) + " given twice with different values";
  } else {
    *slot = std::string(value);
  }
  return true;
}

std::string_view action_name(Action a) noexcept {
  switch (a) {
    case Action::accept: return "accept";
    case Action::retry: return "retry";
    case Action::retry_throttled: return "retry_throttled";
    case Action::fail: return "fail";
    case Action::object_changed: return "object_changed";
    case Action::truncated: return "truncated";
    case Action::not_found: return "not_found";
    case Action::denied: return "denied";
  }
  return "?";
}

Action classify_transport(int curl_code) noexcept {
  // Connection-level faults are transient; what a hostile or misconfigured server causes (a body
  // longer than its range aborts with CURLE_WRITE_ERROR, redirect loops, bad certificates) is not.
  switch (static_cast<CURLcode>(curl_code)) {
    case CURLE_OK: return Action::accept;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_QUIC_CONNECT_ERROR: return Action::retry;
    default: return Action::fail;
  }
}

std::optional<std::string_view> xml_element(std::string_view xml, std::string_view tag) {
  if (tag.empty() || tag.size() > 64) return std::nullopt;
  std::string open, close;  // appended, not operator+ (GCC 12's -Wrestrict false positive on it)
  open.append("<").append(tag).append(">");
  close.append("</").append(tag).append(">");
  const size_t at = xml.find(open);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + open.size(), end = xml.find(close, start);
  if (end == std::string_view::npos) return std::nullopt;
  return trim(xml.substr(start, end - start));
}

std::string extract_s3_error_code(std::string_view body) {
  const auto code = xml_element(body.substr(0, max_error_body), "Code");
  if (!code || code->empty() || code->size() > 64) return {};
  for (char c : *code)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.')) return {};
  return std::string(*code);
}

std::string extract_s3_error_message(std::string_view body) {
  const auto msg = xml_element(body.substr(0, max_error_body), "Message");
  return msg ? printable(*msg, 200) : std::string();
}

Verdict judge(const RangeRequest& req, const ResponseHead& head, int curl_code, std::string_view error_body,
              int64_t now_epoch) {
  constexpr uint64_t retry_after_cap_s = 20;  // the backoff cap (design note 3.4)
  if (req.whole_object && req.start != 0)
    return make(Action::fail, "invalid request: a whole-object read from offset > 0");
  if (!req.whole_object && req.length == 0) return make(Action::fail, "invalid request: an empty range");
  if (uint64_t end; !req.whole_object && __builtin_add_overflow(req.start, req.length, &end))
    return make(Action::fail, "invalid request: the range overflows 64 bits");
  if (head.overflow) return make(Action::fail, "response refused: " + head.problem);
  if (curl_code != 0) {
    const Action a = classify_transport(curl_code);
    return make(a, "transfer failed (libcurl error " + std::to_string(curl_code) + ")");
  }
  if (head.status == 0) return make(Action::fail, "no HTTP response head");
  if (head.conflict) return make(Action::fail, "response refused: " + head.problem);
  std::optional<uint64_t> retry_after;
  if (head.retry_after) retry_after = parse_retry_after(*head.retry_after, now_epoch, retry_after_cap_s);
  if (head.status >= 200 && head.status < 300) {
    Verdict v = judge_success(req, head);
    v.retry_after_s = retry_after;
    return v;
  }
  Verdict v;
  v.retry_after_s = retry_after;
  v.s3_code = extract_s3_error_code(error_body);
  const int status = head.status;
  std::string what = "HTTP " + std::to_string(status) + (v.s3_code.empty() ? std::string() : " " + v.s3_code);
  if (const std::string msg = extract_s3_error_message(error_body); !msg.empty()) what += ": " + msg;
  v.reason = what;
  if (is_throttling_code(v.s3_code) || status == 429 || status == 503) {
    v.action = Action::retry_throttled;
  } else if (status == 416) {
    // The object is shorter than the request's start. At open (size unknown) a read at exactly the
    // end of an object ("bytes */N", N = start: an empty object read from 0) is an empty answer.
    const auto cr = head.content_range ? parse_content_range(*head.content_range) : std::nullopt;
    if (cr && cr->unsatisfied && !req.whole_object && !req.size && cr->total == req.start) {
      v.action = Action::accept;
      v.first = req.start;
      v.count = 0;
      v.total = *cr->total;
      v.reason.clear();
      return v;
    }
    v.action = Action::truncated;
    v.reason = "the object is shorter than at open (" + what +
               (cr && cr->unsatisfied && cr->total ? ", size now " + std::to_string(*cr->total) : std::string()) + ")";
  } else if (status == 404) {
    v.action = Action::not_found;
  } else if (status == 403) {
    v.action = Action::denied;
  } else if (status == 412) {
    v.action = Action::object_changed;
    v.reason = "object changed while reading (" + what + ")";
  } else if (status == 408 || status == 500 || status == 502 || status == 504 || v.s3_code == "InternalError" ||
             v.s3_code == "RequestTimeout" || v.s3_code == "ServiceUnavailable") {
    v.action = Action::retry;
  } else if (v.s3_code == "ExpiredToken" || v.s3_code == "InvalidToken" || v.s3_code == "TokenRefreshRequired" ||
             v.s3_code == "InvalidAccessKeyId" || v.s3_code == "SignatureDoesNotMatch") {
    v.action = Action::denied;
  } else {
    v.action = Action::fail;
    if (status >= 300 && status < 400) v.reason += " (redirected)";
  }
  if (head.bucket_region && (v.s3_code == "PermanentRedirect" || v.s3_code == "AuthorizationHeaderMalformed" ||
                             (status >= 300 && status < 400))) {
    const std::string region = printable(*head.bucket_region, 32);
    v.reason += "; the bucket is in region " + region + " (set AWS_REGION=" + region + ")";
  }
  return v;
}

Error verdict_error(const Verdict& v, std::string_view url) {
  ErrorKind kind = ErrorKind::io;
  if (v.action == Action::not_found) kind = ErrorKind::file_not_found;
  if (v.action == Action::truncated) kind = ErrorKind::truncated;
  return Error(kind, redact_url(url), "", v.reason.empty() ? std::string(action_name(v.action)) : v.reason);
}

void throw_verdict(const Verdict& v, std::string_view url) {
  Error e = verdict_error(v, url);
  if (v.action == Action::denied && v.s3_code == "AccessDenied") throw AccessDenied(std::move(e));
  throw e;
}

}  // namespace ctstream::io::http
