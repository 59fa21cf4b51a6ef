// SafetensorsWriter: the output parses, and a failed or abandoned write leaves nothing behind.
#include <catch2/catch.hpp>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

TEST_CASE("SafetensorsWriter output is a valid safetensors file", "[writer]") {
  th::TempDir tmp("w");
  const auto data = th::random_bytes(6 * 4 + 3, 9);
  {
    SafetensorsWriter w(tmp.path / "x.safetensors",
                        {{"a", DType::I32, {2, 3}}, {"b", DType::U8, {3}}, {"empty", DType::F32, {0, 4}}},
                        {{"format", "pt"}});
    CHECK(w.tensor_bytes(0) == 24);
    CHECK(w.tensor_bytes(2) == 0);
    CHECK(th::error_kind([&] { (void)w.tensor_bytes(3); }) == ErrorKind::invalid_argument);  // past the last
    w.write(std::span(data).first(10));
    w.write(std::span(data).subspan(10));
    w.commit();
  }
  auto c = Checkpoint::open(tmp.path / "x.safetensors");
  REQUIRE(c.tensors().size() == 3);
  auto v = c.stored_view(c.at("a"));
  REQUIRE(std::memcmp(v.data(), data.data(), 24) == 0);
  REQUIRE(c.at("empty").numel() == 0);
  REQUIRE(c.file_metadata(0).at("format") == "pt");
  // The data region starts 8-byte aligned, as safetensors writes it.
  REQUIRE(c.at("a").parts[0].offset % 8 == 0);
}

TEST_CASE("an abandoned or short write leaves no file behind", "[writer]") {
  th::TempDir tmp("w2");
  const fs::path out = tmp.path / "x.safetensors";
  {
    SafetensorsWriter w(out, {{"a", DType::F32, {4}}});
    w.write(th::random_bytes(8, 1));
    CHECK_THROWS_AS(w.commit(), Error);  // 8 of 16 bytes
  }
  {
    SafetensorsWriter w(out, {{"a", DType::F32, {4}}});
    CHECK_THROWS_AS(w.write(th::random_bytes(20, 1)), Error);  // more than declared
  }
  { SafetensorsWriter w(out, {{"a", DType::F32, {4}}}); }  // destroyed without commit
  CHECK(fs::is_empty(tmp.path));
  CHECK_THROWS_AS(SafetensorsWriter(tmp.path / "no" / "dir" / "x.safetensors", {{"a", DType::F32, {1}}}), Error);
  // the header's reserved key is no tensor name (a file holding one opens nowhere)
  CHECK(th::error_kind([&] {
          SafetensorsWriter(out, {{"__metadata__", DType::F32, {1}}});
        }) == ErrorKind::invalid_argument);
  CHECK(fs::is_empty(tmp.path));
}
