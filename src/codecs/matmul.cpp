#include "codecs/matmul.hpp"

#define EIGEN_DONT_PARALLELIZE  // threads belong to the caller (see matmul.hpp)
#include <Eigen/Core>

namespace ctstream::codecs {

void matmul_f32(const float* b, const float* a, uint64_t rows, uint64_t rank, uint64_t cols, float* c) noexcept {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto n = static_cast<Eigen::Index>(rows), r = static_cast<Eigen::Index>(rank),
             k = static_cast<Eigen::Index>(cols);
  const Eigen::Map<const RowMat> B(b, n, r);
  const Eigen::Map<const RowMat> A(a, r, k);
  Eigen::Map<RowMat> C(c, n, k);
  C.noalias() = B * A;
}

}  // namespace ctstream::codecs
