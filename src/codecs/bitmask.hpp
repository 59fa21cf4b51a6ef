// codecs — bitmask sparsity: expand one row of packed non-zero values into a dense row.
// Mask layout (compressed_tensors/utils/helpers.py `pack_bitmasks`: numpy.packbits(axis=-1,
// bitorder="little")): bit j (value 1<<j) of byte k is element 8k+j; each row is padded to whole
// bytes with zero bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "codecs/dispatch.hpp"

namespace ctstream::codecs {

/// Writes `cols` elements of `elem_bytes` (1, 2 or 4) to `out`: element j is the next unread
/// value from `values` if mask bit j is set, else zero bits. Reads exactly popcount(mask bits
/// [0, cols)) values. `stream`: the row belongs to a large output, written with non-temporal
/// stores where the ISA has them (DequantSpec::stream, and as there the caller calls
/// store_fence() after its last row; the same bytes). @return that count.
using BitmaskExpandFn = size_t (*)(const uint8_t* mask, const void* values, size_t cols, void* out, bool stream);

BitmaskExpandFn bitmask_expand_kernel(unsigned elem_bytes, Isa isa) noexcept;

/// Number of set bits in mask bits [0, cols) — the values a row consumes.
uint64_t bitmask_row_popcount(const uint8_t* mask, size_t cols) noexcept;
/// True when the padding bits after `cols` in the row's last byte are all zero.
bool bitmask_padding_clear(const uint8_t* mask, size_t cols) noexcept;

}  // namespace ctstream::codecs
