// config.json -> scheme: target matching as compressed_tensors/utils/match.py does it, format
// names as its registry normalises them, the packing layout chosen from the writer's version.
#include <catch2/catch.hpp>

#include "ctstream/ctstream.hpp"
#include "format/scheme.hpp"
#include "format/targets.hpp"
#include "helpers.hpp"

using namespace ctstream;
using namespace ctstream::format;

namespace {
Scheme parse(const std::string& quant_config) {
  return parse_scheme(R"({"architectures": ["X"], "quantization_config": )" + quant_config + "}", "config.json");
}
const char* kTwoGroups = R"({
  "quant_method": "compressed-tensors", "version": "0.20.0", "format": "mixed-precision",
  "ignore": ["lm_head", "re:.*gate_proj$"],
  "config_groups": {
    "g_class": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true}},
    "g_regex_b": {"targets": ["re:.*mlp\\..*"], "weights": {"num_bits": 4, "group_size": 128}, "format": "pack-quantized"},
    "g_regex_a": {"targets": ["re:.*mlp\\.down"], "weights": {"num_bits": 4, "group_size": 32}},
    "g_exact": {"targets": ["model.layers.0.mlp.up_proj"], "weights": {"num_bits": 2, "group_size": 16, "symmetric": false}}
  }})";
}  // namespace

TEST_CASE("targets: ignore wins, then exact names, regexes by pattern order, class names", "[scheme]") {
  const Scheme s = parse(kTwoGroups);
  REQUIRE(s.present);
  CHECK(s.version == "0.20.0");
  REQUIRE(s.dense_packing.has_value());
  CHECK(*s.dense_packing);
  CHECK_FALSE(s.global_format.has_value());  // mixed-precision
  CHECK(match_group(s, "lm_head") == nullptr);
  CHECK(match_group(s, "model.layers.3.mlp.gate_proj") == nullptr);
  CHECK(match_group(s, "model.layers.0.mlp.up_proj")->name == "g_exact");
  // Both regexes match down_proj; the library tries them in sorted pattern order and
  // ".*mlp\\..*" < ".*mlp\\.down" because '.' (0x2E) < 'd' (0x64), so g_regex_b wins.
  CHECK(match_group(s, "model.layers.1.mlp.down_proj")->name == "g_regex_b");
  CHECK(match_group(s, "model.layers.1.mlp.up_proj")->name == "g_regex_b");
  CHECK(match_group(s, "model.layers.1.self_attn.q_proj")->name == "g_class");
  const auto* g = match_group(s, "model.layers.0.mlp.up_proj");
  CHECK(g->weights->strategy == QuantStrategy::group);  // inferred from group_size
  CHECK(g->weights->group_size == 16);
  CHECK_FALSE(g->weights->symmetric);
  CHECK(match_group(s, "model.layers.1.mlp.up_proj")->format == Format::pack_quantized);
}

TEST_CASE("re: targets use re.match semantics (anchored at the start only)", "[scheme]") {
  const Scheme s = parse(R"({"config_groups": {"g": {"targets": ["re:layers\\.0"], "weights": {"num_bits": 4}}}})");
  CHECK(match_group(s, "layers.0.q") != nullptr);        // prefix match, no $ needed
  CHECK(match_group(s, "model.layers.0.q") == nullptr);  // not a search
}

TEST_CASE("target lists: equal entries, class precedence and the bounds on pattern work", "[scheme]") {
  const auto parse_list = [](const std::vector<std::string>& e) {
    return TargetList::parse(e, ErrorKind::invalid_config, "config.json", "targets");
  };
  // Equal patterns are compiled once; the later entry decides (the library's dict keeps the last).
  const TargetList dup = parse_list({"re:a.*", "Linear", "re:a.*", "re:ab"});
  CHECK(dup.best_match("abc", TargetList::Classes{}) == 2u);
  // Class names: none counts (nullopt), every one counts (alphabetical first; equal: the later),
  // or what the predicate accepts, in that same order.
  const TargetList cls = parse_list({"Linear", "Embedding", "Linear", "Conv2d"});
  CHECK_FALSE(cls.best_match("m", TargetList::Classes{}).has_value());
  CHECK(cls.best_match("m", TargetList::Classes::all()) == 3u);  // "Conv2d" < "Embedding" < "Linear"
  CHECK(cls.best_match("m", TargetList::Classes::of([](const std::string& c) { return c == "Linear"; })) == 2u);
  // A pattern list that compiles past the program budget is refused at parse, cheaply.
  std::vector<std::string> big;
  for (int i = 0; i < 60; ++i) big.push_back("re:\\pL{1000}" + std::to_string(i));
  CHECK(th::error_kind([&] { (void)parse_list(big); }) == ErrorKind::invalid_config);
  // Matching work (name bytes x program size) is bounded per list: past it, an Error.
  std::vector<std::string> thrash;
  for (int i = 0; i < 200; ++i) thrash.push_back("re:(?:a|b)*a(?:a|b){20}c" + std::to_string(i));
  const TargetList t = parse_list(thrash);
  const std::string name(200000, 'a');
  CHECK(th::error_kind([&] { (void)t.best_match(name, TargetList::Classes{}); }) == ErrorKind::invalid_config);
  CHECK(parse_list({"re:(x*)*y", "re:x"}).best_match(std::string(200000, 'x'), TargetList::Classes{}) == 1u);
}

TEST_CASE("format names normalise like the library registry", "[scheme]") {
  CHECK(format_from_name("sparse_bitmask") == Format::sparse_bitmask);
  CHECK(format_from_name("Sparse-24-Bitmask") == Format::sparse_24_bitmask);
  CHECK(format_from_name("dense_sparsity") == Format::dense);
  CHECK(format_from_name("nvfp4-pack-quantized") == Format::nvfp4_pack_quantized);
  CHECK_FALSE(format_from_name("mixed-precision").has_value());
  CHECK_FALSE(format_from_name("zip").has_value());
}

TEST_CASE("the writer's version picks the pack-quantized layout", "[scheme]") {
  CHECK(*parse(R"({"version": "0.12.2"})").dense_packing == false);
  CHECK(*parse(R"({"version": "0.17.1"})").dense_packing == false);
  CHECK(*parse(R"({"version": "0.18.0"})").dense_packing == true);
  CHECK(*parse(R"({"version": "1.0.0"})").dense_packing == true);
  CHECK_FALSE(parse(R"({"format": "pack-quantized"})").dense_packing.has_value());
}

TEST_CASE("legacy config spellings: compression_config and a top-level sparsity_config", "[scheme]") {
  const Scheme a = parse_scheme(R"({"compression_config": {"sparsity_config": {"format": "sparse_bitmask",
                                   "targets": ["Linear"], "ignore": ["lm_head"]}}})",
                                "c.json");
  CHECK(a.present);
  CHECK(a.sparse_format == Format::sparse_bitmask);
  CHECK(sparse_targets_module(a, "model.x"));
  CHECK_FALSE(sparse_targets_module(a, "lm_head"));
  const Scheme b =
      parse_scheme(R"({"sparsity_config": {"format": "dense_sparsity", "targets": ["Linear"]}})", "c.json");
  CHECK(b.present);
  CHECK(b.sparse_format == Format::dense);
  CHECK_FALSE(parse_scheme(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})", "c.json").present);
  CHECK_FALSE(parse_scheme("", "c.json").present);
}

TEST_CASE("malformed quantization configs are invalid_config errors naming the file", "[scheme]") {
  for (const char* bad :
       {R"({"config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "diagonal"}}}})",
        R"({"config_groups": {"g": {"weights": {"num_bits": -4}}}})",
        R"({"config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "group"}}}})",
        R"({"config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "channel", "group_size": 128}}}})",
        R"({"config_groups": {"g": {"weights": {"num_bits": 8, "strategy": "tensor", "group_size": 32}}}})",
        R"({"config_groups": {"g": {"targets": ["re:(unclosed"], "weights": {"num_bits": 4}}}})",
        R"({"format": "zip-quantized"})", R"({"config_groups": []})"}) {
    INFO(bad);
    try {
      parse(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_config);
      CHECK(e.file() == "config.json");
    }
  }
}

TEST_CASE("files the reference library itself cannot decompress decode correctly in ctstream", "[ct][fixture]") {
  // gen_compressed.py records library_decompress_ok=false with the library's error, and computes
  // the expected tensors another way it justifies (notes.txt). test_compressed.cpp compares all
  // of them bit for bit; this case names them so a reader of the test output sees it.
  const auto manifest = th::read_json(th::fixtures() / "ct" / "manifest.json");
  const auto& cases = manifest.is_object() && manifest.contains("cases") ? manifest["cases"] : manifest;
  std::vector<std::string> failing;
  for (const auto& c : cases)
    if (!c.value("library_decompress_ok", true) && !c.value("expected_files", nlohmann::json::array()).empty())
      failing.push_back(c["case"]);
  CHECK(std::find(failing.begin(), failing.end(), "v020_pack_w4_g16_asym_rows7_bf16") != failing.end());
  for (const auto& name : failing) {
    auto ck = Checkpoint::open(th::fixtures() / "ct" / name);
    auto ref = Checkpoint::open(th::fixtures() / "ct" / name / "expected" / "expected.safetensors");
    for (const auto& rt : ref.tensors()) {
      const auto& t = ck.at(rt.name);
      std::vector<std::byte> got(t.decoded_bytes(rt.dtype)), want(rt.decoded_bytes(rt.dtype));
      ck.decode_into(t, got, rt.dtype);
      ref.decode_into(rt, want, rt.dtype);
      INFO(name << ": " << rt.name);
      CHECK(got == want);
    }
  }
}
