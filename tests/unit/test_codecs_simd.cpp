// Bitmask-expand and fused nibble-dequant kernels: every SIMD path against the scalar reference.
#include <catch2/catch.hpp>
