#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/boundary.hpp"
#include "core/checked.hpp"
#include "core/fork.hpp"
#include "format/grouping.hpp"
#include "format/low_rank.hpp"
#include "format/safetensors.hpp"
#include "format/scheme.hpp"
#include "format/shards.hpp"
#include "io/url.hpp"
#include "reader/internal.hpp"
#include "reader/read_schedule.hpp"
#include "reader/rows.hpp"
#ifdef CTSTREAM_HAVE_REMOTE
#include "io/remote_file.hpp"
#endif

namespace fs = std::filesystem;

namespace ctstream {

std::span<const std::byte> Checkpoint::Impl::bytes(const TensorPart& p, uint64_t off, uint64_t n, ReadWindow& w,
                                                   bool windowed) const {
  const io::File& f = file_of(p);
  const uint64_t at = p.offset + off;
  if (f.mode() == io::Mode::mmap && !windowed) {
    f.guard(at + n);  // a file truncated since open: an error here, not SIGBUS on the first touch
    return f.view(at, n);
  }
  if (w.serial == serial && w.file == p.file && at >= w.begin && at - w.begin + n <= w.buf.size())
    return {w.buf.data() + (at - w.begin), n};
  // Read ahead to the window size, within the part (callers keep off + n inside it).
  uint64_t len = std::max(n, std::min(ReadWindow::kReadWindow, p.nbytes - std::min(off, p.nbytes)));
#ifdef CTSTREAM_HAVE_REMOTE
  // Remote: within the bytes the decode fetched ahead, when they hold the request (a TP rank's
  // rows: the window must not reach into the next rank's bytes, which would be fetched for nothing).
  if (f.mode() == io::Mode::remote)
    if (const uint64_t e = static_cast<const io::RemoteFile&>(f).cached_until(at); e >= at + n)
      len = std::min(len, e - at);
#endif
  w.serial = 0;  // empty until the read succeeds
  w.buf.resize(len);
  f.read_at(at, w.buf);
  w.serial = serial, w.file = p.file, w.begin = at;
  return {w.buf.data(), n};
}

unsigned Checkpoint::Impl::threads() const {
  if (unsigned n = reader::ScopedDecodeThreads::current()) return core::team_size(n);
  return core::team_size(opt.threads);
}

// What names the checkpoint in messages and listings: a remote URL without its query (a presigned
// URL's signature) or credentials, a local path as given.
static std::string shown(const fs::path& p) {
  return io::is_remote_url(p.native()) ? io::redact_url(p.native()) : p.string();
}

namespace reader {
namespace {
thread_local unsigned t_decode_threads = 0;
}
ScopedDecodeThreads::ScopedDecodeThreads(unsigned n) : prev_(t_decode_threads) { t_decode_threads = n; }
ScopedDecodeThreads::~ScopedDecodeThreads() { t_decode_threads = prev_; }
unsigned ScopedDecodeThreads::current() { return t_decode_threads; }
}  // namespace reader

namespace {

std::unique_ptr<io::File> open_file(const fs::path& p, io::Mode mode, bool remote) {
#ifdef CTSTREAM_HAVE_REMOTE
  if (remote) return io::RemoteFile::open(p.native());
#else
  (void)remote;
#endif
  return io::File::open(p, mode);
}

std::string read_small(const fs::path& p, uint64_t max, io::FileIdentity* id, bool remote) {
#ifdef CTSTREAM_HAVE_REMOTE
  if (remote) {
    if (id) *id = io::FileIdentity{p, 0, 0};
    return io::read_small_remote(p.native(), max);
  }
#else
  (void)remote;
#endif
  return io::read_small_file(p, max, id);
}

// Remote shards: opened several at a time (as many as the remote cache's connections,
// CTSTREAM_S3_CONNECTIONS; one where the caller asked for one thread), and a shard's prefix and
// header asked for in one read: each request is a round trip, which a model of many shards would
// otherwise wait for one after another. 64 KiB holds the header of most shards (a few hundred
// tensors); a longer one takes a second read.
constexpr uint64_t kRemoteHeadRead = 64 << 10;

std::vector<format::RawTensor> read_headers(Checkpoint::Impl& ck, const format::ShardSet& lay, bool remote) {
  const io::Mode mode = ck.opt.io == IoMode::pread ? io::Mode::pread : io::Mode::mmap;
  struct Opened {
    std::unique_ptr<io::File> f;
    format::StHeader h;
    std::exception_ptr error;
  };
  std::vector<Opened> got(lay.files.size());
  unsigned together = 1;
#ifdef CTSTREAM_HAVE_REMOTE
  if (remote && ck.opt.threads != 1) together = std::max(1u, io::RemoteCacheOptions::from_env().workers);
#endif
  // The first shard in file order that fails is the error reported; shards after a failed one are
  // not opened (nor waited for), those before it are, to find out whether one of them fails first.
  std::atomic<size_t> first_bad{SIZE_MAX};
  reader::parallel_for(got.size(), together, [&](size_t fi) {
    if (fi > first_bad.load()) return;
    try {
      std::unique_ptr<io::File> f;
      try {
        f = open_file(lay.files[fi], mode, remote);
      } catch (const Error& e) {
        // A shard the index names that is not there (remote: found out here, not probed before)
        if (!remote || lay.index_path.empty() || e.kind() != ErrorKind::file_not_found) throw;
        throw format::missing_shard(shown(lay.index_path), lay.files[fi].filename().string());
      }
      const std::string name = f->path();
      std::vector<std::byte> head(std::min<uint64_t>(f->size(), remote ? kRemoteHeadRead : 8));
      if (!head.empty()) f->read_at(0, head);
      std::array<std::byte, 8> prefix{};
      if (!head.empty()) std::memcpy(prefix.data(), head.data(), std::min<size_t>(head.size(), 8));
      const uint64_t n = format::parse_prefix(prefix, f->size(), ck.opt.max_header_bytes, name);
      std::string json(n, '\0');  // parse_prefix bounded n by the cap and the file's size
      const uint64_t have = std::min<uint64_t>(n, head.size() > 8 ? head.size() - 8 : 0);
      if (have) std::memcpy(json.data(), head.data() + 8, have);
      if (have < n) f->read_at(8 + have, std::as_writable_bytes(std::span<char>(json.data() + have, n - have)));
      got[fi].h = format::parse_header(json, n, f->size(), name);
      got[fi].f = std::move(f);
    } catch (...) {  // the first file's error in file order is the one reported, whatever finished first
      got[fi].error = std::current_exception();
      for (size_t b = first_bad.load(); fi < b && !first_bad.compare_exchange_weak(b, fi);) {
      }
    }
  });
  std::vector<format::RawTensor> raw;
  std::unordered_map<std::string, uint32_t> owner;
  for (uint32_t fi = 0; fi < got.size(); ++fi) {
    if (got[fi].error) std::rethrow_exception(got[fi].error);  // none is missing before the first bad one
    format::StHeader& h = got[fi].h;
    const std::string name = got[fi].f->path();
    for (auto& e : h.entries) {
      auto [it, fresh] = owner.emplace(e.name, fi);
      if (!fresh)
        throw Error(ErrorKind::invalid_header, name, e.name,
                    "duplicate tensor: also stored in " + lay.files[it->second].string());
      raw.push_back({e.name, e.dtype, e.shape, fi, h.data_start + e.begin, e.end - e.begin});
    }
    ck.metadata.push_back(std::move(h.metadata));
    ck.has_metadata.push_back(h.has_metadata);
    ck.files.push_back(std::move(got[fi].f));
  }
  // Every tensor the index promises must be in the shard it names.
  for (const auto& [key, fi] : lay.weight_map) {
    auto it = owner.find(key);
    if (it == owner.end() || it->second != fi)
      throw Error(ErrorKind::not_found, lay.index_path.string(), key,
                  "index maps it to " + lay.files[fi].filename().string() +
                      (it == owner.end() ? ", but no shard holds it"
                                         : ", but it is stored in " + lay.files[it->second].filename().string()));
  }
  return raw;
}

/// Open-time size checks of one stored logical tensor (before any merge into low-rank weights).
void check_size(const Checkpoint::Impl& ck, const TensorInfo& t) {
  if (!detail::checked_numel(t.shape) || !detail::checked_mul(*detail::checked_numel(t.shape), 64))
    throw Error(ErrorKind::overflow, ck.paths.at(t.parts.front().file).string(), t.name,
                "logical shape product overflows 64 bits");
  // Every layout the format table admits stores at least 1 byte per 16 elements (1-bit codes
  // pack 8 per byte, a bitmask 8 per byte): a tensor that claims more elements than that is a
  // layout the table failed to bound, and would make callers allocate without limit.
  if (t.numel() > 16 * t.stored_bytes() + 16)
    throw Error(ErrorKind::corrupt_tensor, ck.paths.at(t.parts.front().file).string(), t.name,
                "claims " + std::to_string(t.numel()) + " elements but stores only " +
                    std::to_string(t.stored_bytes()) + " bytes");
}

// A product of two factors holds up to ~min(in, out) / 2 times their elements (rank 1): a few
// KiB of factors could claim TiBs (decoded, and computed, by whoever asks for the tensor). Real
// decompositions keep a rank of at least a few percent of the smaller dim; a product more than
// kMaxLowRankGain times its factors is refused as the decompression bomb it would be.
constexpr uint64_t kMaxLowRankGain = 4096;
void check_low_rank_size(const Checkpoint::Impl& ck, const TensorInfo& t, const std::string& dec_file) {
  uint64_t factors = 0;
  for (const TensorInfo& f : t.factors) factors += f.numel();
  if (t.numel() > kMaxLowRankGain * factors + (uint64_t{1} << 16))
    throw Error(ErrorKind::corrupt_tensor, ck.paths.at(t.parts.front().file).string(), t.name,
                "low-rank product of " + std::to_string(t.numel()) + " elements from factors of " +
                    std::to_string(factors) + " (over " + std::to_string(kMaxLowRankGain) +
                    " times; rank too small for " + dec_file + "'s shapes to be a real decomposition)");
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& path, const OpenOptions& options) {
  return detail::at_boundary(shown(path), "", [&] { return open_impl(path, options); });
}

Checkpoint Checkpoint::open_impl(const fs::path& path, const OpenOptions& options) {
  static std::atomic<uint64_t> serials{0};
  auto ck = std::make_unique<Impl>();
  ck->opened = shown(path);
  reader::check_threads(options.threads, "threads", ck->opened);
  ck->serial = ++serials;
  ck->opt = options;
  const bool remote = io::is_remote_url(path.native());  // before any std::filesystem call
#ifdef CTSTREAM_HAVE_REMOTE
  format::ShardSet lay = remote ? format::discover_remote_shards(path.native(), options.max_json_bytes)
                                : format::discover_shards(path, options.max_json_bytes);
#else
  if (remote)
    throw Error(ErrorKind::unsupported, shown(path), "",
                "s3:// and http(s):// checkpoints need a build with -DCTSTREAM_REMOTE=ON (and libcurl)");
  format::ShardSet lay = format::discover_shards(path, options.max_json_bytes);
#endif
  ck->remote = remote;
  const auto add_source = [&](const io::FileIdentity& id) { ck->sources.push_back({id.path, id.device, id.inode}); };
  // A file of the checkpoint that is not read is still one of its sources (writers refuse it).
  const auto add_unread = [&](const fs::path& p) {
    io::FileIdentity id;
    if (remote) add_source(io::FileIdentity{p, 0, 0});
    else if (io::identify(p, id)) add_source(id);
  };
  if (options.stored_entries)  // a plain safetensors checkpoint: no config, no factors' layout
    for (fs::path* p : {&lay.config_path, &lay.decompose_path})
      if (!p->empty()) add_unread(std::exchange(*p, {}));
  io::FileIdentity config_id;
  if (!lay.config_path.empty()) ck->config = read_small(lay.config_path, options.max_json_bytes, &config_id, remote);
  // One file opened on its own (discover_shards gave back the path itself): its sibling shards,
  // as its config (read once, above) and the index beside it say.
  if (options.sibling_shards && !options.stored_entries && !remote && lay.index_path.empty() && lay.files.size() == 1 &&
      lay.files[0] == path)
    format::add_sibling_shards(lay, path, ck->config, options.max_json_bytes);
  ck->paths = lay.files;
  for (fs::path& p : ck->paths) p = shown(p);  // a remote file is read by its own URL (io::RemoteFile)
  if (!lay.index_path.empty()) add_source(lay.index_id);
  if (!lay.config_path.empty()) add_source(config_id);
  std::vector<format::RawTensor> raw = read_headers(*ck, lay, remote);
  for (const auto& f : ck->files) add_source(f->identity());
  if (lay.one_shard)  // of the other shards, the parts of this file's modules only
    std::erase_if(raw, [&](const format::RawTensor& r) {
      if (r.file == 0) return false;
      const auto m = format::module_of_key(r.key);
      return !m || !lay.modules.count(*m);
    });
  Impl& impl = *ck;
  format::ConfigUse use;
  ck->tensors = format::group_tensors(
      raw, ck->config, lay.config_path.string(),
      [&impl](const format::RawTensor& r) {
        std::vector<std::byte> b(r.nbytes);
        impl.files.at(r.file)->read_at(r.offset, b);
        return b;
      },
      [&impl](uint32_t f) { return impl.paths.at(f).string(); }, &use,
      options.module_classes.empty() ? nullptr : &options.module_classes);
  ck->config_info = ConfigInfo{use.compressed_tensors, lay.config_path, use.description};
  for (const auto& t : ck->tensors) check_size(*ck, t);
  if (options.low_rank == LowRank::original && !lay.decompose_path.empty()) {
    const std::string dec_file = lay.decompose_path.string();
    io::FileIdentity id;
    const std::string text = read_small(lay.decompose_path, options.max_json_bytes, &id, remote);
    add_source(id);
    format::merge_low_rank(ck->tensors, format::parse_decompose_config(text, dec_file), dec_file);
    for (const auto& t : ck->tensors)
      if (t.format == Format::low_rank) check_low_rank_size(*ck, t, dec_file);
  }
  if (options.low_rank != LowRank::original && !lay.decompose_path.empty()) {
    add_unread(lay.decompose_path);  // the factors are served as stored
  }
  if (options.order == Order::name)
    std::stable_sort(ck->tensors.begin(), ck->tensors.end(),
                     [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  else
    std::stable_sort(ck->tensors.begin(), ck->tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
      const auto& pa = a.parts.front();
      const auto& pb = b.parts.front();
      return std::tie(pa.file, pa.offset) < std::tie(pb.file, pb.offset);
    });
  if (lay.one_shard)  // a tensor whose values another shard stores is that shard's
    std::erase_if(ck->tensors, [](const TensorInfo& t) { return t.parts.front().file != 0; });
  for (size_t i = 0; i < ck->tensors.size(); ++i) ck->by_name.emplace(ck->tensors[i].name, i);
  for (const auto& t : ck->tensors)
    for (const auto& p : t.parts) ck->part_by_key.emplace(p.key, &p);
  ck->plans.reserve(ck->tensors.size());
  for (const auto& t : ck->tensors) ck->plans.push_back(reader::make_plan(t));
  return Checkpoint(std::move(ck));
}

const TensorInfo& Checkpoint::Impl::owned(const TensorInfo& t) const {
  if (index_of(t) != SIZE_MAX) return t;
  const auto it = by_name.find(t.name);
  if (it != by_name.end() && tensors[it->second] == t) return tensors[it->second];
  throw Error(ErrorKind::invalid_argument, opened, t.name,
              it == by_name.end() ? "no tensor of this name in the checkpoint (a TensorInfo of another checkpoint?)"
                                  : "the TensorInfo differs from the checkpoint's tensor of this name (edited, or of "
                                    "another checkpoint); pass the checkpoint's own (at(), tensors())");
}

void Checkpoint::Impl::check_part(const TensorPart& p) const {
  const auto it = part_by_key.find(p.key);
  if (it != part_by_key.end()) {
    const TensorPart& q = *it->second;
    if (p.file == q.file && p.offset >= q.offset && p.nbytes <= q.nbytes && p.offset - q.offset <= q.nbytes - p.nbytes)
      return;
  }
  throw Error(ErrorKind::invalid_argument, opened, p.key,
              "not a stored part of this checkpoint, nor a byte range of one (edited, or of another "
              "checkpoint); pass one of its tensors' own parts");
}

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

std::span<const TensorInfo> Checkpoint::tensors() const noexcept { return impl_->tensors; }

const TensorInfo* Checkpoint::find(std::string_view name) const noexcept {
  try {
    auto it = impl_->by_name.find(std::string(name));
    return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
  } catch (...) {  // the key's copy could not be allocated
    return nullptr;
  }
}

const TensorInfo& Checkpoint::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  // A checkpoint of one file is named by it, one of several files by what the caller opened.
  const std::string where = impl_->paths.size() == 1 ? impl_->paths[0].string() : impl_->opened;
  if (name.empty()) throw Error(ErrorKind::not_found, where, "", "an empty tensor name names no tensor");
  throw Error(ErrorKind::not_found, where, std::string(name), "no such tensor in the checkpoint");
}

uint64_t reader::decode(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                        const std::optional<Slice>& slice) {
  DecodePlan own;
  const DecodePlan& plan = ck.plan(t, own);
  const SliceGeom g = slice_geometry(ck, t, slice);
  if (const std::string why = plan.refusal(out_dtype, g.sliced()); !why.empty())
    fail(ck, t, ErrorKind::unsupported, why);
  if (t.format == Format::dense) return decode_dense(ck, plan, out, out_dtype, g);
  if (t.format == Format::low_rank) return decode_low_rank(ck, t, out, out_dtype, g, slice);
  if (g.out_elems() == 0) return 0;  // nothing to decode: no decoder, no reads
  const auto dec = make_decoder(ck, plan, out_dtype);
  return run_rows(ck, t, out, out_dtype, g, slice, *dec);
}

reader::ChunkedDecode::ChunkedDecode(const Checkpoint::Impl& ck, const TensorInfo& t, DType out_dtype)
    : ck_(ck), t_(t), out_(out_dtype), plan_(ck.plan(t, own_)) {
  const bool rows = plan_.codes != format::Codes::none && plan_.codes != format::Codes::marlin;
  if (!rows || t.numel() == 0) {
    validate(ck, t);
    return;
  }
  if (const std::string why = plan_.refusal(out_dtype, false); !why.empty()) fail(ck, t, ErrorKind::unsupported, why);
  dec_ = make_decoder(ck, plan_, out_dtype);  // reads and checks the data every chunk needs, once
}
reader::ChunkedDecode::~ChunkedDecode() = default;

uint64_t reader::ChunkedDecode::decode(std::span<std::byte> out, const std::optional<Slice>& slice) const {
  if (!dec_) return reader::decode(ck_, t_, out, out_, slice);
  const SliceGeom g = slice_geometry(ck_, t_, slice);
  if (g.out_elems() == 0) return 0;
  return run_rows(ck_, t_, out, out_, g, slice, *dec_);
}

bool reader::decode_remote_dense_blocks(const Checkpoint::Impl& ck, const TensorInfo& t,
                                        std::span<const Checkpoint::Impl::Range> ranges, std::span<std::byte> out,
                                        DType out_dtype, const std::optional<Slice>& slice, uint64_t& written) {
#ifdef CTSTREAM_HAVE_REMOTE
  if (!slice || t.format != Format::dense || t.parts.empty()) return false;
  const auto& f = static_cast<const io::RemoteFile&>(ck.file_of(t.parts.front()));
  const uint64_t cap = f.cache_options().prefetch_bytes, gap = f.cache_options().coalesce_gap;
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.length;
  DecodePlan own;
  const DecodePlan& plan = ck.plan(t, own);
  const SliceGeom g = slice_geometry(ck, t, slice);
  if (cap == 0 || total <= cap || g.outer < 2 || !plan.main || !plan.refusal(out_dtype, true).empty()) return false;
  const TensorPart& p = *plan.main;
  const unsigned bits = dtype_bits(p.dtype), obits = dtype_bits(out_dtype);
  if (bits % 8 || obits % 8 || p.nbytes != t.numel() * (bits / 8)) return false;
  // A slice of an inner dim (a TP rank's columns) larger than the cache: blocks of outer indices
  // that fit half of it, the next block fetched while this one decodes, each released after.
  const uint64_t in_sz = bits / 8, o_sz = obits / 8, src_outer = g.dim * g.inner * in_sz;
  const uint64_t per = std::max<uint64_t>(1, cap / 2 / std::max<uint64_t>(1, src_outer));
  std::vector<Checkpoint::Impl::Range> block;
  const auto ranges_of = [&](uint64_t o0, uint64_t o1) {
    block.clear();
    for (uint64_t o = o0; o < o1; ++o) {
      const uint64_t off = p.offset + (o * g.dim + g.start) * g.inner * in_sz, len = g.len * g.inner * in_sz;
      if (!block.empty() && off - (block.back().offset + block.back().length) < gap)
        block.back().length = off + len - block.back().offset;
      else block.push_back({p.file, off, len});
    }
    return block;
  };
  if (require_output(ck, t, out, out_dtype, g) == 0) return false;
  for (const auto& r : ranges_of(0, std::min(g.outer, per))) f.will_need(r.offset, r.length);
  for (uint64_t o0 = 0; o0 < g.outer; o0 += per) {
    const uint64_t o1 = std::min(g.outer, o0 + per);
    const std::vector<Checkpoint::Impl::Range> mine = ranges_of(o0, o1);
    if (o1 < g.outer)
      for (const auto& r : ranges_of(o1, std::min(g.outer, o1 + per))) f.will_need(r.offset, r.length);
    struct Release {
      const io::File& f;
      const std::vector<Checkpoint::Impl::Range>& r;
      ~Release() {
        for (const auto& x : r) f.release(x.offset, x.length, false);
      }
    } release{f, mine};
    TensorPart shifted = p;  // the block's outer indices start at its first
    shifted.offset += o0 * src_outer;
    shifted.nbytes -= o0 * src_outer;
    DecodePlan sub = plan;
    sub.main = &shifted;
    SliceGeom sg = g;
    sg.outer = o1 - o0;
    written += decode_dense(ck, sub, out.subspan(o0 * g.len * g.inner * o_sz), out_dtype, sg);
  }
  return true;
#else
  (void)ck, (void)t, (void)ranges, (void)out, (void)out_dtype, (void)slice, (void)written;
  return false;
#endif
}

namespace {
// A fault of a remote read names the URL; the decode it ended names the tensor too.
[[noreturn]] void rethrow_naming(const Error& e, const std::string& tensor) {
  std::string msg = e.what();
  if (const std::string pre = e.file().empty() ? "" : e.file() + ": "; msg.rfind(pre, 0) == 0) msg.erase(0, pre.size());
  throw Error(e.kind(), e.file(), tensor, msg);
}
}  // namespace

uint64_t Checkpoint::decode_into(const TensorInfo& given, std::span<std::byte> out, DType out_dtype,
                                 const std::optional<Slice>& slice) const {
  const TensorInfo& t = impl_->owned(given);
  return detail::at_boundary(reader::file_name(*impl_, t), t.name, [&]() -> uint64_t {
    // The bytes this decode reads, asked for ahead with those of the tensors after it
    // (reader/read_schedule.hpp): the same schedule for local and remote files.
    if (!impl_->remote) {
      reader::schedule_decode(*impl_, t, slice);
      return reader::decode(*impl_, t, out, out_dtype, slice);
    }
    // Remote: the decoders wait for each fetched piece in turn; the ranges are released
    // afterwards, so compressed bytes are not read twice and the cache frees them.
    const std::vector<Impl::Range> own = reader::decode_ranges(*impl_, t, slice);
    uint64_t n_blocked = 0;
    try {
      if (reader::decode_remote_dense_blocks(*impl_, t, own, out, out_dtype, slice, n_blocked)) return n_blocked;
    } catch (const Error& e) {
      if (!e.tensor().empty()) throw;
      rethrow_naming(e, t.name);
    }
    reader::schedule_decode(*impl_, t, slice, own);
    struct Release {
      const Impl& ck;
      const std::vector<Impl::Range>& ranges;
      ~Release() {
        for (const auto& r : ranges) ck.files[r.file]->release(r.offset, r.length, false);
      }
    } release{*impl_, own};
    try {
      return reader::decode(*impl_, t, out, out_dtype, slice);
    } catch (const Error& e) {
      if (!e.tensor().empty()) throw;
      rethrow_naming(e, t.name);
    }
  });
}

Checkpoint::RemoteStats Checkpoint::remote_stats() const {
  RemoteStats s;
#ifdef CTSTREAM_HAVE_REMOTE
  if (!impl_->remote) return s;
  for (const auto& f : impl_->files) {
    const auto& rf = static_cast<const io::RemoteFile&>(*f);
    s.requests += rf.requests();
    s.bytes_fetched += rf.bytes_fetched();
    s.cached_bytes += rf.cached_bytes();
    s.peak_cached_bytes += rf.peak_cached_bytes();
    s.file_bytes += rf.size();
  }
#endif
  return s;
}

uint64_t Checkpoint::decode_chunked(const TensorInfo& given, DType out_dtype, uint64_t max_bytes,
                                    const std::function<void(std::span<const std::byte>)>& sink) const {
  const TensorInfo& t = impl_->owned(given);
  const std::string file = reader::file_name(*impl_, t);
  // A damaged tensor is refused before a byte of it is allocated.
  const auto dec =
      detail::at_boundary(file, t.name, [&] { return std::make_unique<reader::ChunkedDecode>(*impl_, t, out_dtype); });
  const uint64_t whole = output_bytes(t, out_dtype);
  std::vector<std::byte> buf;
  const auto allocate = [&](uint64_t bytes) { detail::at_boundary(file, t.name, [&] { buf.resize(bytes); }); };
  if (t.shape.empty() || t.shape[0] <= 1 || whole <= max_bytes || dtype_bits(out_dtype) % 8 != 0) {
    allocate(whole);
    const uint64_t n = detail::at_boundary(file, t.name, [&] { return dec->decode(buf, std::nullopt); });
    sink({buf.data(), n});
    return n;
  }
  const uint64_t rows = t.shape[0], row_bytes = whole / rows;  // whole-byte dtype: exact
  const uint64_t per = std::max<uint64_t>(1, max_bytes / std::max<uint64_t>(1, row_bytes));
  allocate(std::min(rows, per) * row_bytes);
  uint64_t total = 0;
  for (uint64_t r = 0; r < rows; r += per) {
    const Slice s{0, r, std::min(rows, r + per)};
    const uint64_t n = detail::at_boundary(file, t.name, [&] { return dec->decode(buf, s); });
    sink({buf.data(), n});
    total += n;
  }
  return total;
}

std::vector<uint64_t> Checkpoint::output_shape(const TensorInfo& given, const std::optional<Slice>& slice) const {
  const TensorInfo& t = impl_->owned(given);
  return detail::at_boundary(reader::file_name(*impl_, t), t.name, [&] {
    std::vector<uint64_t> shape = t.shape;
    if (slice) shape[slice->dim] = reader::slice_geometry(*impl_, t, slice).len;
    return shape;
  });
}

uint64_t Checkpoint::output_bytes(const TensorInfo& given, DType out_dtype, const std::optional<Slice>& slice) const {
  const TensorInfo& t = impl_->owned(given);
  return detail::at_boundary(reader::file_name(*impl_, t), t.name, [&] {
    const reader::SliceGeom g = reader::slice_geometry(*impl_, t, slice);
    reader::DecodePlan own;  // what decode_into() refuses for this dtype / slice, refused here too
    if (const std::string why = impl_->plan(t, own).refusal(out_dtype, g.sliced()); !why.empty())
      reader::fail(*impl_, t, ErrorKind::unsupported, why);
    return (g.out_elems() * dtype_bits(out_dtype) + 7) / 8;  // out_elems() <= numel(): no overflow
  });
}

void Checkpoint::validate(const TensorInfo& given) const {
  const TensorInfo& t = impl_->owned(given);
  detail::at_boundary(reader::file_name(*impl_, t), t.name, [&] { reader::validate(*impl_, t); });
}

void reader::validate(const Checkpoint::Impl& ck, const TensorInfo& t) {
  if (t.format == Format::low_rank) {
    for (const TensorInfo& f : t.factors) validate(ck, f);
    return;
  }
  reader::DecodePlan own;
  const reader::DecodePlan& plan = ck.plan(t, own);
  if (plan.codes == format::Codes::none || plan.codes == format::Codes::marlin) {
    for (const auto& p : t.parts) ck.guard(p);
    if (plan.codes == format::Codes::marlin)  // says why not
      fail(ck, t, ErrorKind::unsupported, plan.refusal(DType::F16, false));
    return;
  }
  // The checks of the stored data every decoder runs when it is built (and the CUDA path before
  // it uploads): parts inside their files, sparse masks against their values, act-order indices.
  for (const auto& p : t.parts) ck.guard(p);
  if (t.numel() == 0) return;
  if (plan.codes == format::Codes::sparse) (void)load_sparse_index(ck, plan);
  (void)load_act_order(ck, plan);
}

std::span<const std::byte> Checkpoint::stored_view(const TensorInfo& given) const {
  const TensorInfo& t = impl_->owned(given);  // one of its tensors: it has a part
  if (t.format != Format::dense)
    reader::fail(*impl_, t, ErrorKind::unsupported, "stored_view needs a dense tensor; use part_view()");
  return part_view(t.parts.front());
}

std::span<const std::byte> Checkpoint::part_view(const TensorPart& p) const {
  impl_->check_part(p);
  const io::File& f = impl_->file_of(p);
  if (f.mode() != io::Mode::mmap)
    throw Error(ErrorKind::unsupported, f.path(), p.key,
                f.mode() == io::Mode::remote ? "a remote checkpoint has no zero-copy views; use read_part()"
                                             : "zero-copy views need IoMode::mmap; use read_part()");
  impl_->guard(p);
  return f.view(p.offset, p.nbytes);
}

uint64_t Checkpoint::read_part(const TensorPart& p, std::span<std::byte> out) const {
  return detail::at_boundary("", p.key, [&] {
    impl_->check_part(p);
    const io::File& f = impl_->file_of(p);
    if (out.size() < p.nbytes)
      throw Error(ErrorKind::buffer_too_small, f.path(), p.key,
                  "output holds " + std::to_string(out.size()) + " bytes, part needs " + std::to_string(p.nbytes));
    f.read_at(p.offset, out.first(p.nbytes));
    return p.nbytes;
  });
}

std::span<const fs::path> Checkpoint::files() const noexcept { return impl_->paths; }
const std::string& Checkpoint::name() const noexcept { return impl_->opened; }
std::span<const Checkpoint::SourceFile> Checkpoint::source_files() const noexcept { return impl_->sources; }

const std::map<std::string, std::string>& Checkpoint::file_metadata(uint32_t file) const {
  if (file >= impl_->metadata.size())
    throw Error(ErrorKind::invalid_argument, "", "", "file index " + std::to_string(file) + " out of range");
  return impl_->metadata[file];
}

bool Checkpoint::file_has_metadata(uint32_t file) const noexcept {
  return file < impl_->has_metadata.size() && impl_->has_metadata[file];
}

std::map<std::string, std::vector<std::string>> module_classes_from_json(std::string_view json_text,
                                                                         const std::string& what) {
  return format::parse_module_classes(json_text, what);
}
std::map<std::string, std::vector<std::string>> module_classes_from_file(const std::filesystem::path& file,
                                                                         uint64_t max_bytes) {
  return format::parse_module_classes(io::read_small_file(file, max_bytes), file.string());
}

const std::string& Checkpoint::config_json() const noexcept { return impl_->config; }
const ConfigInfo& Checkpoint::config_info() const noexcept { return impl_->config_info; }
const OpenOptions& Checkpoint::options() const noexcept { return impl_->opt; }

void Checkpoint::will_need(const TensorInfo& given) const {
  const TensorInfo& t = impl_->owned(given);
  for (const auto& p : t.parts) impl_->file_of(p).will_need(p.offset, p.nbytes);
}
void Checkpoint::release(const TensorInfo& given, bool drop_page_cache) const {
  const TensorInfo& t = impl_->owned(given);
  for (const auto& p : t.parts) impl_->file_of(p).release(p.offset, p.nbytes, drop_page_cache);
}

}  // namespace ctstream
