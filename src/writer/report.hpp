// writer — what `compress_checkpoint` reports: per-tensor error statistics of the written
// tensors against the input (as the library would decode them), and the report as JSON.
#pragma once
#include <cstdint>

#include "ctstream/writer.hpp"

namespace ctstream::writer {

/// Accumulates |decoded - input| over a tensor.
struct ErrStats {
  double max_abs = 0, sum_x2 = 0, sum_e2 = 0;
  bool exact = true;
  void add(float ref, float dec);
  /// Fills exact / max_abs_error / rms_error / snr_db of `tr` over `n` elements.
  void fill(TensorReport& tr, uint64_t n) const;
};

}  // namespace ctstream::writer
