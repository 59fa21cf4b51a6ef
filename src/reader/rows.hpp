// reader — row-wise decode of compressed 2-D weights (rows = product of all but the last dim).
// A RowDecoder knows one format; run_rows handles slicing, the caller-buffer contract and
// splitting rows across threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "reader/internal.hpp"

namespace ctstream::reader {

class RowDecoder {
 public:
  virtual ~RowDecoder() = default;
  /// Writes row r (all columns) to `out` in the output dtype. Called concurrently. `stream`: `out`
  /// is the caller's large output, not scratch, so the kernels may write it with non-temporal
  /// stores (codecs::DequantSpec::stream; run_rows fences once per task).
  virtual void row(uint64_t r, std::byte* out, bool stream) const = 0;
  /// Writes only columns [c0, c1) of row r, reading only what they need (tensor-parallel
  /// column shards). Returns false when the layout does not allow it (then run_rows decodes the
  /// whole row and copies the window).
  virtual bool row_window(uint64_t /*r*/, uint64_t /*c0*/, uint64_t /*c1*/, std::byte* /*out*/, bool /*stream*/) const {
    return false;
  }
  /// True when the decoder reads its parts through read windows even in mmap mode (quantized
  /// formats, whose input is at most half the output); run_rows then does not populate the
  /// mapping. Sparse formats read mapped values (faster there: no extra copy of half the output).
  virtual bool windowed() const { return false; }
};

uint64_t run_rows(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                  const SliceGeom& g, const std::optional<Slice>& slice, const RowDecoder& dec);

/// A sparse tensor's mask (copied out of the file) and where each row's values start, checked
/// against the stored value count, row_offsets and the 2:4 rule. Error{corrupt_tensor} otherwise.
struct SparseIndex {
  std::vector<std::byte> mask;
  std::vector<uint64_t> start;  ///< rows + 1 prefix sums of the rows' popcounts
};
SparseIndex load_sparse_index(const Checkpoint::Impl& ck, const DecodePlan& plan);

/// Builds the decoder for a compressed tensor (validating the data it needs up front:
/// bitmask popcounts, zero points, g_idx). Throws Error{corrupt_tensor / unsupported}; the
/// caller has checked plan.refusal(out_dtype).
std::unique_ptr<RowDecoder> make_decoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out_dtype);

}  // namespace ctstream::reader
