#include "io/read_ahead.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ctstream::io {

struct ReadAhead::State {
  struct Job {
    const File* f;
    uint64_t from, to;
  };
  static constexpr size_t kKeptIntervals = 16;
  // Advised intervals of one file, sorted, disjoint, not adjacent; the lowest dropped past the cap
  // (decodes move forward through a file).
  using Intervals = std::vector<std::pair<uint64_t, uint64_t>>;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::vector<Intervals> files;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> advised_bytes{0};
  std::thread worker;
  const pid_t creator = ::getpid();  // a fork()ed child's copy advises nothing (see read_ahead.hpp)
};

ReadAhead::ReadAhead() : s_(std::make_unique<State>()) {}

uint64_t ReadAhead::advised_bytes() const noexcept { return s_->advised_bytes.load(std::memory_order_relaxed); }

ReadAhead::~ReadAhead() {
  if (s_->creator != ::getpid()) {
    // A fork()ed child's copy: the parent's thread does not exist here, and a parent thread may
    // have held the lock at the fork (see State). Left as it is.
    (void)s_.release();
    return;
  }
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->stop.store(true);
  }
  s_->cv.notify_all();
  if (s_->worker.joinable()) s_->worker.join();
}

void ReadAhead::advise(const File& f, uint32_t index, uint64_t from, uint64_t to) noexcept {
  to = std::min(to, f.size());
  if (f.mode() == Mode::remote || to <= from || s_->creator != ::getpid()) return;
  State& st = *s_;
  try {
    std::lock_guard<std::mutex> lk(st.mu);
    if (st.files.size() <= index) st.files.resize(index + 1);
    State::Intervals& done = st.files[index];
    // The parts of [from, to) no kept interval covers become jobs.
    uint64_t at = from;
    bool queued = false;
    for (const auto& [lo, hi] : done) {
      if (hi <= at) continue;
      if (lo >= to) break;
      if (lo > at) {
        st.jobs.push_back({&f, at, lo});
        st.advised_bytes.fetch_add(lo - at, std::memory_order_relaxed);
        queued = true;
      }
      at = std::max(at, hi);
    }
    if (at < to) {
      st.jobs.push_back({&f, at, to});
      st.advised_bytes.fetch_add(to - at, std::memory_order_relaxed);
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
    if (done.size() > State::kKeptIntervals) done.erase(done.begin());
    while (st.jobs.size() > 64) st.jobs.pop_front();  // the decodes outran the disk: keep the nearest
    if (!st.worker.joinable()) {
      st.worker = std::thread([&st] { run(st); });
    }
  } catch (...) {  // no thread or no memory: the decode reads without advice
    return;
  }
  st.cv.notify_one();
}

void ReadAhead::run(State& s) {
  std::unique_lock<std::mutex> lk(s.mu);
  while (true) {
    s.cv.wait(lk, [&] { return s.stop.load() || !s.jobs.empty(); });
    if (s.stop.load()) return;
    const State::Job j = s.jobs.front();
    s.jobs.pop_front();
    lk.unlock();
    for (uint64_t at = j.from; at < j.to && !s.stop.load(std::memory_order_relaxed); at += kPieceBytes)
      j.f->will_need(at, std::min(kPieceBytes, j.to - at));
    lk.lock();
  }
}

}  // namespace ctstream::io
