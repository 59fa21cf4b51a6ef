// reader — Stream: one worker thread decodes tensors ahead of the consumer (each decode itself
// split across the Checkpoint's OpenMP threads) into a FIFO ring bounded by the budget.
#include "ctstream/stream.hpp"

#include "core/boundary.hpp"
#include "core/fork.hpp"
#include "io/memory.hpp"
#include "reader/internal.hpp"
#include "reader/read_schedule.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace ctstream {

struct Stream::Impl {
  const Checkpoint& ck;
  StreamOptions opt;
  std::vector<const TensorInfo*> order;

  struct Slot {
    uint64_t off = 0, size = 0;  // ring region (size 0: not in the ring)
    uint64_t bytes = 0;          // decoded bytes this slot holds against the budget
    bool oversize = false;       // in the shared oversize buffer (larger than the budget)
    std::span<std::byte> data;
    DType dtype = DType::BF16;
    std::exception_ptr error;
    bool ready = false;
  };
  io::AnonBuffer ring;                 // budget bytes (huge pages), untouched until used
  io::AnonBuffer oversize_buf;         // reused for tensors larger than the budget (one at a time)
  std::deque<Slot> slots;              // produced, not yet released; front = oldest
  size_t produced = 0, delivered = 0;  // counts over `order`
  bool has_current = false;            // the consumer holds slots.front()
  uint64_t held = 0, peak = 0;

  std::mutex mu;
  std::mutex next_mu;        // serialises next() callers
  std::exception_ptr fatal;  // the worker stopped on this (not a per-tensor decode error)
  std::condition_variable cv_space, cv_ready;
  bool stop = false;
  std::thread worker;
  const pid_t pid = ::getpid();  // the process `worker` runs in

  // A fork()ed child's copy: no worker runs here, and the parent's may have held any lock.
  bool foreign() const noexcept { return ::getpid() != pid; }

  Impl(const Checkpoint& c, StreamOptions o) : ck(c), opt(std::move(o)) {
    reader::check_threads(opt.threads, "stream threads", "");
    if (!opt.order) {
      for (const auto& t : ck.tensors()) order.push_back(&t);
    } else {
      for (const auto& n : *opt.order) order.push_back(&ck.at(n));
    }
    if (!opt.destination && opt.budget_bytes > 0) ring = io::AnonBuffer(opt.budget_bytes);
    worker = std::thread([this] {
      try {
        run();
      } catch (...) {  // never let an exception end the process from the worker thread
        std::lock_guard<std::mutex> lk(mu);
        fatal = std::current_exception();
      }
      cv_ready.notify_all();
    });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv_space.notify_all();
    cv_ready.notify_all();
    worker.join();
  }

  DType out_dtype(const TensorInfo& t) const { return output_dtype(t, opt.dtype); }

  // Where the next ring region of `size` bytes would go, or nullopt if it would overlap a
  // region still held. Regions are allocated and freed in FIFO order.
  std::optional<uint64_t> ring_fit(uint64_t size) const {
    const Slot* last = nullptr;
    const Slot* first = nullptr;
    for (const auto& s : slots)
      if (!s.oversize && s.size) {
        if (!first) first = &s;
        last = &s;
      }
    if (!first) return size <= opt.budget_bytes ? std::optional<uint64_t>(0) : std::nullopt;
    uint64_t off = last->off + last->size;
    const uint64_t lo = first->off;
    if (off > lo) {  // live data is [lo, off): free space is [off, B) then [0, lo)
      if (off + size <= opt.budget_bytes) return off;
      if (size <= lo) return 0;
      return std::nullopt;
    }
    // wrapped: live is [lo, B) + [0, off): free space is [off, lo)
    if (off + size <= lo) return off;
    return std::nullopt;
  }

  // Reserves budget (and a ring region) for tensor i. With `wait`, blocks until there is room;
  // without, returns nullptr when there is none now. Called with `mu` held.
  Slot* reserve(std::unique_lock<std::mutex>& lk, size_t i, bool wait) {
    const TensorInfo& t = *order[i];
    const DType d = out_dtype(t);
    const uint64_t size = t.decoded_bytes(d);
    // The bytes held (including the consumer's current item) plus this tensor must fit the
    // budget; a tensor larger than the budget waits until nothing else is held and then uses
    // the oversize buffer.
    auto room = [&] {
      if (stop) return true;
      if (opt.destination) return held == 0 || held + size <= opt.budget_bytes;
      if (size > opt.budget_bytes || size == 0) return slots.empty();
      return ring_fit(size).has_value();
    };
    if (wait) cv_space.wait(lk, room);
    else if (!room()) return nullptr;
    if (stop) return nullptr;
    Slot slot;
    slot.dtype = d;
    slot.bytes = size;
    if (!opt.destination && size <= opt.budget_bytes && size) {
      slot.off = *ring_fit(size);
      slot.size = size;
    } else if (!opt.destination && size) {
      slot.oversize = true;
    }
    held += size;
    peak = std::max(peak, held);
    slots.push_back(slot);
    return &slots.back();  // deque references survive push_back / pop_front of other elements
  }

  void decode_one(size_t i, Slot& s) {
    const TensorInfo& t = *order[i];
    try {
      std::span<std::byte> dst;
      if (opt.destination) {
        dst = detail::call_caller(opt.destination, t, s.bytes);  // its exception: next() rethrows it as it is
      } else if (s.oversize) {
        if (oversize_buf.size() < s.bytes) {  // grows to the largest oversize tensor, then reused
          oversize_buf = io::AnonBuffer();    // the old one goes first: never both at once
          oversize_buf = io::AnonBuffer(s.bytes);
        }
        dst = {oversize_buf.data(), s.bytes};
      } else {
        dst = {ring.data() + s.off, s.bytes};
      }
      const uint64_t n = ck.decode_into(t, dst, s.dtype);
      s.data = dst.first(n);
    } catch (...) {
      s.error = std::current_exception();
    }
  }

  // The batch about to be decoded and the tensors after it in this stream's order, up to the
  // source's window (reader/read_schedule.hpp; asked again before every batch: what a remote
  // cache had no room for last time is fetched as the decodes free it). Each decode_into asks for
  // its own bytes again and, remote, releases them when it ends.
  void read_ahead(size_t i, size_t n) const {
    reader::schedule_order(ck.impl(), std::span(order).subspan(i), n, opt.budget_bytes);
  }

  static constexpr uint64_t kSmall = 1u << 20;       // tensors below this decode in batches
  static constexpr uint64_t kBatchBytes = 8u << 20;  // ... of at most this many bytes
  static constexpr size_t kBatchCount = 256;

  void run() {
    // Default: the Checkpoint's decode threads less one, which stays with the consumer (copying
    // items out, uploading them): an OpenMP team spinning on every core would starve it.
    // (A Stream decodes on its own worker thread, which a fork()ed child makes afresh: full teams.)
    const unsigned ck_threads = core::team_size(ck.options().threads);
    const unsigned threads = core::team_size(opt.threads ? opt.threads : std::max(1u, ck_threads - 1));
    size_t i = 0;
    while (i < order.size()) {
      // A batch: one large tensor (decoded with all threads), or a run of small ones (one
      // thread each, decoded in parallel) for which budget is available right now.
      std::vector<Slot*> batch;
      {
        std::unique_lock<std::mutex> lk(mu);
        Slot* first = reserve(lk, i, true);
        if (!first) return;  // stopped
        batch.push_back(first);
        uint64_t bytes = first->bytes;
        if (first->bytes < kSmall && !opt.destination) {
          while (i + batch.size() < order.size() && batch.size() < kBatchCount) {
            const TensorInfo& t = *order[i + batch.size()];
            const uint64_t size = t.decoded_bytes(out_dtype(t));
            if (size >= kSmall || bytes + size > kBatchBytes) break;
            Slot* s = reserve(lk, i + batch.size(), false);
            if (!s) break;
            batch.push_back(s);
            bytes += size;
          }
        }
      }
      read_ahead(i, batch.size());
      if (batch.size() == 1) {
        reader::ScopedDecodeThreads scope(threads);
        decode_one(i, *batch[0]);
      } else {
        reader::ScopedDecodeThreads scope(1);
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(static_cast <int>(core::team(static_cast <unsigned>(std::min <size_t>(threads, batch.size())))))
        for (size_t k = 0; k < batch.size(); ++k) {
          reader::ScopedDecodeThreads inner(1);  // thread_local: set on every team thread
          decode_one(i + k, *batch[k]);
        }
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        for (Slot* s : batch) s->ready = true;
        produced += batch.size();
      }
      cv_ready.notify_all();
      i += batch.size();
    }
  }

  std::optional<Item> next() {
    if (foreign())
      throw Error(ErrorKind::unsupported, "", "",
                  "this Stream was made in another process (before a fork): its decode thread does not exist here; "
                  "make a new Stream in this process");
    // Consumers are served one at a time: a second thread waits here until the first has its
    // item (which then stays valid until the next call to next(), from any thread).
    std::lock_guard<std::mutex> one_consumer(next_mu);
    std::unique_lock<std::mutex> lk(mu);
    if (has_current) {  // the consumer is done with the previous item
      const TensorInfo& prev = *order[delivered - 1];
      held -= slots.front().bytes;
      slots.pop_front();
      has_current = false;
      lk.unlock();
      if (opt.release_consumed && !ck.impl().remote) ck.release(prev);  // remote: decode_into did
      cv_space.notify_all();
      lk.lock();
    }
    if (delivered == order.size()) return std::nullopt;
    cv_ready.wait(lk, [&] { return (!slots.empty() && slots.front().ready) || fatal; });
    if (slots.empty() || !slots.front().ready) std::rethrow_exception(fatal);
    Slot& s = slots.front();
    ++delivered;
    has_current = true;
    if (s.error) std::rethrow_exception(s.error);
    return Item{order[delivered - 1], s.dtype, s.data};
  }
};

Stream::Stream(const Checkpoint& ckpt, StreamOptions options)
    : impl_(detail::at_boundary("", "", [&] { return std::make_unique<Impl>(ckpt, std::move(options)); })) {}
Stream::~Stream() {
  // In a forked child, joining the parent's worker (or taking a lock it held) would wait forever:
  // the copy is left as it is (its memory is the child's copy of the parent's pages).
  if (impl_ && impl_->foreign()) (void)impl_.release();
}
std::optional<Stream::Item> Stream::next() {
  return detail::at_boundary("", "", [&] { return impl_->next(); });
}
size_t Stream::size() const noexcept { return impl_->order.size(); }
uint64_t Stream::peak_held_bytes() const noexcept {
  if (impl_->foreign()) return impl_->peak;  // no worker here to race with; its lock may be held
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->peak;
}

}  // namespace ctstream
