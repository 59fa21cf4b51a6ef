/* C ABI on checkpoints in object storage (issue 29, docs/design/object_storage.md step 11),
 * compiled as C11. Driven by tests/python/test_remote.py, which serves fixtures over S3 with
 * `rclone serve s3` and sets the AWS_* variables:
 *
 *   test_c_abi_remote same URL LOCAL_DIR
 *       every tensor of URL equals the same checkpoint opened from LOCAL_DIR: names, shapes,
 *       dtypes, each decode (natural dtype, and a slice of dim 0), each stored part's bytes;
 *   test_c_abi_remote fails URL STATUS_NAME SECRET...
 *       ctstream_open(URL) fails with that status; its message names the URL and contains none of
 *       the SECRET strings (credentials never leave through the C ABI).
 */
#include <ctstream.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode.h"

static int same(const char* url, const char* local) {
  ctstream_checkpoint *rk = NULL, *lk = NULL;
  int rc = ctstream_open(url, NULL, &rk);
  CHECK(rc == CTSTREAM_OK, "open %s: %s", url, ctstream_last_error());
  rc = ctstream_open(local, NULL, &lk);
  CHECK(rc == CTSTREAM_OK, "open %s: %s", local, ctstream_last_error());
  if (!rk || !lk) {
    ctstream_close(rk);
    ctstream_close(lk);
    return CHECK_SUMMARY("test_c_abi_remote");
  }
  CHECK(ctstream_tensor_count(rk) == ctstream_tensor_count(lk), "%zu tensors remote, %zu local",
        ctstream_tensor_count(rk), ctstream_tensor_count(lk));
  for (size_t i = 0; i < ctstream_tensor_count(lk); ++i) {
    ctstream_tensor_info lt, rt;
    CHECK(ctstream_tensor_at(lk, i, &lt) == CTSTREAM_OK, "tensor_at");
    rc = ctstream_find(rk, lt.name, &rt);
    CHECK(rc == CTSTREAM_OK, "%s missing remotely: %s", lt.name, ctstream_last_error());
    if (rc != CTSTREAM_OK) continue;
    CHECK(rt.ndim == lt.ndim && (lt.ndim == 0 || memcmp(rt.shape, lt.shape, lt.ndim * sizeof(uint64_t)) == 0) &&
              rt.dtype == lt.dtype && rt.num_parts == lt.num_parts && strcmp(rt.format, lt.format) == 0,
          "%s: metadata differs", lt.name);
    uint64_t nl = 0, nr = 0;
    unsigned char* a = decode_alloc(lk, lt.name, lt.dtype, NULL, &nl);
    unsigned char* b = decode_alloc(rk, lt.name, lt.dtype, NULL, &nr);
    CHECK(a && b && nl == nr && memcmp(a, b, (size_t)nl) == 0, "%s: decode differs (%s)", lt.name,
          ctstream_last_error());
    free(a);
    free(b);
    if (lt.ndim >= 2 && lt.shape[0] > 1) {  // a tensor-parallel style slice
      ctstream_slice s = {0, 1, lt.shape[0]};
      a = decode_alloc(lk, lt.name, lt.dtype, &s, &nl);
      b = decode_alloc(rk, lt.name, lt.dtype, &s, &nr);
      CHECK(a && b && nl == nr && memcmp(a, b, (size_t)nl) == 0, "%s: slice differs (%s)", lt.name,
            ctstream_last_error());
      free(a);
      free(b);
    }
    for (uint32_t p = 0; p < lt.num_parts; ++p) {
      ctstream_part_info lp, rp;
      CHECK(ctstream_part_at(lk, lt.index, p, &lp) == CTSTREAM_OK &&
                ctstream_part_at(rk, rt.index, p, &rp) == CTSTREAM_OK,
            "%s: part %u", lt.name, p);
      CHECK(strcmp(lp.key, rp.key) == 0 && lp.nbytes == rp.nbytes, "%s: part %u differs", lt.name, p);
      if (strcmp(lp.key, rp.key) != 0 || lp.nbytes != rp.nbytes) continue;
      a = malloc(lp.nbytes ? lp.nbytes : 1);
      b = malloc(lp.nbytes ? lp.nbytes : 1);
      uint64_t wa = 0, wb = 0;
      CHECK(ctstream_read_part(lk, lt.index, p, a, lp.nbytes, &wa) == CTSTREAM_OK &&
                ctstream_read_part(rk, rt.index, p, b, rp.nbytes, &wb) == CTSTREAM_OK && wa == wb &&
                memcmp(a, b, (size_t)wa) == 0,
            "%s: part %s bytes differ (%s)", lt.name, lp.key, ctstream_last_error());
      free(a);
      free(b);
    }
  }
  ctstream_close(rk);
  ctstream_close(lk);
  return CHECK_SUMMARY("test_c_abi_remote");
}

static int fails(const char* url, const char* status, char** secrets, int n) {
  ctstream_checkpoint* ck = NULL;
  const int rc = ctstream_open(url, NULL, &ck);
  const char* msg = ctstream_last_error();
  printf("status %s: %s\n", ctstream_status_name(rc), msg);  // the driver checks stdout too
  CHECK(rc != CTSTREAM_OK && ck == NULL, "open %s succeeded", url);
  CHECK(strcmp(ctstream_status_name(rc), status) == 0, "status %s, expected %s", ctstream_status_name(rc), status);
  CHECK(strstr(msg, url) != NULL, "the message does not name %s: %s", url, msg);
  for (int i = 0; i < n; ++i) CHECK(strstr(msg, secrets[i]) == NULL, "the message holds a credential: %s", msg);
  ctstream_close(ck);
  return CHECK_SUMMARY("test_c_abi_remote");
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "same") == 0) return same(argv[2], argv[3]);
  if (argc >= 4 && strcmp(argv[1], "fails") == 0) return fails(argv[2], argv[3], argv + 4, argc - 4);
  fprintf(stderr, "usage: %s same URL LOCAL_DIR | fails URL STATUS_NAME SECRET...\n", argv[0]);
  return 2;
}
