// ctstream C++ example: decode every tensor of a checkpoint (floating and compressed tensors as
// F32, others as stored) into one reused buffer and print a checksum line per tensor; then
// decode a tensor-parallel shard (rows [0, rows/2) of the first 2-D tensor).
//   example_cpp MODEL_DIR
#include <cstdint>
#include <cstdio>
#include <vector>

#include <ctstream/ctstream.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  try {
    auto ckpt = ctstream::Checkpoint::open(argv[1]);
    std::vector<std::byte> buf;
    for (const ctstream::TensorInfo& t : ckpt.tensors()) {
      const bool is_float = ctstream::is_float_output(t.dtype);
      const ctstream::DType d = is_float ? ctstream::DType::F32 : t.dtype;
      buf.resize(t.decoded_bytes(d));
      ckpt.decode_into(t, buf, d);
      double sum = 0;
      if (is_float)
        for (uint64_t k = 0; k < t.numel(); ++k) sum += reinterpret_cast<const float*>(buf.data())[k];
      std::printf("%s %s %s", t.name.c_str(), ctstream::dtype_name(t.dtype).data(),
                  ctstream::format_name(t.format).data());
      for (size_t k = 0; k < t.shape.size(); ++k)
        std::printf("%s%llu", k ? "x" : " ", static_cast<unsigned long long>(t.shape[k]));
      std::printf(" sum=%.6f\n", sum);
    }
    std::printf("%zu tensors\n", ckpt.tensors().size());
    for (const ctstream::TensorInfo& t : ckpt.tensors()) {
      if (t.shape.size() != 2 || !ctstream::is_float_output(t.dtype)) continue;
      const ctstream::Slice shard{0, 0, t.shape[0] / 2};  // dim 0, rows [0, rows/2)
      const uint64_t n = ckpt.decode_into(t, buf, ctstream::DType::BF16, shard);
      std::fprintf(stderr, "shard of %s: %llu bytes\n", t.name.c_str(), static_cast<unsigned long long>(n));
      break;
    }
  } catch (const ctstream::Error& e) {
    std::fprintf(stderr, "error [%s]: %s\n", ctstream::error_kind_name(e.kind()).data(), e.what());
    return 1;
  }
  return 0;
}
