// libFuzzer target: the same structured checkpoints as fuzz_decode, decoded once per instruction
// set this CPU supports (scalar, AVX2, AVX-512 on x86-64; scalar, NEON on AArch64): every ISA must produce the same
// bytes (NaN payloads aside, see same()), or the same error kind.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "codecs/dispatch.hpp"
#include "ctstream/ctstream.hpp"
#include "structured.hpp"

using namespace ctstream;

namespace {
struct Result {
  std::vector<std::byte> bytes;
  std::optional<ErrorKind> error;
};

bool is_nan(DType d, const std::byte* p) {
  if (d == DType::F32) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return (u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu);
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (d == DType::BF16) return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu);
  return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);  // F16
}

// Equal bytes, except that two NaNs are equal whatever their payloads: IEEE 754 leaves the
// payload of an operation on NaNs unspecified (x86 propagates the first operand's, and the
// compiler may swap the operands of a commutative multiply), and torch's differ between its
// own kernels too. Every other bit must match.
bool same(DType d, const std::vector<std::byte>& a, const std::vector<std::byte>& b, size_t* at) {
  if (a.size() != b.size()) return false;
  const size_t esz = dtype_bits(d) / 8;
  for (size_t i = 0; i + esz <= a.size(); i += esz)
    if (std::memcmp(a.data() + i, b.data() + i, esz) != 0 && !(is_nan(d, a.data() + i) && is_nan(d, b.data() + i))) {
      *at = i;
      return false;
    }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const codecs::Isa best = codecs::active_isa();
  fz::Bytes in(data, size);
  const uint8_t opts = in.u8();
  const fz::Checkpoint spec = fz::structured(in);
  const auto dir = fz::scratch_dir("differential");
  fz::write_checkpoint(dir, spec);
  const DType outs[] = {DType::BF16, DType::F16, DType::F32};
  const DType out = outs[opts % 3];
  std::optional<Checkpoint> ck;
  try {
    ck.emplace(Checkpoint::open(dir));
  } catch (const Error&) {
    return 0;
  }
  for (const auto& t : ck->tensors()) {
    if (t.format == Format::dense || t.format == Format::marlin_24) continue;
    std::vector<Result> results;
    for (auto isa : codecs::kAllIsas) {  // scalar first: every other ISA is compared with it
      if (!codecs::isa_supported(isa)) continue;
      codecs::set_active_isa(isa);
      Result r;
      try {
        r.bytes.resize(t.decoded_bytes(out));
        ck->decode_into(t, r.bytes, out);
      } catch (const Error& e) {
        r.error = e.kind();
        r.bytes.clear();
      }
      results.push_back(std::move(r));
    }
    for (size_t k = 1; k < results.size(); ++k) {
      size_t at = 0;
      if (results[k].error != results[0].error || !same(out, results[k].bytes, results[0].bytes, &at)) {
        std::fprintf(stderr, "ISA %zu differs from scalar on %s (%s, shape", k, t.name.c_str(),
                     std::string(format_name(t.format)).c_str());
        for (auto d : t.shape) std::fprintf(stderr, " %llu", static_cast<unsigned long long>(d));
        std::fprintf(stderr, ") out %s: errors %d/%d, first differing byte %zu of %zu\n",
                     std::string(dtype_name(out)).c_str(), results[0].error ? static_cast<int>(*results[0].error) : -1,
                     results[k].error ? static_cast<int>(*results[k].error) : -1, at, results[0].bytes.size());
        __builtin_trap();
      }
    }
  }
  codecs::set_active_isa(best);
  return 0;
}
