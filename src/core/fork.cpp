#include "core/fork.hpp"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <exception>
#include <system_error>
#include <thread>

#include "ctstream/checkpoint.hpp"

namespace ctstream::core {
namespace {

thread_local bool t_survivor = false;

// Registered when the library is loaded (this file is linked into every program that decodes:
// Checkpoint and Stream take their thread counts from here), so a fork at any later point is
// seen. The child handler runs on the child's one thread, the survivor, and only stores a flag;
// the prepare handler touches that flag on the forking thread first, so that its thread-local
// block exists before the fork (a first access from a shared library may allocate it).
const int g_registered = ::pthread_atfork([] { *static_cast<volatile bool*>(&t_survivor) = t_survivor; }, nullptr,
                                          [] { t_survivor = true; });

}  // namespace

bool on_fork_survivor() noexcept {
  (void)g_registered;
  return t_survivor;
}

unsigned team_size(unsigned wanted) noexcept {
  if (wanted) return wanted;  // OpenOptions / StreamOptions keep it within kMaxThreads
  return std::min(kMaxThreads, static_cast<unsigned>(std::max(1, omp_get_max_threads())));  // OMP_NUM_THREADS
}

unsigned team(unsigned n) noexcept { return on_fork_survivor() ? 1 : n; }

void run_team(unsigned n, const std::function<void()>& region) {
  if (n <= 1 || !on_fork_survivor()) return region();
  std::exception_ptr failed;
  try {
    std::thread fresh([&] {
      try {
        region();
      } catch (...) {
        failed = std::current_exception();
      }
    });
    fresh.join();
  } catch (const std::system_error&) {  // no thread to be had: here, on one (team() is 1 here)
    return region();
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace ctstream::core
