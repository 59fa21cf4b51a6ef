/* ctstream — C ABI: open a compressed-tensors / safetensors checkpoint, list its tensors, decode
 * each into memory the caller owns.
 *
 *   ctstream_checkpoint* ck = NULL;
 *   if (ctstream_open("model_dir", NULL, &ck) != CTSTREAM_OK) { puts(ctstream_last_error()); ... }
 *   size_t n = ctstream_tensor_count(ck);
 *   for (size_t i = 0; i < n; ++i) {
 *     ctstream_tensor_info t;
 *     ctstream_tensor_at(ck, i, &t);
 *     uint64_t bytes = 0;
 *     ctstream_decoded_size(ck, t.name, CTSTREAM_BF16, NULL, &bytes);
 *     void* buf = malloc(bytes);
 *     ctstream_decode_into(ck, t.name, buf, bytes, CTSTREAM_BF16, NULL, NULL);
 *   }
 *   ctstream_close(ck);
 *
 * Conventions:
 *  - Every function that can fail returns a ctstream_status (CTSTREAM_OK == 0); no C++ exception
 *    ever crosses this boundary. On failure, ctstream_last_error() returns the message of the
 *    last failing call made on the calling thread (valid until that thread's next failing call).
 *  - A ctstream_checkpoint may be used from several threads at once; ctstream_close must not
 *    race with any other call on the same handle.
 *  - Strings and arrays inside ctstream_tensor_info / ctstream_part_info point into the
 *    checkpoint and stay valid until ctstream_close. Names are NUL-free: a checkpoint with a
 *    tensor name holding an escaped NUL ("x\u0000y") is refused at open (invalid_header), so two
 *    names handed out never compare equal. No pointer into a mapped file is ever handed out:
 *    data leaves only by copy (ctstream_decode_into, ctstream_read_part). A file found truncated
 *    by another process before a call touches it is CTSTREAM_ERR_TRUNCATED. In the default mmap
 *    mode a truncation racing a decode that is already reading the mapping can still raise
 *    SIGBUS, as with any memory-mapped reader. Where other processes may truncate the files,
 *    open with io = CTSTREAM_IO_PREAD: every byte is then read with pread, and a shrunk file is
 *    CTSTREAM_ERR_TRUNCATED in every case.
 *  - Struct evolution (a library newer than the header a program was built with must never
 *    write past the program's struct): input structs start with `struct_size` and are filled by
 *    a static inline _init, sized by the caller's compiler; the library reads only the fields
 *    that size holds. Output structs (ctstream_tensor_info, ctstream_part_info, ctstream_slice)
 *    never grow: a new field means a new struct and new functions.
 */
#ifndef CTSTREAM_H
#define CTSTREAM_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define CTSTREAM_API
#elif defined(__GNUC__)
#define CTSTREAM_API __attribute__((visibility("default")))
#else
#define CTSTREAM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define CTSTREAM_C_ABI_VERSION 6

/** Result of every fallible call. The non-zero values mirror ctstream::ErrorKind, plus the last
 *  two for faults that only the C boundary has. */
typedef enum ctstream_status {
  CTSTREAM_OK = 0,
  CTSTREAM_ERR_IO = 1,                /**< the OS refused an open/stat/read/write */
  CTSTREAM_ERR_TRUNCATED = 2,         /**< a file is shorter than its header says */
  CTSTREAM_ERR_HEADER_TOO_LARGE = 3,  /**< header length over the limit or past the file end */
  CTSTREAM_ERR_INVALID_HEADER = 4,    /**< header/index/config JSON malformed */
  CTSTREAM_ERR_UNKNOWN_DTYPE = 5,     /**< a dtype string this build does not know */
  CTSTREAM_ERR_INVALID_OFFSETS = 6,   /**< data_offsets overlap, leave gaps or point past the end */
  CTSTREAM_ERR_OVERFLOW = 7,          /**< a shape product or byte count overflows 64 bits */
  CTSTREAM_ERR_SIZE_MISMATCH = 8,     /**< stored byte count disagrees with dtype x shape */
  CTSTREAM_ERR_INVALID_SHARD = 9,     /**< a shard name escapes the checkpoint directory */
  CTSTREAM_ERR_MISSING_SHARD = 10,    /**< an index names a shard file that does not exist */
  CTSTREAM_ERR_NOT_FOUND = 11,        /**< no tensor of that name (or index out of range) */
  CTSTREAM_ERR_BUFFER_TOO_SMALL = 12, /**< the output buffer is smaller than the decoded tensor */
  CTSTREAM_ERR_UNSUPPORTED = 13,      /**< a valid request this build cannot serve */
  CTSTREAM_ERR_INVALID_ARGUMENT = 14, /**< an argument is out of range or NULL where not allowed */
  CTSTREAM_ERR_INVALID_CONFIG = 15,   /**< config.json quantization/sparsity settings malformed */
  CTSTREAM_ERR_CORRUPT_TENSOR = 16,   /**< a compressed tensor's parts contradict each other */
  CTSTREAM_ERR_OUT_OF_MEMORY = 17,    /**< an allocation failed */
  CTSTREAM_ERR_INTERNAL = 18,         /**< any other failure (a bug: please report it) */
  CTSTREAM_ERR_FILE_NOT_FOUND = 19    /**< the path to open does not exist (ABI version 2), or holds no checkpoint: a
                                            directory or prefix with no *.safetensors and no index (ABI version 5;
                                            CTSTREAM_ERR_NOT_FOUND before) */
} ctstream_status;

/** Element types; same order and names as safetensors (and ctstream::DType). */
typedef enum ctstream_dtype {
  CTSTREAM_BOOL = 0,
  CTSTREAM_F4,
  CTSTREAM_F6_E2M3,
  CTSTREAM_F6_E3M2,
  CTSTREAM_U8,
  CTSTREAM_I8,
  CTSTREAM_F8_E5M2,
  CTSTREAM_F8_E4M3,
  CTSTREAM_F8_E8M0,
  CTSTREAM_F8_E4M3FNUZ,
  CTSTREAM_F8_E5M2FNUZ,
  CTSTREAM_I16,
  CTSTREAM_U16,
  CTSTREAM_F16,
  CTSTREAM_BF16,
  CTSTREAM_I32,
  CTSTREAM_U32,
  CTSTREAM_F32,
  CTSTREAM_C64,
  CTSTREAM_F64,
  CTSTREAM_I64,
  CTSTREAM_U64,
  /* not dtypes: they make the enum span every int, so any value passed in is checked, not UB */
  CTSTREAM_DTYPE_INVALID_ = -1,
  CTSTREAM_DTYPE_MAX_ = 0x7FFFFFFF
} ctstream_dtype;

typedef enum ctstream_io_mode {
  CTSTREAM_IO_MMAP = 0,
  CTSTREAM_IO_PREAD = 1,
  CTSTREAM_IO_INVALID_ = -1,
  CTSTREAM_IO_MAX_ = 0x7FFFFFFF
} ctstream_io_mode;
typedef enum ctstream_order {
  CTSTREAM_ORDER_FILE = 0,
  CTSTREAM_ORDER_NAME = 1,
  CTSTREAM_ORDER_INVALID_ = -1,
  CTSTREAM_ORDER_MAX_ = 0x7FFFFFFF
} ctstream_order;

/** Options of ctstream_open. Fill with ctstream_open_options_init, then change fields. */
typedef struct ctstream_open_options {
  uint32_t struct_size;      /**< the caller's sizeof(ctstream_open_options), set by _init */
  ctstream_io_mode io;       /**< mmap (default) or pread (network filesystems) */
  ctstream_order order;      /**< iteration order of ctstream_tensor_at */
  uint32_t threads;          /**< threads used to decode one large tensor; 0 = all cores; at most 1024 */
  uint64_t max_header_bytes; /**< largest safetensors JSON header accepted */
  uint64_t max_json_bytes;   /**< largest index / config.json accepted */
  /** A low-rank checkpoint (ptdeco decompose_config.json): 0 (default) presents the original
   *  architecture (format "low-rank", m.weight = m.1.weight @ m.0.weight); 1 the factors as stored.
   *  (ABI version 3; a struct_size of version 2, without this field, is still accepted.) */
  uint32_t stored_factors;
  /** ABI 4: the model's module classes, for config groups that target class names ("Linear",
   *  "Embedding", ...): JSON text of an object module name -> list of class names (its class and
   *  base classes, as compressed-tensors matches them), copied at open. NULL (default): unknown;
   *  a module the stored parts cannot assign to one class-name group is then refused. */
  const char* module_classes_json;
  /** ABI 6: 1 = a file an index beside it names (one shard of a saved model) is read alone: a
   *  module the save cut between shards is then an error. 0 (default): the parts of its modules
   *  stored in other shards are read from them, and the file lists the tensors whose values it
   *  stores (OpenOptions::sibling_shards). */
  uint32_t file_alone;
  /** ABI 6: 1 = every stored entry as a tensor of its own under its own key, as safetensors lists
   *  them (weight_packed, weight_scale, ... not grouped; config.json, decompose_config.json and
   *  sibling shards are not read). 0 (default): the logical tensors (OpenOptions::stored_entries). */
  uint32_t stored_entries;
} ctstream_open_options;

/** Half-open range [start, stop) along dimension `dim` (a tensor-parallel shard). A `stop`
 *  beyond the dimension is clamped to it (UINT64_MAX = to the end). */
typedef struct ctstream_slice {
  uint32_t dim;
  uint64_t start;
  uint64_t stop;
} ctstream_slice;

/** Metadata of one logical tensor (no data). */
typedef struct ctstream_tensor_info {
  const char* name; /**< logical name, e.g. "model.layers.0.mlp.down_proj.weight" */
  uint32_t ndim;
  const uint64_t* shape; /**< ndim entries (NULL when ndim == 0) */
  ctstream_dtype dtype;  /**< natural decoded dtype (what compressed-tensors returns) */
  const char* format;    /**< compressed-tensors format name: "dense", "pack-quantized", ...; "low-rank" (ABI 3) */
  int quantized;         /**< 1 when the tensor is stored quantized */
  uint32_t num_bits;     /**< quantized: bits per weight code, else 0 */
  uint64_t group_size;   /**< quantized group / tensor_group strategies, else 0 */
  uint64_t numel;        /**< elements of the logical tensor */
  uint64_t stored_bytes; /**< bytes on disk over all parts */
  uint32_t num_parts;    /**< stored safetensors entries (see ctstream_part_at) */
  size_t index;          /**< position in iteration order (for ctstream_part_at) */
} ctstream_tensor_info;

/** One stored safetensors entry of a logical tensor (keep-packed passthrough). */
typedef struct ctstream_part_info {
  const char* role; /**< "weight", "weight_packed", "weight_scale", "bitmask", ... */
  const char* key;  /**< full key in the file */
  ctstream_dtype dtype;
  uint32_t ndim;
  const uint64_t* shape;
  uint64_t nbytes;
} ctstream_part_info;

/** Library version (CMake project version, e.g. "0.2.0"); the ABI is CTSTREAM_C_ABI_VERSION. */
CTSTREAM_API const char* ctstream_version(void);
/** Stable lower-case name of a status ("ok", "not_found", ...). */
CTSTREAM_API const char* ctstream_status_name(int status);
/** Message of the last failing call on this thread ("" if none failed yet). Never NULL. */
CTSTREAM_API const char* ctstream_last_error(void);

/** safetensors spelling of a dtype ("BF16"); "?" for a value out of range. */
CTSTREAM_API const char* ctstream_dtype_name(ctstream_dtype dtype);
/** Bits of one element (4 for F4, 6 for F6 types); 0 for a value out of range. */
CTSTREAM_API uint32_t ctstream_dtype_bits(ctstream_dtype dtype);
/** Parses "bf16", "bfloat16", "fp16", "float32", "F8_E4M3", ... (case-insensitive). */
CTSTREAM_API ctstream_status ctstream_dtype_from_name(const char* name, ctstream_dtype* out);

/** Fills the first `struct_size` bytes of *options with the defaults, struct_size included:
 *  only the fields a struct of that size holds: 32 bytes (ABI 1-2), 48 (ABI 4-5, on LP64: up to
 *  module_classes_json), or sizeof(ctstream_open_options) of this header (ABI 6: 56 bytes on LP64;
 *  ABI 3 was never released). An unknown size
 *  (a header newer than this library) writes only struct_size, which ctstream_open then refuses;
 *  under 4 bytes nothing is written. (ABI version 4.) */
CTSTREAM_API ctstream_status ctstream_open_options_init_sized(ctstream_open_options* options, size_t struct_size);

#ifndef CTSTREAM_C_ABI_IMPLEMENTATION
/** Fills *options with the defaults. Inline (ABI version 4), so sizeof is the one of the header
 *  the program was built with: a newer library never writes past the program's struct. (The
 *  exported function of the same name, kept for programs built against ABI 1-3 headers, fills
 *  only the 32-byte layout of ABI 1-2 and sets struct_size to 32.) */
static inline ctstream_status ctstream_open_options_init(ctstream_open_options* options) {
  return ctstream_open_options_init_sized(options, sizeof *options);
}
#endif

typedef struct ctstream_checkpoint ctstream_checkpoint;

/** Opens a .safetensors file or a checkpoint directory (index, shards, config.json), local or at
 *  an s3:// or http(s):// URL (builds with remote support; credentials from the AWS_* variables
 *  and ~/.aws, never in a message).
 *  `options` may be NULL (defaults). On success *out holds a handle for ctstream_close. */
CTSTREAM_API ctstream_status ctstream_open(const char* path, const ctstream_open_options* options,
                                           ctstream_checkpoint** out);
/** Releases the handle (NULL is allowed). */
CTSTREAM_API void ctstream_close(ctstream_checkpoint* ckpt);

/** Number of logical tensors. */
CTSTREAM_API size_t ctstream_tensor_count(const ctstream_checkpoint* ckpt);
/** Metadata of the i-th tensor in iteration order. */
CTSTREAM_API ctstream_status ctstream_tensor_at(const ctstream_checkpoint* ckpt, size_t i, ctstream_tensor_info* out);
/** Metadata of a tensor by logical name (CTSTREAM_ERR_NOT_FOUND when absent). */
CTSTREAM_API ctstream_status ctstream_find(const ctstream_checkpoint* ckpt, const char* name,
                                           ctstream_tensor_info* out);
/** Stored part `part` of the tensor at iteration position `tensor_index`. */
CTSTREAM_API ctstream_status ctstream_part_at(const ctstream_checkpoint* ckpt, size_t tensor_index, uint32_t part,
                                              ctstream_part_info* out);

/** Bytes ctstream_decode_into writes for `name` in `dtype` (of `slice`, which may be NULL). */
CTSTREAM_API ctstream_status ctstream_decoded_size(const ctstream_checkpoint* ckpt, const char* name,
                                                   ctstream_dtype dtype, const ctstream_slice* slice,
                                                   uint64_t* out_bytes);
/** Decodes tensor `name` (or the slice of it; `slice` may be NULL) into out[0, out_size) as
 *  `dtype`, C-contiguous. Compressed tensors and floating tensors (F64, F32, F16, BF16, F8_*,
 *  F4; not F6) convert to F32/F16/BF16 (round-to-nearest-even); an integer or bool tensor needs
 *  dtype == its natural dtype (CTSTREAM_ERR_UNSUPPORTED otherwise, unlike Python's dtype=, which
 *  returns such a tensor as stored). `written` (may be NULL) receives the byte count. Bytes of
 *  `out` past that are left untouched. */
CTSTREAM_API ctstream_status ctstream_decode_into(const ctstream_checkpoint* ckpt, const char* name, void* out,
                                                  uint64_t out_size, ctstream_dtype dtype, const ctstream_slice* slice,
                                                  uint64_t* written);
/** Runs every check ctstream_decode_into would run on `name`'s stored data (mask popcounts,
 *  row offsets, act-order indices, a file truncated since open, ...) without decoding it or
 *  allocating anything its size: check a tensor before sizing a buffer for it. (ABI version 2.) */
CTSTREAM_API ctstream_status ctstream_validate(const ctstream_checkpoint* ckpt, const char* name);
/** Copies the raw stored bytes of one part (keep-packed passthrough) into out[0, out_size). */
CTSTREAM_API ctstream_status ctstream_read_part(const ctstream_checkpoint* ckpt, size_t tensor_index, uint32_t part,
                                                void* out, uint64_t out_size, uint64_t* written);

#ifdef __cplusplus
}
#endif
#endif /* CTSTREAM_H */
