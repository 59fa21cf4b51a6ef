#include "writer/encode.hpp"

#include "writer/svd.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "codecs/encode.hpp"
#include "codecs/half.hpp"
#include "codecs/matmul.hpp"
#include "ctstream/error.hpp"

namespace ctstream::writer {
namespace {

using format::Role;

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<std::byte> shape_bytes(const Shape& s) { return bytes_of(std::vector<int64_t>(s.begin(), s.end())); }

}  // namespace

Encoded encode_quantized(const Item& it, const Resolved& r, const std::vector<float>& v, bool want_decoded,
                         const std::string& file) {
  const TensorInfo& t = *it.t;
  const uint64_t R = t.shape[0], C = t.shape[1], n = R * C;
  const QuantArgs& a = r.args;
  const ScaleForm form = scale_form(r.format);
  const auto qp =
      compute_qparams(v.data(), R, C, it.work, a, form,
                      a.strategy == QuantStrategy::tensor_group ? std::optional<float>(it.global_scale) : std::nullopt);
  // The library computes scales in the weight's dtype: a range wider than that dtype holds
  // (e.g. F16 values from -50000 to 30000, asymmetric) gives an infinite scale and a tensor
  // that decodes to NaN. Refuse it rather than write it.
  for (uint64_t i = 0; i < qp.scale.size(); ++i)
    if (!std::isfinite(qp.scale[i]) || !(qp.scale[i] > 0))
      throw Error(ErrorKind::invalid_argument, file, t.name,
                  "its value range overflows " + std::string(dtype_name(it.work)) + " when computing scale " +
                      std::to_string(i) + " (the library would write a scale of " + std::to_string(qp.scale[i]) +
                      " and decode NaN); quantize it from a wider dtype (--dtype float32) or leave the module out "
                      "(--ignore / ignore=)");
  std::vector<uint8_t> codes(n);
  quantize(v.data(), R, C, it.work, a, qp, codes.data());
  Encoded e;
  const uint64_t ns = qp.scale.size();
  std::vector<std::byte> scale(ns * 4);
  if (form == ScaleForm::e4m3_global) {
    for (uint64_t i = 0; i < ns; ++i) scale[i] = static_cast<std::byte>(codecs::f32_to_e4m3(qp.scale[i]));
    scale.resize(ns);
  } else if (form == ScaleForm::e8m0) {
    for (uint64_t i = 0; i < ns; ++i) scale[i] = static_cast<std::byte>(e8m0_byte(qp.scale[i]));
    scale.resize(ns);
  } else {
    codecs::store_floats(qp.scale.data(), ns, it.work, scale.data());
    scale.resize(ns * (dtype_bits(it.work) / 8));
  }
  e.parts[Role::weight_scale] = std::move(scale);
  std::vector<int8_t> zp;
  if (!a.symmetric)
    for (float z : qp.zero_point) zp.push_back(static_cast<int8_t>(z));
  switch (r.format) {
    case Format::pack_quantized:
      e.parts[Role::weight_packed] =
          bytes_of(codecs::pack_int32_rows(reinterpret_cast<const int8_t*>(codes.data()), R, C, a.num_bits));
      e.parts[Role::weight_shape] = shape_bytes(t.shape);
      if (!a.symmetric)  // group / channel: packed along rows (pack_to_int32(packed_dim=0))
        e.parts[Role::weight_zero_point] =
            a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::channel
                ? bytes_of(codecs::pack_int32_cols(zp.data(), qp.shape[0], qp.shape[1], a.num_bits))
                : bytes_of(zp);
      break;
    case Format::int_quantized:
    case Format::float_quantized:
    case Format::mxfp8_quantized:
      e.parts[Role::weight] = bytes_of(codes);
      if (!a.symmetric) e.parts[Role::weight_zero_point] = bytes_of(zp);
      break;
    case Format::nvfp4_pack_quantized:
    case Format::mxfp4_pack_quantized: {
      std::vector<uint8_t> packed(n / 2);
      codecs::pack_fp4(codes.data(), n, packed.data());
      e.parts[Role::weight_packed] = bytes_of(packed);
      if (form == ScaleForm::e4m3_global)
        e.parts[Role::weight_global_scale] = bytes_of(std::vector<float>{qp.global_scale});
      break;
    }
    default: throw Error(ErrorKind::internal, file, t.name, "encode_quantized: not a quantized format");
  }
  e.decoded_dtype = dequantized_dtype(form, it.work);
  // Decoded as the library decodes it: finite weights near the dtype's largest value can come
  // back as +-inf ((q - zp) * scale overflows, e.g. 2-bit codes of values near 3e38). Refuse
  // rather than write a tensor that decodes to something other than its input's magnitude.
  e.decoded.resize(n);
  dequantize(codes.data(), R, C, it.work, a, qp, e.decoded.data());
  for (uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(e.decoded[i]))
      throw Error(
          ErrorKind::invalid_argument, file, t.name,
          "element " + std::to_string(i) + " (" + std::to_string(v[i]) + ") lies so close to the largest " +
              std::string(dtype_name(it.work)) + " value that its " + r.scheme +
              " dequantization overflows to infinity; quantize it from a wider dtype (--dtype float32) or --ignore "
              "the module");
  if (!want_decoded) e.decoded = {};
  return e;
}

Encoded encode_sparse(const Item& it, const Resolved& r, const std::vector<float>& v, bool prune, bool want_decoded,
                      const std::string& file) {
  const TensorInfo& t = *it.t;
  const uint64_t R = t.shape[0], C = t.shape[1], n = R * C;
  const unsigned eb = dtype_bits(it.work) / 8;
  std::vector<std::byte> raw(n * eb);
  codecs::store_floats(v.data(), n, it.work, raw.data());
  Encoded e;
  e.decoded_dtype = it.work;
  std::vector<uint8_t> mask(R * ((C + 7) / 8));
  e.parts[Role::shape] = shape_bytes(t.shape);
  if (r.format == Format::sparse_bitmask) {
    const uint64_t nnz = codecs::count_nonzero(raw.data(), n, it.work);
    if (nnz != it.nnz)
      throw Error(ErrorKind::io, file, t.name,
                  "tensor changed while it was being compressed (non-zero count differs between passes)");
    std::vector<std::byte> values(nnz * eb);
    std::vector<int64_t> row_offsets(R);
    codecs::bitmask_compress(raw.data(), R, C, it.work, values.data(), mask.data(), row_offsets.data());
    e.parts[Role::compressed] = std::move(values);
    e.parts[Role::row_offsets] = bytes_of(row_offsets);
    if (want_decoded) {  // the library decodes zeros where nothing is stored
      e.decoded.resize(n);
      for (uint64_t i = 0; i < n; ++i) e.decoded[i] = (codecs::f32_bits(v[i]) & 0x7FFFFFFFu) ? v[i] : 0.f;
    }
  } else {
    std::vector<uint8_t> keep(n);
    e.pruned = codecs::mask_24(raw.data(), n, it.work, keep.data());
    if (e.pruned && !prune)
      throw Error(ErrorKind::invalid_argument, file, t.name,
                  "is not 2:4 sparse (" + std::to_string(e.pruned) +
                      " groups of 4 hold more than 2 non-zeros); pass --prune-24 to keep the 2 largest of every 4, as "
                      "compressed-tensors' compressor does");
    std::vector<std::byte> values(n / 2 * eb);
    codecs::sparse24_compress(raw.data(), R, C, it.work, keep.data(), values.data(), mask.data());
    e.parts[Role::compressed] = std::move(values);
    if (want_decoded) {
      e.decoded.resize(n);
      for (uint64_t i = 0; i < n; ++i) e.decoded[i] = keep[i] ? v[i] : 0.f;
    }
  }
  e.parts[Role::bitmask] = bytes_of(mask);
  return e;
}

Encoded encode_low_rank(const Item& it, const std::vector<float>& v, bool want_decoded, const std::string& file) {
  const TensorInfo& t = *it.t;
  const uint64_t rows = t.shape.at(0), cols = t.numel() / rows;  // a conv weight as [out, in * kh * kw]
  std::vector<float> a, b;
  truncated_factors(v.data(), rows, cols, it.rank, a, b, file, t.name);
  for (auto& x : a) x = round_to(it.work, x);
  for (auto& x : b) x = round_to(it.work, x);
  Encoded e;
  e.decoded_dtype = it.work;
  for (const auto* f : {&a, &b}) {
    std::vector<std::byte> bytes(f->size() * dtype_bits(it.work) / 8);
    codecs::store_floats(f->data(), f->size(), it.work, bytes.data());
    e.ordered.push_back(std::move(bytes));
  }
  if (want_decoded) {
    e.decoded.resize(rows * cols);
    codecs::matmul_f32(b.data(), a.data(), rows, it.rank, cols, e.decoded.data());
    for (auto& x : e.decoded) x = round_to(it.work, x);
  }
  return e;
}

void emit(const Item& it, const Encoded& e, SafetensorsWriter& w) {
  if (!e.ordered.empty()) {
    if (e.ordered.size() != it.out.size())
      throw Error(ErrorKind::internal, "", it.t->name, "encoder produced a different number of parts than planned");
    for (size_t i = 0; i < it.out.size(); ++i) {
      if (e.ordered[i].size() != it.out[i].bytes)
        throw Error(ErrorKind::internal, "", it.t->name,
                    "encoder produced " + std::to_string(e.ordered[i].size()) + " bytes of '" + it.out[i].key +
                        "', the plan says " + std::to_string(it.out[i].bytes) + " (please report)");
      w.write(e.ordered[i]);
    }
    return;
  }
  for (const OutEntry& o : it.out) {
    auto p = e.parts.find(o.role);
    if (p == e.parts.end() || p->second.size() != o.bytes)
      throw Error(ErrorKind::internal, "", it.t->name,
                  "encoder produced " +
                      (p == e.parts.end() ? std::string("no") : std::to_string(p->second.size()) + " bytes of") +
                      " part '" + std::string(format::role_name(o.role)) + "', the plan says " +
                      std::to_string(o.bytes) + " bytes (please report)");
    w.write(p->second);
  }
}

}  // namespace ctstream::writer
