// ListObjectsV2: the bounded page parser (no network), the listing of a prefix page by page against
// rclone serve s3 (which honours max-keys and continuation tokens), and remote shard discovery by
// listing: the same files, order, tensors and error kinds as the local discover_shards.
#include <catch2/catch.hpp>

#include "ctstream/checkpoint.hpp"
#include "io/http_client.hpp"
#include "io/s3_list.hpp"
#include "remote_server.hpp"

namespace fs = std::filesystem;
using ctstream::Checkpoint;
using ctstream::Error;
using ctstream::ErrorKind;
namespace io = ctstream::io;

namespace {
// rclone 1.75.2's answer to ?list-type=2&delimiter=/&max-keys=2&prefix=d/ (captured), one key
// escaped as AWS escapes it.
const char* const kPage = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bkt</Name>
  <IsTruncated>true</IsTruncated>
  <Delimiter>/</Delimiter>
  <Prefix>d/</Prefix>
  <MaxKeys>2</MaxKeys>
  <Contents>
    <Key>d/config.json</Key>
    <LastModified>2026-11-26T02:09:00.522Z</LastModified>
    <ETag>2cd6ee2c70b0bde53fbe6cac3c8b8bb1</ETag>
    <Size>2</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>d/m&amp;&lt;&#x41;&#66;.safetensors</Key>
    <Size>18446744073709551615</Size>
  </Contents>
  <CommonPrefixes><Prefix>d/sub/</Prefix></CommonPrefixes>
  <KeyCount>2</KeyCount>
  <NextContinuationToken>ZC9tLTAwMDAxLnNhZmV0ZW5zb3Jz</NextContinuationToken>
</ListBucketResult>)";

std::string kind_and_message(const std::function<void()>& f, ErrorKind& kind) {
  try {
    f();
  } catch (const Error& e) {
    kind = e.kind();
    return e.what();
  }
  kind = ErrorKind::internal;
  return "no error";
}
}  // namespace

TEST_CASE("remote list: a ListObjectsV2 page is parsed, entities decoded", "[remote][list]") {
  const io::ListPage p = io::parse_list_objects(kPage, "s3://bkt/d/");
  REQUIRE(p.objects.size() == 2);
  CHECK(p.objects[0].key == "d/config.json");
  CHECK(p.objects[0].size == 2);
  CHECK(p.objects[1].key == "d/m&<AB.safetensors");
  CHECK(p.objects[1].size == UINT64_MAX);
  CHECK(p.common_prefixes == std::vector<std::string>{"d/sub/"});
  CHECK(p.truncated);
  CHECK(p.next_token == "ZC9tLTAwMDAxLnNhZmV0ZW5zb3Jz");
  const std::string q = io::list_objects_query("a b/", "t+/=", 2);
  CHECK(q == "continuation-token=t%2B%2F%3D&delimiter=%2F&list-type=2&max-keys=2&prefix=a%20b%2F");
}

TEST_CASE("remote list: malformed pages are refused, bounded", "[remote][list]") {
  const std::string good = kPage;
  auto refused = [](const std::string& xml) {
    ErrorKind k{};
    const std::string m = kind_and_message([&] { (void)io::parse_list_objects(xml, "s3://bkt/d/?x=secret"); }, k);
    CHECK(k == ErrorKind::io);
    CHECK_THAT(m, Catch::Contains("malformed ListObjectsV2 answer"));
    CHECK_THAT(m, !Catch::Contains("secret"));
    return m;
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  CHECK_THAT(refused("<Error><Code>AccessDenied</Code></Error>"), Catch::Contains("not a ListBucketResult"));
  CHECK_THAT(refused(with("<Size>2</Size>", "<Size>-2</Size>")), Catch::Contains("Size"));
  CHECK_THAT(refused(with("<Size>2</Size>", "<Size>18446744073709551616</Size>")), Catch::Contains("Size"));
  CHECK_THAT(refused(with("d/config.json", "d/&bogus;")), Catch::Contains("Key"));
  CHECK_THAT(refused(with("d/config.json", "d/&#0;")), Catch::Contains("Key"));
  CHECK_THAT(refused(with("d/config.json", "d/&#xD800;")), Catch::Contains("Key"));
  CHECK_THAT(refused(with("d/config.json", "")), Catch::Contains("Key"));
  CHECK_THAT(refused(with("d/config.json", std::string(1025, 'k'))), Catch::Contains("Key"));
  CHECK_THAT(refused(with("<IsTruncated>true", "<IsTruncated>yes")), Catch::Contains("IsTruncated"));
  CHECK_THAT(refused(with("</Contents>\n  <CommonPrefixes>", "\n  <CommonPrefixes>")), Catch::Contains("unclosed"));
  std::string many = "<ListBucketResult>";
  for (int i = 0; i < 10001; ++i) many += "<Contents><Key>k</Key><Size>1</Size></Contents>";
  CHECK_THAT(refused(many + "</ListBucketResult>"), Catch::Contains("more than 10000 entries"));
  CHECK_THAT(refused("<ListBucketResult>" + std::string(5 << 20, ' ') + "</ListBucketResult>"),
             Catch::Contains("larger than"));
}

TEST_CASE("remote list: a prefix is listed page by page through continuation tokens", "[remote][list][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  io::HttpClient c;
  const std::vector<std::string> want = {"a.safetensors", "b&c.safetensors", "d <e>.bin", "f.safetensors", "g.json"};
  for (const unsigned max_keys : {2u, 1000u}) {
    INFO(max_keys);
    const io::PrefixListing l = io::list_s3_prefix("bkt", "ck/listing/pages/", c, max_keys);
    std::vector<std::string> names;
    for (const auto& o : l.objects) names.push_back(o.key);
    std::sort(names.begin(), names.end());
    CHECK(names == want);  // deeper/h.safetensors is a sub-prefix: not listed
    CHECK(l.any);
    CHECK(l.pages == (max_keys == 2 ? 3u : 1u));  // 5 keys + 1 sub-prefix in pages of 2
    for (const auto& o : l.objects) CHECK(o.size == 3);
  }
  const io::PrefixListing none = io::list_s3_prefix("bkt", "ck/listing/nothing/", c);
  CHECK_FALSE(none.any);
  CHECK(none.objects.empty());
}

TEST_CASE("remote list: shards found by listing equal the local discovery", "[remote][list][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  // The server's directory is local too: the same layout opened both ways.
  const fs::path root = srv.root.path / "bkt";
  for (const char* name : {"ck/listing/noindex", "ck/listing/other_index"}) {
    INFO(name);
    const Checkpoint local = Checkpoint::open(root / name);
    const Checkpoint remote = Checkpoint::open(std::string("s3://bkt/") + name);
    REQUIRE(remote.files().size() == local.files().size());
    for (size_t i = 0; i < local.files().size(); ++i)
      CHECK(remote.files()[i].string() == "s3://bkt/" + std::string(name) + "/" + local.files()[i].filename().string());
    REQUIRE(remote.tensors().size() == local.tensors().size());
    CHECK(remote.config_json() == local.config_json());
    th::check_same_decodes(local, remote);
  }
  CHECK(Checkpoint::open(root / "ck/listing/noindex").files().size() > 1);
}

TEST_CASE("remote list: listing refusals keep the local error kinds", "[remote][list][s3]") {
  REQUIRE_S3(srv);
  th::S3Env env(srv);
  const fs::path root = srv.root.path / "bkt";
  for (const char* name : {"ck/listing/two_indexes", "ck/listing/config_only"}) {
    INFO(name);
    const std::optional<ErrorKind> local = th::error_kind([&] { Checkpoint::open(root / name); });
    ErrorKind remote{};
    const std::string m = kind_and_message([&] { Checkpoint::open(std::string("s3://bkt/") + name); }, remote);
    CHECK(remote == local);
    CHECK_THAT(m, Catch::StartsWith(std::string("s3://bkt/") + name));
  }
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/listing/two_indexes"); }) == ErrorKind::invalid_header);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/listing/config_only"); }) == ErrorKind::file_not_found);
  CHECK(th::error_kind([] { Checkpoint::open("s3://bkt/ck/listing/absent"); }) == ErrorKind::file_not_found);
}
