#include "core/fork.hpp"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>

namespace ctstream::core {
namespace {

std::atomic<bool> g_forked{false};

// Registered when the library is loaded (this file is linked into every program that decodes:
// Checkpoint and Stream take their thread counts from team_size()), so a fork at any later
// point is seen. The child handler only stores a flag: async-signal-safe.
const int g_registered = ::pthread_atfork(nullptr, nullptr, [] { g_forked.store(true, std::memory_order_relaxed); });

}  // namespace

bool in_forked_child() noexcept {
  (void)g_registered;
  return g_forked.load(std::memory_order_relaxed);
}

unsigned team_size(unsigned wanted) noexcept {
  if (in_forked_child()) return 1;
  return wanted ? wanted : static_cast<unsigned>(std::max(1, omp_get_max_threads()));
}

}  // namespace ctstream::core
