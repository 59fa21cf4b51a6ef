#include <cstring>

#include "codecs/dequant.hpp"
#include "reader/rows.hpp"

namespace ctstream::reader {
namespace {
constexpr uint64_t kTaskBytes = 256u << 10;  // output bytes per parallel task
}

uint64_t run_rows(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                  const SliceGeom& g, const std::optional<Slice>& slice, const RowDecoder& dec) {
  const uint64_t C = t.shape.empty() ? 1 : t.shape.back();
  const uint64_t osz = dtype_bits(out_dtype) / 8;  // decoders write whole-byte dtypes
  const uint64_t need = require_output(ck, t, out, out_dtype, g);
  if (need == 0) return 0;
  for (const auto& p : t.parts) {
    ck.guard(p);
    if (!dec.windowed()) ck.file_of(p).populate(p.offset, p.nbytes);  // one call instead of a fault per page
  }
  const unsigned threads = need >= 4 * kTaskBytes ? ck.threads() : 1;
  // Rows written straight into a large output stream past the caches (non-temporal stores, fenced
  // once per task below); rows decoded into scratch never do: they are read back at once.
  const bool stream = need >= codecs::kStreamStoresFrom;

  if (slice && !t.shape.empty() && slice->dim == t.shape.size() - 1) {
    // Slice of the last dim (the columns; the only dim of a 1-D tensor, which is one row): decode
    // whole rows into scratch, keep [start, start + len).
    const uint64_t rows = g.outer;
    const uint64_t per = std::max<uint64_t>(1, kTaskBytes / (C * osz));
    parallel_for((rows + per - 1) / per, threads, [&](size_t task) {
      thread_local std::vector<std::byte> row;
      row.resize(C * osz);
      for (uint64_t r = task * per; r < std::min(rows, (task + 1) * per); ++r) {
        std::byte* dst = out.data() + r * g.len * osz;
        if (dec.row_window(r, g.start, g.start + g.len, dst, stream)) continue;
        dec.row(r, row.data(), /*stream=*/false);
        std::memcpy(dst, row.data() + g.start * osz, g.len * osz);
      }
      codecs::store_fence();  // the task's streamed rows, before the join hands them on
    });
    return need;
  }
  // Whole rows: runs of rows [first, first + n) for each outer index of a leading-dim slice.
  // Only a slice of a leading dim gets here, whose `inner` holds whole rows; anything else would
  // write fewer bytes than `need` and leave the rest of the caller's buffer as it was.
  if (C != 0 && ((g.len * g.inner) % C != 0 || g.outer * (g.len * g.inner / C) * C * osz != need))
    fail(ck, t, ErrorKind::internal, "row decode of a slice that does not cover whole rows");
  const uint64_t rows_per_outer = g.len * g.inner / C;
  const uint64_t per = std::max<uint64_t>(1, kTaskBytes / (C * osz));
  const uint64_t tasks_per_outer = (rows_per_outer + per - 1) / per;
  parallel_for(g.outer * tasks_per_outer, threads, [&](size_t task) {
    const uint64_t o = task / tasks_per_outer, c = task % tasks_per_outer;
    const uint64_t first = (o * g.dim + g.start) * g.inner / C;
    for (uint64_t i = c * per; i < std::min(rows_per_outer, (c + 1) * per); ++i)
      dec.row(first + i, out.data() + (o * rows_per_outer + i) * C * osz, stream);
    codecs::store_fence();  // the task's streamed rows (codecs::DequantSpec::stream), before the join
  });
  return need;
}

}  // namespace ctstream::reader
