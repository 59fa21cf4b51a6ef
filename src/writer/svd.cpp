#include "writer/svd.hpp"

// One thread per call (the writer handles one tensor at a time; the reader's row blocks bring
// their own threads): results never depend on a thread count.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>

#include "ctstream/error.hpp"

namespace ctstream::writer {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Divide-and-conquer SVD (Eigen's BDCSVD: bidiagonalisation + divide and conquer, LAPACK
/// xGESDD's algorithm) of W [rows, cols].
Eigen::BDCSVD<RowMat> svd(const float* w, uint64_t rows, uint64_t cols, bool vectors, const std::string& file,
                          const std::string& tensor) {
  if (rows > static_cast<uint64_t>(INT32_MAX) || cols > static_cast<uint64_t>(INT32_MAX))
    throw Error(ErrorKind::unsupported, file, tensor, "weight too large for an SVD");
  const Eigen::Map<const RowMat> m(w, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  Eigen::BDCSVD<RowMat> s(m, vectors ? (Eigen::ComputeThinU | Eigen::ComputeThinV) : 0);
  if (s.info() != Eigen::Success) throw Error(ErrorKind::internal, file, tensor, "the SVD did not converge");
  return s;
}

}  // namespace

std::vector<float> singular_values(const float* w, uint64_t rows, uint64_t cols, const std::string& file,
                                   const std::string& tensor) {
  const auto s = svd(w, rows, cols, false, file, tensor);
  const auto& v = s.singularValues();
  return std::vector<float>(v.data(), v.data() + v.size());
}

uint64_t rank_for_energy(const std::vector<float>& s, double energy) {
  double total = 0;
  for (float v : s) total += static_cast<double>(v) * v;
  double acc = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    acc += static_cast<double>(s[i]) * s[i];
    if (acc >= energy * total) return i + 1;
  }
  return std::max<uint64_t>(1, s.size());
}

uint64_t max_useful_rank(uint64_t rows, uint64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  return (rows * cols - 1) / (rows + cols);
}

void truncated_factors(const float* w, uint64_t rows, uint64_t cols, uint64_t rank, std::vector<float>& a,
                       std::vector<float>& b, const std::string& file, const std::string& tensor) {
  const auto s = svd(w, rows, cols, true, file, tensor);
  const auto& sv = s.singularValues();
  const uint64_t k = static_cast<uint64_t>(sv.size());
  if (rank == 0 || rank > k)
    throw Error(ErrorKind::internal, file, tensor,
                "rank " + std::to_string(rank) + " outside [1, " + std::to_string(k) + "]");
  const auto& U = s.matrixU();  // [rows, k]
  const auto& V = s.matrixV();  // [cols, k]
  a.assign(rank * cols, 0.f);
  b.assign(rows * rank, 0.f);
  for (uint64_t i = 0; i < rank; ++i) {
    const float r = std::sqrt(sv(static_cast<Eigen::Index>(i)));
    const auto ii = static_cast<Eigen::Index>(i);
    for (uint64_t j = 0; j < cols; ++j) a[i * cols + j] = r * V(static_cast<Eigen::Index>(j), ii);
    for (uint64_t o = 0; o < rows; ++o) b[o * rank + i] = r * U(static_cast<Eigen::Index>(o), ii);
  }
}

}  // namespace ctstream::writer
