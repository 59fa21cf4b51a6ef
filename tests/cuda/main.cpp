// Device tests: they need a CUDA device. Without one (ctstream::cuda::available() false) nothing
// runs and the binary exits with 4, which ctest reports as skipped (SKIP_RETURN_CODE), not
// passed. Catch2 v2 (Debian) has no SKIP(); this is its equivalent for a whole binary.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "ctstream/cuda.hpp"

int main(int argc, char** argv) {
  if (!ctstream::cuda::available()) {
    std::puts("SKIP: no usable CUDA device (ctstream::cuda::available() is false); device tests not run");
    return 4;
  }
  return Catch::Session().run(argc, argv);
}
