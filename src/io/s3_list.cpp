// io — ListObjectsV2: see s3_list.hpp.
#include "io/s3_list.hpp"

#include <set>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"
#include "io/http_client.hpp"
#include "io/http_response.hpp"
#include "io/url.hpp"

namespace ctstream::io {
namespace {

constexpr size_t max_key_bytes = 1024;  // AWS's limit on a key (UTF-8 bytes)

[[noreturn]] void refuse(std::string_view display, const std::string& why) {
  throw Error(ErrorKind::io, redact_url(display), "", "malformed ListObjectsV2 answer: " + why);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The text of each `<tag>...</tag>` block of `xml`, in order (flat: blocks do not nest).
template <class F>
void for_each_block(std::string_view xml, std::string_view tag, F&& f) {
  std::string open, close;  // appended, not operator+ (GCC 12's -Wrestrict false positive on it)
  open.append("<").append(tag).append(">");
  close.append("</").append(tag).append(">");
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string_view::npos) {
    const size_t start = at + open.size(), end = xml.find(close, start);
    if (end == std::string_view::npos) {
      f(std::string_view(), false);
      return;
    }
    f(xml.substr(start, end - start), true);
    at = end + close.size();
  }
}

}  // namespace

bool xml_unescape(std::string_view text, std::string& out) {
  out.clear();
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '<') return false;  // markup inside character data
    if (c != '&') {
      out += c;
      ++i;
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) return false;
    const std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() >= 2 && ent[0] == '#') {
      const bool hex = ent[1] == 'x';
      const std::string_view digits = ent.substr(hex ? 2 : 1);
      if (digits.empty() || digits.size() > 8) return false;
      uint32_t cp = 0;
      for (char d : digits) {
        int v = -1;
        if (d >= '0' && d <= '9') v = d - '0';
        else if (hex && d >= 'a' && d <= 'f') v = d - 'a' + 10;
        else if (hex && d >= 'A' && d <= 'F') v = d - 'A' + 10;
        if (v < 0) return false;
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
        if (cp > 0x10FFFF) return false;
      }
      if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      append_utf8(out, cp);
    } else {
      return false;
    }
    i = semi + 1;
  }
  return true;
}

ListPage parse_list_objects(std::string_view xml, std::string_view display) {
  if (xml.size() > max_list_page_bytes)
    refuse(display, "larger than " + std::to_string(max_list_page_bytes) + " bytes");
  if (xml.find("<ListBucketResult") == std::string_view::npos ||
      xml.find("</ListBucketResult>") == std::string_view::npos)
    refuse(display, "not a ListBucketResult");
  ListPage page;
  size_t entries = 0;
  std::string text;
  for_each_block(xml, "Contents", [&](std::string_view block, bool closed) {
    if (!closed) refuse(display, "an unclosed <Contents>");
    if (++entries > max_list_page_entries)
      refuse(display, "more than " + std::to_string(max_list_page_entries) + " entries");
    const auto key = http::xml_element(block, "Key");
    if (!key || !xml_unescape(*key, text) || text.empty() || text.size() > max_key_bytes)
      refuse(display, "a <Contents> without a valid <Key>");
    ListedObject o;
    o.key = text;
    const auto size = http::xml_element(block, "Size");
    const auto n = size ? http::parse_u64(*size) : std::nullopt;
    if (!n) refuse(display, "a <Contents> without a valid <Size>");
    o.size = *n;
    page.objects.push_back(std::move(o));
  });
  for_each_block(xml, "CommonPrefixes", [&](std::string_view block, bool closed) {
    if (!closed) refuse(display, "an unclosed <CommonPrefixes>");
    if (++entries > max_list_page_entries)
      refuse(display, "more than " + std::to_string(max_list_page_entries) + " entries");
    const auto p = http::xml_element(block, "Prefix");
    if (!p || !xml_unescape(*p, text) || text.empty() || text.size() > max_key_bytes)
      refuse(display, "a <CommonPrefixes> without a valid <Prefix>");
    page.common_prefixes.push_back(text);
  });
  // The page-level elements sit after the entries in AWS's answers and before them in rclone's:
  // look them up outside every <Contents> block (a key cannot hold '<': it is escaped).
  if (const auto t = http::xml_element(xml, "IsTruncated")) {
    if (*t == "true") page.truncated = true;
    else if (*t != "false") refuse(display, "<IsTruncated> is neither true nor false");
  }
  if (const auto tok = http::xml_element(xml, "NextContinuationToken")) {
    if (!xml_unescape(*tok, text) || text.size() > max_key_bytes * 2) refuse(display, "a malformed continuation token");
    page.next_token = text;
  }
  return page;
}

std::optional<std::string> listed_name(std::string_view prefix, std::string_view key, std::string_view display) {
  if (key.size() < prefix.size() || key.substr(0, prefix.size()) != prefix)
    throw Error(ErrorKind::io, redact_url(display), "", "listing holds a key outside the prefix");
  const std::string_view name = key.substr(prefix.size());
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return std::nullopt;
  return std::string(name);
}

std::string list_objects_query(std::string_view prefix, std::string_view token, unsigned max_keys) {
  std::vector<std::pair<std::string, std::string>> q = {
      {"list-type", "2"}, {"prefix", std::string(prefix)}, {"delimiter", "/"}, {"max-keys", std::to_string(max_keys)}};
  if (!token.empty()) q.emplace_back("continuation-token", std::string(token));
  return canonical_query(std::move(q));
}

PrefixListing list_s3_prefix(std::string_view bucket, std::string_view prefix, HttpClient& client, unsigned max_keys) {
  if (max_keys < 1 || max_keys > 1000) throw Error(ErrorKind::invalid_argument, "", "", "max-keys must be 1-1000");
  const std::string display = "s3://" + std::string(bucket) + "/" + std::string(prefix);
  const S3Config cfg = load_s3_config();
  PrefixListing out;
  std::string token;
  std::set<std::string> tokens, keys;
  size_t entries = 0;
  for (;;) {
    if (++out.pages > max_list_pages)
      throw Error(ErrorKind::io, redact_url(display), "",
                  "listing has more than " + std::to_string(max_list_pages) + " pages");
    const HttpTarget t = s3_bucket_target(bucket, list_objects_query(prefix, token, max_keys), cfg, display);
    const ListPage page = parse_list_objects(client.get_document(t, max_list_page_bytes), display);
    entries += page.objects.size() + page.common_prefixes.size();
    if (entries > max_list_entries)
      throw Error(ErrorKind::io, redact_url(display), "",
                  "listing has more than " + std::to_string(max_list_entries) + " entries");
    if (!page.common_prefixes.empty()) out.any = true;
    for (const ListedObject& o : page.objects) {
      out.any = true;
      // S3 lists each key once, across pages too: a repeat is a malformed listing (one shard
      // opened twice, reported as duplicate tensors of one file).
      if (!keys.insert(o.key).second)
        throw Error(ErrorKind::io, redact_url(display), "",
                    "the listing repeats the key '" + o.key.substr(0, 256) + "'");
      if (auto name = listed_name(prefix, o.key, display)) out.objects.push_back({std::move(*name), o.size});
    }
    if (!page.truncated) return out;
    if (page.next_token.empty())
      throw Error(ErrorKind::io, redact_url(display), "", "a truncated listing page without a continuation token");
    if (!tokens.insert(page.next_token).second)
      throw Error(ErrorKind::io, redact_url(display), "", "the listing repeats a continuation token");
    token = page.next_token;
  }
}

}  // namespace ctstream::io
