/* C ABI test (loaders/c/include/ctstream.h), compiled as C11: every compressed-tensors fixture
 * decodes through the C ABI to exactly the library's own decompression (expected_{bf16,fp16,
 * fp32}.safetensors, read through the same ABI), slices equal slicing the full decode, and every
 * error path returns its status with a message instead of crashing.
 *
 *   test_c_abi FIXTURES_DIR          (FIXTURES_DIR = tests/fixtures)
 */
#include <ctstream.h>
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode.h"

static int is_nan(ctstream_dtype d, const unsigned char* p) {
  if (d == CTSTREAM_F32) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (v & 0x7F800000u) == 0x7F800000u && (v & 0x007FFFFFu) != 0;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  if (d == CTSTREAM_BF16) return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu) != 0;
  if (d == CTSTREAM_F16) return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0;
  return 0;
}

/* Equal bytes, except that NaN equals NaN (torch's NaN payloads are path-dependent). */
static int same_values(ctstream_dtype d, const unsigned char* a, const unsigned char* b, uint64_t n) {
  const uint64_t esz = ctstream_dtype_bits(d) / 8;
  if (esz == 0) return memcmp(a, b, (size_t)n) == 0;
  for (uint64_t i = 0; i < n; i += esz) {
    if (is_nan(d, a + i) && is_nan(d, b + i)) continue;
    if (memcmp(a + i, b + i, (size_t)esz) != 0) return 0;
  }
  return 1;
}

/* Every tensor of expected/<ref> equals ctstream's decode of the case in that dtype. */
static void compare_case(const char* dir, const char* ref_name, ctstream_io_mode io, const char* classes_json) {
  char path[8192];
  snprintf(path, sizeof path, "%s/expected/%s", dir, ref_name);
  ctstream_checkpoint *ref = NULL, *ck = NULL;
  if (ctstream_open(path, NULL, &ref) != CTSTREAM_OK) return; /* no such expected file */
  ctstream_open_options o;
  ctstream_open_options_init(&o);
  o.io = io;
  o.threads = 2;
  o.module_classes_json = classes_json;
  int rc = ctstream_open(dir, &o, &ck);
  CHECK(rc == CTSTREAM_OK, "open %s: %s", dir, ctstream_last_error());
  if (rc != CTSTREAM_OK) {
    ctstream_close(ref);
    return;
  }
  for (size_t i = 0; i < ctstream_tensor_count(ref); ++i) {
    ctstream_tensor_info rt, t;
    CHECK(ctstream_tensor_at(ref, i, &rt) == CTSTREAM_OK, "tensor_at");
    rc = ctstream_find(ck, rt.name, &t);
    CHECK(rc == CTSTREAM_OK, "%s: %s missing: %s", dir, rt.name, ctstream_last_error());
    if (rc != CTSTREAM_OK) continue;
    CHECK(t.ndim == rt.ndim && memcmp(t.shape, rt.shape, rt.ndim * sizeof(uint64_t)) == 0, "%s: %s shape", dir,
          rt.name);
    uint64_t nw = 0, ng = 0;
    unsigned char* want = decode_alloc(ref, rt.name, rt.dtype, NULL, &nw);
    unsigned char* got = decode_alloc(ck, rt.name, rt.dtype, NULL, &ng);
    CHECK(want && got && nw == ng && same_values(rt.dtype, got, want, nw), "%s: %s as %s differs (%s)", dir, rt.name,
          ctstream_dtype_name(rt.dtype), ctstream_last_error());
    free(want);
    free(got);
  }
  ctstream_close(ck);
  ctstream_close(ref);
}

/* Config groups that target module classes (fixtures/ct_class, the library's model path): the
 * stored parts choose among them, or options.module_classes_json does; without it a module the
 * parts cannot assign is refused (CTSTREAM_ERR_UNSUPPORTED), never decoded with the wrong group. */
static void test_class_targets(const char* fixtures) {
  char dir[4096], file[4200];
  const char* decidable[] = {"embedding_w8_linear_w4", "attention_linear_w4"};
  for (int i = 0; i < 2; ++i) {
    snprintf(dir, sizeof dir, "%s/ct_class/%s", fixtures, decidable[i]);
    compare_case(dir, "expected.safetensors", CTSTREAM_IO_MMAP, NULL);
  }
  snprintf(dir, sizeof dir, "%s/ct_class/fp8_blocks_64_96", fixtures);
  ctstream_checkpoint* ck = NULL;
  CHECK(ctstream_open(dir, NULL, &ck) == CTSTREAM_ERR_UNSUPPORTED && ck == NULL, "fp8 class groups without classes");
  CHECK(strstr(ctstream_last_error(), "module classes") != NULL, "%s", ctstream_last_error());
  snprintf(file, sizeof file, "%s/module_classes.json", dir);
  FILE* f = fopen(file, "rb");
  CHECK(f != NULL, "open %s", file);
  if (!f) return;
  static char json[1 << 20];
  size_t n = fread(json, 1, sizeof json - 1, f);
  fclose(f);
  json[n] = 0;
  compare_case(dir, "expected.safetensors", CTSTREAM_IO_MMAP, json);
  compare_case(dir, "expected.safetensors", CTSTREAM_IO_PREAD, json);
  ctstream_open_options o;
  ctstream_open_options_init(&o);
  CHECK(o.module_classes_json == NULL, "init leaves module_classes_json NULL");
  o.module_classes_json = "[1, 2]";
  CHECK(ctstream_open(dir, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "module classes not an object");
}

static void test_slices(const char* dir) {
  ctstream_checkpoint* ck = NULL;
  if (ctstream_open(dir, NULL, &ck) != CTSTREAM_OK) return;
  for (size_t i = 0; i < ctstream_tensor_count(ck); ++i) {
    ctstream_tensor_info t;
    ctstream_tensor_at(ck, i, &t);
    if (t.ndim != 2 || strcmp(t.format, "dense") == 0 || strcmp(t.format, "marlin-24") == 0 || t.shape[0] < 3)
      continue; /* marlin-24: recognised, passed through packed only */
    const uint64_t R = t.shape[0], C = t.shape[1];
    uint64_t nf = 0;
    unsigned char* full = decode_alloc(ck, t.name, CTSTREAM_F32, NULL, &nf);
    CHECK(full != NULL && nf == R * C * 4, "%s full decode", t.name);
    if (!full) continue;
    ctstream_slice rows = {0, 1, R - 1}, cols = {1, C / 3, C};
    uint64_t n = 0;
    unsigned char* r = decode_alloc(ck, t.name, CTSTREAM_F32, &rows, &n);
    CHECK(r && n == (R - 2) * C * 4 && memcmp(r, full + C * 4, (size_t)n) == 0, "%s row slice", t.name);
    free(r);
    unsigned char* c = decode_alloc(ck, t.name, CTSTREAM_F32, &cols, &n);
    const uint64_t w = C - C / 3;
    int ok = c && n == R * w * 4;
    for (uint64_t y = 0; ok && y < R; ++y) ok = memcmp(c + y * w * 4, full + (y * C + C / 3) * 4, (size_t)(w * 4)) == 0;
    CHECK(ok, "%s column slice", t.name);
    free(c);
    free(full);
  }
  ctstream_close(ck);
}

static void test_errors(const char* fixtures) {
  char path[4096];
  ctstream_checkpoint* ck = (ctstream_checkpoint*)&path; /* must be reset to NULL on failure */
  snprintf(path, sizeof path, "%s/no/such/model", fixtures);
  int rc = ctstream_open(path, NULL, &ck);
  CHECK(rc != CTSTREAM_OK && ck == NULL, "open of a missing path: rc %d", rc);
  CHECK(strstr(ctstream_last_error(), "no/such/model") != NULL, "message names the path: %s", ctstream_last_error());
  CHECK(ctstream_open(NULL, NULL, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT, "NULL path");
  CHECK(ctstream_open(path, NULL, NULL) == CTSTREAM_ERR_INVALID_ARGUMENT, "NULL out");

  ctstream_open_options o;
  memset(&o, 0, sizeof o); /* struct_size not set */
  snprintf(path, sizeof path, "%s/ct/v020_pack_w4_g32_asym_bf16", fixtures);
  CHECK(ctstream_open(path, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT, "options without _init");
  CHECK(strstr(ctstream_last_error(), "struct_size") != NULL, "%s", ctstream_last_error());
  ctstream_open_options_init(&o);
  o.io = (ctstream_io_mode)7;
  CHECK(ctstream_open(path, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "unknown io mode");

  rc = ctstream_open(path, NULL, &ck);
  CHECK(rc == CTSTREAM_OK, "open %s: %s", path, ctstream_last_error());
  if (rc != CTSTREAM_OK) return;
  ctstream_tensor_info t;
  CHECK(ctstream_find(ck, "no.such.tensor", &t) == CTSTREAM_ERR_NOT_FOUND, "find unknown");
  CHECK(strstr(ctstream_last_error(), "no.such.tensor") != NULL, "%s", ctstream_last_error());
  CHECK(ctstream_tensor_at(ck, ctstream_tensor_count(ck), &t) == CTSTREAM_ERR_NOT_FOUND, "tensor_at past the end");
  const char* name = "model.layers.0.mlp.down_proj.weight";
  CHECK(ctstream_find(ck, name, &t) == CTSTREAM_OK, "find");
  CHECK(strcmp(t.format, "pack-quantized") == 0 && t.quantized && t.num_bits == 4 && t.group_size == 32,
        "metadata: %s %d %u", t.format, t.quantized, t.num_bits);
  CHECK(t.num_parts >= 3, "parts: %u", t.num_parts);

  ctstream_part_info p;
  CHECK(ctstream_part_at(ck, t.index, 0, &p) == CTSTREAM_OK && strcmp(p.role, "weight_packed") == 0, "part 0");
  unsigned char* raw = malloc(p.nbytes);
  uint64_t written = 0;
  CHECK(ctstream_read_part(ck, t.index, 0, raw, p.nbytes, &written) == CTSTREAM_OK && written == p.nbytes, "read_part");
  CHECK(ctstream_read_part(ck, t.index, 0, raw, p.nbytes - 1, &written) == CTSTREAM_ERR_BUFFER_TOO_SMALL,
        "read_part into a short buffer");
  CHECK(ctstream_part_at(ck, t.index, t.num_parts, &p) == CTSTREAM_ERR_NOT_FOUND, "part past the end");
  free(raw);

  uint64_t bytes = 0;
  CHECK(ctstream_decoded_size(ck, name, CTSTREAM_BF16, NULL, &bytes) == CTSTREAM_OK && bytes == t.numel * 2, "size");
  unsigned char* buf = malloc(bytes + 1);
  buf[bytes - 1] = 0xAB;
  rc = ctstream_decode_into(ck, name, buf, bytes - 1, CTSTREAM_BF16, NULL, &written);
  CHECK(rc == CTSTREAM_ERR_BUFFER_TOO_SMALL && written == 0, "short buffer: rc %d", rc);
  CHECK(strlen(ctstream_last_error()) > 0, "message for a short buffer");
  CHECK(ctstream_decode_into(ck, name, NULL, bytes, CTSTREAM_BF16, NULL, NULL) == CTSTREAM_ERR_INVALID_ARGUMENT,
        "NULL out");
  CHECK(ctstream_decode_into(ck, name, buf, bytes, (ctstream_dtype)99, NULL, NULL) == CTSTREAM_ERR_INVALID_ARGUMENT,
        "dtype out of range");
  CHECK(
      ctstream_decode_into(ck, name, buf, bytes, CTSTREAM_DTYPE_INVALID_, NULL, NULL) == CTSTREAM_ERR_INVALID_ARGUMENT,
      "negative dtype");
  CHECK(strcmp(ctstream_dtype_name((ctstream_dtype)99), "?") == 0 && ctstream_dtype_bits((ctstream_dtype)-3) == 0,
        "names of dtypes out of range");
  rc = ctstream_decode_into(ck, name, buf, bytes, CTSTREAM_I32, NULL, NULL);
  CHECK(rc != CTSTREAM_OK, "decode of a float tensor as I32 is refused");
  /* the size of a request decode_into refuses is refused too, with the same status */
  uint64_t no_size = 0;
  CHECK((int)ctstream_decoded_size(ck, name, CTSTREAM_I32, NULL, &no_size) == (int)rc,
        "size of a refused dtype: status");
  ctstream_slice bad = {5, 0, 1};
  CHECK(ctstream_decoded_size(ck, name, CTSTREAM_BF16, &bad, &bytes) == CTSTREAM_ERR_INVALID_ARGUMENT, "slice dim");
  CHECK(ctstream_decode_into(ck, name, buf, bytes, CTSTREAM_BF16, &bad, NULL) != CTSTREAM_OK, "slice dim (decode)");
  ctstream_slice clamp = {0, 2, UINT64_MAX};
  CHECK(ctstream_decoded_size(ck, name, CTSTREAM_BF16, &clamp, &bytes) == CTSTREAM_OK &&
            bytes == (t.shape[0] - 2) * t.shape[1] * 2,
        "stop clamps to the dimension");
  free(buf);
  ctstream_close(ck);
  ctstream_close(NULL);

  /* a corrupt file: an error, never a crash */
  snprintf(path, sizeof path, "%s/corrupt", fixtures);
  DIR* d = opendir(path);
  int corrupt = 0;
  if (d) {
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
      if (!strstr(e->d_name, ".safetensors")) continue;
      char f[8192];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      ctstream_checkpoint* c = NULL;
      if (ctstream_open(f, NULL, &c) == CTSTREAM_OK) {
        for (size_t i = 0; i < ctstream_tensor_count(c); ++i) { /* decode may fail; must not crash */
          ctstream_tensor_info ti;
          ctstream_tensor_at(c, i, &ti);
          uint64_t n = 0;
          free(decode_alloc(c, ti.name, ti.dtype, NULL, &n));
        }
        ctstream_close(c);
      } else {
        CHECK(strlen(ctstream_last_error()) > 0, "corrupt %s: empty message", e->d_name);
        ++corrupt;
      }
    }
    closedir(d);
  }
  CHECK(corrupt > 0, "some corrupt fixtures were refused (%d)", corrupt);
}

static void test_basics(void) {
  CHECK(strlen(ctstream_version()) > 0, "version");
  CHECK(strcmp(ctstream_status_name(CTSTREAM_OK), "ok") == 0, "status ok");
  CHECK(strcmp(ctstream_status_name(CTSTREAM_ERR_NOT_FOUND), "not_found") == 0, "status not_found");
  CHECK(strcmp(ctstream_status_name(CTSTREAM_ERR_CORRUPT_TENSOR), "corrupt_tensor") == 0, "status corrupt_tensor");
  CHECK(strcmp(ctstream_status_name(12345), "unknown_status") == 0, "unknown status");
  CHECK(strcmp(ctstream_dtype_name(CTSTREAM_BF16), "BF16") == 0, "BF16 name");
  CHECK(strcmp(ctstream_dtype_name(CTSTREAM_F8_E4M3), "F8_E4M3") == 0, "F8 name");
  CHECK(ctstream_dtype_bits(CTSTREAM_F4) == 4 && ctstream_dtype_bits(CTSTREAM_I64) == 64, "bits");
  ctstream_dtype d = CTSTREAM_BOOL;
  CHECK(ctstream_dtype_from_name("bfloat16", &d) == CTSTREAM_OK && d == CTSTREAM_BF16, "parse bfloat16");
  CHECK(ctstream_dtype_from_name("fp16", &d) == CTSTREAM_OK && d == CTSTREAM_F16, "parse fp16");
  CHECK(ctstream_dtype_from_name("u8", &d) == CTSTREAM_OK && d == CTSTREAM_U8, "parse u8");
  CHECK(ctstream_dtype_from_name("int3", &d) == CTSTREAM_ERR_UNKNOWN_DTYPE, "parse int3");
}

/* No two names handed out compare equal as C strings (a name with an embedded NUL would list as
 * its prefix, beside a real tensor of that name). */
static int names_distinct(const ctstream_checkpoint* ck) {
  const size_t n = ctstream_tensor_count(ck);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      ctstream_tensor_info a, b;
      if (ctstream_tensor_at(ck, i, &a) != CTSTREAM_OK || ctstream_tensor_at(ck, j, &b) != CTSTREAM_OK) return 0;
      if (strcmp(a.name, b.name) == 0) return 0;
    }
  return 1;
}

/* tests/fixtures/hostile/name_nul: "x\u0000evil" and "x" (safetensors 0.8 loads both) are
 * refused at open, in both io modes, naming the NUL. */
static void test_nul_names(const char* fixtures) {
  const char* cases[] = {"name_nul", "name_nul_only"};
  for (int c = 0; c < 2; ++c)
    for (int io = 0; io < 2; ++io) {
      char dir[4096];
      snprintf(dir, sizeof dir, "%s/hostile/%s", fixtures, cases[c]);
      ctstream_open_options o;
      ctstream_open_options_init(&o);
      o.io = io ? CTSTREAM_IO_PREAD : CTSTREAM_IO_MMAP;
      ctstream_checkpoint* ck = NULL;
      const int st = ctstream_open(dir, &o, &ck);
      CHECK(st == CTSTREAM_ERR_INVALID_HEADER && ck == NULL, "%s: status %s: %s", cases[c], ctstream_status_name(st),
            ctstream_last_error());
      CHECK(strstr(ctstream_last_error(), "NUL") != NULL, "%s: message says why: %s", cases[c], ctstream_last_error());
      if (st == CTSTREAM_OK) {
        CHECK(names_distinct(ck), "%s: two tensors with the same C-string name", cases[c]);
        ctstream_close(ck);
      }
    }
}

/* Options init (ABI 4): the inline init is sized by this program's compiler; init_sized writes
 * only the fields the given size holds (canaries after a 32-byte ABI 1-2 struct stay intact). */
static void test_options_init(const char* fixtures) {
  ctstream_open_options o;
  memset(&o, 0xA5, sizeof o);
  CHECK(ctstream_open_options_init(&o) == CTSTREAM_OK, "inline init");
  CHECK(o.struct_size == sizeof(ctstream_open_options) && o.stored_factors == 0 && o.io == CTSTREAM_IO_MMAP,
        "inline init: struct_size %u", o.struct_size);

  enum { kV2 = 32, kPad = 24 };
  union { /* aligned for the struct; the bytes after it are the canaries */
    ctstream_open_options o;
    unsigned char b[sizeof(ctstream_open_options) + kPad];
  } u;
  unsigned char* buf = u.b;
  const size_t buf_size = sizeof u.b;
  memset(buf, 0xA5, buf_size);
  ctstream_open_options* p = &u.o;
  CHECK(ctstream_open_options_init_sized(p, kV2) == CTSTREAM_OK, "init_sized(32): %s", ctstream_last_error());
  int intact = 1;
  for (size_t i = kV2; i < buf_size; ++i) intact &= buf[i] == 0xA5;
  CHECK(intact, "init_sized(32) wrote past 32 bytes");
  CHECK(p->struct_size == kV2 && p->max_header_bytes == o.max_header_bytes && p->max_json_bytes == o.max_json_bytes,
        "init_sized(32) filled the ABI 2 fields");
  char path[4096];
  snprintf(path, sizeof path, "%s/lowrank/fp32", fixtures);
  ctstream_checkpoint* ck = NULL;
  CHECK(ctstream_open(path, p, &ck) == CTSTREAM_OK, "open with a 32-byte struct: %s", ctstream_last_error());
  ctstream_close(ck);

  /* a size this library does not know (a newer header): only struct_size written, open refuses */
  memset(buf, 0xA5, buf_size);
  CHECK(ctstream_open_options_init_sized(p, sizeof(ctstream_open_options) + 8) == CTSTREAM_ERR_INVALID_ARGUMENT,
        "init_sized(unknown)");
  intact = 1;
  for (size_t i = sizeof(uint32_t); i < buf_size; ++i) intact &= buf[i] == 0xA5;
  CHECK(intact && p->struct_size == sizeof(ctstream_open_options) + 8, "init_sized(unknown) wrote only struct_size");
  ck = NULL;
  CHECK(ctstream_open(path, p, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "open refuses an unknown size");
  memset(buf, 0xA5, buf_size);
  CHECK(ctstream_open_options_init_sized(p, 3) == CTSTREAM_ERR_INVALID_ARGUMENT && buf[0] == 0xA5 && buf[2] == 0xA5,
        "init_sized(3) writes nothing");

  /* ABI 4-5's struct (48 bytes on LP64: up to module_classes_json) is filled and served as it is */
  const size_t v5 = offsetof(ctstream_open_options, file_alone);
  memset(buf, 0xA5, buf_size);
  CHECK(ctstream_open_options_init_sized(p, v5) == CTSTREAM_OK, "init_sized(%zu): %s", v5, ctstream_last_error());
  intact = 1;
  for (size_t i = v5; i < buf_size; ++i) intact &= buf[i] == 0xA5;
  CHECK(intact && p->struct_size == v5 && p->module_classes_json == NULL && p->stored_factors == 0,
        "init_sized(%zu) filled that layout and wrote nothing past it", v5);
  ck = NULL;
  CHECK(ctstream_open(path, p, &ck) == CTSTREAM_OK, "open with an ABI 5 struct: %s", ctstream_last_error());
  ctstream_close(ck);
}

/* ABI 6: stored_entries reads a checkpoint as plain safetensors (every entry its own tensor, as
 * stored); file_alone and stored_entries take 0 or 1. */
static void test_stored_entries(const char* fixtures) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ct/v020_pack_w4_g32_asym_bf16", fixtures);
  ctstream_open_options o;
  ctstream_open_options_init(&o);
  CHECK(o.file_alone == 0 && o.stored_entries == 0, "init: sibling shards read, logical tensors");
  ctstream_checkpoint *logical = NULL, *stored = NULL;
  CHECK(ctstream_open(path, &o, &logical) == CTSTREAM_OK, "open %s: %s", path, ctstream_last_error());
  o.stored_entries = 1;
  o.file_alone = 1;
  CHECK(ctstream_open(path, &o, &stored) == CTSTREAM_OK, "open stored entries: %s", ctstream_last_error());
  if (!logical || !stored) {
    ctstream_close(logical);
    ctstream_close(stored);
    return;
  }
  /* 17 entries in the file (its header), grouped into fewer logical tensors */
  CHECK(ctstream_tensor_count(stored) == 17 && ctstream_tensor_count(logical) < 17, "entries %zu, tensors %zu",
        ctstream_tensor_count(stored), ctstream_tensor_count(logical));
  ctstream_tensor_info t, w;
  CHECK(ctstream_find(stored, "model.layers.0.mlp.down_proj.weight_packed", &t) == CTSTREAM_OK &&
            strcmp(t.format, "dense") == 0 && t.dtype == CTSTREAM_I32 && t.num_parts == 1,
        "stored entry: weight_packed is a dense I32 tensor of its own");
  CHECK(ctstream_find(stored, "model.layers.0.mlp.down_proj.weight", &t) == CTSTREAM_ERR_NOT_FOUND,
        "stored entries have no logical weight");
  CHECK(ctstream_find(logical, "model.layers.0.mlp.down_proj.weight", &w) == CTSTREAM_OK && w.quantized == 1,
        "logical view: the quantized weight");
  ctstream_close(logical);
  ctstream_close(stored);
  ctstream_checkpoint* ck = NULL;
  ctstream_open_options_init(&o);
  o.file_alone = 2;
  CHECK(ctstream_open(path, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "file_alone 2");
  ctstream_open_options_init(&o);
  o.stored_entries = 7;
  CHECK(ctstream_open(path, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "stored_entries 7");
  CHECK(ctstream_open_options_init_sized(NULL, sizeof o) == CTSTREAM_ERR_INVALID_ARGUMENT, "init_sized(NULL)");
}

/* Every hostile case (tests/fixtures/hostile/manifest.tsv: case, kind, stage, tensor) in both io
 * modes: the expected status at the expected stage, a message naming the file, never a crash. */
static void test_hostile(const char* fixtures) {
  char path[4096];
  snprintf(path, sizeof path, "%s/hostile/manifest.tsv", fixtures);
  FILE* f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char name[512], kind[64], stage[16], tensor[4096];
    if (sscanf(line, "%511[^\t]\t%63[^\t]\t%15[^\t]\t%4095[^\n]", name, kind, stage, tensor) != 4) continue;
    ++n;
    for (int io = 0; io < 2; ++io) {
      char dir[8192];
      snprintf(dir, sizeof dir, "%s/hostile/%s", fixtures, name);
      ctstream_open_options o;
      ctstream_open_options_init(&o);
      o.io = io ? CTSTREAM_IO_PREAD : CTSTREAM_IO_MMAP;
      ctstream_checkpoint* ck = NULL;
      int st = ctstream_open(dir, &o, &ck);
      const int opened = st == CTSTREAM_OK;
      if (opened) CHECK(names_distinct(ck), "hostile %s: two tensors with the same C-string name", name);
      for (size_t i = 0; opened && st == CTSTREAM_OK && i < ctstream_tensor_count(ck); ++i) {
        ctstream_tensor_info t;
        st = ctstream_tensor_at(ck, i, &t);
        if (st != CTSTREAM_OK) break;
        if (strcmp(kind, "ok") != 0 && strcmp(tensor, "-") != 0 && strcmp(tensor, t.name) != 0) continue;
        st = ctstream_validate(ck, t.name);
        if (st != CTSTREAM_OK) break;
        const int is_float = t.dtype == CTSTREAM_F32 || t.dtype == CTSTREAM_F16 || t.dtype == CTSTREAM_BF16;
        const ctstream_dtype d = is_float || t.quantized ? CTSTREAM_F32 : t.dtype;
        uint64_t size = 0;
        st = ctstream_decoded_size(ck, t.name, d, NULL, &size);
        if (st != CTSTREAM_OK) break;
        void* buf = malloc(size ? size : 1);
        st = ctstream_decode_into(ck, t.name, buf, size, d, NULL, NULL);
        free(buf);
      }
      const char* got = ctstream_status_name(st);
      CHECK(strcmp(got, kind) == 0, "hostile %s (%s): status %s, want %s: %s", name, io ? "pread" : "mmap", got, kind,
            ctstream_last_error());
      CHECK(opened == (strcmp(stage, "decode") == 0), "hostile %s: refused at the wrong stage (%s)", name,
            ctstream_last_error());
      if (st != CTSTREAM_OK)
        CHECK(strstr(ctstream_last_error(), "/") != NULL, "hostile %s: message names no file", name);
      ctstream_close(ck);
    }
  }
  fclose(f);
  CHECK(n >= 80, "hostile cases read: %d", n);
}

static void test_low_rank(const char* fixtures) {
  char path[4096];
  snprintf(path, sizeof path, "%s/lowrank/fp32", fixtures);
  ctstream_checkpoint* ck = NULL;
  ctstream_tensor_info t;
  int rc = ctstream_open(path, NULL, &ck);
  CHECK(rc == CTSTREAM_OK, "open %s: %s", path, ctstream_last_error());
  if (rc != CTSTREAM_OK) return;
  CHECK(ctstream_find(ck, "fc1.weight", &t) == CTSTREAM_OK && strcmp(t.format, "low-rank") == 0 && t.ndim == 2 &&
            t.shape[0] == 96 && t.shape[1] == 64,
        "original view: fc1.weight is low-rank [96, 64]");
  CHECK(ctstream_find(ck, "fc1.0.weight", &t) == CTSTREAM_ERR_NOT_FOUND, "original view hides the factors");
  ctstream_close(ck);
  ctstream_open_options o;
  ctstream_open_options_init(&o);
  CHECK(o.stored_factors == 0, "default: original architecture");
  o.stored_factors = 1;
  rc = ctstream_open(path, &o, &ck);
  CHECK(rc == CTSTREAM_OK, "open stored: %s", ctstream_last_error());
  if (rc != CTSTREAM_OK) return;
  CHECK(ctstream_find(ck, "fc1.0.weight", &t) == CTSTREAM_OK && strcmp(t.format, "dense") == 0, "stored view");
  CHECK(ctstream_find(ck, "fc1.weight", &t) == CTSTREAM_ERR_NOT_FOUND, "stored view has no product");
  ctstream_close(ck);
  /* a caller built against ABI version 2 (struct without stored_factors) is still served */
  o.struct_size = (uint32_t)offsetof(ctstream_open_options, stored_factors);
  rc = ctstream_open(path, &o, &ck);
  CHECK(rc == CTSTREAM_OK && ctstream_find(ck, "fc1.weight", &t) == CTSTREAM_OK, "ABI 2 options struct");
  if (rc == CTSTREAM_OK) ctstream_close(ck);
  ctstream_open_options_init(&o);
  o.stored_factors = 2;
  CHECK(ctstream_open(path, &o, &ck) == CTSTREAM_ERR_INVALID_ARGUMENT && ck == NULL, "stored_factors 2");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  const char* fixtures = argv[1];
  test_basics();
  test_errors(fixtures);
  test_hostile(fixtures);
  test_nul_names(fixtures);
  test_options_init(fixtures);
  test_stored_entries(fixtures);
  test_low_rank(fixtures);
  test_class_targets(fixtures);

  char root[4096];
  snprintf(root, sizeof root, "%s/ct", fixtures);
  DIR* d = opendir(root);
  CHECK(d != NULL, "opendir %s", root);
  int cases = 0;
  while (d) {
    struct dirent* e = readdir(d);
    if (!e) break;
    if (e->d_name[0] == '.') continue;
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
    const ctstream_io_mode io = (cases % 2) ? CTSTREAM_IO_PREAD : CTSTREAM_IO_MMAP;
    compare_case(dir, "expected_bf16.safetensors", io, NULL);
    compare_case(dir, "expected_fp16.safetensors", io, NULL);
    compare_case(dir, "expected_fp32.safetensors", io, NULL);
    compare_case(dir, "expected.safetensors", io, NULL);
    test_slices(dir);
    ++cases;
  }
  if (d) closedir(d);
  CHECK(cases >= 60, "cases found: %d", cases);
  return CHECK_SUMMARY("c_abi");
}
