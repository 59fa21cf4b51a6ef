/* A C program built against the ABI version 2 header (tests/c/abi_v2/ctstream.h, release 0.2.0),
 * run against the current libctstream_c: what an old binary sees after a library upgrade.
 *
 * ABI 3 grew ctstream_open_options by 8 bytes and its exported ctstream_open_options_init wrote
 * the library's sizeof: 8 bytes past this program's 32-byte struct. Canaries right after the
 * struct (in a wrapper struct on the stack and in an exactly-sized heap block, which ASan checks
 * too) must come back untouched, and the options must still open and decode a checkpoint.
 *
 *   test_c_abi_v2 FIXTURES_DIR          (FIXTURES_DIR = tests/fixtures)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_v2/ctstream.h" /* quotes: this directory first, never the current header */

#include "check.h"

enum { kCanary = 0xA5, kCanaryBytes = 64 };

static int canary_intact(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != kCanary) return 0;
  return 1;
}

/* Opens `path` with `o` and decodes its first tensor in its natural dtype. */
static int opens_and_decodes(const char* path, const ctstream_open_options* o) {
  ctstream_checkpoint* ck = NULL;
  if (ctstream_open(path, o, &ck) != CTSTREAM_OK) {
    fprintf(stderr, "open %s: %s\n", path, ctstream_last_error());
    return 0;
  }
  int ok = ctstream_tensor_count(ck) > 0;
  ctstream_tensor_info t;
  uint64_t bytes = 0, written = 0;
  ok = ok && ctstream_tensor_at(ck, 0, &t) == CTSTREAM_OK &&
       ctstream_decoded_size(ck, t.name, t.dtype, NULL, &bytes) == CTSTREAM_OK;
  void* buf = malloc(bytes ? bytes : 1);
  ok = ok && buf && ctstream_decode_into(ck, t.name, buf, bytes, t.dtype, NULL, &written) == CTSTREAM_OK &&
       written == bytes;
  free(buf);
  ctstream_close(ck);
  return ok;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/lowrank/fp32", argv[1]);
  CHECK(sizeof(ctstream_open_options) == 32, "the ABI 2 struct is 32 bytes, got %zu", sizeof(ctstream_open_options));

  /* on the stack: the struct, then canaries */
  struct {
    ctstream_open_options o;
    unsigned char canary[kCanaryBytes];
  } s;
  memset(&s, kCanary, sizeof s);
  ctstream_open_options_init(&s.o);
  CHECK(canary_intact(s.canary, sizeof s.canary), "init wrote past the ABI 2 struct (stack)");
  CHECK(s.o.struct_size == sizeof(ctstream_open_options), "struct_size %u, want %zu", s.o.struct_size,
        sizeof(ctstream_open_options));
  CHECK(s.o.io == CTSTREAM_IO_MMAP && s.o.order == CTSTREAM_ORDER_FILE && s.o.threads == 0, "defaults");
  CHECK(s.o.max_header_bytes > 0 && s.o.max_json_bytes > 0, "size limits filled");

  /* on the heap: exactly the struct's size, canaries after it (ASan also sees any overflow) */
  unsigned char* block = malloc(sizeof(ctstream_open_options) + kCanaryBytes);
  CHECK(block != NULL, "malloc");
  if (!block) return 1;
  memset(block, kCanary, sizeof(ctstream_open_options) + kCanaryBytes);
  ctstream_open_options* heap = (ctstream_open_options*)block;
  ctstream_open_options_init(heap);
  CHECK(canary_intact(block + sizeof(ctstream_open_options), kCanaryBytes), "init wrote past the ABI 2 struct (heap)");
  CHECK(memcmp(heap, &s.o, sizeof(ctstream_open_options)) == 0, "heap and stack init agree");

  /* the old struct is still served: both io modes; a low-rank checkpoint in its default
   * (original) architecture, since an ABI 2 caller cannot ask for stored factors */
  CHECK(opens_and_decodes(path, &s.o), "ABI 2 options, mmap");
  heap->io = CTSTREAM_IO_PREAD;
  heap->threads = 2;
  CHECK(opens_and_decodes(path, heap), "ABI 2 options, pread");
  ctstream_checkpoint* ck = NULL;
  ctstream_tensor_info t;
  CHECK(ctstream_open(path, &s.o, &ck) == CTSTREAM_OK && ctstream_find(ck, "fc1.weight", &t) == CTSTREAM_OK &&
            strcmp(t.format, "low-rank") == 0,
        "original architecture: %s", ctstream_last_error());
  ctstream_close(ck);
  CHECK(canary_intact(s.canary, sizeof s.canary), "open wrote past the ABI 2 struct");
  free(block);

  return CHECK_SUMMARY("c_abi_v2");
}
