// The 8-bit kernels' table memo (DequantByteFn's `memo`: kDequantByteMemoBytes of per-thread caller
// scratch, zeroed before first use), shared by the x86 ISA files. 256 slots of 576 bytes from the
// first 64-byte boundary: slot g % 256 holds the last table built for group g of a row, with its
// key, so rows that repeat their scales (block strategy: 128 rows share each) build each table once
// per block of rows. A key is (tag, scale bits, zero point bits); the tag names the table's layout
// and every parameter it depends on besides those, and each ISA file takes its own tags, so one
// buffer used by several ISAs' kernels (the SIMD tests share one) never serves one's table to another.
//
// Internal linkage, as stores.hpp: each ISA file compiles its own copy with its own flags.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "codecs/dequant.hpp"

namespace ctstream::codecs::x86 {
namespace {

struct MemoSlot {
  uint32_t tag, scale_bits, zp_bits, pad[13];  // tag 0: empty (the caller zeroes the buffer)
  alignas(64) unsigned char table[512];
};
inline constexpr size_t kMemoSlots = 256;
static_assert(kMemoSlots * sizeof(MemoSlot) + 64 == ::ctstream::codecs::kDequantByteMemoBytes,
              "kDequantByteMemoBytes: 256 slots of 576 bytes and 64 for alignment");
inline constexpr size_t kMemoFrom = 64;  // shorter groups: the arithmetic path

// Kernels reading tables from the memo prefetch their codes this far ahead: a memo table's lines
// are loaded every 128 columns (block 128), and on the EPYC measured the hardware's stream of codes
// read from memory then fell behind (fp8 block 128x128, 4096 x 14336: AVX-512 0.53-0.63 of the
// roofline without, 0.79-1.08 with; bench/RESULTS.md). A prefetch never faults, so the ones past
// the row's end are harmless (an address, not a pointer into the row).
inline constexpr size_t kCodesAhead = 8192;

// Tags: AVX-512 1..36 (its ByteTable, by natural and output dtype, zero points, E4M3), AVX2 64.
inline constexpr uint32_t kAvx2E4m3Tag = 64;

inline uint32_t f32_bits_of(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  return b;
}

// Group g's table for the key, built by build() when the slot holds another.
template <class Table, class Build>
inline const Table& memo_table(void* memo, size_t g, uint32_t tag, float scale, float zp, Build&& build) {
  static_assert(sizeof(Table) <= sizeof(MemoSlot::table), "a table fits its slot");
  static_assert(alignof(Table) <= alignof(MemoSlot), "and is aligned there");
  auto* slots = reinterpret_cast<MemoSlot*>((reinterpret_cast<uintptr_t>(memo) + 63) & ~uintptr_t(63));
  MemoSlot& m = slots[g % kMemoSlots];
  Table* t = reinterpret_cast<Table*>(m.table);
  const uint32_t sb = f32_bits_of(scale), zb = f32_bits_of(zp);
  if (m.tag != tag || m.scale_bits != sb || m.zp_bits != zb) {
    *t = build();
    m.tag = tag, m.scale_bits = sb, m.zp_bits = zb;
  }
  return *t;
}

}  // namespace
}  // namespace ctstream::codecs::x86
