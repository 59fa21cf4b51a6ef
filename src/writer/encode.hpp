// writer — the encoders: one per format family, each turning a weight's values (f32, exact in
// the work dtype) into the bytes of its parts, by role; emit() writes them in the order the plan
// (i.e. the format table) gives, checking each part's size against the plan. Pure: no files.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ctstream/safetensors_writer.hpp"
#include "writer/plan.hpp"

namespace ctstream::writer {

struct Encoded {
  std::map<format::Role, std::vector<std::byte>> parts;
  DType decoded_dtype = DType::F32;  ///< what the library's decompression returns
  std::vector<float> decoded;        ///< that decompression, when asked for (error statistics)
  uint64_t pruned = 0;               ///< sparse-24: groups of 4 in which non-zeros were dropped
  /// Parts in output order, for formats whose parts have no format-table role (low-rank factors);
  /// emit() writes these instead of `parts` when set.
  std::vector<std::vector<std::byte>> ordered;
};

/// pack-quantized, int-/float-quantized, nvfp4. `v` must be finite. Throws Error{invalid_argument}
/// (naming `file` and the tensor) when the values cannot be quantized in the work dtype.
Encoded encode_quantized(const Item& it, const Resolved& r, const std::vector<float>& v, bool want_decoded,
                         const std::string& file);
/// sparse-bitmask (needs it.nnz from the scan) and sparse-24-bitmask (`prune`: keep the 2
/// largest of every 4; otherwise a tensor that is not 2:4 sparse is refused).
Encoded encode_sparse(const Item& it, const Resolved& r, const std::vector<float>& v, bool prune, bool want_decoded,
                      const std::string& file);

/// low-rank: the rank-`it.rank` factors of the 2-D weight `v` (finite), stored in the work dtype;
/// `decoded` = their product as the reader computes it (f32 GEMM, rounded to the work dtype).
Encoded encode_low_rank(const Item& it, const std::vector<float>& v, bool want_decoded, const std::string& file);

/// Writes a compressed item's parts in its planned order.
void emit(const Item& it, const Encoded& e, SafetensorsWriter& w);

}  // namespace ctstream::writer
