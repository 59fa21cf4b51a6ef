#include "core/fork.hpp"

#include <omp.h>
#include <pthread.h>

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
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

namespace {
// The thread that opens the survivor's teams: made on first use in a process and kept, with its
// GNU OpenMP pool (a fresh thread per region would build and tear down a pool every decode).
// Only the survivor hands it work, one region at a time. Never destroyed: its thread is detached
// and may be waiting when the process exits. A process fork()ed from one that had a host makes
// its own (the old one's thread does not exist there, and its lock may be held).
class TeamHost {
 public:
  static TeamHost* get() {
    static TeamHost* host = nullptr;
    if (!host || host->pid_ != ::getpid()) host = new TeamHost();  // may throw: no thread
    return host;
  }
  void run(const std::function<void()>& region) {
    std::unique_lock<std::mutex> lk(mu_);
    job_ = &region;
    failed_ = nullptr;
    cv_.notify_all();
    cv_.wait(lk, [this] { return job_ == nullptr; });
    if (failed_) std::rethrow_exception(failed_);
  }

 private:
  TeamHost() {
    std::thread([this] { serve(); }).detach();
  }
  [[noreturn]] void serve() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [this] { return job_ != nullptr; });
      lk.unlock();
      std::exception_ptr failed;
      try {
        (*job_)();
      } catch (...) {
        failed = std::current_exception();
      }
      lk.lock();
      failed_ = failed;
      job_ = nullptr;
      cv_.notify_all();
    }
  }
  const pid_t pid_ = ::getpid();
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr failed_;
};
}  // namespace

void run_team(unsigned n, const std::function<void()>& region) {
  if (n <= 1 || !on_fork_survivor()) return region();
  TeamHost* host;
  try {
    host = TeamHost::get();
  } catch (const std::system_error&) {  // no thread to be had: here, on one (team() is 1 here)
    return region();
  }
  host->run(region);
}

}  // namespace ctstream::core
