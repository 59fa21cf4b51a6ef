#include "io/read_ahead.hpp"

#include <unistd.h>

#include <algorithm>
#include <exception>

#include "core/fork.hpp"

namespace ctstream::io {

ReadAhead::~ReadAhead() {
  if (worker_.joinable() && ::getpid() != owner_pid_) {
    // A fork()ed child: the worker is the parent's thread, which does not exist here, and the
    // mutex may have been held by it at the fork. The std::thread object is leaked (never joined,
    // detached or destroyed), as io/remote_file.cpp does with its workers.
    try {
      (void)new std::thread(std::move(worker_));
    } catch (...) {
      std::terminate();  // ~std::thread of a joinable thread would terminate anyway
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ReadAhead::advise(const File& f, uint32_t index, uint64_t from, uint64_t to) noexcept {
  to = std::min(to, f.size());
  if (f.mode() == Mode::remote || to <= from || core::in_forked_child()) return;
  try {
    std::lock_guard<std::mutex> lk(mu_);
    if (files_.size() <= index) files_.resize(index + 1);
    Intervals& done = files_[index];
    // The parts of [from, to) no kept interval covers become jobs.
    uint64_t at = from;
    bool queued = false;
    for (const auto& [lo, hi] : done) {
      if (hi <= at) continue;
      if (lo >= to) break;
      if (lo > at) {
        jobs_.push_back({&f, at, lo});
        advised_bytes_.fetch_add(lo - at, std::memory_order_relaxed);
        queued = true;
      }
      at = std::max(at, hi);
    }
    if (at < to) {
      jobs_.push_back({&f, at, to});
      advised_bytes_.fetch_add(to - at, std::memory_order_relaxed);
      queued = true;
    }
    if (!queued) return;
    // Insert [from, to) and merge what it touches.
    auto it = std::lower_bound(done.begin(), done.end(), std::make_pair(from, uint64_t{0}));
    if (it != done.begin() && std::prev(it)->second >= from) --it;
    uint64_t lo = from, hi = to;
    auto end = it;
    while (end != done.end() && end->first <= hi) {
      lo = std::min(lo, end->first);
      hi = std::max(hi, end->second);
      ++end;
    }
    it = done.erase(it, end);
    done.insert(it, {lo, hi});
    if (done.size() > kKeptIntervals) done.erase(done.begin());
    while (jobs_.size() > 64) jobs_.pop_front();  // the decodes outran the disk: keep the nearest
    if (!worker_.joinable()) {
      worker_ = std::thread([this] { run(); });
      owner_pid_ = ::getpid();
    }
  } catch (...) {  // no thread or no memory: the decode reads without advice
    return;
  }
  cv_.notify_one();
}

void ReadAhead::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_.load() || !jobs_.empty(); });
    if (stop_.load()) return;
    const Job j = jobs_.front();
    jobs_.pop_front();
    lk.unlock();
    for (uint64_t at = j.from; at < j.to && !stop_.load(std::memory_order_relaxed); at += kPieceBytes)
      j.f->will_need(at, std::min(kPieceBytes, j.to - at));
    lk.lock();
  }
}

}  // namespace ctstream::io
