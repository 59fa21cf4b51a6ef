// ctstream C ABI (include/ctstream.h) over the C++ API. Every entry point catches everything:
// no exception crosses the boundary; the message goes to a thread-local last-error string.
// The library exports the ABI 1-3 ctstream_open_options_init itself (below), in place of the
// header's static inline one.
#define CTSTREAM_C_ABI_IMPLEMENTATION
#include "ctstream.h"

#include <cstddef>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "ctstream/ctstream.hpp"

struct ctstream_checkpoint {
  ctstream::Checkpoint ck;
};

namespace {

thread_local std::string g_last_error;

ctstream_status fail(ctstream_status s, std::string msg) noexcept {
  try {
    g_last_error = std::move(msg);
  } catch (...) {
    // keep the previous message rather than throw out of a C function
  }
  return s;
}

// Runs `f` (returning ctstream_status) and turns every exception into a status + message.
template <class F>
ctstream_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const ctstream::Error& e) {
    return fail(static_cast<ctstream_status>(static_cast<int>(e.kind()) + 1), e.what());
  } catch (const std::bad_alloc&) {
    return fail(CTSTREAM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(CTSTREAM_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(CTSTREAM_ERR_INTERNAL, "internal error: unknown exception");
  }
}

constexpr int kNumDTypes = CTSTREAM_U64 + 1;
static_assert(static_cast<int>(ctstream::DType::U64) == CTSTREAM_U64, "dtype enums out of step");
static_assert(static_cast<int>(ctstream::DType::BF16) == CTSTREAM_BF16, "dtype enums out of step");
static_assert(static_cast<int>(ctstream::ErrorKind::corrupt_tensor) + 1 == CTSTREAM_ERR_CORRUPT_TENSOR,
              "status enum out of step with ctstream::ErrorKind");
static_assert(static_cast<int>(ctstream::ErrorKind::out_of_memory) + 1 == CTSTREAM_ERR_OUT_OF_MEMORY &&
                  static_cast<int>(ctstream::ErrorKind::internal) + 1 == CTSTREAM_ERR_INTERNAL &&
                  static_cast<int>(ctstream::ErrorKind::file_not_found) + 1 == CTSTREAM_ERR_FILE_NOT_FOUND,
              "status enum out of step with ctstream::ErrorKind");

// ctstream_open_options as ABI 1-2 laid it out (tests/c/abi_v2/ctstream.h): 32 bytes, ending
// before stored_factors (ABI 3); as ABI 4-5 laid it out: 48 bytes, ending before file_alone (ABI 6).
constexpr size_t kOptionsV2Size = offsetof(ctstream_open_options, stored_factors);
constexpr size_t kOptionsV3End = offsetof(ctstream_open_options, stored_factors) + sizeof(uint32_t);
constexpr size_t kOptionsV5Size = offsetof(ctstream_open_options, file_alone);
static_assert(kOptionsV2Size == 32 && kOptionsV5Size == 48 && sizeof(ctstream_open_options) == 56,
              "ctstream_open_options layout changed");
// The sizes this library reads, oldest first.
constexpr size_t kOptionsSizes[] = {kOptionsV2Size, kOptionsV5Size, sizeof(ctstream_open_options)};
bool known_options_size(size_t n) noexcept {
  return std::find(std::begin(kOptionsSizes), std::end(kOptionsSizes), n) != std::end(kOptionsSizes);
}

bool valid_dtype(int d) noexcept { return d >= 0 && d < kNumDTypes; }

// NUL-terminated copies of the library's names (string_views), built once.
const std::array<std::string, kNumDTypes>& dtype_names() {
  static const std::array<std::string, kNumDTypes> names = [] {
    std::array<std::string, kNumDTypes> a;
    for (int i = 0; i < kNumDTypes; ++i) a[i] = std::string(ctstream::dtype_name(static_cast<ctstream::DType>(i)));
    return a;
  }();
  return names;
}

const char* format_cstr(ctstream::Format f) {
  constexpr int n = static_cast<int>(ctstream::Format::low_rank) + 1;
  static const std::array<std::string, n> names = [] {
    std::array<std::string, n> a;
    for (int i = 0; i < n; ++i) a[i] = std::string(ctstream::format_name(static_cast<ctstream::Format>(i)));
    return a;
  }();
  const int i = static_cast<int>(f);
  return i >= 0 && i < n ? names[i].c_str() : "unknown";
}

void fill(const ctstream::TensorInfo& t, size_t index, ctstream_tensor_info* out) {
  out->name = t.name.c_str();
  out->ndim = static_cast<uint32_t>(t.shape.size());
  out->shape = t.shape.empty() ? nullptr : t.shape.data();
  out->dtype = static_cast<ctstream_dtype>(t.dtype);
  out->format = format_cstr(t.format);
  out->quantized = t.quantized ? 1 : 0;
  out->num_bits = t.quantized ? t.quant.num_bits : 0;
  out->group_size = t.quantized ? t.quant.group_size : 0;
  out->numel = t.numel();
  out->stored_bytes = t.stored_bytes();
  out->num_parts = static_cast<uint32_t>(t.parts.size());
  out->index = index;
}

std::optional<ctstream::Slice> to_slice(const ctstream_slice* s) {
  if (!s) return std::nullopt;
  return ctstream::Slice{s->dim, s->start, s->stop};
}

const ctstream::TensorInfo* tensor_at(const ctstream_checkpoint* c, size_t i) {
  auto ts = c->ck.tensors();
  if (i >= ts.size())
    throw ctstream::Error(
        ctstream::ErrorKind::not_found, "", "",
        "tensor index " + std::to_string(i) + " out of range (" + std::to_string(ts.size()) + " tensors)");
  return &ts[i];
}

}  // namespace

extern "C" {

const char* ctstream_version(void) { return ctstream::version_string; }

const char* ctstream_status_name(int status) {
  switch (status) {
    case CTSTREAM_OK: return "ok";
    case CTSTREAM_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case CTSTREAM_ERR_INTERNAL: return "internal";
    default: break;
  }
  if (status >= CTSTREAM_ERR_IO && status <= CTSTREAM_ERR_FILE_NOT_FOUND)
    return ctstream::error_kind_name(static_cast<ctstream::ErrorKind>(status - 1)).data();
  return "unknown_status";
}

const char* ctstream_last_error(void) { return g_last_error.c_str(); }

const char* ctstream_dtype_name(ctstream_dtype dtype) {
  if (!valid_dtype(dtype)) return "?";
  try {
    return dtype_names()[dtype].c_str();
  } catch (...) {
    return "?";
  }
}

uint32_t ctstream_dtype_bits(ctstream_dtype dtype) {
  return valid_dtype(dtype) ? ctstream::dtype_bits(static_cast<ctstream::DType>(dtype)) : 0;
}

ctstream_status ctstream_dtype_from_name(const char* name, ctstream_dtype* out) {
  if (!name || !out) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_dtype_from_name: NULL argument");
  return guarded([&] {
    auto d = ctstream::dtype_from_user(name);
    if (!d) return fail(CTSTREAM_ERR_UNKNOWN_DTYPE, std::string("unknown dtype '") + name + "'");
    *out = static_cast<ctstream_dtype>(*d);
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_open_options_init_sized(ctstream_open_options* o, size_t struct_size) {
  if (!o) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open_options_init_sized: NULL options");
  if (struct_size < sizeof(o->struct_size))
    return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open_options_init_sized: struct_size " +
                                                   std::to_string(struct_size) + " cannot hold struct_size");
  // Every write below stays inside the caller's struct_size bytes: the caller's struct may be an
  // older, shorter layout than this library's (ABI 1-2 ended before stored_factors).
  o->struct_size = static_cast<uint32_t>(std::min<size_t>(struct_size, UINT32_MAX));
  if (!known_options_size(struct_size))
    return fail(CTSTREAM_ERR_INVALID_ARGUMENT,
                "ctstream_open_options_init_sized: unknown struct_size " + std::to_string(struct_size) +
                    " (this library knows " + std::to_string(kOptionsV2Size) + ", " + std::to_string(kOptionsV5Size) +
                    " and " + std::to_string(sizeof(ctstream_open_options)) + ")");
  const ctstream::OpenOptions d;
  o->io = d.io == ctstream::IoMode::pread ? CTSTREAM_IO_PREAD : CTSTREAM_IO_MMAP;
  o->order = d.order == ctstream::Order::name ? CTSTREAM_ORDER_NAME : CTSTREAM_ORDER_FILE;
  o->threads = d.threads;
  o->max_header_bytes = d.max_header_bytes;
  o->max_json_bytes = d.max_json_bytes;
  if (struct_size >= kOptionsV5Size) {
    o->stored_factors = d.low_rank == ctstream::LowRank::stored ? 1 : 0;
    // the padding too, so a struct the caller memcmp()s or hashes is fully defined
    std::memset(reinterpret_cast<char*>(o) + kOptionsV3End, 0, struct_size - kOptionsV3End);
    o->module_classes_json = nullptr;
  }
  if (struct_size >= sizeof(ctstream_open_options)) {
    o->file_alone = d.sibling_shards ? 0 : 1;
    o->stored_entries = d.stored_entries ? 1 : 0;
  }
  return CTSTREAM_OK;
}

// ABI 1-3 exported this with the library's own sizeof, writing 8 bytes past the 32-byte struct
// of a program built against an ABI 1-2 header. ABI 3 was never released, so every program that
// calls this symbol has (or may have) the 32-byte layout: fill exactly that. Programs built
// against the ABI 4 header call ctstream_open_options_init_sized through the inline init instead.
CTSTREAM_API void ctstream_open_options_init(ctstream_open_options* o);
void ctstream_open_options_init(ctstream_open_options* o) { (void)ctstream_open_options_init_sized(o, kOptionsV2Size); }

ctstream_status ctstream_open(const char* path, const ctstream_open_options* options, ctstream_checkpoint** out) {
  if (out) *out = nullptr;
  if (!path || !out) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open: NULL path or out");
  return guarded([&] {
    ctstream::OpenOptions o;
    if (options) {
      // ABI version 1-2's struct ended before stored_factors, 4-5's before file_alone: still
      // accepted (the fields they lack keep their defaults).
      if (!known_options_size(options->struct_size))
        return fail(CTSTREAM_ERR_INVALID_ARGUMENT,
                    "ctstream_open: options->struct_size is " + std::to_string(options->struct_size) + ", expected " +
                        std::to_string(sizeof(ctstream_open_options)) + " (call ctstream_open_options_init first)");
      if (options->io != CTSTREAM_IO_MMAP && options->io != CTSTREAM_IO_PREAD)
        return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open: unknown io mode");
      if (options->order != CTSTREAM_ORDER_FILE && options->order != CTSTREAM_ORDER_NAME)
        return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open: unknown order");
      o.io = options->io == CTSTREAM_IO_PREAD ? ctstream::IoMode::pread : ctstream::IoMode::mmap;
      o.order = options->order == CTSTREAM_ORDER_NAME ? ctstream::Order::name : ctstream::Order::file;
      o.threads = options->threads;
      o.max_header_bytes = options->max_header_bytes;
      o.max_json_bytes = options->max_json_bytes;
      if (options->struct_size >= kOptionsV5Size) {
        if (options->stored_factors > 1)
          return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open: stored_factors must be 0 or 1");
        o.low_rank = options->stored_factors ? ctstream::LowRank::stored : ctstream::LowRank::original;
        if (options->module_classes_json)
          o.module_classes = ctstream::module_classes_from_json(options->module_classes_json, "module_classes_json");
      }
      if (options->struct_size >= sizeof(ctstream_open_options)) {
        if (options->file_alone > 1 || options->stored_entries > 1)
          return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_open: file_alone and stored_entries must be 0 or 1");
        o.sibling_shards = options->file_alone == 0;
        o.stored_entries = options->stored_entries == 1;
      }
    }
    *out = new ctstream_checkpoint{ctstream::Checkpoint::open(path, o)};
    return CTSTREAM_OK;
  });
}

void ctstream_close(ctstream_checkpoint* ckpt) { delete ckpt; }

size_t ctstream_tensor_count(const ctstream_checkpoint* ckpt) { return ckpt ? ckpt->ck.tensors().size() : 0; }

ctstream_status ctstream_tensor_at(const ctstream_checkpoint* ckpt, size_t i, ctstream_tensor_info* out) {
  if (!ckpt || !out) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_tensor_at: NULL argument");
  return guarded([&] {
    fill(*tensor_at(ckpt, i), i, out);
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_find(const ctstream_checkpoint* ckpt, const char* name, ctstream_tensor_info* out) {
  if (!ckpt || !name || !out) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_find: NULL argument");
  return guarded([&] {
    const ctstream::TensorInfo& t = ckpt->ck.at(name);
    fill(t, static_cast<size_t>(&t - ckpt->ck.tensors().data()), out);
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_part_at(const ctstream_checkpoint* ckpt, size_t tensor_index, uint32_t part,
                                 ctstream_part_info* out) {
  if (!ckpt || !out) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_part_at: NULL argument");
  return guarded([&] {
    const ctstream::TensorInfo& t = *tensor_at(ckpt, tensor_index);
    if (part >= t.parts.size())
      return fail(CTSTREAM_ERR_NOT_FOUND, "tensor '" + t.name + "': part " + std::to_string(part) + " out of range (" +
                                              std::to_string(t.parts.size()) + " parts)");
    const ctstream::TensorPart& p = t.parts[part];
    out->role = p.role.c_str();
    out->key = p.key.c_str();
    out->dtype = static_cast<ctstream_dtype>(p.dtype);
    out->ndim = static_cast<uint32_t>(p.shape.size());
    out->shape = p.shape.empty() ? nullptr : p.shape.data();
    out->nbytes = p.nbytes;
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_decoded_size(const ctstream_checkpoint* ckpt, const char* name, ctstream_dtype dtype,
                                      const ctstream_slice* slice, uint64_t* out_bytes) {
  if (!ckpt || !name || !out_bytes) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_decoded_size: NULL argument");
  if (!valid_dtype(dtype)) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_decoded_size: dtype out of range");
  return guarded([&] {
    *out_bytes = ckpt->ck.output_bytes(ckpt->ck.at(name), static_cast<ctstream::DType>(dtype), to_slice(slice));
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_decode_into(const ctstream_checkpoint* ckpt, const char* name, void* out, uint64_t out_size,
                                     ctstream_dtype dtype, const ctstream_slice* slice, uint64_t* written) {
  if (written) *written = 0;
  if (!ckpt || !name || (!out && out_size > 0))
    return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_decode_into: NULL argument");
  if (!valid_dtype(dtype)) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_decode_into: dtype out of range");
  return guarded([&] {
    const ctstream::TensorInfo& t = ckpt->ck.at(name);
    std::span<std::byte> buf(static_cast<std::byte*>(out), static_cast<size_t>(out_size));
    const uint64_t n = ckpt->ck.decode_into(t, buf, static_cast<ctstream::DType>(dtype), to_slice(slice));
    if (written) *written = n;
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_validate(const ctstream_checkpoint* ckpt, const char* name) {
  if (!ckpt || !name) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_validate: NULL argument");
  return guarded([&] {
    ckpt->ck.validate(ckpt->ck.at(name));
    return CTSTREAM_OK;
  });
}

ctstream_status ctstream_read_part(const ctstream_checkpoint* ckpt, size_t tensor_index, uint32_t part, void* out,
                                   uint64_t out_size, uint64_t* written) {
  if (written) *written = 0;
  if (!ckpt || (!out && out_size > 0)) return fail(CTSTREAM_ERR_INVALID_ARGUMENT, "ctstream_read_part: NULL argument");
  return guarded([&] {
    const ctstream::TensorInfo& t = *tensor_at(ckpt, tensor_index);
    if (part >= t.parts.size())
      return fail(CTSTREAM_ERR_NOT_FOUND, "tensor '" + t.name + "': part " + std::to_string(part) + " out of range");
    const ctstream::TensorPart& p = t.parts[part];
    if (out_size < p.nbytes)
      return fail(CTSTREAM_ERR_BUFFER_TOO_SMALL, "tensor '" + t.name + "' part '" + p.role + "': needs " +
                                                     std::to_string(p.nbytes) + " bytes, buffer holds " +
                                                     std::to_string(out_size));
    std::span<std::byte> buf(static_cast<std::byte*>(out), static_cast<size_t>(out_size));
    const uint64_t n = ckpt->ck.read_part(p, buf);
    if (written) *written = n;
    return CTSTREAM_OK;
  });
}

}  // extern "C"
