// io — large anonymous buffers for decoded data (the stream's ring): their own mapping, with
// transparent huge pages requested, so first touch costs one fault per 2 MiB instead of per
// 4 KiB (on a 2-core machine the 4 KiB faults of a 256 MiB ring cost more than the decode).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ctstream::io {

class AnonBuffer {
 public:
  AnonBuffer() = default;
  /// Maps `bytes` of zero-filled, untouched memory (no RSS until written). Throws std::bad_alloc.
  explicit AnonBuffer(uint64_t bytes);
  ~AnonBuffer();
  AnonBuffer(AnonBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  AnonBuffer& operator=(AnonBuffer&& o) noexcept;
  AnonBuffer(const AnonBuffer&) = delete;
  AnonBuffer& operator=(const AnonBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  uint64_t size() const noexcept { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ctstream::io
