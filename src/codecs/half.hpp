// codecs — scalar bit-exact conversions among F32, F16 and BF16 (round-to-nearest-even): the
// reference every SIMD kernel is tested against. They live in codecs/element.hpp, shared with the
// CUDA kernels (one arithmetic, two targets); this header names them for the CPU code.
#pragma once
#include "codecs/element.hpp"
