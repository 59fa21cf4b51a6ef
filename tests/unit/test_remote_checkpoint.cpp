// Checkpoint::open on s3:// URLs served by rclone (remote_server.hpp): every tensor decoded from
// the server equals the local decode byte for byte; the local layout rules and error kinds hold.
#include <catch2/catch.hpp>
#include <optional>

#include <fstream>

#include <nlohmann/json.hpp>

#include "ctstream/checkpoint.hpp"
#include "ctstream/stream.hpp"
#include "remote_server.hpp"

namespace fs = std::filesystem;
using ctstream::Checkpoint;
using ctstream::ErrorKind;

namespace {
const char* const kCheckpoints[] = {"ct/v012_pack_w4_g32_sym_bf16", "ct/v012_sparse_bitmask_bf16", "st/sharded",
                                    "corrupt_dirs/missing_shard", "corrupt_dirs/shard_dotdot"};
}

namespace {
// A dense bf16 model many times the small caches the tests set: kLayers layers of a [128, 256]
// weight (64 KiB) and a [256] norm, in file order, with finite pseudo-random values.
constexpr int kLayers = 16;
void write_gen_model(const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::ordered_json h;
  std::vector<uint16_t> data;
  uint32_t x = 12345;
  const auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    const uint64_t begin = data.size() * 2;
    for (uint64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      data.push_back(static_cast<uint16_t>(((x >> 16) % 0x7f00u) | ((x & 1u) << 15)));  // exponent never all ones
    }
    h[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {begin, data.size() * 2}}};
  };
  for (int i = 0; i < kLayers; ++i) {
    add("layers." + std::to_string(i) + ".weight", {128, 256});
    add("layers." + std::to_string(i) + ".norm", {256});
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 2));
}
}  // namespace

void th::copy_remote_fixtures(const fs::path& bucket) {
  for (const char* name : kCheckpoints) {
    fs::create_directories(bucket / "ck" / name);
    fs::copy(th::fixtures() / name, bucket / "ck" / name, fs::copy_options::recursive);
  }
  // Every compressed-tensors fixture, for the format sweep below.
  for (const char* set : {"ct", "ct_moe"}) {
    fs::create_directories(bucket / "all" / set);
    fs::copy(th::fixtures() / set, bucket / "all" / set, fs::copy_options::recursive);
  }
  // Layouts only a listing finds (test_remote_list.cpp): shards without an index, an index under
  // another name, two indexes, no weights, and a prefix of several pages.
  const fs::path l = bucket / "ck/listing";
  fs::create_directories(l / "noindex");
  fs::copy(th::fixtures() / "st/noindex", l / "noindex", fs::copy_options::recursive);
  fs::create_directories(l / "other_index");
  for (const auto& e : fs::directory_iterator(th::fixtures() / "st/sharded"))
    if (e.path().filename() != "model.safetensors.index.json") fs::copy(e.path(), l / "other_index");
  fs::copy(th::fixtures() / "st/sharded/model.safetensors.index.json",
           l / "other_index/weights.safetensors.index.json");
  fs::create_directories(l / "other_index/sub");
  fs::copy(th::fixtures() / "st/sharded/model-00001-of-00003.safetensors", l / "other_index/sub/x.safetensors");
  fs::create_directories(l / "two_indexes");
  th::write_file(l / "two_indexes/a.safetensors.index.json", th::random_bytes(10, 1));
  th::write_file(l / "two_indexes/b.safetensors.index.json", th::random_bytes(10, 2));
  fs::create_directories(l / "config_only");
  fs::copy(th::fixtures() / "st/sharded/config.json", l / "config_only/config.json");
  fs::create_directories(l / "pages/deeper");
  for (const char* n : {"a.safetensors", "b&c.safetensors", "d <e>.bin", "f.safetensors", "g.json"})
    th::write_file(l / "pages" / n, th::random_bytes(3, 3));
  th::write_file(l / "pages/deeper/h.safetensors", th::random_bytes(3, 4));
  write_gen_model(bucket / "ck" / "gen");
}

TEST_CASE("remote: every tensor decoded from s3:// equals the local decode", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  for (const char* name : {"ct/v012_pack_w4_g32_sym_bf16", "ct/v012_sparse_bitmask_bf16", "st/sharded"}) {
    INFO(name);
    const Checkpoint local = Checkpoint::open(th::fixtures() / name);
    const Checkpoint remote = Checkpoint::open(std::string("s3://bkt/ck/") + name);
    REQUIRE(remote.tensors().size() == local.tensors().size());
    CHECK(remote.config_json() == local.config_json());
    th::check_same_decodes(local, remote);
  }
  // A single file named directly.
  const Checkpoint one = Checkpoint::open("s3://bkt/ck/ct/v012_pack_w4_g32_sym_bf16/model.safetensors");
  CHECK(one.tensors().size() ==
        Checkpoint::open(th::fixtures() / "ct/v012_pack_w4_g32_sym_bf16/model.safetensors").tensors().size());
}

TEST_CASE("remote: every compressed-tensors fixture decodes from s3:// as it does locally, whole and a row slice",
          "[remote][s3]") {
  // Every format and both library lines (tests/fixtures/ct: 0.12 and 0.20, dense and legacy
  // packing, sparse, act-order, nvfp4 / mx, ...; ct_moe: 3-D experts): each tensor in its natural
  // dtype, and its first rows (a tensor-parallel rank's slice: the remote path fetches only their
  // byte ranges), equal to the local decode.
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  size_t cases = 0, tensors = 0;
  for (const char* set : {"ct", "ct_moe"})
    for (const auto& e : fs::directory_iterator(th::fixtures() / set)) {
      if (!e.is_directory() || !fs::exists(e.path() / "config.json")) continue;
      const std::string name = std::string(set) + "/" + e.path().filename().string();
      INFO("case " << name);
      const Checkpoint local = Checkpoint::open(e.path());
      const Checkpoint remote = Checkpoint::open("s3://bkt/all/" + name);
      REQUIRE(remote.tensors().size() == local.tensors().size());
      for (const ctstream::TensorInfo& t : local.tensors()) {
        INFO("tensor " << t.name);
        const ctstream::TensorInfo* r = remote.find(t.name);
        REQUIRE(r != nullptr);
        // Both decode to the same bytes, or both refuse with the same kind (marlin-24: keep-packed only).
        const auto same = [&](const std::optional<ctstream::Slice>& s) {
          // a request decode_into() refuses is refused by output_bytes() already, in both
          const auto size_error = th::error_kind([&] { (void)local.output_bytes(t, t.dtype, s); });
          CHECK(th::error_kind([&] { (void)remote.output_bytes(*r, r->dtype, s); }) == size_error);
          if (size_error) return;
          std::vector<std::byte> want(local.output_bytes(t, t.dtype, s)), got(want.size());
          const auto le = th::error_kind([&] { local.decode_into(t, want, t.dtype, s); });
          const auto re = th::error_kind([&] { remote.decode_into(*r, got, r->dtype, s); });
          CHECK(re == le);
          if (!le) CHECK(got == want);
        };
        same(std::nullopt);
        if (t.shape.size() >= 2 && t.shape[0] > 1) same(ctstream::Slice{0, 0, t.shape[0] / 2});
        ++tensors;
      }
      ++cases;
    }
  CHECK(cases >= 70);
  CHECK(tensors > 300);
}

TEST_CASE("remote: a shard's prefix and header come in one read, shards opened together", "[remote][s3]") {
  // A round trip per request: three per shard, one shard after another, was the open's cost.
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  const Checkpoint remote = Checkpoint::open("s3://bkt/ck/st/sharded");
  REQUIRE(remote.files().size() == 3);
  CHECK(remote.remote_stats().requests == remote.files().size());  // the probe aside: one read per shard
}

TEST_CASE("remote: layout errors keep their local kinds", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/corrupt_dirs/missing_shard"); }) == ErrorKind::missing_shard);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/corrupt_dirs/shard_dotdot"); }) == ErrorKind::invalid_shard);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/nothing-here"); }) == ErrorKind::file_not_found);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/nothing.safetensors"); }) == ErrorKind::file_not_found);
  CHECK(th::error_kind([] { Checkpoint::open("s3://"); }) == ErrorKind::invalid_argument);
}

TEST_CASE("remote: a Stream over an s3:// checkpoint delivers what the local one does", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  const Checkpoint local = Checkpoint::open(th::fixtures() / "st/sharded");
  const Checkpoint remote = Checkpoint::open("s3://bkt/ck/st/sharded");
  ctstream::StreamOptions so;
  so.dtype = ctstream::DType::F32;
  so.budget_bytes = 64 << 10;
  ctstream::Stream a(local, so), b(remote, so);
  size_t n = 0;
  while (auto x = a.next()) {
    auto y = b.next();
    REQUIRE(y.has_value());
    CHECK(y->info->name == x->info->name);
    CHECK(std::equal(x->data.begin(), x->data.end(), y->data.begin(), y->data.end()));
    ++n;
  }
  CHECK_FALSE(b.next().has_value());
  CHECK(n == local.tensors().size());
  // Zero-copy views do not exist for remote files; the message says so.
  try {
    (void)remote.part_view(remote.tensors().front().parts.front());
    FAIL("no error");
  } catch (const ctstream::Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("remote"));
  }
}

namespace {
// The read-ahead cache sizes of the Checkpoints opened while it lives (RemoteFile reads them at open).
struct SmallCache {
  th::S3Env env;
  SmallCache(th::S3Server& srv, const char* chunk, const char* prefetch, const char* gap = "1048576") : env(srv) {
    env.set("CTSTREAM_S3_CHUNK_BYTES", chunk);
    env.set("CTSTREAM_S3_PREFETCH_BYTES", prefetch);
    env.set("CTSTREAM_S3_COALESCE_GAP", gap);
  }
};
}  // namespace

TEST_CASE("remote: a Stream reads ahead within the prefetch cap, whatever the model size", "[remote][s3]") {
  REQUIRE_S3(srv);
  // A cap of four weights: the stream's read-ahead (not only each decode's own fetch, which holds
  // at most the two weights of a batch) shows as more than two weights cached at once.
  constexpr uint64_t kCap = 262144, kWeight = 128 * 256 * 2;
  SmallCache cache(srv, "16384", "262144");
  const fs::path local_dir = srv.root.path / "bkt/ck/gen";
  const Checkpoint local = Checkpoint::open(local_dir);
  for (const bool named_order : {false, true}) {
    INFO("named order " << named_order);
    const Checkpoint remote = Checkpoint::open("s3://bkt/ck/gen");
    const auto open_cost = remote.remote_stats();
    REQUIRE(open_cost.file_bytes == fs::file_size(local_dir / "model.safetensors"));
    REQUIRE(open_cost.file_bytes > 4 * kCap);  // the model is several times the cap
    ctstream::StreamOptions so;
    so.dtype = ctstream::DType::F32;
    so.budget_bytes = 256 << 10;  // two decoded weights
    if (named_order) {            // reversed: read-ahead follows the order, not the file
      so.order.emplace();
      for (auto it = local.tensors().rbegin(); it != local.tensors().rend(); ++it) so.order->push_back(it->name);
    }
    ctstream::Stream a(local, so), b(remote, so);
    size_t n = 0;
    uint64_t most_cached = 0;
    while (auto x = a.next()) {
      auto y = b.next();
      REQUIRE(y.has_value());
      REQUIRE(y->info->name == x->info->name);
      CHECK(std::equal(x->data.begin(), x->data.end(), y->data.begin(), y->data.end()));
      most_cached = std::max(most_cached, remote.remote_stats().cached_bytes);
      ++n;
    }
    CHECK_FALSE(b.next().has_value());
    CHECK(n == local.tensors().size());
    const auto st = remote.remote_stats();
    INFO("requests " << st.requests << ", fetched " << st.bytes_fetched << " of " << st.file_bytes << ", peak cache "
                     << st.peak_cached_bytes);
    CHECK(st.peak_cached_bytes > 2 * kWeight + 1024);  // the stream did read ahead
    CHECK(st.peak_cached_bytes <= kCap);               // ... never past the cap
    CHECK(most_cached <= kCap);
    CHECK(st.cached_bytes == 0);  // every fetched range released after its decode
    CHECK(st.bytes_fetched - open_cost.bytes_fetched <= st.file_bytes);            // no byte fetched twice
    CHECK(st.bytes_fetched - open_cost.bytes_fetched >= 2 * 128 * 256 * kLayers);  // every weight byte
    // Requests of up to a chunk each: far fewer than one per tensor part read by 256 KiB windows.
    CHECK(st.requests - open_cost.requests <= st.file_bytes / 16384 + 2 * kLayers + 4);
    CHECK(b.peak_held_bytes() <= so.budget_bytes);
  }
}

TEST_CASE("remote: a decode error in a Stream names the URL and the tensor", "[remote][s3]") {
  REQUIRE_S3(srv);
  SmallCache cache(srv, "16384", "65536");
  const fs::path dir = srv.root.path / "bkt/ck/gen_changed";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(srv.root.path / "bkt/ck/gen/model.safetensors", dir / "model.safetensors");
  const Checkpoint remote = Checkpoint::open("s3://bkt/ck/gen_changed");
  {  // the object changes after open: same size, other bytes (another ETag)
    std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
  }
  ctstream::Stream s(remote, {});
  try {
    while (s.next()) {
    }
    FAIL("no error");
  } catch (const ctstream::Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK(e.file() == "s3://bkt/ck/gen_changed/model.safetensors");
    CHECK(e.tensor() == remote.tensors().front().name);
    CHECK_THAT(e.what(), Catch::Contains("s3://bkt/ck/gen_changed/model.safetensors") &&
                             Catch::Contains("tensor '" + remote.tensors().front().name + "'"));
  }
  fs::remove_all(dir);
}

TEST_CASE("remote: a TP rank's row slices fetch only their rows", "[remote][s3]") {
  REQUIRE_S3(srv);
  // A gap threshold under one row block of the fixture (the default, 1 MiB, joins everything in a
  // model this small); chunks and cache as small as the other tests.
  SmallCache cache(srv, "16384", "65536", "4096");
  const Checkpoint local = Checkpoint::open(srv.root.path / "bkt/ck/gen");
  for (uint64_t rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const Checkpoint remote = Checkpoint::open("s3://bkt/ck/gen");
    const auto before = remote.remote_stats();
    for (const auto& t : local.tensors()) {
      INFO(t.name);
      std::optional<ctstream::Slice> s;  // 2-D weights are split by rows; norms are replicated
      if (t.shape.size() == 2) s = ctstream::Slice{0, rank * t.shape[0] / 2, (rank + 1) * t.shape[0] / 2};
      std::vector<std::byte> want(local.output_bytes(t, ctstream::DType::BF16, s)), got(want.size());
      local.decode_into(t, want, ctstream::DType::BF16, s);
      remote.decode_into(remote.at(t.name), got, ctstream::DType::BF16, s);
      CHECK(got == want);
    }
    const auto st = remote.remote_stats();
    const uint64_t fetched = st.bytes_fetched - before.bytes_fetched;
    INFO("fetched " << fetched << " of " << st.file_bytes << " in " << st.requests - before.requests << " requests");
    CHECK(fetched < st.file_bytes * 6 / 10);
    CHECK(fetched >= st.file_bytes * 4 / 10);
    CHECK(st.cached_bytes == 0);
  }
}

TEST_CASE("remote: a column slice is right, and fetches its rows' bytes in joined ranges", "[remote][s3]") {
  REQUIRE_S3(srv);
  // 64 KiB of cache holds one weight's slice ranges; 16 KiB does not: that slice is fetched and
  // decoded in blocks of rows, each released before the cache would overflow.
  for (const char* prefetch : {"65536", "16384"}) {
    INFO("prefetch " << prefetch);
    SmallCache cache(srv, "4096", prefetch, "4096");
    const Checkpoint local = Checkpoint::open(srv.root.path / "bkt/ck/gen");
    const Checkpoint remote = Checkpoint::open("s3://bkt/ck/gen");
    const auto before = remote.remote_stats();
    for (const auto& t : local.tensors()) {
      if (t.shape.size() != 2) continue;
      const ctstream::Slice s{1, 64, 192};
      std::vector<std::byte> want(local.output_bytes(t, ctstream::DType::F32, s)), got(want.size());
      local.decode_into(t, want, ctstream::DType::F32, s);
      remote.decode_into(remote.at(t.name), got, ctstream::DType::F32, s);
      CHECK(got == want);
    }
    const auto st = remote.remote_stats();
    INFO("fetched " << st.bytes_fetched - before.bytes_fetched << " in " << st.requests - before.requests
                    << " requests, cache peak " << st.peak_cached_bytes);
    // Rows of 512 bytes, 256 of them a gap: under the 4096-byte threshold, so each weight is one
    // range (less its first and last 128 bytes), fetched in chunk-sized requests, never one per row.
    CHECK(st.bytes_fetched - before.bytes_fetched <= uint64_t{kLayers} * 128 * 512);
    CHECK(st.requests - before.requests <= uint64_t{kLayers} * (128 * 512 / 4096 + 4));
    CHECK(st.peak_cached_bytes <= std::stoull(prefetch));
    CHECK(st.cached_bytes == 0);
  }
}
