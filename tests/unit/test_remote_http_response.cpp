// HTTP response rules (src/io/http_response.hpp): header accumulation under caps, strict parsing,
// the acceptance of ranged answers (AWS S3's 206, rclone serve s3's 200 + Content-Range), the
// retry classification, S3 error codes. One section per header-level row of the hostile-server
// table (docs/design/object_storage.md 5.2) and per rclone answer recorded in section 4.
#include <curl/curl.h>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ctstream/error.hpp"
#include "io/http_response.hpp"

using namespace ctstream;
using namespace ctstream::io::http;

namespace {
ResponseHead head_of(const std::vector<std::string>& lines) {
  HeaderAccumulator acc;
  for (const auto& l : lines) acc.add_line(l + "\r\n");
  acc.add_line("\r\n");
  return acc.head();
}
RangeRequest range(uint64_t start, uint64_t length, std::optional<uint64_t> size = 1048576, std::string etag = "") {
  RangeRequest r;
  r.start = start;
  r.length = length;
  r.size = size;
  r.etag = std::move(etag);
  return r;
}
std::string s3_error(const std::string& code) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
         "</Code><Message>Please reduce your request rate.</Message><RequestId>1</RequestId></Error>";
}
}  // namespace

TEST_CASE("strict integers, Content-Range, Content-Length", "[remote]") {
  CHECK(parse_u64("0") == 0u);
  CHECK(parse_u64("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parse_u64("18446744073709551616"));  // 2^64
  CHECK_FALSE(parse_u64("99999999999999999999"));
  CHECK_FALSE(parse_u64("000000000000000000001"));  // 21 digits
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "١"}) CHECK_FALSE(parse_u64(bad));

  auto cr = parse_content_range("bytes 100-199/1048576");
  REQUIRE(cr);
  CHECK_FALSE(cr->unsatisfied);
  CHECK(cr->first == 100);
  CHECK(cr->last == 199);
  CHECK(cr->total == 1048576u);
  cr = parse_content_range("  Bytes 0-0/1 ");
  REQUIRE(cr);
  CHECK(cr->last == 0);
  cr = parse_content_range("bytes */1048576");
  REQUIRE(cr);
  CHECK(cr->unsatisfied);
  CHECK(cr->total == 1048576u);
  cr = parse_content_range("bytes 5-9/*");
  REQUIRE(cr);
  CHECK_FALSE(cr->total);
  for (const char* bad : {"bytes -1-5/10", "bytes 0-18446744073709551616/18446744073709551617", "bytes 5-4/10",
                          "bytes 0-10/10", "bytes 0-9/10 trailing", "items 0-9/10", "bytes0-9/10", "bytes 0-9",
                          "bytes 0-9/", "bytes */*", "bytes 0--9/10", "bytes +0-9/10", "bytes 0-9/-10", ""})
    CHECK_FALSE(parse_content_range(bad));
  CHECK(parse_content_length(" 100 ") == 100u);
  CHECK_FALSE(parse_content_length("-100"));
  CHECK_FALSE(parse_content_length("100, 100"));
}

TEST_CASE("ETags and Retry-After", "[remote]") {
  auto e = parse_etag("\"0123abcd\"");
  REQUIRE(e);
  CHECK(e->value == "\"0123abcd\"");
  CHECK_FALSE(e->weak);
  e = parse_etag("W/\"x\"");
  REQUIRE(e);
  CHECK(e->weak);
  CHECK(e->value == "W/\"x\"");
  CHECK(parse_etag("0123abcd")->value == "\"0123abcd\"");  // rclone's listing XML: unquoted
  for (const char* bad : {"", "\"\"", "\"a", "\"a b\"", "\"a\"b\"", "W/"}) CHECK_FALSE(parse_etag(bad));
  CHECK_FALSE(parse_etag("\"" + std::string(2000, 'a') + "\""));

  CHECK(parse_retry_after("1", 0, 20) == 1u);
  CHECK(parse_retry_after("120", 0, 20) == 20u);
  CHECK(parse_retry_after("99999999999999999999999", 0, 20) == 20u);
  CHECK_FALSE(parse_retry_after("-1", 0, 20));
  CHECK_FALSE(parse_retry_after("1.5", 0, 20));
  CHECK_FALSE(parse_retry_after("soon", 0, 20));
  // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example)
  CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111770, 20) == 7u);
  CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111780, 20) == 0u);
  CHECK_FALSE(parse_retry_after("Sun, 06 Foo 1994 08:49:37 GMT", 0, 20));
  CHECK_FALSE(parse_retry_after("Sun, 06 Nov 1994 25:49:37 GMT", 0, 20));
}

TEST_CASE("header accumulation: status lines, duplicates, caps", "[remote]") {
  HeaderAccumulator acc;
  CHECK(acc.add_line("HTTP/1.1 100 Continue\r\n"));
  CHECK(acc.add_line("\r\n"));
  CHECK(acc.add_line("HTTP/1.1 206 Partial Content\r\n"));
  CHECK(acc.add_line("content-range: bytes 0-9/10\r\n"));
  CHECK(acc.add_line("ETag:\"e\"\r\n"));
  CHECK(acc.add_line("X-Other: whatever\r\n"));
  CHECK_FALSE(acc.complete());
  CHECK(acc.add_line("\r\n"));
  CHECK(acc.complete());
  CHECK(acc.head().status == 206);
  CHECK(acc.head().content_range == "bytes 0-9/10");
  CHECK(acc.head().etag == "\"e\"");
  CHECK(HeaderAccumulator{}.head().status == 0);

  // a redirect's head is replaced by the next one
  ResponseHead h =
      head_of({"HTTP/1.1 302 Found", "Location: /x", "Content-Length: 5", "", "HTTP/2 200", "Content-Length: 10"});
  CHECK(h.status == 200);
  CHECK(h.content_length == "10");
  CHECK_FALSE(h.content_range);

  // the same header twice: equal values are one, different ones a conflict
  CHECK_FALSE(head_of({"HTTP/1.1 206 x", "Content-Length: 10", "Content-Length: 10"}).conflict);
  CHECK(head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/10", "Content-Range: bytes 0-4/10"}).conflict);

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"HTTP/1.1 2000 OK"},
                                              {"HTTP/1.1 099 x"},
                                              {"HTTP/1.1"},
                                              {"Content-Length: 1"},
                                              {"HTTP/1.1 200 OK", " folded"},
                                              {"HTTP/1.1 200 OK", "no colon"},
                                              {"HTTP/1.1 200 OK", "Bad Name: x"},
                                              {"HTTP/1.1 200 OK", "X: a\x01z"}})
    CHECK(head_of(bad).overflow);

  SECTION("hostile: header_flood, 10k lines") {
    HeaderAccumulator flood;
    flood.add_line("HTTP/1.1 200 OK\r\n");
    size_t accepted = 0;
    for (int i = 0; i < 10000; ++i)
      if (flood.add_line("X-Flood-" + std::to_string(i) + ": y\r\n")) ++accepted;
    CHECK(accepted < max_header_lines);
    CHECK(flood.head().overflow);
    const Verdict v = judge(range(0, 10), flood.head(), 0, "");
    CHECK(v.action == Action::fail);
  }
  SECTION("hostile: header_flood, 1 MiB of headers") {
    HeaderAccumulator flood;
    flood.add_line("HTTP/1.1 200 OK\r\n");
    bool refused = false;
    for (int i = 0; i < 16 && !refused; ++i) refused = !flood.add_line("X-Big: " + std::string(65536, 'a') + "\r\n");
    CHECK(refused);
    CHECK(judge(range(0, 10), flood.head(), CURLE_WRITE_ERROR, "").action == Action::fail);
  }
}

TEST_CASE("ranged answers: AWS 206, rclone 200 + Content-Range, clipping", "[remote]") {
  // AWS: 206 with the exact range
  Verdict v = judge(range(100, 100),
                    head_of({"HTTP/1.1 206 Partial Content", "Content-Range: bytes 100-199/1048576",
                             "Content-Length: 100", "ETag: \"abc\""}),
                    0, "");
  CHECK(v.action == Action::accept);
  CHECK(v.first == 100);
  CHECK(v.count == 100);
  CHECK(v.total == 1048576);
  // rclone serve s3: 200 with a matching Content-Range (design note section 4)
  v = judge(range(100, 100),
            head_of({"HTTP/1.1 200 OK", "Content-Range: bytes 100-199/1048576", "Content-Length: 100",
                     "Accept-Ranges: bytes", "Etag: \"abc\""}),
            0, "");
  CHECK(v.action == Action::accept);
  // a range running past the end is clipped by the server
  v = judge(range(1048570, 100),
            head_of({"HTTP/1.1 200 OK", "Content-Range: bytes 1048570-1048575/1048576", "Content-Length: 6",
                     "ETag: \"abc\""}),
            0, "");
  CHECK(v.action == Action::accept);
  CHECK(v.count == 6);
  // at open: size and ETag unknown, the first answer gives them
  v = judge(range(0, 8 << 20, std::nullopt, ""),
            head_of({"HTTP/1.1 206 Partial Content", "Content-Range: bytes 0-1048575/1048576", "ETag: \"abc\""}), 0,
            "");
  CHECK(v.action == Action::accept);
  CHECK(v.total == 1048576);
  CHECK(v.count == 1048576);
  // no ETag in an answer: nothing to compare where none was pinned; where one was, the answer
  // cannot be told from another version's (a server that stopped vouching for it)
  CHECK(
      judge(range(0, 10, 1048576, ""), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576"}), 0, "").action ==
      Action::accept);
  v = judge(range(0, 10, 1048576, "\"abc\""), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576"}), 0, "");
  CHECK(v.action == Action::object_changed);
  CHECK_THAT(v.reason, Catch::Contains("no ETag"));
  // a weak ETag pinned at open is compared weakly: the same opaque value passes, another does not
  CHECK(judge(range(0, 10, 1048576, "W/\"v1\""),
              head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576", "ETag: W/\"v1\""}), 0, "")
            .action == Action::accept);
  CHECK(judge(range(0, 10, 1048576, "W/\"v1\""),
              head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576", "ETag: \"v1\""}), 0, "")
            .action == Action::accept);
  CHECK(judge(range(0, 10, 1048576, "W/\"v1\""),
              head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576", "ETag: W/\"v2\""}), 0, "")
            .action == Action::object_changed);
  CHECK(judge(range(0, 10, 1048576, "W/\"v1\""), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/1048576"}), 0, "")
            .action == Action::object_changed);

  SECTION("hostile: wrong_range") {
    for (const char* cr :
         {"bytes 101-200/1048576", "bytes 100-198/1048576", "bytes 100-200/1048576", "bytes 0-1048575/1048576"}) {
      v = judge(range(100, 100), head_of({"HTTP/1.1 206 x", "ETag: \"abc\"", std::string("Content-Range: ") + cr}), 0,
                "");
      CHECK(v.action == Action::fail);
    }
    CHECK(judge(range(100, 100), head_of({"HTTP/1.1 206 x", "ETag: \"abc\""}), 0, "").action == Action::fail);
    CHECK(
        judge(range(100, 100), head_of({"HTTP/1.1 206 x", "ETag: \"abc\"", "Content-Range: garbage"}), 0, "").action ==
        Action::fail);
    CHECK(judge(range(100, 100), head_of({"HTTP/1.1 206 x", "ETag: \"abc\"", "Content-Range: bytes 100-199/*"}), 0, "")
              .action == Action::fail);
    CHECK(judge(range(100, 100), head_of({"HTTP/1.1 204 x"}), 0, "").action == Action::fail);
    // a range starting at or past the end must be 416, not a 2xx
    CHECK(judge(range(2000000, 10, std::nullopt, ""), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/10"}), 0, "")
              .action == Action::fail);
  }
  SECTION("hostile: wrong_total") {
    v = judge(range(100, 100), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/2000000"}), 0, "");
    CHECK(v.action == Action::object_changed);
    CHECK(verdict_error(v, "s3://b/k").kind() == ErrorKind::io);
  }
  SECTION("hostile: long_body (Content-Length over the range)") {
    v = judge(range(100, 100),
              head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/1048576", "Content-Length: 1000000"}), 0, "");
    CHECK(v.action == Action::fail);
    CHECK(judge(range(100, 100),
                head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/1048576", "Content-Length: 99"}), 0, "")
              .action == Action::fail);
    CHECK(judge(range(100, 100),
                head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/1048576", "Content-Length: -100"}), 0, "")
              .action == Action::fail);
  }
  SECTION("hostile: ignore_range") {
    v = judge(range(100, 100), head_of({"HTTP/1.1 200 OK", "Content-Length: 1048576"}), 0, "");
    CHECK(v.action == Action::fail);
    CHECK(v.reason.find("does not support range requests") != std::string::npos);
    // ... unless the request was for the whole object
    RangeRequest whole = range(0, 0);
    whole.whole_object = true;
    v = judge(whole, head_of({"HTTP/1.1 200 OK", "Content-Length: 1048576"}), 0, "");
    CHECK(v.action == Action::accept);
    CHECK(v.count == 1048576);
    CHECK(judge(range(0, 1048576), head_of({"HTTP/1.1 200 OK", "Content-Length: 1048576"}), 0, "").action ==
          Action::accept);
    CHECK(judge(range(0, 4096, std::nullopt, ""), head_of({"HTTP/1.1 200 OK", "Content-Length: 100"}), 0, "").action ==
          Action::accept);
    CHECK(judge(range(0, 10, std::nullopt, ""), head_of({"HTTP/1.1 200 OK", "Content-Length: 100"}), 0, "").action ==
          Action::fail);
    CHECK(judge(whole, head_of({"HTTP/1.1 200 OK", "Content-Length: 5"}), 0, "").action == Action::object_changed);
    CHECK(judge(whole, head_of({"HTTP/1.1 200 OK"}), 0, "").action == Action::fail);  // no length at all
  }
  SECTION("hostile: etag_flip") {
    v = judge(range(100, 100, 1048576, "\"abc\""),
              head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/1048576", "ETag: \"other\""}), 0, "");
    CHECK(v.action == Action::object_changed);
    CHECK(v.reason.find("object changed") != std::string::npos);
    CHECK(
        judge(range(100, 100), head_of({"HTTP/1.1 206 x", "Content-Range: bytes 100-199/1048576", "ETag: \"\""}), 0, "")
            .action == Action::fail);
    // AWS answers If-Match with 412
    CHECK(judge(range(100, 100), head_of({"HTTP/1.1 412 Precondition Failed"}), 0, s3_error("PreconditionFailed"))
              .action == Action::object_changed);
  }
  SECTION("hostile: negative / overflow") {
    for (const char* cr : {"bytes -1-5/1048576", "bytes 0-18446744073709551616/1048576",
                           "bytes 100-199/18446744073709551616", "bytes 100-199/-1"})
      CHECK(judge(range(100, 100), head_of({"HTTP/1.1 206 x", std::string("Content-Range: ") + cr}), 0, "").action ==
            Action::fail);
    CHECK(judge(range(UINT64_MAX - 5, 100, std::nullopt, ""), head_of({"HTTP/1.1 206 x"}), 0, "").action ==
          Action::fail);
    // an invalid request is refused whatever the answer, even a 416 that looks like an empty object
    CHECK(judge(range(5, UINT64_MAX, std::nullopt, ""), head_of({"HTTP/1.1 416 x", "Content-Range: bytes */5"}), 0, "")
              .action == Action::fail);
    CHECK(judge(range(5, 0, std::nullopt, ""), head_of({"HTTP/1.1 416 x", "Content-Range: bytes */5"}), 0, "").action ==
          Action::fail);
  }
}

TEST_CASE("statuses, S3 error codes and transport errors: retry or fail", "[remote]") {
  const RangeRequest r = range(0, 10);
  auto status = [&](const std::string& line, const std::string& body = {}, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), line);
    return judge(r, head_of(extra), 0, body);
  };
  SECTION("hostile: slowdown") {
    Verdict v = status("HTTP/1.1 503 Slow Down", s3_error("SlowDown"), {"Retry-After: 1"});
    CHECK(v.action == Action::retry_throttled);
    CHECK(v.s3_code == "SlowDown");
    CHECK(v.retry_after_s == 1u);
    CHECK(status("HTTP/1.1 429 Too Many Requests").action == Action::retry_throttled);
    CHECK(status("HTTP/1.1 400 Bad Request", s3_error("RequestLimitExceeded")).action == Action::retry_throttled);
  }
  CHECK(status("HTTP/1.1 500 Internal Server Error", s3_error("InternalError")).action == Action::retry);
  CHECK(status("HTTP/1.1 502 Bad Gateway").action == Action::retry);
  CHECK(status("HTTP/1.1 504 Gateway Timeout").action == Action::retry);
  CHECK(status("HTTP/1.1 408 Request Timeout").action == Action::retry);
  CHECK(status("HTTP/1.1 400 Bad Request", s3_error("RequestTimeout")).action == Action::retry);
  CHECK(status("HTTP/1.1 400 Bad Request", s3_error("InvalidArgument")).action == Action::fail);
  CHECK(status("HTTP/1.1 400 Bad Request", s3_error("ExpiredToken")).action == Action::denied);
  CHECK(status("HTTP/1.1 501 Not Implemented").action == Action::fail);
  CHECK(status("HTTP/1.1 403 Forbidden", s3_error("SignatureDoesNotMatch")).action == Action::denied);
  CHECK(status("HTTP/1.1 403 Forbidden", s3_error("AccessDenied")).action == Action::denied);
  Verdict v = status("HTTP/1.1 404 Not Found", s3_error("NoSuchKey"));
  CHECK(v.action == Action::not_found);
  CHECK(v.s3_code == "NoSuchKey");
  const Error e = verdict_error(v, "https://AKIA:secret@bucket.s3.amazonaws.com/model/config.json?X-Amz-Signature=s");
  CHECK(e.kind() == ErrorKind::file_not_found);
  CHECK(e.file() == "https://bucket.s3.amazonaws.com/model/config.json");
  CHECK(std::string(e.what()).find("NoSuchKey") != std::string::npos);
  CHECK(std::string(e.what()).find("secret") == std::string::npos);
  // wrong region: the error names the bucket's region
  v = status("HTTP/1.1 301 Moved Permanently", s3_error("PermanentRedirect"), {"x-amz-bucket-region: eu-west-1"});
  CHECK(v.action == Action::fail);
  CHECK(v.reason.find("eu-west-1") != std::string::npos);
  // 416: shorter than at open (rclone: InvalidRange), or an empty object read at open
  v = status("HTTP/1.1 416 Requested Range Not Satisfiable", s3_error("InvalidRange"), {"Content-Range: bytes */5"});
  CHECK(v.action == Action::truncated);
  CHECK(verdict_error(v, "s3://b/k").kind() == ErrorKind::truncated);
  v = judge(range(0, 4096, std::nullopt, ""), head_of({"HTTP/1.1 416 x", "Content-Range: bytes */0"}), 0, "");
  CHECK(v.action == Action::accept);
  CHECK(v.count == 0);
  CHECK(v.total == 0);

  SECTION("hostile: bad_xml") {
    for (const std::string& body :
         {std::string(1 << 20, '<'), std::string("<Error><Code>NoSuch</Error>"), std::string("<Code>a b</Code>"),
          std::string("<Code>") + std::string(100, 'A') + "</Code>", std::string(9000, ' ') + "<Code>Late</Code>",
          std::string("<Code>\xff\xfe</Code>")}) {
      v = status("HTTP/1.1 403 Forbidden", body);
      CHECK(v.action == Action::denied);
      CHECK(v.s3_code.empty());
      CHECK(v.reason.size() < 400);
    }
    CHECK(extract_s3_error_message("<Message>a\x01" + std::string(500, 'm') + "</Message>").size() <= 203);
  }
  SECTION("transport errors: short_body, stall, endless_body, redirect_loop") {
    CHECK(judge(r, ResponseHead{}, CURLE_PARTIAL_FILE, "").action == Action::retry);        // short_body
    CHECK(judge(r, ResponseHead{}, CURLE_OPERATION_TIMEDOUT, "").action == Action::retry);  // stall
    CHECK(judge(r, ResponseHead{}, CURLE_RECV_ERROR, "").action == Action::retry);
    CHECK(judge(r, ResponseHead{}, CURLE_COULDNT_CONNECT, "").action == Action::retry);
    CHECK(judge(r, ResponseHead{}, CURLE_GOT_NOTHING, "").action == Action::retry);
    CHECK(judge(r, ResponseHead{}, CURLE_WRITE_ERROR, "").action == Action::fail);         // endless_body guard
    CHECK(judge(r, ResponseHead{}, CURLE_TOO_MANY_REDIRECTS, "").action == Action::fail);  // redirect_loop
    CHECK(judge(r, ResponseHead{}, CURLE_PEER_FAILED_VERIFICATION, "").action == Action::fail);
    CHECK(classify_transport(CURLE_OK) == Action::accept);
    CHECK(judge(r, ResponseHead{}, 0, "").action == Action::fail);  // no head at all
  }
}
