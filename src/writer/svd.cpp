#include "writer/svd.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>

#include "ctstream/error.hpp"

// LAPACK's SGESDD (Fortran; gfortran passes the length of a CHARACTER argument as a trailing
// hidden size_t). OpenBLAS ships LAPACK, not LAPACKE, on Debian: declared here.
extern "C" void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
                        const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork,
                        int* info, size_t jobz_len);

namespace ctstream::writer {
namespace {

int to_int(uint64_t v, const std::string& file, const std::string& tensor) {
  if (v > static_cast<uint64_t>(INT_MAX))
    throw Error(ErrorKind::unsupported, file, tensor, "dimension " + std::to_string(v) + " exceeds what LAPACK takes");
  return static_cast<int>(v);
}

/// SGESDD of W read as the column-major [cols, rows] matrix W^T = U' S V'^T, so that
/// W = V' S U'^T: U' (cols x k, column-major) holds W's right singular vectors, V'^T (k x rows,
/// column-major) its left ones. jobz 'N': singular values only.
void gesdd(char jobz, const float* w, uint64_t rows, uint64_t cols, std::vector<float>& s, std::vector<float>& u,
           std::vector<float>& vt, const std::string& file, const std::string& tensor) {
  const int m = to_int(cols, file, tensor), n = to_int(rows, file, tensor);
  const int k = std::min(m, n);
  std::vector<float> a(w, w + rows * cols);
  s.assign(static_cast<size_t>(k), 0.f);
  const bool vec = jobz != 'N';
  u.assign(vec ? static_cast<size_t>(m) * static_cast<size_t>(k) : 1, 0.f);
  vt.assign(vec ? static_cast<size_t>(k) * static_cast<size_t>(n) : 1, 0.f);
  const int lda = std::max(1, m), ldu = std::max(1, m), ldvt = std::max(1, k);
  std::vector<int> iwork(8 * static_cast<size_t>(k));
  int info = 0, lwork = -1;
  float query = 0;
  sgesdd_(&jobz, &m, &n, a.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, &query, &lwork, iwork.data(),
          &info, 1);
  if (info != 0)
    throw Error(ErrorKind::internal, file, tensor, "SGESDD workspace query failed: info " + std::to_string(info));
  lwork = static_cast<int>(std::ceil(static_cast<double>(query) * 1.0001)) + 16;
  std::vector<float> work(static_cast<size_t>(lwork));
  sgesdd_(&jobz, &m, &n, a.data(), &lda, s.data(), u.data(), &ldu, vt.data(), &ldvt, work.data(), &lwork, iwork.data(),
          &info, 1);
  if (info != 0)
    throw Error(ErrorKind::internal, file, tensor, "SGESDD did not converge (info " + std::to_string(info) + ")");
}

}  // namespace

std::vector<float> singular_values(const float* w, uint64_t rows, uint64_t cols, const std::string& file,
                                   const std::string& tensor) {
  std::vector<float> s, u, vt;
  gesdd('N', w, rows, cols, s, u, vt, file, tensor);
  return s;
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
  std::vector<float> s, u, vt;
  gesdd('S', w, rows, cols, s, u, vt, file, tensor);
  const uint64_t k = s.size();
  if (rank == 0 || rank > k)
    throw Error(ErrorKind::internal, file, tensor,
                "rank " + std::to_string(rank) + " outside [1, " + std::to_string(k) + "]");
  a.assign(rank * cols, 0.f);
  b.assign(rows * rank, 0.f);
  for (uint64_t i = 0; i < rank; ++i) {
    const float r = std::sqrt(s[i]);
    for (uint64_t j = 0; j < cols; ++j) a[i * cols + j] = r * u[i * cols + j];  // column i of U'
    for (uint64_t o = 0; o < rows; ++o) b[o * rank + i] = r * vt[i + o * k];    // row i of V'^T
  }
}

void multiply_factors(const float* b, const float* a, uint64_t rows, uint64_t rank, uint64_t cols, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
              static_cast<int>(rank), 1.0f, b, static_cast<int>(rank), a, static_cast<int>(cols), 0.0f, c,
              static_cast<int>(cols));
}

}  // namespace ctstream::writer
