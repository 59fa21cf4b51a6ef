// Remote locations (src/io/url.hpp): s3:// and http(s):// parsing, SigV4 URI-encoding and
// canonical queries (the examples of AWS's "Create a canonical request" and "Authenticating
// Requests: Using the Authorization Header" pages), endpoint URLs, addressing style, redaction.
#include <catch2/catch.hpp>
#include <string>

#include "ctstream/error.hpp"
#include "io/url.hpp"

using namespace ctstream;
using namespace ctstream::io;

namespace {
ErrorKind kind_of(const std::string& text) {
  try {
    (void)parse_url(text);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::internal;  // accepted
}
}  // namespace

TEST_CASE("remote URLs are told from paths by their scheme", "[remote]") {
  CHECK(is_remote_url("s3://bucket/key"));
  CHECK(is_remote_url("S3://bucket"));
  CHECK(is_remote_url("https://host/x"));
  CHECK(is_remote_url("HTTP://host/x"));
  CHECK_FALSE(is_remote_url("/data/model"));
  CHECK_FALSE(is_remote_url("s3:/bucket"));
  CHECK_FALSE(is_remote_url("gs://bucket/key"));
  CHECK_FALSE(is_remote_url("file:///x"));
  CHECK_FALSE(is_remote_url(""));
}

TEST_CASE("s3:// URLs: bucket and literal key", "[remote]") {
  Url u = parse_url("s3://my-bucket/models/llama/model.safetensors");
  CHECK(u.scheme == UrlScheme::s3);
  CHECK(u.host == "my-bucket");
  CHECK(u.path == "models/llama/model.safetensors");
  CHECK(to_string(u) == "s3://my-bucket/models/llama/model.safetensors");
  // the key is literal: no percent-decoding, '//' and a trailing '/' kept, '?' and '#' are key bytes
  CHECK(parse_url("s3://b/a%20b").path == "a%20b");
  CHECK(parse_url("s3://b/a//b/").path == "a//b/");
  CHECK(parse_url("s3://b/x?y#z").path == "x?y#z");
  CHECK(parse_url("s3://b/sp ace+plus.json").path == "sp ace+plus.json");
  CHECK(parse_url("s3://b/\xe6\xa8\xa1\xe5\x9e\x8b/w.safetensors").path == "\xe6\xa8\xa1\xe5\x9e\x8b/w.safetensors");
  CHECK(parse_url("s3://bucket").path.empty());
  CHECK(parse_url("s3://bucket/").path.empty());
  CHECK(parse_url("S3://Legacy_Bucket/k").host == "Legacy_Bucket");  // S3-compatible servers' names
  CHECK(parse_url("s3://b/" + std::string(1024, 'k')).path.size() == 1024);

  CHECK(kind_of("s3://") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3:///key") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://AKIA:secret@bucket/key") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://bu cket/key") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://../key") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://b/" + std::string(1025, 'k')) == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://b/a\nb") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://b/a\x7f") == ErrorKind::invalid_argument);
  CHECK(kind_of("s3://b/\xff\xfe") == ErrorKind::invalid_argument);      // not UTF-8
  CHECK(kind_of("s3://b/\xc0\xaf") == ErrorKind::invalid_argument);      // overlong '/'
  CHECK(kind_of("s3://b/\xed\xa0\x80") == ErrorKind::invalid_argument);  // a surrogate
  CHECK(kind_of("s3://b/\xe6\xa8") == ErrorKind::invalid_argument);      // cut short
  CHECK(kind_of("s3://" + std::string(256, 'b')) == ErrorKind::invalid_argument);
  CHECK(kind_of("ftp://host/x") == ErrorKind::invalid_argument);
  CHECK(kind_of(std::string(max_url_bytes + 1, 'x')) == ErrorKind::invalid_argument);
}

TEST_CASE("http(s):// URLs: host, port, path, query", "[remote]") {
  Url u = parse_url("https://Example.COM:8443/a/b.json?X-Amz-Signature=abc#frag");
  CHECK(u.scheme == UrlScheme::https);
  CHECK(u.host == "example.com");
  CHECK(u.port == 8443);
  CHECK(u.path == "/a/b.json");
  CHECK(u.query == "X-Amz-Signature=abc");
  CHECK(to_string(u) == "https://example.com:8443/a/b.json?X-Amz-Signature=abc");
  CHECK(parse_url("http://127.0.0.1:9000").path == "/");
  CHECK(parse_url("https://h/p?a=b/c?d e").query == "a=b/c?d%20e");
  CHECK(parse_url("http://[::1]:8080/x").host == "[::1]");
  CHECK(parse_url("http://[::1]:8080/x").port == 8080);
  // bytes a request line cannot carry are escaped; valid escapes stay as they are
  CHECK(parse_url("https://h/sp ace/%41%zz/\xc3\xa9").path == "/sp%20ace/%41%25zz/%C3%A9");

  CHECK(kind_of("https://user:pass@host/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://host:0/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://host:65536/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://host:/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://host:12a/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https:///x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://ho_st/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://[::1/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://[zz]/x") == ErrorKind::invalid_argument);
  CHECK(kind_of("https://host/a\r\nHost: evil") == ErrorKind::invalid_argument);
}

TEST_CASE("a server's words lose every piece of a credential", "[remote]") {
  const std::string key = "AKIAEXAMPLEKEY000001", secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                    token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD";
  const auto r = [&](std::string text) { return redact_secrets(std::move(text), {key, secret, token, ""}); };
  // the Authorization header echoed: Credential=KEY/date/... is one run of key characters
  CHECK(r("auth AWS4-HMAC-SHA256 Credential=" + key + "/20261126/us-east-1/s3/aws4_request, SignedHeaders=host") ==
        "auth AWS4-HMAC-SHA256 <redacted>, SignedHeaders=host");
  CHECK(r("token " + token + " and " + secret + ".") == "token <redacted> and <redacted>.");
  // a token cut short by the message cap ("..." ends the run): a piece of 8+ bytes goes too
  CHECK(r("token " + token.substr(0, 30) + "...") == "token <redacted>...");
  CHECK(r("id (" + key.substr(4, 9) + ")") == "id (<redacted>)");
  // short common words that happen to be in a credential stay (they are not secrets)
  CHECK(r("Access Denied for s3 ok") == "Access Denied for s3 ok");
  CHECK(r("The AWS Access Key Id you provided does not exist in our records.") ==
        "The AWS Access Key Id you provided does not exist in our records.");
  CHECK(r("") == "");
  CHECK(redact_secrets("nothing to hide", {}) == "nothing to hide");
}

TEST_CASE("errors name the URL redacted: no userinfo, no query", "[remote]") {
  CHECK(redact_url("https://user:secret@host/p?X-Amz-Credential=AKIA&X-Amz-Signature=s") == "https://host/p");
  CHECK(redact_url("s3://AKIA:secret@bucket/key") == "s3://bucket/key");
  CHECK(redact_url("https://a@b@host/p#frag") == "https://host/p");
  CHECK(redact_url("https://host/p/a@b") == "https://host/p/a@b");  // '@' in a path is not userinfo
  CHECK(redact_url("s3://b/k\n\xff") == "s3://b/k%0A%FF");
  CHECK(redact_url("not a url?secret") == "not a url");
  CHECK(redact_url(std::string(100000, 'a')).size() <= 520);
  try {
    (void)parse_url("https://AKIAEXAMPLE:wJalrXUtnFEMI@host:99999/x?token=SECRET");
    FAIL("accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("AKIAEXAMPLE") == std::string::npos);
    CHECK(what.find("wJalrXUtnFEMI") == std::string::npos);
    CHECK(what.find("SECRET") == std::string::npos);
    CHECK(what.find("host") != std::string::npos);
  }
}

TEST_CASE("SigV4 URI-encoding of keys and canonical queries", "[remote]") {
  // AWS: "URI-encode each byte ... A-Z, a-z, 0-9, '-', '.', '_', '~' are not encoded"; space is
  // %20, never '+'; hex upper-case; '/' kept in an object key, encoded elsewhere.
  CHECK(uri_encode("photos/Jan/sample.jpg", true) == "photos/Jan/sample.jpg");
  CHECK(uri_encode("/documents and settings/", true) == "/documents%20and%20settings/");
  CHECK(uri_encode("model/sp ace+plus.json", true) == "model/sp%20ace%2Bplus.json");
  CHECK(uri_encode("100%", true) == "100%25");
  CHECK(uri_encode("a//b/", true) == "a//b/");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
  CHECK(uri_encode("-._~AZaz09", false) == "-._~AZaz09");
  CHECK(uri_encode("\xe6\xa8\xa1/\xc3\xa9", true) == "%E6%A8%A1/%C3%A9");
  CHECK(uri_encode("!*'();:@&=+$,?#[] \x01\x7f", false) ==
        "%21%2A%27%28%29%3B%3A%40%26%3D%2B%24%2C%3F%23%5B%5D%20%01%7F");
  CHECK(uri_encode("", true).empty());

  // AWS's ListObjects example: GET /?max-keys=2&prefix=J
  CHECK(canonical_query({{"prefix", "J"}, {"max-keys", "2"}}) == "max-keys=2&prefix=J");
  // a value-less subresource keeps its '=' (GET ?lifecycle)
  CHECK(canonical_query({{"lifecycle", ""}}) == "lifecycle=");
  // the order rclone accepts from libcurl 7.88.1 (design note 3.2)
  CHECK(canonical_query({{"prefix", "model/"}, {"list-type", "2"}}) == "list-type=2&prefix=model%2F");
  // sorted by encoded name, byte order: upper case first, '%' before '-'
  CHECK(canonical_query({{"b", "1"}, {"a-b", "2"}, {"a b", "3"}, {"B", "4"}}) == "B=4&a%20b=3&a-b=2&b=1");
  CHECK(canonical_query({{"continuation-token", "1/a+b=="}, {"list-type", "2"}}) ==
        "continuation-token=1%2Fa%2Bb%3D%3D&list-type=2");
  CHECK(canonical_query({}).empty());
}

TEST_CASE("AWS bucket naming rules", "[remote]") {
  for (const char* ok : {"abc", "my-bucket", "my.bucket.name", "b00", "0bucket", "a1-b2.c3"})
    CHECK(aws_bucket_name_ok(ok));
  for (const char* bad : {"ab",
                          "b0",
                          "My-Bucket",
                          "my_bucket",
                          "-bucket",
                          "bucket-",
                          ".bucket",
                          "bucket.",
                          "my..bucket",
                          "my.-bucket",
                          "my-.bucket",
                          "192.168.5.4",
                          "xn--bucket",
                          "sthree-b",
                          "amzn-s3-demo-b",
                          "bucket-s3alias",
                          "bucket--ol-s3",
                          "bucket.mrap",
                          "bucket--x-s3",
                          "bucket--table-s3"})
    CHECK_FALSE(aws_bucket_name_ok(bad));
  CHECK(aws_bucket_name_ok(std::string(63, 'a')));
  CHECK_FALSE(aws_bucket_name_ok(std::string(64, 'a')));
  CHECK(aws_bucket_name_ok("1.2.3.4.5"));  // not an IPv4 address
}

TEST_CASE("endpoints and request URLs, virtual-hosted and path-style", "[remote]") {
  const Endpoint aws = aws_endpoint("eu-west-1");
  CHECK(aws.https);
  CHECK(aws.host == "s3.eu-west-1.amazonaws.com");
  CHECK(is_aws_endpoint(aws));
  CHECK(aws_endpoint("cn-north-1").host == "s3.cn-north-1.amazonaws.com.cn");
  CHECK(is_aws_endpoint(aws_endpoint("cn-north-1")));

  const Endpoint local = parse_endpoint("http://127.0.0.1:9000/", "AWS_ENDPOINT_URL");
  CHECK_FALSE(local.https);
  CHECK(local.host == "127.0.0.1");
  CHECK(local.port == 9000);
  CHECK(local.base.empty());
  CHECK_FALSE(is_aws_endpoint(local));
  CHECK(parse_endpoint("https://Minio.Example/s3/", "x").base == "/s3");
  for (const char* bad : {"127.0.0.1:9000", "ftp://h", "http://u:p@h", "http://h?x=1", "http://h:0", "https://"})
    CHECK_THROWS_MATCHES(parse_endpoint(bad, "AWS_ENDPOINT_URL"), Error,
                         Catch::Predicate<Error>([](const Error& e) { return e.kind() == ErrorKind::invalid_config; }));

  // automatic: virtual-hosted on AWS for DNS-compatible names without dots over https
  CHECK(resolve_addressing(aws, "my-bucket", AddressingStyle::automatic) == AddressingStyle::virtual_hosted);
  CHECK(resolve_addressing(aws, "my.bucket", AddressingStyle::automatic) == AddressingStyle::path);
  CHECK(resolve_addressing(aws, "Legacy_Bucket", AddressingStyle::automatic) == AddressingStyle::path);
  CHECK(resolve_addressing(local, "my-bucket", AddressingStyle::automatic) == AddressingStyle::path);
  CHECK(resolve_addressing(local, "my-bucket", AddressingStyle::virtual_hosted) == AddressingStyle::virtual_hosted);
  CHECK(resolve_addressing(aws, "my-bucket", AddressingStyle::path) == AddressingStyle::path);
  CHECK_THROWS_AS(resolve_addressing(aws, "Legacy_Bucket", AddressingStyle::virtual_hosted), Error);

  CHECK(object_url(aws, "my-bucket", "models/sp ace+plus.json", AddressingStyle::virtual_hosted) ==
        "https://my-bucket.s3.eu-west-1.amazonaws.com/models/sp%20ace%2Bplus.json");
  CHECK(object_url(aws, "my.bucket", "a//b", AddressingStyle::path) ==
        "https://s3.eu-west-1.amazonaws.com/my.bucket/a//b");
  CHECK(object_url(local, "models", "\xc3\xa9/x.json", AddressingStyle::path) ==
        "http://127.0.0.1:9000/models/%C3%A9/x.json");
  CHECK(object_url(local, "models", "", AddressingStyle::path,
                   canonical_query({{"prefix", "llama/"}, {"list-type", "2"}})) ==
        "http://127.0.0.1:9000/models/?list-type=2&prefix=llama%2F");
  CHECK(object_url(parse_endpoint("https://h/base", "x"), "b", "k", AddressingStyle::path) == "https://h/base/b/k");
}
