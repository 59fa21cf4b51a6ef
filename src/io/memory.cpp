#include "io/memory.hpp"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace ctstream::io {

AnonBuffer::AnonBuffer(uint64_t bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  // Advisory: THP in "madvise" mode (a common default) only backs ranges that ask for it.
  if (bytes >= (2u << 20)) ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
  data_ = static_cast<std::byte*>(p);
  size_ = bytes;
}

AnonBuffer::~AnonBuffer() {
  if (data_) ::munmap(data_, size_);
}

AnonBuffer& AnonBuffer::operator=(AnonBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace ctstream::io
