// ctstream — streaming load: tensors come out decoded, in order, while worker threads read and
// decode the next ones ahead, within a memory budget.
//
//   auto ckpt = ctstream::Checkpoint::open("model_dir");
//   ctstream::Stream stream(ckpt, {.dtype = ctstream::DType::BF16, .budget_bytes = 256 << 20});
//   while (auto item = stream.next()) {            // blocks until the next tensor is decoded
//     copy_to_engine(item->info->name, item->data); // valid until the next call to next()
//   }
//
// Memory: decoded-ahead tensors live in one ring of `budget_bytes` (allocated once, touched only
// as far as used); a tensor larger than the budget is decoded alone into its own buffer. Peak
// resident memory is therefore about budget + the largest tensor + the pages of the tensor being
// read, whatever the model size: consumed file ranges are released (MADV_DONTNEED on the
// mapping, POSIX_FADV_DONTNEED on the file) unless `release_consumed` is false.
// From s3:// / https:// the stream fetches ahead over its order: the tensors being decoded and the
// next ones, up to the smaller of the budget and CTSTREAM_S3_PREFETCH_BYTES (32 MiB) of stored
// bytes, in parallel ranged GETs (CTSTREAM_S3_CONNECTIONS, CTSTREAM_S3_CHUNK_BYTES); each decode
// starts as soon as its first bytes arrive and frees its fetched bytes when it ends, so peak memory
// is about budget + the largest tensor + that read-ahead cap (Checkpoint::remote_stats() reports it).
// Alternatively `destination` lets the caller own every output buffer (e.g. the engine's own
// parameter memory): tensors are then decoded straight into it and the budget bounds how many
// bytes may be decoded ahead of the consumer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ctstream/bytes.hpp"  // parse_bytes, for budgets
#include "ctstream/checkpoint.hpp"

namespace ctstream {

struct StreamOptions {
  /// Output dtype for floating and compressed tensors (other dense dtypes come out as stored);
  /// nullopt: every tensor in its natural dtype (TensorInfo::dtype).
  std::optional<DType> dtype = DType::BF16;
  /// Bytes of decoded tensors that may be held ahead of the consumer.
  uint64_t budget_bytes = 512ull << 20;
  /// Decode threads (0 = the Checkpoint's setting less one, left to the consumer). They run on
  /// the stream's worker thread: one large tensor is split across them, small tensors are
  /// decoded in parallel batches. At most kMaxThreads.
  unsigned threads = 0;
  /// Drop the file pages of each tensor once the consumer moves past it.
  bool release_consumed = true;
  /// Tensor names in the order to deliver them; nullopt = every tensor in the checkpoint's order
  /// (file order). An empty list delivers nothing: a caller that filtered every name out (e.g.
  /// vLLM's lazy iterator when every tensor is lazy) must not get the whole model decoded.
  std::optional<std::vector<std::string>> order;
  /// Optional caller-owned destination for each tensor (must hold `bytes`); called on a worker
  /// thread, in delivery order, one tensor at a time, before its decode. When set, no internal
  /// ring is used. An exception it throws fails that tensor: next() rethrows it, as thrown.
  std::function<std::span<std::byte>(const TensorInfo& t, uint64_t bytes)> destination;
};

class Stream {
 public:
  struct Item {
    const TensorInfo* info;
    DType dtype;
    std::span<const std::byte> data;
  };

  /// Starts decoding ahead immediately. The Checkpoint must outlive the Stream.
  Stream(const Checkpoint& ckpt, StreamOptions options = {});
  /// Stops and joins the worker. In a fork()ed child (where the worker does not exist) it joins
  /// nothing and leaves the child's copy of the stream's memory as it is.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// The next tensor, decoded; nullopt after the last. Rethrows (as ctstream::Error) a decode
  /// error at the tensor it concerns, and `destination`'s exception as thrown; the next call goes
  /// on with the next tensor. The previous item's data is released by this call, from whichever
  /// thread it comes: several threads may call next() (they are served one at a time, each gets
  /// its own item), but an item in the ring stays valid only until any of them calls again --
  /// consumers that keep items while others call need `destination` (their own buffers).
  /// In a fork()ed child a Stream made before the fork throws Error{unsupported}: make a new one.
  std::optional<Item> next();
  /// Number of tensors this stream delivers.
  size_t size() const noexcept;
  /// Largest number of decoded bytes held at once so far (ring + oversize buffers).
  uint64_t peak_held_bytes() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctstream
