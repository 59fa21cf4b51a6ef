// io — remote locations: `s3://bucket/key` and `http(s)://host[:port]/path` parsed and checked,
// keys URI-encoded as AWS Signature Version 4 canonicalises them, canonical query strings, the
// request URL for an S3 endpoint (virtual-hosted or path-style), and the redaction that every
// error message naming a URL goes through. No network, no libcurl.
//
// libcurl 7.88.1 signs the path and the query exactly as given (docs/design/object_storage.md
// section 3.2), so the URLs built here are already canonical. The transport must also set
// CURLOPT_PATH_AS_IS: a key segment "." or ".." is an object name, not a dot segment.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/text.hpp"

namespace ctstream::io {

enum class UrlScheme : uint8_t { s3, http, https };

/// A parsed remote location. Nothing in it is percent-decoded: an S3 key is the literal text
/// after the bucket (as the AWS CLI reads `s3://` URLs), an HTTP path is what the server is sent.
struct Url {
  UrlScheme scheme = UrlScheme::s3;
  std::string host;   ///< s3: the bucket; http(s): the host, lower-cased (IPv6 literal in brackets)
  uint16_t port = 0;  ///< http(s) only; 0 = the scheme's default
  std::string path;   ///< s3: the key (no leading '/', may be empty); http(s): path from '/', percent-encoded
  std::string query;  ///< http(s) only: the query without '?' (kept for the request, never printed)
};

/// Longest URL accepted (a key is at most 1024 bytes; a host at most 253).
inline constexpr size_t max_url_bytes = 8192;

/// Whether `text` starts with `s3://`, `http://` or `https://` (scheme case-insensitive): the test
/// made on a path's native string before any std::filesystem call. Inline: builds without remote
/// code (CTSTREAM_REMOTE=OFF) make it too, to refuse such paths rather than look them up as files.
inline bool is_remote_url(std::string_view text) noexcept {
  return detail::istarts_with(text, "s3://") || detail::istarts_with(text, "http://") ||
         detail::istarts_with(text, "https://");
}

/// Parses a remote location. Refused with Error{invalid_argument} naming the redacted URL: another
/// scheme, credentials in the URL (`user:pass@`), an empty or malformed host or bucket, a port
/// outside 1-65535, control characters, an S3 key over 1024 bytes or not UTF-8. Bytes of an HTTP
/// path that a URL may not carry (space, non-ASCII) are percent-encoded; valid escapes are kept.
Url parse_url(std::string_view text);

/// The URL back as text (query included: for the transport only, never for a message).
std::string to_string(const Url& url);

/// `text` fit for an error message: userinfo, query string and fragment dropped, control and
/// non-ASCII bytes %XX-escaped, cut at 512 bytes. Works on any text, parseable or not.
std::string redact_url(std::string_view text);

/// `text` (a server's words: an S3 error <Message>, a header quoted in a refusal) with every piece
/// of a credential in `secrets` replaced by "<redacted>": each run of the characters access keys,
/// secrets and session tokens are made of ([A-Za-z0-9+/=_-]) that contains a secret, or is a piece
/// of one at least 8 bytes long (a server echoing a token cut short). A server may echo what it was
/// sent (the Authorization header names the access key id; x-amz-security-token is the token).
std::string redact_secrets(std::string text, std::initializer_list<std::string_view> secrets);

/// AWS's rules for a general purpose bucket name (3-63 bytes of a-z 0-9 . -, letter or digit at
/// both ends, no "..", not an IPv4 address, no reserved prefix or suffix): the names that can be a
/// DNS label, so the names virtual-hosted addressing can use.
bool aws_bucket_name_ok(std::string_view bucket) noexcept;

/// URI-encoding as SigV4 wants it: RFC 3986 unreserved bytes (A-Z a-z 0-9 - . _ ~) kept, every
/// other byte %XX with upper-case hex (space is %20, never '+'); '/' kept when `keep_slash` (object
/// key in a path) and %2F otherwise (query names and values).
std::string uri_encode(std::string_view text, bool keep_slash);

/// A canonical query string: every name and value URI-encoded, sorted by encoded name (then
/// value), each parameter written `name=value` even with an empty value, joined by '&'.
std::string canonical_query(std::vector<std::pair<std::string, std::string>> params);

enum class AddressingStyle : uint8_t { automatic, path, virtual_hosted };

/// An S3 endpoint: `http(s)://host[:port][/base]`.
struct Endpoint {
  bool https = true;
  std::string host;   ///< lower-cased
  uint16_t port = 0;  ///< 0 = the scheme's default
  std::string base;   ///< path prefix without a trailing '/', usually empty
};

/// Parses an endpoint URL (AWS_ENDPOINT_URL and its kin); Error{invalid_config} naming `what`.
Endpoint parse_endpoint(std::string_view text, std::string_view what);

/// AWS's endpoint for `region`: https://s3.REGION.amazonaws.com (amazonaws.com.cn for cn-*).
Endpoint aws_endpoint(std::string_view region);

/// Whether the endpoint is AWS's own (*.amazonaws.com, *.amazonaws.com.cn).
bool is_aws_endpoint(const Endpoint& e) noexcept;

/// The style a request uses: `automatic` is virtual-hosted on AWS endpoints when the bucket is a
/// DNS name (and has no '.' over https: the wildcard certificate covers one label), path-style
/// elsewhere (S3-compatible servers). An explicit `virtual_hosted` with a bucket that cannot be a
/// host name is Error{invalid_argument}.
AddressingStyle resolve_addressing(const Endpoint& e, std::string_view bucket, AddressingStyle wanted);

/// The request URL of `key` in `bucket` (key URI-encoded, '/' kept; `query` appended as given,
/// build it with canonical_query). `style` must be resolved (not `automatic`).
std::string object_url(const Endpoint& e, std::string_view bucket, std::string_view key, AddressingStyle style,
                       std::string_view query = {});

}  // namespace ctstream::io
