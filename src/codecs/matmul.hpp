// codecs — the one dense matrix product of the project (low-rank weights: W = B @ A), through
// Eigen's GEMM, single-threaded per call (callers split rows across threads). For given shapes
// the result of a row depends only on its inputs and the call's (rows, rank, cols): callers that
// need bit-identical rows whatever the slicing call it on a fixed grid of row blocks.
#pragma once
#include <cstdint>

namespace ctstream::codecs {

/// c [rows, cols] = b [rows, rank] @ a [rank, cols]; all row-major f32, no aliasing.
void matmul_f32(const float* b, const float* a, uint64_t rows, uint64_t rank, uint64_t cols, float* c) noexcept;

}  // namespace ctstream::codecs
