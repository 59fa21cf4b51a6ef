// io — read-ahead for cold local files, on a thread of its own (issue 30).
//
// The reader's read schedule (reader/read_schedule.hpp) says which byte ranges of a local file its
// decodes will read next; ReadAhead advises the kernel to read them
// (POSIX_FADV_WILLNEED / MADV_WILLNEED, in kPieceBytes pieces: the kernel reads at most
// read_ahead_kb of one advice and drops the rest) on its worker thread. Filling the page cache
// costs CPU time that would otherwise be the decoding threads', and several threads' interleaved
// preads defeat the kernel's own per-file sequential detection. Bytes already advised (the last
// kKeptIntervals merged intervals per file) are not advised again. Remote files fetch ahead
// themselves (io::RemoteFile::will_need). A ReadAhead made before a fork() advises nothing in the
// child (its worker thread is the parent's); one made in the child advises as usual.
#pragma once
#include <cstdint>
#include <memory>

#include "io/file.hpp"

namespace ctstream::io {

class ReadAhead {
 public:
  static constexpr uint64_t kPieceBytes = 4ull << 20;

  ReadAhead();
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// Decodes will read [from, to) of `f`, the checkpoint's file `index`, soon. Never blocks on
  /// I/O; never throws.
  void advise(const File& f, uint32_t index, uint64_t from, uint64_t to) noexcept;
  /// Bytes handed to the worker so far (each at most once per interval; tests, stats).
  uint64_t advised_bytes() const noexcept;

 private:
  // Everything the worker shares, on the heap: a fork()ed child leaks it whole, since the parent's
  // worker may have been waiting on the condition variable (destroying it would wait for that
  // waiter forever: pthread_cond_destroy) or holding the mutex at the fork.
  struct State;
  static void run(State& s);
  std::unique_ptr<State> s_;
};

}  // namespace ctstream::io
