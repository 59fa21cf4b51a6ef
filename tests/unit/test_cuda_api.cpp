// include/ctstream/cuda.hpp in every build: without CUDA or without a device, available() is false
// and decode_into_device() refuses with Error{unsupported} naming the file and the tensor, before
// touching the pointer it was given. (On a machine with a device, tests/cuda/ decodes every
// fixture there; this test then checks the host-side refusals that need no device work.)
#include <catch2/catch.hpp>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "ctstream/cuda.hpp"
#include "helpers.hpp"

using namespace ctstream;

TEST_CASE("decode_into_device refuses with Error{unsupported} when no CUDA device is usable", "[cuda]") {
  auto ck = Checkpoint::open(th::fixtures() / "ct" / "v020_pack_w4_g32_asym_bf16");
  const TensorInfo* t = nullptr;
  for (const auto& x : ck.tensors())
    if (x.format != Format::dense) t = &x;
  REQUIRE(t != nullptr);
  const uint64_t need = ck.output_bytes(*t, DType::BF16);
  if (!cuda::available()) {
    // A bogus non-null pointer: the refusal must come before any use of it.
    void* bogus = reinterpret_cast<void*>(uintptr_t{0x10});
    try {
      (void)cuda::decode_into_device(ck, *t, bogus, need, DType::BF16);
      FAIL("decode_into_device returned without a device");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::unsupported);
      CHECK(e.tensor() == t->name);
      CHECK(e.file() == ck.files()[t->parts.front().file].string());
      CHECK(std::string(e.what()).find("device") != std::string::npos);
    }
    // the same for a dense tensor and for a slice
    const TensorInfo* d = nullptr;
    for (const auto& x : ck.tensors())
      if (x.format == Format::dense) d = &x;
    REQUIRE(d != nullptr);
    CHECK(th::error_kind([&] { (void)cuda::decode_into_device(ck, *d, bogus, 1 << 20, d->dtype); }) ==
          ErrorKind::unsupported);
    CHECK(th::error_kind([&] {
            (void)cuda::decode_into_device(ck, *t, bogus, need, DType::F32, nullptr, Slice{0, 0, 1});
          }) == ErrorKind::unsupported);
  } else {
    // With a device the host-side checks still come first: a too-small buffer, a bad slice and
    // an integer output dtype for a quantized weight are refused before any device work.
    CHECK(th::error_kind([&] { (void)cuda::decode_into_device(ck, *t, nullptr, need - 1, DType::BF16); }) ==
          ErrorKind::buffer_too_small);
    CHECK(th::error_kind([&] {
            (void)cuda::decode_into_device(ck, *t, nullptr, need, DType::BF16, nullptr, Slice{7, 0, 1});
          }) == ErrorKind::invalid_argument);
    CHECK(th::error_kind([&] { (void)cuda::decode_into_device(ck, *t, nullptr, need, DType::I32); }) ==
          ErrorKind::unsupported);
  }
}

TEST_CASE("decode_into_device takes 3-D experts with packed zero points through the same host checks", "[cuda][moe]") {
  // The device path reads the per-expert zero-point packing from the format table
  // (format::ZeroPointPacking); tests/cuda/test_device.cpp checks its values on a GPU. Here: the
  // host side accepts the geometry (its refusal is the missing device, or a too-small buffer /
  // a bad slice dim with one), never the old "2-D weight" rule.
  auto ck = Checkpoint::open(th::fixtures() / "ct_moe" / "w4a16_group32_asym");
  const TensorInfo& t = ck.at("model.layers.0.mlp.experts.gate_up_proj.weight");
  REQUIRE(t.shape.size() == 3);
  for (unsigned dim : {0u, 1u, 2u}) {
    const Slice s{dim, 1, 3};
    const uint64_t need = ck.output_bytes(t, DType::BF16, s);
    if (!cuda::available()) {
      void* bogus = reinterpret_cast<void*>(uintptr_t{0x10});
      CHECK(th::error_kind([&] { (void)cuda::decode_into_device(ck, t, bogus, need, DType::BF16, nullptr, s); }) ==
            ErrorKind::unsupported);
    } else {
      CHECK(th::error_kind([&] {
              (void)cuda::decode_into_device(ck, t, nullptr, need - 1, DType::BF16, nullptr, s);
            }) == ErrorKind::buffer_too_small);
      CHECK(th::error_kind([&] {
              (void)cuda::decode_into_device(ck, t, nullptr, need, DType::BF16, nullptr, Slice{3, 0, 1});
            }) == ErrorKind::invalid_argument);
    }
  }
}
