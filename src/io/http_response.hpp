// io — what an HTTP response to a ranged GET must look like before a byte of its body is used, and
// what to do when it does not: header lines accumulated under caps, strict parsing of
// Content-Range / Content-Length / ETag / Retry-After, the acceptance rules of
// docs/design/object_storage.md section 3.4 (AWS S3, rclone serve s3, plain https servers), the
// retry classification of HTTP statuses, S3 error codes and libcurl transport errors, and the S3
// error body's <Code>. Pure: no libcurl calls, no network; every input may be hostile.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ctstream/error.hpp"

namespace ctstream::io::http {

/// Caps on a response's header block (all blocks of one transfer together: 100-continue and
/// redirects included) and on the part of an error body that is read.
inline constexpr size_t max_header_bytes = 64 * 1024;
inline constexpr size_t max_header_lines = 256;
inline constexpr size_t max_error_body = 8 * 1024;
inline constexpr size_t max_etag_bytes = 1024;

/// A strict decimal: 1-20 ASCII digits, no sign, no blanks, no overflow past 2^64 - 1.
std::optional<uint64_t> parse_u64(std::string_view text) noexcept;

/// `Content-Range: bytes A-B/T` (T may be `*`: unknown) or `bytes */T` (the 416 form).
struct ContentRange {
  bool unsatisfied = false;       ///< `bytes */T`: no range, T is the object size
  uint64_t first = 0, last = 0;   ///< inclusive; first <= last
  std::optional<uint64_t> total;  ///< last < total when known
};
/// nullopt for anything else (another unit, A > B, B >= T, a sign, an overflow, trailing bytes).
std::optional<ContentRange> parse_content_range(std::string_view value) noexcept;

/// `Content-Length: N` (parse_u64 after trimming blanks).
std::optional<uint64_t> parse_content_length(std::string_view value) noexcept;

/// An entity tag, quotes kept (`"abc"` or weak `W/"abc"`); unquoted tags (rclone's listing XML, some
/// servers) get quotes. nullopt when empty, over max_etag_bytes, or holding a control byte, a blank
/// inside, or a quote inside.
struct ETag {
  std::string value;
  bool weak = false;
};
std::optional<ETag> parse_etag(std::string_view value);

/// `Retry-After`: delta-seconds, or an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") taken
/// relative to `now_epoch` (a date in the past is 0). Capped at `cap_s`; nullopt when malformed.
std::optional<uint64_t> parse_retry_after(std::string_view value, int64_t now_epoch, uint64_t cap_s) noexcept;

/// The parts of a response head the rules look at.
struct ResponseHead {
  int status = 0;  ///< of the last status line (0: none seen)
  std::optional<std::string> content_range, content_length, etag, last_modified, retry_after, bucket_region;
  bool conflict = false;  ///< one of the above given twice with different values
  bool overflow = false;  ///< a cap was hit or a line was malformed: the transfer must be aborted
  std::string problem;    ///< why, when overflow or conflict
};

/// Feeds the header lines of a transfer one by one, as CURLOPT_HEADERFUNCTION hands them over
/// (CR LF included). A status line starts a new head (after a redirect or 100-continue), but the
/// caps count every line of the transfer. add_line() returns false once the head is refused; the
/// caller then aborts the transfer (returning 0 from the header callback).
class HeaderAccumulator {
 public:
  bool add_line(std::string_view line);
  const ResponseHead& head() const noexcept { return head_; }
  /// Whether the blank line that ends a head has been seen (a head without it is incomplete).
  bool complete() const noexcept { return complete_; }

 private:
  bool refuse(std::string why);
  ResponseHead head_;
  size_t bytes_ = 0, lines_ = 0;
  bool complete_ = false;
};

/// A ranged GET: bytes [start, start + length) of an object. At open the size and the ETag are
/// not known yet; every later request carries the ones recorded then.
struct RangeRequest {
  uint64_t start = 0;
  uint64_t length = 0;           ///< > 0
  bool whole_object = false;     ///< sent without a Range header (the whole object is wanted)
  std::optional<uint64_t> size;  ///< the object size recorded at open
  /// The ETag recorded at open, quotes kept ("" = none): strong, or weak (`W/"..."`, compared
  /// weakly: the opaque values). Every response must then carry it: a response without one (the
  /// server no longer vouches for the version) is object_changed too.
  std::string etag;
  /// The Last-Modified recorded at open when the server gave no strong ETag (a weak `W/` one or
  /// none): then every response must carry this same Last-Modified ("" = none recorded: size only).
  std::string last_modified;
};

/// What to do with a finished (or failed) transfer. A closed set (fuzz_http_response checks it).
enum class Action : uint8_t {
  accept,           ///< the body is bytes [first, first + count) of the object
  retry,            ///< transient: back off and try again (server error, connection fault)
  retry_throttled,  ///< throttled (503 SlowDown, 429): back off longer, honour Retry-After
  fail,             ///< permanent: a refused request, a malformed or hostile response
  object_changed,   ///< the object is not the one opened (ETag, size, 412)
  truncated,        ///< the object is shorter than asked for (416)
  not_found,        ///< 404 NoSuchKey / NoSuchBucket
  denied,           ///< 403 (AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId, ExpiredToken)
};
std::string_view action_name(Action a) noexcept;

struct Verdict {
  Action action = Action::fail;
  uint64_t first = 0, count = 0;          ///< accept: the byte range the body holds (count may be 0)
  uint64_t total = 0;                     ///< accept: the object size (recorded at open from this)
  std::optional<uint64_t> retry_after_s;  ///< the server's Retry-After, when given
  std::string s3_code;                    ///< the S3 error <Code>, when the body had one
  std::string reason;                     ///< why, for the error message (never a credential)
};

/// The acceptance and retry rules for one response: `curl_code` is the transfer's CURLcode (0 =
/// CURLE_OK: the head is complete), `error_body` the first max_error_body bytes of a non-2xx body.
/// 2xx: 206, or 200 with a Content-Range, must cover exactly [start, min(start + length, size) - 1]
/// of an object of the recorded size; a 200 without one is accepted only for a whole-object request
/// (or one whose range is the whole object); Content-Length, when given, equals the range's length;
/// an ETag differing from the recorded one is `object_changed` (rclone ignores If-Match).
/// Without a recorded ETag, a recorded Last-Modified must be repeated exactly (a weak ETag is never
/// compared: W/ tags may stay equal across byte changes, RFC 9110 8.8.1).
/// Statuses: 5xx, 408, 429 and 400 RequestTimeout retried (AWS SDKs' "Retry behavior"); 503 and
/// the throttling codes as `retry_throttled`; 404, 403, 412, 416 and every other status final.
Verdict judge(const RangeRequest& req, const ResponseHead& head, int curl_code, std::string_view error_body,
              int64_t now_epoch = 0);

/// Retry class of a libcurl transport error (CURLcode as int; 0 is not an error).
Action classify_transport(int curl_code) noexcept;

/// The text of the first `<tag>...</tag>` element in `xml` (trimmed; no entity decoding, no nesting
/// awareness: the S3 error and listing bodies are flat enough), nullopt when there is none.
std::optional<std::string_view> xml_element(std::string_view xml, std::string_view tag);

/// The S3 error XML's <Code> (ASCII letters, digits and '.', at most 64), read from the first
/// max_error_body bytes only; "" when there is none.
std::string extract_s3_error_code(std::string_view body);
/// The <Message>, printable ASCII only, at most 200 bytes; "" when none.
std::string extract_s3_error_message(std::string_view body);

/// The ctstream::Error for a verdict that is not `accept`: `url` is redacted here; the kind is
/// not_found, truncated or io (denied, object changed, hostile responses, exhausted retries).
Error verdict_error(const Verdict& v, std::string_view url);

/// verdict_error's error for S3's 403 AccessDenied: what S3 answers for a key the caller may not
/// read, and for a missing key when the caller may not list the bucket (no s3:ListBucket). Its own
/// type, so that the discovery of a checkpoint's optional objects can tell it from other faults.
class AccessDenied : public Error {
 public:
  explicit AccessDenied(Error e) : Error(std::move(e)) {}
};
/// Throws verdict_error(v, url), as AccessDenied where it is one.
[[noreturn]] void throw_verdict(const Verdict& v, std::string_view url);

}  // namespace ctstream::io::http
