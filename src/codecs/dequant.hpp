// codecs — dequantization of one row: out[j] = D( S( S(x[j] - zp[g]) * scale[g] ) ), g = the
// group of column j. This is the compressed-tensors arithmetic (quantization/lifecycle/
// forward_helpers.py `_dequantize`): values and zero points are cast to the scale's dtype S,
// the subtraction and the product are each one torch op on S tensors (computed in f32, rounded
// to S, round-to-nearest-even), and the result is converted to the caller's dtype D.
// Callers pass x, scale and zp as exact f32 images of the stored values; a global scale is
// folded into `scale` beforehand (f32 division, as the reference does).
#pragma once
#include <cstddef>
#include <cstdint>

#include "codecs/dispatch.hpp"
#include "ctstream/dtype.hpp"

namespace ctstream::codecs {

struct DequantSpec {
  DType natural = DType::BF16;  ///< S: dtype the reference computes in (BF16, F16 or F32)
  DType out = DType::BF16;      ///< D: output dtype (BF16, F16 or F32)
  uint64_t group_size = 1;      ///< consecutive columns per scale entry (>= 1)
  /// Values and zero points are small integers (|x - zp| <= 2^8), so x - zp is exact in f32 and
  /// in S; lets the generic kernel skip rounding the subtraction (fp8 zero points need it).
  bool int_values = false;
  /// The output is large and not read back soon: the SIMD kernels may write it with non-temporal
  /// stores (no read-for-ownership of each line; about 1.5x the write bandwidth where measured).
  /// The bits written are the same. Set from kStreamStoresFrom by the reader and the benchmark.
  /// Such stores are weakly ordered and a kernel does not fence them: the caller calls
  /// store_fence() once after its last row, before the output is read by another thread.
  bool stream = false;
};

/// Makes this thread's non-temporal stores (DequantSpec::stream, the bitmask kernels' `stream`)
/// globally visible before any later store: sfence on x86-64, nothing elsewhere (no ISA streams
/// there). Once per run of rows, not per row: a fence waits for the stores in flight to reach
/// memory, which per 8 KiB row cost the 4096-column kernels about a third of their time.
void store_fence() noexcept;

/// Decoded outputs of at least this many bytes are written with non-temporal stores
/// (DequantSpec::stream): past the caches a core can keep them in, where the lines would be
/// evicted before anyone read them.
inline constexpr uint64_t kStreamStoresFrom = 4ull << 20;

/// Generic row kernel over f32 inputs. zp may be null (symmetric); gidx, if not null, maps
/// column j to scale entry gidx[j] (act-order) instead of j / group_size. `isa`: whose
/// conversion kernels finish the row (the caller's table, taken once per tensor).
void dequant_f32_row(const float* x, size_t cols, const float* scale, const float* zp, const int32_t* gidx,
                     const DequantSpec& spec, Isa isa, void* out) noexcept;

/// Fused kernel for 4-bit codes: byte m of `packed` holds column 2m in its low nibble and 2m+1
/// in its high nibble (pack-quantized int4 and fp4 E2M1 share this order); `lut[code]` is the
/// exact f32 value of a code (u - 8 for int4, the E2M1 table for fp4). Subtraction of a zero
/// point is exact here (int4 only), so it is not re-rounded.
using DequantNibbleFn = void (*)(const uint8_t* packed, size_t cols, const float* lut, const float* scale,
                                 const float* zp, const DequantSpec& spec, void* out);
DequantNibbleFn dequant_nibble_kernel(Isa isa) noexcept;

/// 8-bit codes of naive-quantized / int-quantized (int8, two's complement) and float-quantized
/// (F8_E4M3 = float8_e4m3fn: no Inf, S.1111.111 = NaN) weights.
enum class ByteCode : uint8_t { i8, e4m3 };
/// Fused kernel for one row of 8-bit codes: column j = code[j]'s exact f32 value, minus zp[g]
/// (int8 only, integer zero points: spec.int_values), times scale[g], g = j / group_size; then
/// rounded as dequant_f32_row does. Same bits as dequant_f32_row over the decoded values.
/// `memo` (may be null): kDequantByteMemoBytes of caller scratch, the same for every call of a
/// thread, where a kernel may keep per-group output tables between calls: worth it when rows
/// repeat their scales (block strategy: 128 rows share each scale). Contents are keyed by
/// everything a table depends on, so one buffer may serve any tensor; zero it before first use.
using DequantByteFn = void (*)(const uint8_t* codes, size_t cols, ByteCode code, const float* scale, const float* zp,
                               const DequantSpec& spec, void* memo, void* out);
DequantByteFn dequant_byte_kernel(Isa isa) noexcept;
inline constexpr size_t kDequantByteMemoBytes = 256 * 576 + 64;

/// Unpacks `cols` offset-binary (`words`: little-endian int32 words, any alignment) `bits`-wide codes (1..8) of one row
/// of int32 words into f32 values u - 2^(bits-1). dense = the 0.18+ layout (element i at stream bits [i*b, i*b+b),
/// compressed_tensors/compressors/pack_quantized/helpers.py `unpack_from_int32`); otherwise the
/// <= 0.17 layout (32/b elements per word at bits b*(i % (32/b)), rest of the word unused).
/// `words` must hold detail::packed_words(cols, bits, dense) words (core/packing.hpp).
void unpack_int_row(const uint8_t* words, unsigned bits, bool dense, size_t cols, float* out) noexcept;

/// Unpacks `cols` `bits`-wide (1..8) offset-binary codes of one row in the dense 0.18+ layout
/// (code i at stream bits [i*b, i*b+b) of little-endian int32 words, unpack_from_int32) into their
/// values u - 2^(bits-1) as int8, so the fused 8-bit kernel (ByteCode::i8) finishes the row with the
/// arithmetic it applies to int8 weights (the same as dequant_f32_row over int_code_value()).
/// Reads only the row's first ceil(cols * bits / 8) bytes (any alignment), so a row may start at
/// any code whose first bit is on a byte.
using UnpackInt8Fn = void (*)(const uint8_t* words, unsigned bits, size_t cols, int8_t* out);
UnpackInt8Fn unpack_int8_kernel(Isa isa) noexcept;

/// Fused kernel for one row of `bits`-wide (1..8) codes in the dense layout (as UnpackInt8Fn):
/// the same bits as unpack_int8 followed by the 8-bit kernel (ByteCode::i8) over the values, in
/// one pass: zp (may be null) holds integer zero points (spec.int_values), `memo` is the 8-bit
/// kernel's (DequantByteFn; tables of the two kernels are interchangeable). Reads only the row's
/// ceil(cols * bits / 8) bytes, writes only its `cols` outputs.
using DequantPackedFn = void (*)(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                                 const DequantSpec& spec, void* memo, void* out);
DequantPackedFn dequant_packed_kernel(Isa isa) noexcept;

/// Stores f32 `v` rounded to S then converted to D at out[j] (the scalar tail of every kernel).
void store_dequant(float v, const DequantSpec& spec, void* out, size_t j) noexcept;

}  // namespace ctstream::codecs
