// libFuzzer target: the decoders, fed structured parts (tests/fuzz/structured.hpp): bitmask and
// 2:4 sparse values (also on int8 / fp8), pack-quantized codes of every width in both packings
// with zero points and g_idx, int8 / fp8 with tensor / channel / group / block scales, nvfp4 and
// the mx formats. Each checkpoint is opened (mmap or pread) and decoded whole, by leading rows
// and by columns; the slices must equal the matching part of the whole decode. Only
// ctstream::Error may come out.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "structured.hpp"

using namespace ctstream;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Bytes in(data, size);
  const uint8_t opts = in.u8();
  const fz::Checkpoint spec = fz::structured(in);
  const auto dir = fz::scratch_dir("decode");
  fz::write_checkpoint(dir, spec);
  const DType outs[] = {DType::BF16, DType::F16, DType::F32};
  const DType out = outs[opts % 3];
  try {
    OpenOptions o;
    o.io = opts & 4 ? IoMode::pread : IoMode::mmap;
    o.threads = opts & 8 ? 2 : 1;
    const Checkpoint ck = Checkpoint::open(dir, o);
    for (const auto& t : ck.tensors()) {
      if (t.format == Format::dense || t.format == Format::marlin_24) continue;
      try {
        ck.validate(t);
        std::vector<std::byte> whole(t.decoded_bytes(out));
        if (ck.decode_into(t, whole, out) != whole.size()) __builtin_trap();
        if (t.shape.size() != 2) continue;
        const uint64_t R = t.shape[0], C = t.shape[1], esz = dtype_bits(out) / 8;
        // leading rows [a, b) and columns [c, d) must be the same bytes as in the whole decode
        const uint64_t a = R ? (opts >> 4) % R : 0, b = R ? a + (R - a + 1) / 2 : 0;
        std::vector<std::byte> rows((b - a) * C * esz);
        ck.decode_into(t, rows, out, Slice{0, a, b});
        if (!rows.empty() && std::memcmp(rows.data(), whole.data() + a * C * esz, rows.size()) != 0) __builtin_trap();
        const uint64_t c = C ? (opts >> 5) % C : 0, d = C ? c + (C - c + 2) / 3 : 0;
        std::vector<std::byte> cols(R * (d - c) * esz);
        ck.decode_into(t, cols, out, Slice{1, c, d});
        for (uint64_t r = 0; r < R; ++r)
          if (d > c &&
              std::memcmp(cols.data() + r * (d - c) * esz, whole.data() + (r * C + c) * esz, (d - c) * esz) != 0)
            __builtin_trap();
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
