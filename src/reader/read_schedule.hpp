// reader — the read schedule (issue 30): which stored bytes each file is asked for ahead of the
// decodes, one schedule for local files and remote objects alike.
//
// A decode asks for the bytes it reads: its slice's rows or columns where the layout says where
// they are, whole parts otherwise. While decodes walk an order -- the checkpoint's file order,
// which the decodes themselves reveal, or a Stream's, which it states -- the parts of the tensors
// after the decode follow, up to the source's window. Each source brings them in its own way
// (io::File::ahead_policy says how far and which): a local file's pages are advised on the
// checkpoint's ReadAhead worker (the kernel reads them while the decodes run; dense tensors are left
// to the kernel's own readahead of their copy), a remote object fetches them into its bounded cache.
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "reader/internal.hpp"

namespace ctstream::reader {

using Range = Checkpoint::Impl::Range;

/// The byte ranges a decode of `slice` of `t` reads, joined where closer than the file's coalesce
/// gap. Low-rank weights: none (each factor's decode reads its own).
std::vector<Range> decode_ranges(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice);

/// Before a decode of `slice` of `t`: asks the files for its ranges (decode_ranges, computed only
/// when the source is asked for them) and, when the decode is whole and follows the one before it
/// in file order, for the tensors after it in the checkpoint up to the window. The second form
/// takes the ranges a caller computed already (a remote decode releases them afterwards).
void schedule_decode(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice);
void schedule_decode(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice,
                     std::span<const Range> own);

/// A Stream about to decode next[0, batch) at once, then the rest of `next` in that order: asks for
/// the batch's tensors and those after it up to the window, and no further than `budget` where
/// the source holds what it reads ahead in memory (io::AheadPolicy::holds_bytes).
void schedule_order(const Checkpoint::Impl& ck, std::span<const TensorInfo* const> next, size_t batch, uint64_t budget);

}  // namespace ctstream::reader
