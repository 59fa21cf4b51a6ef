// The libcurl this build links: new enough for CURLOPT_AWS_SIGV4 (7.75.0) and safe to initialise
// from any thread (the `threadsafe` feature, 7.84.0): docs/design/object_storage.md section 3.1.
#include <curl/curl.h>
#include <catch2/catch.hpp>
#include <string_view>

TEST_CASE("libcurl is at least 7.75 and thread-safe", "[remote]") {
  const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
  REQUIRE(v != nullptr);
  INFO("libcurl " << v->version);
  CHECK(v->version_num >= 0x074B00);  // 7.75.0
  CHECK((v->features & CURL_VERSION_THREADSAFE) != 0);
  bool http = false, https = false;
  for (const char* const* p = v->protocols; p && *p; ++p) {
    http = http || std::string_view(*p) == "http";
    https = https || std::string_view(*p) == "https";
  }
  CHECK(http);
  CHECK(https);
}
