#include <omp.h>

#include "core/fork.hpp"
#include "reader/internal.hpp"

namespace ctstream::reader {

std::string file_name(const Checkpoint::Impl& ck, const TensorInfo& t) noexcept {
  try {
    if (t.parts.empty() || t.parts.front().file >= ck.paths.size()) return {};
    return ck.paths[t.parts.front().file].string();
  } catch (...) {
    return {};
  }
}

[[noreturn]] void fail(const Checkpoint::Impl& ck, const TensorInfo& t, ErrorKind kind, const std::string& msg) {
  throw Error(kind, file_name(ck, t), t.name, msg);
}

SliceGeom slice_geometry(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& s) {
  SliceGeom g;
  const uint64_t n = t.numel();
  if (!s) {
    g.dim = n;
    g.len = n;
    return g;
  }
  if (s->dim >= t.shape.size())
    fail(ck, t, ErrorKind::invalid_argument,
         "slice dim " + std::to_string(s->dim) + " out of range for a " + std::to_string(t.shape.size()) + "-d tensor");
  for (unsigned d = 0; d < s->dim; ++d) g.outer *= t.shape[d];
  g.dim = t.shape[s->dim];
  for (size_t d = s->dim + 1; d < t.shape.size(); ++d) g.inner *= t.shape[d];
  const uint64_t stop = std::min(s->stop, g.dim);
  if (s->start > stop)  // empty slices (start == stop <= size) are fine
    fail(ck, t, ErrorKind::invalid_argument,
         "slice [" + std::to_string(s->start) + ", " + std::to_string(s->stop) + ") " +
             (s->start > g.dim ? "starts past the end" : "is reversed") + " of dim " + std::to_string(s->dim) +
             " of size " + std::to_string(g.dim));
  g.start = s->start;
  g.len = stop - s->start;
  return g;
}

uint64_t require_output(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<const std::byte> out,
                        DType out_dtype, const SliceGeom& g) {
  const uint64_t need = (g.out_elems() * dtype_bits(out_dtype) + 7) / 8;
  if (out.size() < need)
    fail(ck, t, ErrorKind::buffer_too_small,
         "output holds " + std::to_string(out.size()) + " bytes, decode needs " + std::to_string(need));
  return need;
}

void check_threads(unsigned threads, const char* what, const std::string& file) {
  if (threads > kMaxThreads)
    throw Error(
        ErrorKind::invalid_argument, file, "",
        std::string(what) + " must be at most " + std::to_string(kMaxThreads) + ", not " + std::to_string(threads));
}

void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& body) {
  if (n == 0) return;
  if (threads <= 1 || n == 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  const unsigned team = static_cast<unsigned>(std::min<size_t>(threads, n));
  core::run_team(team, [&] {  // a fork()ed child's first thread hands the team to its host thread
    std::exception_ptr first;
    std::mutex mu;
#pragma omp parallel for schedule(dynamic, 1) num_threads(static_cast <int>(core::team(team)))
    for (size_t i = 0; i < n; ++i) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (first) continue;
      }
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  });
}

}  // namespace ctstream::reader
