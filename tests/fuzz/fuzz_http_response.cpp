// libFuzzer target: the HTTP response rules of remote reads (src/io/http_response.hpp), which a
// server controls entirely. Input: a request descriptor, then the raw header block, a NUL, the
// error body:
//   byte 0      flags: 1 whole-object request, 2 size recorded at open, 4 ETag recorded
//   bytes 1-8   start (little-endian), 9-16 length, 17-24 size at open
//   byte 25     libcurl result (CURLcode; 0 = the transfer completed)
//   byte 26     n, then n bytes: the recorded ETag
//   the rest    header lines ('\n'-separated, fed as libcurl's header callback feeds them), '\0', body
// Invariants: nothing but ctstream::Error is thrown; the verdict is one of the closed set; an
// accepted response covers exactly the request clipped to the object size (and the recorded size);
// the caps hold (a refused head once over them; S3 codes short and clean).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ctstream/error.hpp"
#include "io/http_response.hpp"

using namespace ctstream::io::http;

namespace {
uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 27) return 0;
  const uint8_t flags = data[0];
  RangeRequest req;
  req.whole_object = flags & 1;
  req.start = le64(data + 1);
  req.length = le64(data + 9);
  if (flags & 2) req.size = le64(data + 17);
  const int curl_code = data[25];
  size_t pos = 27;
  const size_t etag_n = data[26];
  if (size - pos < etag_n) return 0;
  if (flags & 4) req.etag.assign(reinterpret_cast<const char*>(data + pos), etag_n);
  pos += etag_n;
  const std::string_view rest(reinterpret_cast<const char*>(data + pos), size - pos);
  const size_t nul = rest.find('\0');
  const std::string_view headers = rest.substr(0, nul);
  const std::string_view body = nul == std::string_view::npos ? std::string_view{} : rest.substr(nul + 1);

  HeaderAccumulator acc;
  size_t fed = 0, lines = 0;
  std::string_view h = headers;
  while (!h.empty()) {
    const size_t nl = h.find('\n');
    const std::string_view line = h.substr(0, nl == std::string_view::npos ? h.size() : nl + 1);
    h.remove_prefix(line.size());
    fed += line.size();
    ++lines;
    const bool ok = acc.add_line(line);
    if ((fed > max_header_bytes || lines > max_header_lines) && ok) __builtin_trap();  // a cap did not hold
    // each value through the parsers on its own as well
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view value = line.substr(colon + 1);
      if (auto cr = parse_content_range(value); cr && !cr->unsatisfied) {
        if (cr->first > cr->last || (cr->total && cr->last >= *cr->total)) __builtin_trap();
      }
      (void)parse_content_length(value);
      if (auto e = parse_etag(value); e && (e->value.size() < 3 || e->value.back() != '"')) __builtin_trap();
      if (auto r = parse_retry_after(value, 1764000000, 20); r && *r > 20) __builtin_trap();
    }
  }
  const ResponseHead& head = acc.head();
  try {
    const Verdict v = judge(req, head, curl_code, body, 1764000000);
    if (action_name(v.action) == "?") __builtin_trap();
    if (v.s3_code.size() > 64) __builtin_trap();
    if (v.retry_after_s && *v.retry_after_s > 20) __builtin_trap();
    if (v.action == Action::accept) {
      if (head.overflow || head.conflict || curl_code != 0) __builtin_trap();
      if (v.first != req.start) __builtin_trap();
      if (req.size && v.total != *req.size) __builtin_trap();
      if (v.count > 0 && (v.first > v.total || v.count > v.total - v.first)) __builtin_trap();
      if (!req.whole_object) {
        uint64_t end;
        if (__builtin_add_overflow(req.start, req.length, &end)) __builtin_trap();
        const uint64_t clipped = std::min(end, v.total);
        // the answer is the request clipped to the size (or, at open, an empty object read at 0)
        if (v.count != (clipped > req.start ? clipped - req.start : 0)) __builtin_trap();
      } else if (v.first != 0 || v.count != v.total) {
        __builtin_trap();
      }
    } else {
      const ctstream::Error e = verdict_error(v, "https://user:secret@host/key?X-Amz-Signature=sig");
      if (e.file() != "https://host/key") __builtin_trap();  // the URL is redacted
    }
  } catch (const ctstream::Error&) {
  }
  const std::string code = extract_s3_error_code(body);
  if (code.size() > 64) __builtin_trap();
  if (extract_s3_error_message(body).size() > 203) __builtin_trap();
  return 0;
}
