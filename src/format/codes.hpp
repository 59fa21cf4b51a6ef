// format — how a format's main stored part holds a tensor's values. The one switch of every
// decoder: the CPU row decoders (reader/decode_compressed.cpp) and the CUDA kernels
// (cuda/kernels.cu) both dispatch on it. No dependencies, so device code can include it.
#pragma once
#include <cstdint>

namespace ctstream::format {

enum class Codes : uint8_t {
  none,        ///< dense (stored as the tensor's own dtype) and low-rank (factors): no codes
  packed_int,  ///< pack-quantized: b-bit offset-binary codes in I32 words, row_bytes per row
  byte,        ///< naive / int / float / mxfp8: one I8 or F8_E4M3 per element
  e2m1,        ///< nvfp4 / mxfp4: E2M1 nibbles, even column in the low nibble
  e2m3,        ///< mxfp6: 4 E2M3 codes per 3 bytes
  sparse,      ///< bitmask: the values at the mask's set bits, zero elsewhere
  marlin,      ///< marlin-24 GPU tiles (not decoded: handed over as stored)
};

}  // namespace ctstream::format
