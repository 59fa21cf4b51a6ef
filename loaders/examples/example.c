/* ctstream C example: decode every tensor of a checkpoint with the C ABI (floating and
 * compressed tensors as F32, others as stored) into one reused buffer, and print a checksum line
 * per tensor.   example_c MODEL_DIR */
#include <ctstream.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  ctstream_checkpoint* ck = NULL;
  if (ctstream_open(argv[1], NULL, &ck) != CTSTREAM_OK) {
    fprintf(stderr, "error: %s\n", ctstream_last_error());
    return 1;
  }
  void* buf = NULL;
  uint64_t cap = 0;
  const size_t n = ctstream_tensor_count(ck);
  for (size_t i = 0; i < n; ++i) {
    ctstream_tensor_info t;
    ctstream_tensor_at(ck, i, &t);
    const int is_float = t.dtype == CTSTREAM_F32 || t.dtype == CTSTREAM_F16 || t.dtype == CTSTREAM_BF16;
    const ctstream_dtype d = is_float ? CTSTREAM_F32 : t.dtype;
    uint64_t bytes = 0;
    if (ctstream_decoded_size(ck, t.name, d, NULL, &bytes) != CTSTREAM_OK) break;
    if (bytes > cap) {
      free(buf);
      cap = bytes;
      buf = malloc(cap);
    }
    if (ctstream_decode_into(ck, t.name, buf, cap, d, NULL, NULL) != CTSTREAM_OK) {
      fprintf(stderr, "error: %s\n", ctstream_last_error());
      free(buf);
      ctstream_close(ck);
      return 1;
    }
    double sum = 0;
    if (is_float)
      for (uint64_t k = 0; k < t.numel; ++k) sum += ((const float*)buf)[k];
    printf("%s %s %s", t.name, ctstream_dtype_name(t.dtype), t.format);
    for (uint32_t k = 0; k < t.ndim; ++k) printf("%s%llu", k ? "x" : " ", (unsigned long long)t.shape[k]);
    printf(" sum=%.6f\n", sum);
  }
  printf("%zu tensors\n", n);
  free(buf);
  ctstream_close(ck);
  return 0;
}
