// Damaged compressed tensors: each case rewrites one fixture with one fault (a flipped mask
// bit, a wrong offset, a dropped part, a config that contradicts the keys) and expects the clear
// error, naming the file and the tensor — never a crash and never a wrong tensor.
#include <catch2/catch.hpp>

#include "ctstream/ctstream.hpp"
#include "format/safetensors.hpp"
#include "helpers.hpp"
#include "io/file.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

struct Entry {
  DType dtype;
  Shape shape;
  std::vector<std::byte> data;
};
using Entries = std::map<std::string, Entry>;

Entries load(const fs::path& file) {
  auto f = io::File::open(file, io::Mode::pread);
  std::vector<std::byte> all(f->size());
  f->read_at(0, all);
  const uint64_t n = format::parse_prefix(all, all.size(), 100'000'000, file.string());
  const auto h = format::parse_header(std::string_view(reinterpret_cast<const char*>(all.data()) + 8, n), n, all.size(),
                                      file.string());
  Entries e;
  for (const auto& x : h.entries)
    e[x.name] = {x.dtype, x.shape,
                 std::vector<std::byte>(all.begin() + static_cast<long>(h.data_start + x.begin),
                                        all.begin() + static_cast<long>(h.data_start + x.end))};
  return e;
}

// Copies fixture `name` into `dir` with `mutate` applied to its tensors and `config_edit` to
// its config.json text.
fs::path mutated(const th::TempDir& dir, const std::string& name, const std::function<void(Entries&)>& mutate,
                 const std::function<void(std::string&)>& config_edit = {}) {
  const fs::path src = th::fixtures() / "ct" / name;
  Entries e = load(src / "model.safetensors");
  mutate(e);
  std::vector<SafetensorsWriter::Entry> decl;
  for (const auto& [k, v] : e) decl.push_back({k, v.dtype, v.shape});
  const fs::path out = dir.path / name;
  fs::create_directories(out);
  SafetensorsWriter w(out / "model.safetensors", decl);
  for (const auto& [k, v] : e) w.write(v.data);
  w.commit();
  std::string cfg = io::read_small_file(src / "config.json", 1 << 20);
  if (config_edit) config_edit(cfg);
  std::ofstream(out / "config.json") << cfg;
  return out;
}

// Opens and decodes everything; returns the error (fails the test if none).
Error first_error(const fs::path& dir) {
  try {
    auto ck = Checkpoint::open(dir);
    std::vector<std::byte> buf;
    for (const auto& t : ck.tensors()) {
      buf.resize(t.decoded_bytes(DType::F32));
      ck.decode_into(t, buf, is_float_output(t.dtype) || t.quantized ? DType::F32 : t.dtype);
    }
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error for " << dir);
  return Error(ErrorKind::io, "", "", "");
}

void expect(const fs::path& dir, ErrorKind kind, const std::string& tensor, const std::string& words) {
  const Error e = first_error(dir);
  INFO(e.what());
  CHECK(error_kind_name(e.kind()) == error_kind_name(kind));
  if (!tensor.empty()) CHECK(e.tensor() == tensor);
  CHECK(std::string(e.what()).find(words) != std::string::npos);
  CHECK(!e.file().empty());
}

void set_i64(Entry& e, size_t i, int64_t v) { std::memcpy(e.data.data() + 8 * i, &v, 8); }

}  // namespace

TEST_CASE("damaged sparse tensors are refused", "[ct][corrupt]") {
  th::TempDir tmp("ctbad");
  const std::string down = "model.layers.0.mlp.down_proj";
  SECTION("a mask bit set without a stored value") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) {
      auto& m = e[down + ".bitmask"].data;  // set the first clear bit of row 0 (80 columns)
      for (unsigned j = 0; j < 80; ++j)
        if (!(std::to_integer<unsigned>(m[j / 8]) >> (j % 8) & 1)) {
          m[j / 8] |= std::byte{static_cast<unsigned char>(1u << (j % 8))};
          break;
        }
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "bitmask");
  }
  SECTION("row_offsets out of range") {
    auto d =
        mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) { set_i64(e[down + ".row_offsets"], 3, 999999); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "row_offsets[3]");
  }
  SECTION("row_offsets not monotone") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) {
      set_i64(e[down + ".row_offsets"], 2, 1);
      set_i64(e[down + ".row_offsets"], 1, 5);
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "row_offsets[1]");
  }
  SECTION("values fewer than the mask promises") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) {
      auto& v = e[down + ".compressed"];
      v.shape[0] -= 1;
      v.data.resize(v.data.size() - 2);
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "values are stored");
  }
  SECTION("padding bits set in a mask row") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) {
      // q_proj has 100 columns: byte 12 of each 13-byte row holds 4 padding bits.
      e["model.layers.0.self_attn.q_proj.bitmask"].data[12] |= std::byte{0x80};
    });
    expect(d, ErrorKind::corrupt_tensor, "model.layers.0.self_attn.q_proj.weight", "past column");
  }
  SECTION("a 2:4 group keeping three values") {
    auto d = mutated(tmp, "v012_sparse24_bitmask_bf16", [&](Entries& e) {
      auto& m = e[down + ".bitmask"].data;
      m[0] = std::byte{0x07};  // first group of four: three set bits
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "2:4");
  }
  SECTION("a missing bitmask part") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) { e.erase(down + ".bitmask"); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "incomplete sparse tensor");
  }
  SECTION("a missing shape part") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) { e.erase(down + ".shape"); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", ".shape");
  }
  SECTION("a shape part that disagrees with the bitmask") {
    auto d = mutated(tmp, "v012_sparse_bitmask_bf16", [&](Entries& e) { set_i64(e[down + ".shape"], 1, 81); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "bitmask shape [24, 10] is not the [24, 11]");
  }
}

TEST_CASE("damaged quantized tensors are refused", "[ct][corrupt]") {
  th::TempDir tmp("ctbadq");
  const std::string down = "model.layers.0.mlp.down_proj";
  SECTION("packed size does not match weight_shape") {
    auto d = mutated(tmp, "v020_pack_w4_g32_sym_bf16", [&](Entries& e) { set_i64(e[down + ".weight_shape"], 1, 192); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "weight_packed shape");
  }
  SECTION("a negative weight_shape") {
    auto d = mutated(tmp, "v020_pack_w4_g32_sym_bf16", [&](Entries& e) { set_i64(e[down + ".weight_shape"], 0, -24); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "negative");
  }
  SECTION("scale shape not matching the config's group layout") {
    auto d = mutated(
        tmp, "v020_pack_w4_g32_sym_bf16", [](Entries&) {},
        [](std::string& c) { c.replace(c.find("\"group_size\": 32"), 16, "\"group_size\": 16"); });
    expect(d, ErrorKind::corrupt_tensor, "", "weight_scale shape");
  }
  SECTION("a missing weight_scale") {
    auto d = mutated(tmp, "v020_pack_w4_g32_sym_bf16", [&](Entries& e) { e.erase(down + ".weight_scale"); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "weight_scale");
  }
  SECTION("a missing weight_packed") {
    auto d = mutated(tmp, "v020_pack_w4_g32_sym_bf16", [&](Entries& e) { e.erase(down + ".weight_packed"); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "packed weight is missing");
  }
  SECTION("packed zero point of the wrong size") {
    auto d = mutated(tmp, "v020_pack_w4_g32_asym_bf16", [&](Entries& e) {
      auto& z = e[down + ".weight_zero_point"];
      z.shape[0] += 1;
      z.data.resize(z.data.size() + 4 * z.shape[1]);
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "weight_zero_point");
  }
  SECTION("act-order g_idx pointing at no group") {
    auto d = mutated(tmp, "v012_pack_w4_g32_actorder_bf16", [&](Entries& e) {
      int32_t v = 99;
      std::memcpy(e[down + ".weight_g_idx"].data.data(), &v, 4);
    });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "weight_g_idx");
  }
  SECTION("keys contradict the config: a quantized module the config ignores") {
    auto d = mutated(
        tmp, "v020_pack_w4_g32_sym_bf16", [](Entries&) {},
        [&](std::string& c) { c.replace(c.find("\"lm_head\""), 9, "\"" + down + "\""); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "no config group targeting");
  }
  SECTION("nvfp4 without its global scale") {
    auto d = mutated(tmp, "v020_nvfp4a16_bf16", [&](Entries& e) { e.erase(down + ".weight_global_scale"); });
    expect(d, ErrorKind::corrupt_tensor, down + ".weight", "global_scale");
  }
  SECTION("config.json that is not JSON") {
    auto d = mutated(
        tmp, "v020_pack_w4_g32_sym_bf16", [](Entries&) {}, [](std::string& c) { c = "{ nope"; });
    expect(d, ErrorKind::invalid_config, "", "not valid JSON");
  }
  SECTION("an unknown compression format") {
    auto d = mutated(
        tmp, "v020_pack_w4_g32_sym_bf16", [](Entries&) {},
        [](std::string& c) {
          c.replace(c.find("\"format\": \"pack-quantized\""), 26, "\"format\": \"zip-quantized\" ");
        });
    expect(d, ErrorKind::invalid_config, "", "zip-quantized");
  }
}
