// io — remote objects as files: see remote_file.hpp.
#include "io/remote_file.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

#include <unistd.h>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"
#include "io/http_response.hpp"
#include "io/url.hpp"

namespace ctstream::io {

HttpTarget remote_target(std::string_view url) {
  const Url u = parse_url(url);
  if (u.scheme == UrlScheme::s3) return s3_target(u, load_s3_config());
  return http_target(u);
}

RemoteFile::RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string name,
                       RemoteCacheOptions cache)
    : File(std::move(name), info.size, Mode::remote),
      target_(std::move(target)),
      info_(std::move(info)),
      client_(client),
      cache_opt_(cache),
      owner_pid_(static_cast<int>(getpid())) {
  id_.path = path_;
}

bool absent_object(std::string_view url, const Error& e) {
  if (e.kind() == ErrorKind::file_not_found) return true;
  return dynamic_cast<const http::AccessDenied*>(&e) != nullptr && parse_url(url).scheme == UrlScheme::s3;
}

std::unique_ptr<RemoteFile> RemoteFile::open(std::string_view url, HttpClient& client) {
  HttpTarget t = remote_target(url);
  ObjectInfo info = client.probe(t);
  std::string name = t.display;  // path(): what messages and listings show (never the query)
  return std::make_unique<RemoteFile>(std::move(t), std::move(info), client, std::move(name));
}

void RemoteFile::fetch(uint64_t offset, std::span<std::byte> out) const {
  requests_.fetch_add(1, std::memory_order_relaxed);
  fetched_.fetch_add(out.size(), std::memory_order_relaxed);
  client_.read(target_, info_, offset, out);
}

void RemoteFile::read_at(uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return;
  if (offset > size_ || out.size() > size_ - offset || getpid() != owner_pid_) return fetch(offset, out);
  // Walk the range: cached pieces are copied out (after waiting for those in flight), the gaps
  // between them fetched straight into `out`.
  const uint64_t end = offset + out.size();
  for (uint64_t pos = offset; pos < end;) {
    std::shared_ptr<Chunk> c;
    uint64_t stop = end;  // end of the gap at pos, when no piece covers it
    {
      std::unique_lock lock(mu_);
      auto it = chunks_.upper_bound(pos);
      if (it != chunks_.begin() && std::prev(it)->first + std::prev(it)->second->size > pos) c = std::prev(it)->second;
      else if (it != chunks_.end()) stop = std::min(end, it->first);
      if (c) {
        cv_.wait(lock, [&] { return c->ready || c->failed || stop_; });
        if (!c->ready) {  // failed: read its bytes directly
          stop = std::min(end, c->start + c->size);
          c.reset();
        }
      }
    }
    if (!c) {
      fetch(pos, out.subspan(pos - offset, stop - pos));
      pos = stop;
      continue;
    }
    // A ready piece is immutable; the shared_ptr keeps it alive past a concurrent release.
    const uint64_t b = std::min(end, c->start + c->size);
    std::memcpy(out.data() + (pos - offset), c->data.data() + (pos - c->start), b - pos);
    pos = b;
  }
}

namespace {
uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0' || v[0] == '-')
    throw Error(ErrorKind::invalid_argument, "", "", std::string(name) + " must be a non-negative integer");
  return x;
}
}  // namespace

RemoteCacheOptions RemoteCacheOptions::from_env() {
  RemoteCacheOptions o;
  o.chunk_bytes = std::max<uint64_t>(env_u64("CTSTREAM_S3_CHUNK_BYTES", o.chunk_bytes), 4096);
  o.prefetch_bytes = env_u64("CTSTREAM_S3_PREFETCH_BYTES", o.prefetch_bytes);
  o.workers = static_cast<unsigned>(std::clamp<uint64_t>(env_u64("CTSTREAM_S3_CONNECTIONS", o.workers), 1, 64));
  o.coalesce_gap = env_u64("CTSTREAM_S3_COALESCE_GAP", o.coalesce_gap);
  return o;
}

RemoteFile::~RemoteFile() {
  if (getpid() != owner_pid_) {
    // A fork()ed child: the workers are the parent's threads, which do not exist here. Their
    // std::thread objects are leaked (never joined, detached or destroyed).
    try {
      (void)new std::vector<std::thread>(std::move(workers_));
    } catch (...) {
      std::terminate();  // ~std::thread of a joinable thread would terminate anyway
    }
    // A worker may have been waiting on cv_ at the fork: destroying it would wait for that waiter
    // forever (pthread_cond_destroy), and mu_ may have been held. Both are replaced by fresh
    // objects for the member destructors (the old ones need no destruction: nothing runs there).
    new (&cv_) std::condition_variable();
    new (&mu_) std::mutex();
    return;
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void RemoteFile::drop_locked(std::map<uint64_t, std::shared_ptr<Chunk>>::iterator it) const {
  held_ -= it->second->size;
  chunks_.erase(it);
}

void RemoteFile::work() const {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::shared_ptr<Chunk> c = std::move(queue_.front());
    queue_.pop_front();
    c->taken = true;  // its size is fixed from here on
    lock.unlock();
    bool ok = true;
    try {
      c->data = AnonBuffer(c->size);
      fetch(c->start, {c->data.data(), c->size});
    } catch (...) {  // forgotten: read_at fetches directly and reports its own error
      ok = false;
    }
    lock.lock();
    c->ready = ok;
    c->failed = !ok;
    if (!ok || c->dropped) {
      auto it = chunks_.find(c->start);
      if (it != chunks_.end() && it->second == c) drop_locked(it);
    }
    cv_.notify_all();
  }
}

void RemoteFile::will_need(uint64_t offset, uint64_t n) const noexcept {
  const uint64_t cb = cache_opt_.chunk_bytes;
  if (n == 0 || cache_opt_.prefetch_bytes == 0 || offset >= size_ || getpid() != owner_pid_) return;
  const uint64_t end = offset + std::min(n, size_ - offset);
  try {
    std::lock_guard lock(mu_);
    bool queued = false;
    for (uint64_t pos = offset; pos < end;) {
      auto it = chunks_.upper_bound(pos);
      if (it != chunks_.begin()) {
        auto prev = std::prev(it);
        const uint64_t pend = prev->first + prev->second->size;
        if (pend > pos) {  // already cached or scheduled
          pos = pend;
          continue;
        }
      }
      const uint64_t gap_end = std::min(end, it == chunks_.end() ? end : it->first);
      uint64_t bytes = std::min(cb, gap_end - pos);
      if (held_ + bytes > cache_opt_.prefetch_bytes) {  // backpressure: what fits (not a sliver), or nothing
        const uint64_t room = cache_opt_.prefetch_bytes - std::min(held_, cache_opt_.prefetch_bytes);
        if (room < std::min<uint64_t>(bytes, 1u << 20)) break;
        bytes = room;
      }
      // A piece right after a queued one (not yet taken by a worker) joins it, up to chunk_bytes:
      // a run of small tensors becomes one request.
      if (it != chunks_.begin()) {
        Chunk& p = *std::prev(it)->second;
        if (!p.taken && p.start + p.size == pos && p.size < cb) {
          const uint64_t add = std::min(bytes, cb - p.size);
          p.size += add;
          p.live += add;
          held_ += add;
          peak_ = std::max(peak_, held_);
          pos += add;
          continue;
        }
      }
      auto c = std::make_shared<Chunk>();
      c->start = pos;
      c->size = bytes;
      c->live = bytes;
      chunks_.emplace(pos, c);
      queue_.push_back(std::move(c));
      held_ += bytes;
      peak_ = std::max(peak_, held_);
      pos += bytes;
      queued = true;
    }
    if (queued && workers_.empty())
      for (unsigned i = 0; i < cache_opt_.workers; ++i) workers_.emplace_back([this] { work(); });
    if (queued) cv_.notify_all();
  } catch (...) {  // advisory: no memory or no thread means no read-ahead
  }
}

void RemoteFile::release(uint64_t offset, uint64_t n, bool) const noexcept {
  if (n == 0) return;
  const uint64_t end = offset + std::min(n, UINT64_MAX - offset);
  std::unique_lock lock(mu_);
  bool cancelled = false;
  auto it = chunks_.upper_bound(offset);
  if (it != chunks_.begin()) --it;
  while (it != chunks_.end() && it->first < end) {
    Chunk& c = *it->second;
    const uint64_t a = std::max(offset, c.start), b = std::min(end, c.start + c.size);
    if (b <= a) {
      ++it;
      continue;
    }
    c.live -= std::min(c.live, b - a);
    if (c.live > 0) {
      ++it;
      continue;
    }
    if (!c.ready && !c.failed) {  // queued or in flight
      auto q = std::find(queue_.begin(), queue_.end(), it->second);
      if (q == queue_.end()) {  // in flight: freed when its fetch ends
        c.dropped = true;
        ++it;
        continue;
      }
      queue_.erase(q);
      c.failed = true;  // never fetched now: a reader waiting for it reads those bytes directly
      cancelled = true;
    }
    auto next = std::next(it);
    drop_locked(it);
    it = next;
  }
  lock.unlock();
  if (cancelled) cv_.notify_all();
}

uint64_t RemoteFile::cached_until(uint64_t offset) const {
  std::lock_guard lock(mu_);
  auto it = chunks_.upper_bound(offset);
  if (it == chunks_.begin()) return 0;
  --it;
  uint64_t end = it->first + it->second->size;
  if (end <= offset) return 0;
  for (++it; it != chunks_.end() && it->first == end; ++it) end += it->second->size;
  return end;
}

uint64_t RemoteFile::cached_bytes() const {
  std::lock_guard lock(mu_);
  return held_;
}
uint64_t RemoteFile::peak_cached_bytes() const {
  std::lock_guard lock(mu_);
  return peak_;
}

std::string read_small_remote(std::string_view url, uint64_t max_bytes, HttpClient& client) {
  const HttpTarget t = remote_target(url);
  ObjectInfo info;
  std::string s = client.read_head(t, max_bytes, info);
  if (info.size > max_bytes)
    throw Error(ErrorKind::header_too_large, t.display, "",
                "object is " + std::to_string(info.size) + " bytes, over the limit of " + std::to_string(max_bytes));
  return s;
}

}  // namespace ctstream::io
