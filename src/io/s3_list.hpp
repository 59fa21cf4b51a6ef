// io — S3 ListObjectsV2 (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html):
// the listing of one "directory" of a bucket (prefix + delimiter '/'), page by page with
// continuation tokens, each page's XML read by a bounded parser (caps on the page, the keys, the
// pages; the element reader is http_response's xml_element). Used by remote shard discovery when a
// prefix has no index (src/format/remote_shards.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctstream::io {

class HttpClient;

inline constexpr uint64_t max_list_page_bytes = 4ull << 20;  ///< one page's XML (AWS: ~1000 keys, ~300 KiB)
inline constexpr size_t max_list_page_entries = 10000;       ///< Contents + CommonPrefixes of one page
inline constexpr size_t max_list_entries = 100000;           ///< over all pages of one listing
inline constexpr size_t max_list_pages = 1000;

struct ListedObject {
  std::string key;  ///< the whole key, entities decoded
  uint64_t size = 0;
};

struct ListPage {
  std::vector<ListedObject> objects;         ///< <Contents>
  std::vector<std::string> common_prefixes;  ///< <CommonPrefixes><Prefix>
  bool truncated = false;                    ///< <IsTruncated>true
  std::string next_token;                    ///< <NextContinuationToken>, entities decoded
};

/// Parses one ListObjectsV2 answer. Error{io} naming `display` when it is not a
/// ListBucketResult, is larger than max_list_page_bytes, holds more than max_list_page_entries
/// entries, a key that is empty, over 1024 bytes or badly escaped, a Size that is not a decimal, or
/// an IsTruncated other than true/false.
ListPage parse_list_objects(std::string_view xml, std::string_view display);

/// XML character data with its five named entities and numeric references (`&#N;`, `&#xH;`, as
/// UTF-8; not 0, not a surrogate, at most U+10FFFF) decoded; false when an `&` starts anything else.
bool xml_unescape(std::string_view text, std::string& out);

/// The canonical query of one ListObjectsV2 request (list-type=2, prefix, delimiter '/', max-keys,
/// continuation-token when not empty).
std::string list_objects_query(std::string_view prefix, std::string_view token, unsigned max_keys);

/// The name of a listed `key` relative to `prefix` when it is an object directly under it: nullopt
/// for the prefix's own "directory marker", a deeper key (a '/' left), "." and "..", and a name
/// holding a NUL (what is returned is always a contained file name). Error{io} naming `display`
/// for a key outside the prefix (a server answering another request).
std::optional<std::string> listed_name(std::string_view prefix, std::string_view key, std::string_view display);

/// The objects directly under `prefix` (ending in '/', or empty for the bucket's top) of an S3
/// bucket, as names relative to the prefix (the "directory marker" whose key is the prefix itself
/// skipped), in the server's order, and whether the prefix has anything at all under it
/// (sub-prefixes included). Pages of `max_keys` (1-1000) followed through continuation tokens.
/// Errors as HttpClient::get_document; Error{io} for a malformed page, a truncated page without a
/// token, a token repeated, more than max_list_pages pages or max_list_entries entries.
struct PrefixListing {
  std::vector<ListedObject> objects;  ///< key = the name relative to the prefix
  bool any = false;                   ///< something (an object or a sub-prefix) is under the prefix
  unsigned pages = 0;
};
PrefixListing list_s3_prefix(std::string_view bucket, std::string_view prefix, HttpClient& client,
                             unsigned max_keys = 1000);

}  // namespace ctstream::io
