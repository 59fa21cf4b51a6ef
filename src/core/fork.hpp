// core — fork(). GNU OpenMP's thread pool does not survive fork(): the pool of the thread that
// forks (if it opened a team before) lists pool threads that do not exist in the child, and a
// parallel region of more than one thread on that thread reuses them (measured: SIGSEGV in the
// child; tests/unit/test_stream.cpp). Only that thread -- the one the child starts with, "the
// survivor" -- carries such a pool: threads made in the child have none. So a region of ctstream
// on the survivor runs on one thread (team()), and a decode's rows go to a host thread that opens
// the full team (run_team()): a process that forks before it decodes, as an engine's workers
// do, decodes with every thread. An object that owns a thread (Stream) is refused in a process
// other than the one that made it.
#pragma once

#include <functional>

namespace ctstream::core {

/// True on the thread a fork()ed child started with (see above).
bool on_fork_survivor() noexcept;

/// The threads a decode may use: `wanted`, or OpenMP's default (omp_get_max_threads()) for 0.
unsigned team_size(unsigned wanted = 0) noexcept;

/// The num_threads of an OpenMP region about to open on this thread: n, or 1 on the survivor.
unsigned team(unsigned n) noexcept;

/// Runs `region` on this thread, or -- on the survivor, for a team of n > 1 -- on a host thread
/// made once per process (kept with its OpenMP pool), where team(n) is n; returns when it is done
/// (an exception it throws is rethrown here). Where no thread can be made, on this thread (one
/// thread).
void run_team(unsigned n, const std::function<void()>& region);

}  // namespace ctstream::core
