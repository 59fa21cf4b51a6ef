// libFuzzer target: an S3 ListObjectsV2 answer (src/io/s3_list.hpp), which a server controls
// entirely. Input: a prefix on the first line ('\n'-terminated, at most 1024 bytes), then the XML
// page. Invariants: nothing but ctstream::Error is thrown; a parsed page holds at most
// max_list_page_entries entries, each key and common prefix non-empty and at most 1024 bytes; a
// continuation token only decoded text; every key that listed_name() keeps relative to the prefix
// is a contained file name (format::is_contained_name) without '/', and what it skips is the
// prefix's marker, a deeper key, "." / "..", or a name with a NUL.
#include <cstdint>
#include <string>
#include <string_view>

#include "ctstream/error.hpp"
#include "format/shards.hpp"
#include "io/s3_list.hpp"

using namespace ctstream;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos || nl > 1024) return 0;
  const std::string_view prefix = in.substr(0, nl), xml = in.substr(nl + 1);
  try {
    const io::ListPage page = io::parse_list_objects(xml, "s3://fuzz/prefix/");
    if (page.objects.size() + page.common_prefixes.size() > io::max_list_page_entries) __builtin_trap();
    for (const auto& p : page.common_prefixes)
      if (p.empty() || p.size() > 1024) __builtin_trap();
    for (const auto& o : page.objects) {
      if (o.key.empty() || o.key.size() > 1024) __builtin_trap();
      try {
        const auto name = io::listed_name(prefix, o.key, "s3://fuzz/prefix/");
        if (name) {
          if (name->find('/') != std::string::npos || !format::is_contained_name(*name)) __builtin_trap();
          if (std::string(prefix) + *name != o.key) __builtin_trap();
        } else {
          const std::string_view rest = std::string_view(o.key).substr(prefix.size());
          if (!(rest.empty() || rest == "." || rest == ".." || rest.find('/') != std::string_view::npos ||
                rest.find('\0') != std::string_view::npos))
            __builtin_trap();
        }
      } catch (const Error& e) {
        // only for a key outside the prefix
        if (o.key.size() >= prefix.size() && std::string_view(o.key).substr(0, prefix.size()) == prefix)
          __builtin_trap();
      }
    }
    std::string unescaped;
    if (!page.next_token.empty() && page.next_token.size() > 2048) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
