// io — remote objects as files: see remote_file.hpp.
#include "io/remote_file.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <unistd.h>

#include "ctstream/error.hpp"
#include "io/aws_config.hpp"
#include "io/url.hpp"

namespace ctstream::io {

HttpTarget remote_target(std::string_view url) {
  const Url u = parse_url(url);
  if (u.scheme == UrlScheme::s3) return s3_target(u, load_s3_config());
  return http_target(u);
}

RemoteFile::RemoteFile(HttpTarget target, ObjectInfo info, HttpClient& client, std::string url,
                       RemoteCacheOptions cache)
    : File(std::move(url), info.size, Mode::remote),
      target_(std::move(target)),
      info_(std::move(info)),
      client_(client),
      cache_opt_(cache),
      owner_pid_(static_cast<int>(getpid())) {
  id_.path = path_;
}

std::unique_ptr<RemoteFile> RemoteFile::open(std::string_view url, HttpClient& client) {
  HttpTarget t = remote_target(url);
  ObjectInfo info = client.probe(t);
  return std::make_unique<RemoteFile>(std::move(t), std::move(info), client, std::string(url));
}

void RemoteFile::read_at(uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return;
  if (offset <= size_ && out.size() <= size_ - offset && getpid() == owner_pid_ && copy_from_cache(offset, out)) return;
  client_.read(target_, info_, offset, out);
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
  return o;
}

RemoteFile::~RemoteFile() {
  if (getpid() != owner_pid_) {
    // A fork()ed child: the workers are the parent's threads, which do not exist here. Their
    // std::thread objects are leaked (never joined, detached or destroyed).
    try {
      (void)new std::vector<std::thread>(std::move(workers_));
    } catch (...) {
      for (auto& w : workers_) w.detach();
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void RemoteFile::work() const {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const uint64_t idx = queue_.front();
    queue_.pop_front();
    auto it = chunks_.find(idx);
    if (it == chunks_.end()) continue;  // released before its turn
    std::shared_ptr<Chunk> c = it->second;
    const uint64_t off = idx * cache_opt_.chunk_bytes;
    lock.unlock();
    bool ok = true;
    try {
      client_.read(target_, info_, off, c->data);
    } catch (...) {  // forgotten: read_at fetches directly and reports its own error
      ok = false;
    }
    lock.lock();
    c->ready = ok;
    c->failed = !ok;
    if (!ok || c->dropped) {
      auto jt = chunks_.find(idx);
      if (jt != chunks_.end() && jt->second == c) {
        held_ -= c->data.size();
        chunks_.erase(jt);
      }
    }
    cv_.notify_all();
  }
}

void RemoteFile::will_need(uint64_t offset, uint64_t n) const noexcept {
  const uint64_t cb = cache_opt_.chunk_bytes;
  if (n == 0 || cache_opt_.prefetch_bytes == 0 || offset >= size_ || getpid() != owner_pid_) return;
  n = std::min(n, size_ - offset);
  try {
    std::lock_guard lock(mu_);
    bool queued = false;
    for (uint64_t idx = offset / cb; idx <= (offset + n - 1) / cb; ++idx) {
      if (chunks_.count(idx)) continue;
      const uint64_t bytes = std::min(cb, size_ - idx * cb);
      if (held_ + bytes > cache_opt_.prefetch_bytes) break;  // backpressure
      auto c = std::make_shared<Chunk>();
      c->data.resize(bytes);
      chunks_.emplace(idx, std::move(c));
      held_ += bytes;
      peak_ = std::max(peak_, held_);
      queue_.push_back(idx);
      queued = true;
    }
    if (queued && workers_.empty())
      for (unsigned i = 0; i < cache_opt_.workers; ++i) workers_.emplace_back([this] { work(); });
    if (queued) cv_.notify_all();
  } catch (...) {  // advisory: no memory or no thread means no read-ahead
  }
}

void RemoteFile::release(uint64_t offset, uint64_t n, bool) const noexcept {
  const uint64_t cb = cache_opt_.chunk_bytes;
  std::lock_guard lock(mu_);
  for (auto it = chunks_.lower_bound((offset + cb - 1) / cb); it != chunks_.end();) {
    const uint64_t start = it->first * cb, end = start + it->second->data.size();
    if (end > offset + n) break;
    if (!it->second->ready) {  // in flight or queued: dropped when its fetch ends (or skipped)
      it->second->dropped = true;
      if (std::find(queue_.begin(), queue_.end(), it->first) == queue_.end()) {
        ++it;
        continue;
      }
      queue_.erase(std::find(queue_.begin(), queue_.end(), it->first));
    }
    held_ -= it->second->data.size();
    it = chunks_.erase(it);
  }
}

bool RemoteFile::copy_from_cache(uint64_t offset, std::span<std::byte> out) const {
  const uint64_t cb = cache_opt_.chunk_bytes;
  std::unique_lock lock(mu_);
  const uint64_t first = offset / cb, last = (offset + out.size() - 1) / cb;
  std::vector<std::shared_ptr<Chunk>> parts;
  for (uint64_t idx = first; idx <= last; ++idx) {
    auto it = chunks_.find(idx);
    if (it == chunks_.end()) return false;
    parts.push_back(it->second);
  }
  for (const auto& c : parts) {
    cv_.wait(lock, [&] { return c->ready || c->failed || stop_; });
    if (!c->ready) return false;
  }
  lock.unlock();  // ready chunks are immutable; the shared_ptrs keep them alive
  for (uint64_t idx = first; idx <= last; ++idx) {
    const uint64_t cstart = idx * cb;
    const uint64_t a = std::max(offset, cstart), b = std::min(offset + out.size(), cstart + cb);
    std::memcpy(out.data() + (a - offset), parts[idx - first]->data.data() + (a - cstart), b - a);
  }
  return true;
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
