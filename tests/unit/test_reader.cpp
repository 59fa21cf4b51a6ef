// Reader behaviour on synthetic checkpoints written with SafetensorsWriter: slices against an
// index-math reference, threads, io modes, caller-buffer contract, truncation after open.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include <catch2/catch.hpp>

#include "codecs/half.hpp"
#include "ctstream/ctstream.hpp"
#include "helpers.hpp"
#include "reader/internal.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

struct Synth {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<std::byte> data;
};

uint64_t numel(const Shape& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Random finite floats (or random bytes for non-float dtypes).
Synth make(const std::string& name, DType d, Shape shape, uint64_t seed) {
  Synth s{name, d, shape, {}};
  const uint64_t n = numel(shape);
  s.data = th::random_bytes(n * dtype_bits(d) / 8, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> dist(0.f, 1.f);
  for (uint64_t i = 0; i < n && is_float_output(d); ++i) {
    const uint32_t f = codecs::f32_bits(dist(rng));
    if (d == DType::F32) std::memcpy(s.data.data() + 4 * i, &f, 4);
    const uint16_t h = d == DType::BF16 ? codecs::f32_to_bf16(f) : codecs::f32_to_f16(f);
    if (d != DType::F32) std::memcpy(s.data.data() + 2 * i, &h, 2);
  }
  return s;
}

fs::path write(const fs::path& p, const std::vector<Synth>& ts) {
  std::vector<SafetensorsWriter::Entry> e;
  for (const auto& t : ts) e.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w(p, e);
  for (const auto& t : ts) w.write(t.data);
  w.commit();
  return p;
}

std::vector<std::byte> decode(const Checkpoint& c, const std::string& name, DType d,
                              std::optional<Slice> s = std::nullopt) {
  const TensorInfo& t = c.at(name);
  std::vector<std::byte> out(t.decoded_bytes(d));
  out.resize(c.decode_into(t, out, d, s));
  return out;
}

}  // namespace

TEST_CASE("slices along any dim equal slicing the full decode", "[reader][slice][dispatch]") {
  th::TempDir tmp("slice");
  auto p = write(tmp.path / "m.safetensors", {make("w3", DType::F32, {5, 7, 9}, 1),
                                              make("w2", DType::BF16, {33, 17}, 2), make("i2", DType::I32, {6, 4}, 3)});
  auto ckpt = Checkpoint::open(p);
  for (const char* name : {"w3", "w2", "i2"}) {
    const auto& t = ckpt.at(name);
    for (DType out : {DType::F32, DType::BF16, DType::F16}) {
      if (!is_float_output(t.dtype) && out != t.dtype) continue;
      const auto full = decode(ckpt, name, out);
      const size_t esz = dtype_bits(out) / 8;
      for (unsigned dim = 0; dim < t.shape.size(); ++dim) {
        for (auto [start, stop] :
             {std::pair<uint64_t, uint64_t>{0, t.shape[dim]}, {1, 3}, {t.shape[dim] - 1, 99}, {2, 2}}) {
          INFO(name << " out " << dtype_name(out) << " dim " << dim << " [" << start << "," << stop << ")");
          const auto got = decode(ckpt, name, out, Slice{dim, start, stop});
          // The shape and size the bindings allocate by are what decode_into writes.
          CHECK(ckpt.output_bytes(t, out, Slice{dim, start, stop}) == got.size());
          auto shape = t.shape;
          shape[dim] = std::min(stop, t.shape[dim]) - start;
          CHECK(ckpt.output_shape(t, Slice{dim, start, stop}) == shape);
          // Reference: walk every element of the full tensor, keep those inside the slice.
          std::vector<std::byte> want;
          const uint64_t n = t.numel();
          for (uint64_t i = 0; i < n; ++i) {
            uint64_t rem = i, idx = 0;
            for (size_t d = t.shape.size(); d-- > 0;) {
              if (d == dim) idx = rem % t.shape[d];
              rem /= t.shape[d];
            }
            if (idx >= start && idx < std::min(stop, t.shape[dim]))
              want.insert(want.end(), full.begin() + i * esz, full.begin() + (i + 1) * esz);
          }
          REQUIRE(got == want);
        }
      }
    }
  }
}

TEST_CASE("a TensorInfo or part edited, or of another checkpoint, is refused; an equal copy decodes", "[reader]") {
  // A red-team pass: an edited copy's shape drove the decoders past the parts' bytes (ASan: a heap
  // overflow), and another checkpoint's tensors decoded to this one's bytes at their offsets.
  const fs::path dir = th::fixtures() / "ct" / "v020_pack_w4_g32_asym_bf16";
  const Checkpoint a = Checkpoint::open(dir);
  const Checkpoint b = Checkpoint::open(th::fixtures() / "ct" / "v020_int8_w8a8_channel_sym_bf16");
  for (const TensorInfo& own : a.tensors()) {
    INFO(own.name);
    std::vector<std::byte> want(own.decoded_bytes(DType::F32)), got(want.size());
    a.decode_into(own, want, DType::F32);
    const TensorInfo copy = own;  // an equal copy is the checkpoint's tensor
    a.decode_into(copy, got, DType::F32);
    CHECK(got == want);
    TensorInfo edited = own;
    edited.shape[0] *= 4;
    std::vector<std::byte> big(edited.decoded_bytes(DType::F32));
    CHECK(th::error_kind([&] { a.decode_into(edited, big, DType::F32); }) == ErrorKind::invalid_argument);
    CHECK(th::error_kind([&] { (void)a.output_bytes(edited, DType::F32); }) == ErrorKind::invalid_argument);
    TensorPart moved = own.parts.front();
    moved.offset += 1;
    std::vector<std::byte> raw(moved.nbytes);
    CHECK(th::error_kind([&] { a.read_part(moved, raw); }) == ErrorKind::invalid_argument);
    TensorPart piece = own.parts.front();  // a byte range inside a part (the CUDA path's staging)
    piece.nbytes /= 2;
    CHECK(a.read_part(piece, raw) == piece.nbytes);
  }
  for (const TensorInfo& other : b.tensors()) {
    INFO(other.name);
    std::vector<std::byte> buf(other.decoded_bytes(DType::F32));
    CHECK(th::error_kind([&] { a.decode_into(other, buf, DType::F32); }) == ErrorKind::invalid_argument);
    std::vector<std::byte> raw(other.parts.front().nbytes);
    if (!a.find(other.name) || a.find(other.name)->parts.front() != other.parts.front())
      CHECK(th::error_kind([&] { a.read_part(other.parts.front(), raw); }) == ErrorKind::invalid_argument);
  }
  TensorPart wrap = a.tensors().front().parts.front();  // offset + size past 2^64
  wrap.offset = UINT64_MAX - 3;
  std::vector<std::byte> raw(16);
  CHECK(th::error_kind([&] { a.read_part(wrap, raw); }) == ErrorKind::invalid_argument);
}

TEST_CASE("bad slices, small buffers and impossible conversions are clear errors", "[reader]") {
  th::TempDir tmp("errors");
  auto p = write(tmp.path / "m.safetensors", {make("w", DType::BF16, {4, 8}, 1), make("i", DType::I64, {3}, 2)});
  auto ckpt = Checkpoint::open(p);
  const auto& w = ckpt.at("w");
  std::vector<std::byte> buf(w.decoded_bytes(DType::F32));
  auto kind_of = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("m.safetensors") != std::string::npos);
      return e.kind();
    }
    FAIL("no error");
    return ErrorKind::io;
  };
  CHECK(kind_of([&] { ckpt.decode_into(w, std::span(buf).first(buf.size() - 1), DType::F32); }) ==
        ErrorKind::buffer_too_small);
  CHECK(kind_of([&] { ckpt.decode_into(w, buf, DType::F32, Slice{2, 0, 1}); }) == ErrorKind::invalid_argument);
  CHECK(kind_of([&] { ckpt.decode_into(w, buf, DType::F32, Slice{0, 3, 2}); }) == ErrorKind::invalid_argument);
  // The bindings shape their outputs by the same rule (output_shape / output_bytes), same errors.
  CHECK(kind_of([&] { ckpt.output_shape(w, Slice{2, 0, 1}); }) == ErrorKind::invalid_argument);
  CHECK(kind_of([&] { ckpt.output_bytes(w, DType::F32, Slice{0, 3, 2}); }) == ErrorKind::invalid_argument);
  CHECK(ckpt.output_shape(w) == w.shape);
  CHECK(ckpt.output_bytes(w, DType::F32) == w.decoded_bytes(DType::F32));
  CHECK(kind_of([&] { ckpt.decode_into(ckpt.at("i"), buf, DType::BF16); }) == ErrorKind::unsupported);
  CHECK(kind_of([&] { ckpt.decode_into(w, buf, DType::I8); }) == ErrorKind::unsupported);
  CHECK(kind_of([&] { ckpt.at("nope"); }) == ErrorKind::not_found);
  CHECK(ckpt.find("nope") == nullptr);
  // An empty name says so (a message of "m.safetensors: no such tensor" would hide the mistake).
  try {
    ckpt.at("");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::not_found);
    CHECK(std::string(e.what()).find("empty tensor name") != std::string::npos);
  }
  // A checkpoint of several files is named by what was opened: the directory.
  const fs::path dir = th::fixtures() / "st" / "sharded";
  const Checkpoint sharded = Checkpoint::open(dir);
  try {
    sharded.at("nope");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.file() == dir.string());
    CHECK(e.tensor() == "nope");
  }
}

TEST_CASE("pread mode, mmap mode and any thread count decode identically", "[reader][dispatch]") {
  th::TempDir tmp("modes");
  // 3 M elements: above the threshold where decode splits across threads.
  auto p = write(tmp.path / "m.safetensors", {make("big", DType::F32, {1536, 2048}, 7), make("s", DType::F16, {5}, 8)});
  OpenOptions one;
  one.threads = 1;
  auto ref = Checkpoint::open(p, one);
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    for (unsigned threads : {1u, 2u, 3u}) {
      OpenOptions o;
      o.io = io;
      o.threads = threads;
      auto c = Checkpoint::open(p, o);
      for (DType d : {DType::F32, DType::BF16, DType::F16}) {
        INFO("io " << int(io) << " threads " << threads << " dtype " << dtype_name(d));
        REQUIRE(decode(c, "big", d) == decode(ref, "big", d));
        REQUIRE(decode(c, "big", d, Slice{1, 100, 1100}) == decode(ref, "big", d, Slice{1, 100, 1100}));
        REQUIRE(decode(c, "s", d) == decode(ref, "s", d));
      }
    }
  }
}

namespace {
// How many pages of [off, off + len) of p are in the page cache, and how many pages that range
// has, by mincore of a mapping of our own (the file's owner sees the page cache, not only its own
// mappings).
std::pair<size_t, size_t> resident_pages(const fs::path& p, uint64_t off, uint64_t len) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), first = off / page * page;
  const uint64_t span = off + len - first;
  void* m = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first));
  REQUIRE(m != MAP_FAILED);
  std::vector<unsigned char> vec((span + page - 1) / page);
  REQUIRE(::mincore(m, span, vec.data()) == 0);
  ::munmap(m, span);
  ::close(fd);
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return {resident, vec.size()};
}
// Drops the file's clean pages from the page cache; returns how many of its pages are still
// resident (0 unless the file system keeps them: tmpfs).
size_t evict(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return resident_pages(p, 0, fs::file_size(p)).first;
}
// Whether every page of [off, off + len) of p is in the page cache.
bool resident(const fs::path& p, uint64_t off, uint64_t len) {
  const auto [in_cache, pages] = resident_pages(p, off, len);
  return in_cache == pages;
}
// Whether this kernel answers cachestat (Linux 6.5+; not under qemu-user): in pread mode
// File::cached has nothing else to ask and says true.
bool cachestat_works(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  uint64_t range[2] = {0, 4096}, stat[5] = {};
  const bool ok = ::syscall(451, fd, range, stat, 0) == 0;  // __NR_cachestat, as in io/file.cpp
  ::close(fd);
  return ok;
}
}  // namespace

TEST_CASE("dense copies of evicted files equal the stored bytes; File::cached tells them from resident ones",
          "[reader][io]") {
  // A plain copy of a tensor whose pages are not in the page cache is read by one thread
  // (reader/decode_dense.cpp), a resident one split across threads: both must give the
  // stored bytes, whole and sliced, in both io modes.
  th::TempDir tmp("cold");
  const Synth big = make("big", DType::F32, {1536, 2048}, 11);  // 12 MiB: above the 4 MiB split threshold
  const auto p = write(tmp.path / "m.safetensors", {make("s", DType::F16, {5}, 12), big});
  OpenOptions one;
  one.threads = 1;
  const auto ref = Checkpoint::open(p, one);
  const std::vector<std::byte> whole = decode(ref, "big", DType::F32);
  REQUIRE(whole == big.data);
  const auto rows = decode(ref, "big", DType::F32, Slice{0, 7, 1500}),
             cols = decode(ref, "big", DType::F32, Slice{1, 3, 2000});
  int compared = 0, known = 0;  // answers compared that were the expected residency; cold-known rounds
  for (IoMode io : {IoMode::mmap, IoMode::pread})
    for (unsigned threads : {1u, 2u}) {
      INFO("io " << int(io) << " threads " << threads);
      OpenOptions o;
      o.io = io;
      o.threads = threads;
      const auto c = Checkpoint::open(p, o);
      const bool cold_known = evict(p) == 0 && (io == IoMode::mmap || cachestat_works(p));
      const TensorInfo& t = c.at("big");
      const io::File& f = c.impl().file_of(t.parts.front());
      const uint64_t at = t.parts.front().offset, n = t.parts.front().nbytes;
      // File::cached against the pages' residency by our own mincore just before and after it:
      // the kernel may reclaim pages just read (under another process's memory pressure) or read
      // ahead of a read at any time, so an answer is compared only where the two probes agree.
      const auto agrees = [&](uint64_t off, uint64_t len, bool want) {
        const bool before = resident(p, off, len), got = f.cached(off, len), after = resident(p, off, len);
        if (before != after) return;
        CHECK(got == before);
        if (before == want) ++compared;
      };
      if (cold_known) {  // the pages are gone, and File::cached can tell
        agrees(at, n, false);
        std::vector<std::byte> head(64 << 10);  // a partly resident range is not cached
        f.read_at(at, head);
        agrees(at, head.size(), true);
        agrees(at, n, false);
      }
      CHECK(decode(c, "big", DType::F32) == whole);
      if (cold_known) {  // just read (pread mode without cachestat: cached() cannot tell, says true)
        agrees(at, n, true);
        agrees(at + n / 2, 1, true);
      }
      evict(p);
      CHECK(decode(c, "big", DType::F32, Slice{0, 7, 1500}) == rows);
      evict(p);
      CHECK(decode(c, "big", DType::F32, Slice{1, 3, 2000}) == cols);
      known += cold_known;
    }
  // Where pages could be evicted at all (not tmpfs), some answers were compared.
  if (known > 0) CHECK(compared > 0);
}

TEST_CASE("a file truncated after open gives an error, not SIGBUS", "[reader][io]") {
  th::TempDir tmp("trunc");
  for (IoMode io : {IoMode::mmap, IoMode::pread}) {
    auto p =
        write(tmp.path / "m.safetensors", {make("a", DType::F32, {64, 64}, 1), make("b", DType::F32, {64, 64}, 2)});
    OpenOptions o;
    o.io = io;
    auto ckpt = Checkpoint::open(p, o);
    fs::resize_file(p, fs::file_size(p) - 1000);
    const auto& b = ckpt.at("b");
    std::vector<std::byte> buf(b.decoded_bytes(DType::F32));
    try {
      ckpt.decode_into(b, buf, DType::F32);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::truncated);
      CHECK(std::string(e.what()).find("m.safetensors") != std::string::npos);
    }
  }
}

TEST_CASE("zero-copy views need mmap; read_part works in both modes", "[reader]") {
  th::TempDir tmp("views");
  auto s = make("w", DType::BF16, {3, 5}, 4);
  auto p = write(tmp.path / "m.safetensors", {s});
  OpenOptions o;
  o.io = IoMode::pread;
  auto pr = Checkpoint::open(p, o);
  auto mm = Checkpoint::open(p);
  CHECK_THROWS_AS(pr.stored_view(pr.at("w")), Error);
  auto v = mm.stored_view(mm.at("w"));
  REQUIRE(std::vector<std::byte>(v.begin(), v.end()) == s.data);
  std::vector<std::byte> raw(s.data.size());
  REQUIRE(pr.read_part(pr.at("w").parts[0], raw) == raw.size());
  REQUIRE(raw == s.data);
}

TEST_CASE("decompress_to_file writes what decode_into returns", "[reader][decompress]") {
  th::TempDir tmp("decomp");
  auto p = write(tmp.path / "in.safetensors",
                 {make("a", DType::F32, {7, 3}, 1), make("b", DType::BF16, {4}, 2), make("c", DType::I16, {2, 2}, 3)});
  auto in = Checkpoint::open(p);
  for (std::optional<DType> d : {std::optional<DType>{}, std::optional<DType>{DType::F16}}) {
    DecompressOptions opt;
    opt.dtype = d;
    decompress_to_file(in, tmp.path / "out.safetensors", opt);
    auto out = Checkpoint::open(tmp.path / "out.safetensors");
    REQUIRE(out.tensors().size() == 3);
    for (const auto& t : in.tensors()) {
      const DType want = decompressed_dtype(t, opt);
      REQUIRE(out.at(t.name).dtype == want);
      REQUIRE(decode(out, t.name, want) == decode(in, t.name, want));
    }
    REQUIRE(out.at("c").dtype == DType::I16);
  }
}

TEST_CASE("an exception from the caller's callback reaches the caller as it was thrown", "[reader][decompress]") {
  // Not ours: at the API boundary it is neither renamed nor reported as an internal error.
  struct Mine {
    int code;
  };
  th::TempDir tmp("decomp_cb");
  auto in = Checkpoint::open(
      write(tmp.path / "in.safetensors", {make("a", DType::F32, {7, 3}, 1), make("b", DType::BF16, {4}, 2)}));
  DecompressOptions opt;
  opt.progress = [](size_t done, size_t, const TensorInfo&) {
    if (done == 1) throw Mine{7};
  };
  try {
    decompress_to_file(in, tmp.path / "out.safetensors", opt);
    FAIL("no exception");
  } catch (const Mine& m) {
    CHECK(m.code == 7);
  }
  CHECK(!fs::exists(tmp.path / "out.safetensors"));  // nothing left behind
  opt.progress = [](size_t, size_t, const TensorInfo&) { throw std::runtime_error("the caller's"); };
  CHECK_THROWS_WITH(decompress_to_file(in, tmp.path / "out.safetensors", opt), "the caller's");
  // decode_chunked's sink likewise.
  CHECK_THROWS_AS(in.decode_chunked(in.at("a"), DType::F32, 8, [](std::span<const std::byte>) { throw Mine{1}; }),
                  Mine);
}
