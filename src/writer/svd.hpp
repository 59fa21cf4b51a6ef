// writer — truncated SVD for low-rank weights (format/low_rank.hpp), through Eigen (BDCSVD, the
// divide-and-conquer algorithm of LAPACK's xGESDD): W [rows, cols] ~= B [rows, R] @ A [R, cols],
// the optimal rank-R approximation in the Frobenius and spectral norms (Eckart-Young), split
// evenly: A = sqrt(S) V^T, B = U sqrt(S).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ctstream::writer {

/// Singular values of W (row-major [rows, cols]), descending. Throws Error{internal} naming
/// `file` and `tensor` when the SVD fails to converge.
std::vector<float> singular_values(const float* w, uint64_t rows, uint64_t cols, const std::string& file,
                                   const std::string& tensor);

/// The smallest rank whose singular values hold `energy` (in (0, 1]) of sum(s^2); at least 1.
uint64_t rank_for_energy(const std::vector<float>& s, double energy);

/// Largest rank whose factors hold fewer values than W: R * (rows + cols) < rows * cols
/// (0 when no rank does, e.g. a 1 x n weight).
uint64_t max_useful_rank(uint64_t rows, uint64_t cols);

/// The rank-R factors of W: a [R, cols] and b [rows, R], row-major.
void truncated_factors(const float* w, uint64_t rows, uint64_t cols, uint64_t rank, std::vector<float>& a,
                       std::vector<float>& b, const std::string& file, const std::string& tensor);

}  // namespace ctstream::writer
