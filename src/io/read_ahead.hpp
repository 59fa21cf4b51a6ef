// io — read-ahead for cold local files, on a thread of its own (issue 30).
//
// The reader says which byte ranges its decodes will read next (reader/checkpoint.cpp
// note_read: the tensor it is about to decode and, when decodes walk the file in order, the
// tensors after it up to kAheadBytes); ReadAhead advises the kernel to read them
// (POSIX_FADV_WILLNEED / MADV_WILLNEED, in kPieceBytes pieces: the kernel reads at most
// read_ahead_kb of one advice and drops the rest) on its worker thread. Filling the page cache
// costs CPU time that would otherwise be the decoding threads', and several threads' interleaved
// preads defeat the kernel's own per-file sequential detection. Bytes already advised (the last
// kKeptIntervals merged intervals per file) are not advised again. Remote files schedule their own
// fetches; in a fork()ed child nothing is advised (no thread).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "io/file.hpp"

namespace ctstream::io {

class ReadAhead {
 public:
  static constexpr uint64_t kAheadBytes = 32ull << 20;
  static constexpr uint64_t kPieceBytes = 4ull << 20;

  ReadAhead() = default;
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// Decodes will read [from, to) of `f`, the checkpoint's file `index`, soon. Never blocks on
  /// I/O; never throws.
  void advise(const File& f, uint32_t index, uint64_t from, uint64_t to) noexcept;
  /// Bytes handed to the worker so far (each at most once per interval; tests, stats).
  uint64_t advised_bytes() const noexcept { return advised_bytes_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    const File* f;
    uint64_t from, to;
  };
  static constexpr size_t kKeptIntervals = 16;
  // Advised intervals of one file, sorted, disjoint, not adjacent; the lowest dropped past the cap
  // (decodes move forward through a file).
  using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<Intervals> files_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> advised_bytes_{0};
  std::thread worker_;
  int owner_pid_ = 0;  // the process that started worker_ (a fork()ed child must not join it)
};

}  // namespace ctstream::io
