/* Shared by the C ABI tests: a tensor (or slice) decoded into a buffer of its own. */
#ifndef CTSTREAM_TESTS_C_DECODE_H
#define CTSTREAM_TESTS_C_DECODE_H
#include <ctstream.h>
#include <stdint.h>
#include <stdlib.h>

/* `name` decoded as `d` (slice `s`, may be NULL) into a malloc'd buffer of *bytes bytes; NULL when
 * the size or the decode is refused or writes another count. The caller frees it. */
static inline unsigned char* decode_alloc(ctstream_checkpoint* ck, const char* name, ctstream_dtype d,
                                          const ctstream_slice* s, uint64_t* bytes) {
  *bytes = 0;
  if (ctstream_decoded_size(ck, name, d, s, bytes) != CTSTREAM_OK) return NULL;
  unsigned char* buf = malloc(*bytes ? *bytes : 1);
  uint64_t written = 0;
  if (ctstream_decode_into(ck, name, buf, *bytes, d, s, &written) != CTSTREAM_OK || written != *bytes) {
    free(buf);
    return NULL;
  }
  return buf;
}

#endif
