// Config groups that target module classes (`Linear`, `Embedding`, `LlamaAttention`), on
// checkpoints the real library wrote through a transformers model (tests/fixtures/gen/
// gen_class_targets.py): every tensor equals the library's model-path decompression, the module's
// class coming from the stored parts where they tell the groups apart and from
// OpenOptions::module_classes where they cannot; without it such a module is refused, never decoded
// with the alphabetically first class group (which gave 50,686 wrong values in the fp8 case).
#include <catch2/catch.hpp>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

fs::path case_dir(const char* name) { return th::fixtures() / "ct_class" / name; }

std::map<std::string, std::vector<std::string>> classes_of(const fs::path& dir) {
  std::map<std::string, std::vector<std::string>> m;
  const nlohmann::json j = th::read_json(dir / "module_classes.json");
  for (auto it = j.begin(); it != j.end(); ++it) m[it.key()] = it.value().get<std::vector<std::string>>();
  return m;
}

// Every tensor of the expected file equals ctstream's decode of the checkpoint, byte for byte.
void require_expected(const fs::path& dir, const OpenOptions& o) {
  const Checkpoint ck = Checkpoint::open(dir, o);
  const Checkpoint exp = Checkpoint::open(dir / "expected" / "expected.safetensors");
  REQUIRE(ck.tensors().size() == exp.tensors().size());
  for (const TensorInfo& e : exp.tensors()) {
    INFO(dir.filename().string() << " " << e.name);
    const TensorInfo* t = ck.find(e.name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == e.dtype);
    CHECK(t->shape == e.shape);
    std::vector<std::byte> got(t->decoded_bytes(e.dtype)), want(e.decoded_bytes(e.dtype));
    ck.decode_into(*t, got, e.dtype);
    exp.decode_into(e, want, e.dtype);
    CHECK(got == want);
  }
}

}  // namespace

TEST_CASE("class-name groups the stored parts tell apart decode as the library's model path", "[ct][classes]") {
  for (const char* name : {"embedding_w8_linear_w4", "attention_linear_w4"}) {
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      OpenOptions o;
      o.io = io;
      require_expected(case_dir(name), o);  // no classes: the parts decide
      o.module_classes = classes_of(case_dir(name));
      require_expected(case_dir(name), o);  // classes given: the same tensors
    }
  }
  // The parts really did decide: the Linear weights are int4 group-32, the embedding int8 channel.
  const Checkpoint ck = Checkpoint::open(case_dir("embedding_w8_linear_w4"));
  CHECK(ck.at("model.layers.0.mlp.up_proj.weight").quant.num_bits == 4);
  CHECK(ck.at("model.layers.0.mlp.up_proj.weight").quant.group_size == 32);
  CHECK(ck.at("model.embed_tokens.weight").quant.num_bits == 8);
  CHECK(ck.at("model.embed_tokens.weight").quant.strategy == QuantStrategy::channel);
}

TEST_CASE("class-name groups only the module's class can tell apart need its class", "[ct][classes]") {
  const fs::path d = case_dir("fp8_blocks_64_96");
  // Without classes: refused, naming the module and both groups (never the Embedding group's
  // 64-row blocks for a Linear weight stored with 96-row blocks).
  try {
    (void)Checkpoint::open(d);
    FAIL("opened without module classes");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("group_0 (Embedding)") && Catch::Contains("group_1 (Linear)") &&
                             Catch::Contains("module_classes") && Catch::Contains("proj.weight"));
  }
  // With the model's classes: exactly the library's decompression, both io modes.
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    OpenOptions o;
    o.io = io;
    o.module_classes = classes_of(d);
    require_expected(d, o);
  }
  // Classes for some modules only: those still unknown are refused as before.
  OpenOptions partial;
  partial.module_classes = classes_of(d);
  partial.module_classes.erase("model.layers.1.self_attn.q_proj");
  CHECK_THROWS_WITH(Checkpoint::open(d, partial), Catch::Contains("model.layers.1.self_attn.q_proj"));
}
