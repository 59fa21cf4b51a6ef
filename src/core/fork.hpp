// core — fork(). GNU OpenMP's thread pool does not survive fork(): in the child, a parallel
// region of more than one thread on a thread that had a pool reuses the parent's pool threads,
// which do not exist there (measured: SIGSEGV in the child; tests/unit/test_stream.cpp). So, as torch does
// after fork, every OpenMP region of ctstream in a forked child runs on the calling thread only
// (its size comes from team_size()), and an object that owns a thread (Stream) is refused in a
// process other than the one that made it.
#pragma once

namespace ctstream::core {

/// True in a process fork()ed from one that had ctstream loaded.
bool in_forked_child() noexcept;

/// The threads an OpenMP region of ctstream may use: `wanted` (0: OpenMP's default,
/// omp_get_max_threads()), and 1 in a forked child.
unsigned team_size(unsigned wanted = 0) noexcept;

}  // namespace ctstream::core
