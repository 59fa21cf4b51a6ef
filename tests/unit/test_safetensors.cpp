// Files written by the real Python `safetensors` read bit-exactly, and the malformed corpus
// (tests/fixtures/corrupt*, see tests/fixtures/gen/gen_safetensors.py) gives the right error.
#include <catch2/catch.hpp>

#include <cmath>

#include "ctstream/ctstream.hpp"
#include "format/shards.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

// expected.json: a list (or name-keyed object) of {name, dtype, shape, hex}.
std::vector<nlohmann::json> expected_entries(const fs::path& p) {
  nlohmann::json j = th::read_json(p);
  if (j.is_object() && j.contains("tensors")) j = j["tensors"];
  std::vector<nlohmann::json> out;
  if (j.is_array()) {
    for (auto& e : j) out.push_back(e);
  } else {
    for (auto it = j.begin(); it != j.end(); ++it) {
      auto e = it.value();
      if (!e.contains("name")) e["name"] = it.key();
      out.push_back(e);
    }
  }
  return out;
}

void check_against_expected(const fs::path& ckpt_path, const fs::path& expected, IoMode io) {
  OpenOptions o;
  o.io = io;
  auto ckpt = Checkpoint::open(ckpt_path, o);
  auto entries = expected_entries(expected);
  REQUIRE(ckpt.tensors().size() == entries.size());
  for (const auto& e : entries) {
    const std::string name = e["name"];
    INFO("tensor " << name);
    const TensorInfo& t = ckpt.at(name);
    REQUIRE(dtype_name(t.dtype) == e["dtype"].get<std::string>());
    REQUIRE(t.shape == e["shape"].get<Shape>());
    const auto want = th::from_hex(e["hex"]);
    REQUIRE(t.decoded_bytes(t.dtype) == want.size());
    std::vector<std::byte> got(want.size() + 8, std::byte{0x5A});
    REQUIRE(ckpt.decode_into(t, got, t.dtype) == want.size());
    REQUIRE(std::equal(want.begin(), want.end(), got.begin()));
    REQUIRE(got[want.size()] == std::byte{0x5A});             // nothing written past the tensor
    if (e.contains("f32_hex") && is_float_output(t.dtype)) {  // torch's .to(float32)
      const auto want32 = th::from_hex(e["f32_hex"]);
      std::vector<std::byte> got32(t.decoded_bytes(DType::F32));
      ckpt.decode_into(t, got32, DType::F32);
      REQUIRE(got32.size() == want32.size());
      for (size_t i = 0; i < got32.size(); i += 4) {
        float g, w;
        std::memcpy(&g, &got32[i], 4);
        std::memcpy(&w, &want32[i], 4);
        // torch canonicalises NaN payloads path-dependently (see gen_safetensors.py): NaN-ness only.
        if (std::isnan(w)) REQUIRE(std::isnan(g));
        else REQUIRE(std::memcmp(&got32[i], &want32[i], 4) == 0);
      }
    }
    if (io == IoMode::mmap) {
      auto view = ckpt.stored_view(t);
      REQUIRE(view.size() == want.size());
      REQUIRE(std::equal(want.begin(), want.end(), view.begin()));
    }
  }
}

}  // namespace

TEST_CASE("every dtype written by Python safetensors reads back bit-exactly", "[safetensors][fixture]") {
  const auto io = GENERATE(IoMode::mmap, IoMode::pread);
  const fs::path dir = th::fixtures() / "st";
  check_against_expected(dir / "all_dtypes.safetensors", dir / "all_dtypes.expected.json", io);
  auto ckpt = Checkpoint::open(dir / "all_dtypes.safetensors");
  REQUIRE(ckpt.file_metadata(0).at("format") == "pt");
}

TEST_CASE("hand-built valid layouts: unaligned data, odd order, empty tensors, no tensors", "[safetensors][fixture]") {
  const auto io = GENERATE(IoMode::mmap, IoMode::pread);
  const fs::path dir = th::fixtures() / "st";
  for (const char* stem : {"handmade_layout", "handmade_empty"}) {
    INFO(stem);
    check_against_expected(dir / (std::string(stem) + ".safetensors"), dir / (std::string(stem) + ".expected.json"),
                           io);
    const auto j = th::read_json(dir / (std::string(stem) + ".expected.json"));
    auto ckpt = Checkpoint::open(dir / (std::string(stem) + ".safetensors"));
    if (j["metadata"].is_object())
      REQUIRE(ckpt.file_metadata(0) == j["metadata"].get<std::map<std::string, std::string>>());
    else REQUIRE(ckpt.file_metadata(0).empty());
  }
}

TEST_CASE("a 3-shard checkpoint with an index reads back bit-exactly", "[safetensors][fixture]") {
  const auto io = GENERATE(IoMode::mmap, IoMode::pread);
  const fs::path dir = th::fixtures() / "st";
  check_against_expected(dir / "sharded", dir / "sharded.expected.json", io);
  auto ckpt = Checkpoint::open(dir / "sharded");
  REQUIRE(ckpt.files().size() == 3);
  REQUIRE(!ckpt.config_json().empty());
}

TEST_CASE("a directory of safetensors files without an index is a checkpoint", "[safetensors][fixture]") {
  const fs::path dir = th::fixtures() / "st";
  check_against_expected(dir / "noindex", dir / "noindex.expected.json", IoMode::mmap);
  REQUIRE(Checkpoint::open(dir / "noindex").files().size() == 2);
}

TEST_CASE("tensors iterate in file order by default, by name on request", "[safetensors][fixture]") {
  const fs::path p = th::fixtures() / "st" / "sharded";
  auto by_file = Checkpoint::open(p);
  for (size_t i = 1; i < by_file.tensors().size(); ++i) {
    const auto& a = by_file.tensors()[i - 1].parts[0];
    const auto& b = by_file.tensors()[i].parts[0];
    REQUIRE(std::tie(a.file, a.offset) < std::tie(b.file, b.offset));
  }
  OpenOptions o;
  o.order = Order::name;
  auto by_name = Checkpoint::open(p, o);
  for (size_t i = 1; i < by_name.tensors().size(); ++i)
    REQUIRE(by_name.tensors()[i - 1].name < by_name.tensors()[i].name);
}

TEST_CASE("every file of the malformed corpus gives its clear error", "[safetensors][corrupt][fixture]") {
  for (const char* sub : {"corrupt", "corrupt_dirs"}) {
    const fs::path dir = th::fixtures() / sub;
    const auto manifest = th::read_json(dir / "manifest.json");
    REQUIRE(manifest.size() >= (std::string(sub) == "corrupt" ? 15u : 5u));
    for (const auto& c : manifest) {
      const std::string file = c["file"], kind = c["kind"];
      INFO(sub << "/" << file << ": " << c.value("why", "") << " (want " << kind << ")");
      for (IoMode io : {IoMode::mmap, IoMode::pread}) {
        OpenOptions o;
        o.io = io;
        try {
          auto ckpt = Checkpoint::open(dir / file, o);
          // Some faults only show when data is touched: decode everything.
          std::vector<std::byte> buf;
          for (const auto& t : ckpt.tensors()) {
            buf.resize(t.decoded_bytes(t.dtype));
            ckpt.decode_into(t, buf, t.dtype);
          }
          FAIL("no error raised");
        } catch (const Error& e) {
          INFO("got [" << error_kind_name(e.kind()) << "] " << e.what());
          CHECK(error_kind_name(e.kind()) == kind);
          // The message names the file (or the directory / index that holds the fault).
          CHECK(std::string(e.what()).find(file) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("shard names may not leave the checkpoint directory", "[safetensors]") {
  using format::is_contained_name;
  CHECK(is_contained_name("model-00001-of-00002.safetensors"));
  CHECK(is_contained_name("sub/model.safetensors"));
  CHECK_FALSE(is_contained_name("../model.safetensors"));
  CHECK_FALSE(is_contained_name("sub/../../model.safetensors"));
  CHECK_FALSE(is_contained_name("/etc/passwd"));
  CHECK_FALSE(is_contained_name(""));
  CHECK_FALSE(is_contained_name(".."));
  // A NUL in an index's shard name: said so, the name shown escaped (a raw NUL cut the message)
  format::ShardSet lay;
  lay.index_path = "model.safetensors.index.json";
  try {
    format::fill_from_index(lay, std::string("{\"weight_map\": {\"a\": \"s1\\u0000../x\"}}"),
                            [](const std::string&) { return std::filesystem::path("s1"); });
    FAIL("accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(e.kind() == ErrorKind::invalid_shard);
    CHECK(what.find('\0') == std::string::npos);
    CHECK(what.find("s1\\x00../x") != std::string::npos);
    CHECK(what.find("NUL") != std::string::npos);
  }
  // One file under two spellings is one shard (it was opened twice: "duplicate tensor" followed)
  format::ShardSet two;
  two.index_path = "model.safetensors.index.json";
  format::fill_from_index(two, std::string("{\"weight_map\": {\"a\": \"s1.st\", \"b\": \"./s1.st\"}}"),
                          [](const std::string& n) { return std::filesystem::path("/m") / n; });
  CHECK(two.files.size() == 1);
  CHECK(two.weight_map.at("a") == 0);
  CHECK(two.weight_map.at("b") == 0);
}

TEST_CASE("a tensor name with an embedded NUL is refused at open, and never written", "[safetensors][hostile]") {
  // safetensors 0.8 loads {"x\u0000evil", "x"} as two tensors; as C strings (the C ABI, CLI
  // arguments) both are "x". tests/fixtures/hostile/name_nul (gen_hostile.py).
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    for (const char* c : {"name_nul", "name_nul_only"}) {
      INFO(c);
      OpenOptions o;
      o.io = io;
      try {
        (void)Checkpoint::open(th::fixtures() / "hostile" / c, o);
        FAIL("opened");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::invalid_header);
        CHECK(std::string(e.what()).find("NUL") != std::string::npos);
        CHECK(e.tensor().find('\0') == std::string::npos);  // the name is shown escaped
        CHECK(e.tensor().find("\\u0000") != std::string::npos);
      }
    }
  }
  th::TempDir tmp("nulname");
  const std::string bad("a\0b", 3);
  CHECK(th::error_kind([&] {
          SafetensorsWriter w(tmp.path / "m.safetensors", {{bad, DType::U8, {1}}});
        }) == ErrorKind::invalid_argument);
  CHECK_FALSE(fs::exists(tmp.path / "m.safetensors"));
}
