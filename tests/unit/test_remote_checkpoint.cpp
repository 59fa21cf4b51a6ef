// Checkpoint::open on s3:// URLs served by rclone (remote_server.hpp): every tensor decoded from
// the server equals the local decode byte for byte; the local layout rules and error kinds hold.
#include <catch2/catch.hpp>

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

void th::copy_remote_fixtures(const fs::path& bucket) {
  for (const char* name : kCheckpoints) {
    fs::create_directories(bucket / "ck" / name);
    fs::copy(th::fixtures() / name, bucket / "ck" / name, fs::copy_options::recursive);
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
}

#define REQUIRE_S3(server)                    \
  th::S3Server& server = th::S3Server::get(); \
  if (!server.why_not.empty()) REMOTE_SKIP(server.why_not);

TEST_CASE("remote: every tensor decoded from s3:// equals the local decode", "[remote][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  for (const char* name : {"ct/v012_pack_w4_g32_sym_bf16", "ct/v012_sparse_bitmask_bf16", "st/sharded"}) {
    INFO(name);
    const Checkpoint local = Checkpoint::open(th::fixtures() / name);
    const Checkpoint remote = Checkpoint::open(std::string("s3://bkt/ck/") + name);
    REQUIRE(remote.tensors().size() == local.tensors().size());
    CHECK(remote.config_json() == local.config_json());
    for (const auto& t : local.tensors()) {
      INFO(t.name);
      const auto* r = remote.find(t.name);
      REQUIRE(r != nullptr);
      REQUIRE(r->dtype == t.dtype);
      std::vector<std::byte> want(t.decoded_bytes(t.dtype)), got(want.size());
      local.decode_into(t, want, t.dtype);
      remote.decode_into(*r, got, r->dtype);
      CHECK(got == want);
    }
  }
  // A single file named directly.
  const Checkpoint one = Checkpoint::open("s3://bkt/ck/ct/v012_pack_w4_g32_sym_bf16/model.safetensors");
  CHECK(one.tensors().size() ==
        Checkpoint::open(th::fixtures() / "ct/v012_pack_w4_g32_sym_bf16/model.safetensors").tensors().size());
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
