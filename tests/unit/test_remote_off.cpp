// Builds without remote code (-DCTSTREAM_REMOTE=OFF) refuse URLs by name instead of looking them
// up as local paths.
#include <catch2/catch.hpp>

#include "ctstream/checkpoint.hpp"
#include "helpers.hpp"

TEST_CASE("remote: URLs are unsupported in a build without CTSTREAM_REMOTE", "[remote]") {
  for (const char* url : {"s3://bucket/prefix", "https://example.com/model.safetensors", "HTTP://h/x"}) {
    INFO(url);
    try {
      (void)ctstream::Checkpoint::open(url);
      FAIL("no error");
    } catch (const ctstream::Error& e) {
      CHECK(e.kind() == ctstream::ErrorKind::unsupported);
      CHECK_THAT(e.what(), Catch::Contains("CTSTREAM_REMOTE"));
    }
  }
}
