// reader — decoders of the compressed-tensors formats, one row at a time. Layouts and
// arithmetic: tests/fixtures/gen/DECODE_NOTES.md (each statement cites the library source);
// the kernels themselves are in src/codecs.
#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <optional>

#include "codecs/convert.hpp"
#include "codecs/half.hpp"
#include "codecs/kernels.hpp"
#include "codecs/minifloat.hpp"
#include "core/packing.hpp"
#include "format/format_table.hpp"
#include "reader/rows.hpp"

namespace ctstream::reader {
namespace {

using codecs::DequantSpec;

// int4 codes are offset-binary: value = u - 8 (pack_quantized/helpers.py `unpack_from_int32`).
constexpr std::array<float, 16> kInt4Lut = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
const std::array<float, 16>& e2m1_lut() {
  static const std::array<float, 16> t = [] {
    std::array<float, 16> a{};
    for (unsigned i = 0; i < 16; ++i) a[i] = codecs::e2m1_to_f32(static_cast<uint8_t>(i));
    return a;
  }();
  return t;
}
const std::array<float, 256>& e4m3_lut() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (unsigned i = 0; i < 256; ++i) a[i] = codecs::e4m3_to_f32(static_cast<uint8_t>(i));
    return a;
  }();
  return t;
}

using format::Role;

const TensorPart& need_part(const Checkpoint::Impl& ck, const DecodePlan& plan, Role role) {
  if (const TensorPart* p = plan.part(role)) return *p;
  fail(ck, *plan.t, ErrorKind::corrupt_tensor, "missing part '" + std::string(format::role_name(role)) + "'");
}

// Exact f32 image of one stored scalar of a scale / zero-point / quantized-value part (the format
// table admits no dtype stored_to_f32 does not read).
float to_f32(DType d, const std::byte* p, bool e8m0) {
  return codecs::stored_to_f32(d, reinterpret_cast<const uint8_t*>(p), e8m0);
}

// Scales and zero points of a quantized weight, per row (compressed_tensors/quantization/
// lifecycle/forward.py: tensor / channel / group / block mapping).
class Scales {
 public:
  Scales(const Checkpoint::Impl& ck, const DecodePlan& plan) : ck_(ck), t_(*plan.t) {
    const format::Geometry& geo = plan.geo;
    scale_ = &need_part(ck, plan, Role::weight_scale);
    e8m0_ = plan.e8m0_scale;
    ssz_ = dtype_bits(scale_->dtype) / 8;
    G_ = geo.scale.cols, gs_ = geo.scale.group_size, row_div_ = geo.scale.row_div, scale_rows_ = geo.scale.rows;
    assert(scale_->nbytes == scale_rows_ * G_ * ssz_);  // the format table checked it at open
    if (const TensorPart* gsp = plan.part(Role::weight_global_scale)) {
      std::vector<std::byte> b(4);
      ck.file_of(*gsp).read_at(gsp->offset, b);
      std::memcpy(&global_, b.data(), 4);
      has_global_ = true;
    }
    if (ssz_ == 1) {  // E4M3, E8M0, U8: the 256 values a scale can take, each divided as below
      byte_table_.resize(256);
      for (unsigned v = 0; v < 256; ++v) {
        const std::byte u[4] = {static_cast<std::byte>(v)};  // (to_f32 reads one byte of it)
        const float x = to_f32(scale_->dtype, u, e8m0_);
        byte_table_[v] = has_global_ ? x / global_ : x;
      }
    }
    zp_packing_ = geo.zp;
    if (const TensorPart* zp = plan.part(Role::weight_zero_point)) load_zp(*zp, geo.rows);
  }
  uint64_t group_size() const { return gs_; }
  /// Scale-entry offset of column c0 when a window starting there keeps the group mapping
  /// (j / group_size relative to c0): c0 on a group boundary, or one group per row.
  std::optional<uint64_t> window_offset(uint64_t c0, uint64_t cols) const {
    if (gs_ >= cols) return 0;
    if (c0 % gs_ == 0) return c0 / gs_;
    return std::nullopt;
  }
  const float* row(uint64_t r, std::vector<float>& f, ReadWindow& scratch) const {
    const uint64_t sr = r / row_div_;
    auto b = ck_.bytes(*scale_, sr * G_ * ssz_, G_ * ssz_, scratch, /*windowed=*/true);
    f.resize(G_);
    // nvfp4: the stored global scale divides (nvfp4/base.py, forward_helpers.py `_dequantize`:
    // scale.to(bf16) / global_scale in f32; fp8 -> bf16 is exact).
    if (!byte_table_.empty()) {
      const auto* p = reinterpret_cast<const uint8_t*>(b.data());
      for (uint64_t g = 0; g < G_; ++g) f[g] = byte_table_[p[g]];
    } else {
      codecs::stored_row_to_f32(scale_->dtype, b.data(), G_, e8m0_, f.data());
      if (has_global_)
        for (float& v : f) v = v / global_;
    }
    return f.data();
  }
  const float* zp_row(uint64_t r) const { return zp_.empty() ? nullptr : zp_.data() + (r / row_div_) * G_; }

 private:
  void load_zp(const TensorPart& zp, uint64_t rows) {
    std::vector<std::byte> raw(zp.nbytes);  // as large as the scales at most (format table)
    ck_.file_of(zp).read_at(zp.offset, raw);
    zp_.resize(scale_rows_ * G_);
    if (zp.dtype != DType::I32) {  // unpacked, one per scale entry
      const size_t esz = dtype_bits(zp.dtype) / 8;
      assert(zp.nbytes == zp_.size() * esz);
      // The library subtracts in the scale's dtype S (forward.py `_dequantize`: x_q.to(S) -
      // zp.to(S)): a float zero point is first rounded to S (a no-op for integer ones and fp8).
      for (uint64_t i = 0; i < zp_.size(); ++i)
        zp_[i] = codecs::f32_from_bits(
            codecs::round_to(codecs::f32_bits(to_f32(zp.dtype, raw.data() + i * esz, false)), t_.dtype));
      return;
    }
    // Packed along rows (pack_to_int32(packed_dim=0)), one 2-D slice of the weight at a time
    // (MoE experts): column g of each slice is a code stream over that slice's rows. The format
    // table says where (Geometry::zp); group / channel only, so scale rows = rows.
    const unsigned b = t_.quant.num_bits;
    const bool dense = !t_.quant.legacy_packing;
    const format::ZeroPointPacking& pk = zp_packing_;
    const uint64_t slice_rows = std::min(pk.slice_rows, rows);
    assert(rows == scale_rows_ && (slice_rows == 0 || rows % slice_rows == 0));
    assert(zp.nbytes == (slice_rows == 0 ? 0 : rows / slice_rows) * pk.words * G_ * 4);
    std::vector<uint8_t> col(pk.words * 4);
    std::vector<float> vals(slice_rows);
    for (uint64_t r0 = 0; r0 < rows; r0 += slice_rows) {
      for (uint64_t g = 0; g < G_; ++g) {
        const uint64_t at = pk.column_byte(r0, g, G_);
        for (uint64_t k = 0; k < pk.words; ++k) std::memcpy(&col[4 * k], raw.data() + at + k * G_ * 4, 4);
        codecs::unpack_int_row(col.data(), b, dense, slice_rows, vals.data());
        for (uint64_t r = 0; r < slice_rows; ++r) zp_[(r0 + r) * G_ + g] = vals[r];
      }
    }
  }
  const Checkpoint::Impl& ck_;
  const TensorInfo& t_;
  const TensorPart* scale_;
  bool e8m0_ = false, has_global_ = false;
  float global_ = 1.f;
  std::vector<float> byte_table_;  ///< one-byte scales: the value (over the global scale) of each byte
  uint64_t ssz_ = 2, G_ = 1, gs_ = 1, row_div_ = 1, scale_rows_ = 1;
  std::vector<float> zp_;
  format::ZeroPointPacking zp_packing_;
};

// The fused 8-bit kernel's code type for values of dtype `d`, where that kernel applies: int8 or
// fp8 E4M3 codes, zero points only when the subtraction is exact (integer ones).
std::optional<codecs::ByteCode> fused_byte_code(DType d, const float* zp, const DequantSpec& spec) {
  if (zp && !spec.int_values) return std::nullopt;
  if (d == DType::I8) return codecs::ByteCode::i8;
  if (d == DType::F8_E4M3) return codecs::ByteCode::e4m3;
  return std::nullopt;
}
// A tensor's arithmetic `spec`, with or without non-temporal stores (RowDecoder::row's `stream`).
DequantSpec with_stream(DequantSpec spec, bool stream) {
  spec.stream = stream;
  return spec;
}
// Block-quantized weights repeat each row's scales block_rows times (DecodePlan::rows_repeat_scales):
// the 8-bit kernel is then offered the calling thread's table memo (it keys every table it keeps,
// so one memo serves all).
void* byte_memo(bool wanted) {
  if (!wanted) return nullptr;
  thread_local std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);  // zeroed: every slot empty
  return memo.data();
}

// Shared by every quantized format: the main stored part, its scales, and the two ways a row
// is finished — the fused 4-bit kernel, or f32 values through the generic dequant kernel.
class ScaledDecoder : public RowDecoder {
 protected:
  ScaledDecoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out)
      : ck_(ck),
        main_(need_part(ck, plan, format::facts(plan.t->format).main)),
        scales_(ck, plan),
        cols_(plan.geo.cols),
        spec_(plan.dequant(out)),
        memo_(plan.rows_repeat_scales),
        k_(codecs::active_kernels()) {
    [[maybe_unused]] const format::Geometry& g = plan.geo;
    assert(main_.nbytes >= g.rows * (g.row_bytes ? g.row_bytes : g.cols * (dtype_bits(main_.dtype) / 8)));
  }

  // Quantized formats read their parts through read windows in mmap mode too: copying the
  // packed input into a per-thread window costs less than mapping its page-cache pages, which
  // does not scale across threads (A/B in bench/RESULTS.md, "Reading compressed parts").
  bool windowed() const override { return true; }

  // Columns [c0, c1) of row r from 4-bit codes (byte m: column 2m low nibble) whose row starts
  // at byte `row_off` of the main part. False when c0 is not on a byte and group boundary.
  bool nibbles(uint64_t r, uint64_t row_off, uint64_t c0, uint64_t c1, const float* lut, std::byte* out,
               bool stream) const {
    const auto goff = scales_.window_offset(c0, cols_);
    if (c0 % 2 || !goff) return false;
    thread_local ReadWindow sw, ss;
    thread_local std::vector<float> sf;
    auto w = ck_.bytes(main_, row_off + c0 / 2, (c1 - c0 + 1) / 2, sw, /*windowed=*/true);
    const float* zp = scales_.zp_row(r);
    k_.dequant_nibble(reinterpret_cast<const uint8_t*>(w.data()), c1 - c0, lut, scales_.row(r, sf, ss) + *goff,
                      zp ? zp + *goff : nullptr, with_stream(spec_, stream), out);
    return true;
  }
  // n 8-bit codes (int8 / fp8 E4M3) of row r starting at a column whose scale entry is `goff`:
  // the fused kernel where it applies (no act-order, zero points only integer ones), else false.
  bool byte_codes(uint64_t r, const std::byte* codes, DType code_dtype, uint64_t n, uint64_t goff, std::byte* out,
                  bool stream) const {
    const float* zp = scales_.zp_row(r);
    const auto code = fused_byte_code(code_dtype, zp, spec_);
    if (!code) return false;
    thread_local ReadWindow ss;
    thread_local std::vector<float> sf;
    k_.dequant_byte(reinterpret_cast<const uint8_t*>(codes), n, *code, scales_.row(r, sf, ss) + goff,
                    zp ? zp + goff : nullptr, with_stream(spec_, stream), byte_memo(memo_), out);
    return true;
  }
  // n f32 values of row r starting at a column whose scale entry is `goff`.
  void dequant(uint64_t r, const float* x, uint64_t n, uint64_t goff, const int32_t* gidx, std::byte* out,
               bool stream) const {
    thread_local ReadWindow ss;
    thread_local std::vector<float> sf;
    const float* zp = scales_.zp_row(r);
    codecs::dequant_f32_row(x, n, scales_.row(r, sf, ss) + goff, zp ? zp + goff : nullptr, gidx,
                            with_stream(spec_, stream), k_.isa, out);
  }

  const Checkpoint::Impl& ck_;
  const TensorPart& main_;
  Scales scales_;
  uint64_t cols_;
  DequantSpec spec_;
  bool memo_;                 // rows repeat their scales: offer the 8-bit kernel a table memo
  const codecs::Kernels& k_;  // the active ISA's kernels, taken once per tensor
};

class PackedIntDecoder final : public ScaledDecoder {
 public:
  PackedIntDecoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out)
      : ScaledDecoder(ck, plan, out),
        bits_(plan.geo.quant.num_bits),
        dense_(!plan.geo.quant.legacy_packing),
        row_bytes_(plan.geo.row_bytes),
        gidx_(load_act_order(ck, plan)) {}
  void row(uint64_t r, std::byte* out, bool stream) const override {
    // int4: the nibble order of the int32 packing on a little-endian host is the fp4 one.
    if (fused() && nibbles(r, r * row_bytes_, 0, cols_, kInt4Lut.data(), out, stream)) return;
    if (as_int8() && int8_codes(r, 0, cols_, out, stream)) return;
    thread_local ReadWindow sw;
    thread_local std::vector<float> xf;
    auto w = ck_.bytes(main_, r * row_bytes_, row_bytes_, sw, /*windowed=*/true);
    xf.resize(cols_);
    codecs::unpack_int_row(reinterpret_cast<const uint8_t*>(w.data()), bits_, dense_, cols_, xf.data());
    dequant(r, xf.data(), cols_, 0, gidx_.empty() ? nullptr : gidx_.data(), out, stream);
  }
  bool row_window(uint64_t r, uint64_t c0, uint64_t c1, std::byte* out, bool stream) const override {
    if (fused()) return nibbles(r, r * row_bytes_, c0, c1, kInt4Lut.data(), out, stream);
    return as_int8() && int8_codes(r, c0, c1, out, stream);
  }

 private:
  bool fused() const { return bits_ == 4 && gidx_.empty(); }
  // Other widths in the dense layout (the <= 0.17 one is the same for 1, 2 and 8 bits): the row's
  // codes are int8 values (u - 2^(b-1)) that the fused packed kernel dequantizes as the 8-bit
  // kernel does int8 weights.
  bool as_int8() const { return bits_ != 4 && gidx_.empty() && (dense_ || 32 % bits_ == 0); }
  // Columns [c0, c1) of row r; false when c0 is not on a group boundary or the 8-bit kernel's
  // arithmetic does not apply (zero points whose subtraction rounds).
  bool int8_codes(uint64_t r, uint64_t c0, uint64_t c1, std::byte* out, bool stream) const {
    const auto goff = scales_.window_offset(c0, cols_);
    if (!goff) return false;
    const float* zp = scales_.zp_row(r);
    if (!fused_byte_code(DType::I8, zp, spec_)) return false;
    thread_local ReadWindow sw, ss;
    thread_local std::vector<float> sf;
    const uint64_t bit0 = c0 * bits_;
    if (bit0 % 8 == 0) {  // the window's codes start on a byte: read only their bytes, one fused pass
      auto w = ck_.bytes(main_, r * row_bytes_ + bit0 / 8, ((c1 - c0) * bits_ + 7) / 8, sw, /*windowed=*/true);
      k_.dequant_packed(reinterpret_cast<const uint8_t*>(w.data()), bits_, c1 - c0, scales_.row(r, sf, ss) + *goff,
                        zp ? zp + *goff : nullptr, with_stream(spec_, stream), byte_memo(memo_), out);
      return true;
    }
    // A window starting mid-byte (a group size that is not a multiple of 8): the codes up to c1
    // unpacked, then the 8-bit kernel over [c0, c1).
    thread_local std::vector<int8_t> codes;
    auto w = ck_.bytes(main_, r * row_bytes_, row_bytes_, sw, /*windowed=*/true);
    codes.resize(c1);
    k_.unpack_int8(reinterpret_cast<const uint8_t*>(w.data()), bits_, c1, codes.data());
    return byte_codes(r, reinterpret_cast<const std::byte*>(codes.data() + c0), DType::I8, c1 - c0, *goff, out, stream);
  }
  unsigned bits_;
  bool dense_;
  uint64_t row_bytes_;
  std::vector<int32_t> gidx_;  // act-order scale column of each column; empty: plain order
};

// naive / int / float / mxfp8: values stored unpacked (I8 two's complement or F8_E4M3).
class NaiveDecoder final : public ScaledDecoder {
 public:
  NaiveDecoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out)
      : ScaledDecoder(ck, plan, out), gidx_(load_act_order(ck, plan)) {
    assert(main_.dtype == DType::I8 || main_.dtype == DType::F8_E4M3);  // format table
  }
  void row(uint64_t r, std::byte* out, bool stream) const override { window(r, 0, cols_, 0, out, stream); }
  bool row_window(uint64_t r, uint64_t c0, uint64_t c1, std::byte* out, bool stream) const override {
    if (!gidx_.empty()) return false;  // act-order: a column's scale is not found from its position
    const auto goff = scales_.window_offset(c0, cols_);
    if (!goff) return false;
    window(r, c0, c1, *goff, out, stream);
    return true;
  }
  static void values_to_f32(DType d, const std::byte* v, uint64_t n, float* x) {
    if (d == DType::I8)
      for (uint64_t j = 0; j < n; ++j) x[j] = static_cast<float>(static_cast<int8_t>(v[j]));
    else
      for (uint64_t j = 0; j < n; ++j) x[j] = e4m3_lut()[static_cast<uint8_t>(v[j])];
  }

 private:
  void window(uint64_t r, uint64_t c0, uint64_t c1, uint64_t goff, std::byte* out, bool stream) const {
    thread_local ReadWindow sw;
    thread_local std::vector<float> xf;
    auto v = ck_.bytes(main_, r * cols_ + c0, c1 - c0, sw, /*windowed=*/true);
    if (gidx_.empty() && byte_codes(r, v.data(), main_.dtype, c1 - c0, goff, out, stream)) return;
    xf.resize(c1 - c0);
    values_to_f32(main_.dtype, v.data(), c1 - c0, xf.data());
    dequant(r, xf.data(), c1 - c0, goff, gidx_.empty() ? nullptr : gidx_.data(), out, stream);
  }
  std::vector<int32_t> gidx_;  // act-order scale column of each column; empty: plain order
};

// nvfp4 / mxfp4: E2M1 nibbles, row-major, even column in the low nibble (nvfp4/helpers.py).
class Fp4Decoder final : public ScaledDecoder {
 public:
  Fp4Decoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out) : ScaledDecoder(ck, plan, out) {}
  void row(uint64_t r, std::byte* out, bool stream) const override {
    nibbles(r, r * cols_ / 2, 0, cols_, e2m1_lut().data(), out, stream);
  }
  bool row_window(uint64_t r, uint64_t c0, uint64_t c1, std::byte* out, bool stream) const override {
    return nibbles(r, r * cols_ / 2, c0, c1, e2m1_lut().data(), out, stream);
  }
};

// mxfp6: every 3 bytes hold 4 E2M3 codes, code j = (b0 | b1<<8 | b2<<16) >> 6j (mxfp6/helpers.py).
class Fp6Decoder final : public ScaledDecoder {
 public:
  Fp6Decoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out) : ScaledDecoder(ck, plan, out) {}
  void row(uint64_t r, std::byte* out, bool stream) const override {
    thread_local ReadWindow sw;
    thread_local std::vector<float> xf;
    const uint64_t rb = cols_ / 4 * 3;
    auto w = ck_.bytes(main_, r * rb, rb, sw, /*windowed=*/true);
    xf.resize(cols_);
    const auto* row = reinterpret_cast<const uint8_t*>(w.data());
    for (uint64_t j = 0; j < cols_; ++j) xf[j] = codecs::e2m3_to_f32(codecs::fp6_code(row, j));
    dequant(r, xf.data(), cols_, 0, nullptr, out, stream);
  }
};

// sparse-bitmask / sparse-24-bitmask (0.12 sparse_compressors): values in row-major order, one
// LSB-first mask bit per element; optionally the values are quantized (stacked formats).
class SparseDecoder final : public RowDecoder {
 public:
  SparseDecoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out)
      : ck_(ck),
        t_(*plan.t),
        values_(need_part(ck, plan, Role::compressed)),
        cols_(plan.geo.cols),
        vsz_(dtype_bits(values_.dtype) / 8),
        mbytes_((plan.geo.cols + 7) / 8),
        index_(load_sparse_index(ck, plan)),
        spec_(plan.dequant(out)),
        memo_(plan.rows_repeat_scales) {
    expand_ = k_.bitmask_expand(static_cast<unsigned>(vsz_));
    if (!expand_)
      fail(ck, t_, ErrorKind::unsupported, "sparse values of dtype " + std::string(dtype_name(values_.dtype)));
    if (t_.quantized) scales_ = std::make_unique<Scales>(ck, plan);
    // The values are read in place from the mapping (mmap mode): guarded once here, before the
    // first row touches it.
    if (ck.file_of(values_).mode() == io::Mode::mmap) {
      ck.guard(values_);
      values_view_ = ck.file_of(values_).view(values_.offset, values_.nbytes);
    }
    if (!t_.quantized && values_.dtype != out) {
      // Another float output: the row's values converted first (n of them into a row buffer), then
      // expanded into the output at its element size, zeros being 0 in every float dtype. Expanding
      // first and converting the row after converted every zero too and wrote the output in a second
      // pass: bitmask 50 % -> f32 0.77-0.81 of memset's bandwidth that way (AVX2), -> f16 0.50-0.56.
      convert_ = k_.convert(values_.dtype, out);
      expand_out_ = k_.bitmask_expand(dtype_bits(out) / 8);
      osz_ = dtype_bits(out) / 8;
    }
  }
  void row(uint64_t r, std::byte* out, bool stream) const override {
    thread_local ReadWindow sv, ss;
    thread_local std::vector<std::byte> dense;
    thread_local std::vector<float> sf, xf;
    const std::vector<uint64_t>& start = index_.start;
    const uint64_t n = start[r + 1] - start[r];
    const std::span<const std::byte> v = values_view_.empty() ? ck_.bytes(values_, start[r] * vsz_, n * vsz_, sv)
                                                              : values_view_.subspan(start[r] * vsz_, n * vsz_);
    const auto* mask = reinterpret_cast<const uint8_t*>(index_.mask.data()) + r * mbytes_;
    if (!t_.quantized && !convert_) {
      expand_(mask, v.data(), cols_, out, stream);
      return;
    }
    if (!t_.quantized) {
      dense.resize(n * osz_);
      convert_(v.data(), dense.data(), n, false);
      expand_out_(mask, dense.data(), cols_, out, stream);
      return;
    }
    dense.resize(cols_ * vsz_);
    expand_(mask, v.data(), cols_, dense.data(), false);
    const float* zp = scales_->zp_row(r);
    if (const auto code = fused_byte_code(values_.dtype, zp, spec_)) {
      k_.dequant_byte(reinterpret_cast<const uint8_t*>(dense.data()), cols_, *code, scales_->row(r, sf, ss), zp,
                      with_stream(spec_, stream), byte_memo(memo_), out);
      return;
    }
    xf.resize(cols_);
    NaiveDecoder::values_to_f32(values_.dtype, dense.data(), cols_, xf.data());
    codecs::dequant_f32_row(xf.data(), cols_, scales_->row(r, sf, ss), zp, nullptr, with_stream(spec_, stream), k_.isa,
                            out);
  }

 private:
  const Checkpoint::Impl& ck_;
  const TensorInfo& t_;
  const TensorPart& values_;
  uint64_t cols_;
  uint64_t vsz_, mbytes_;
  SparseIndex index_;
  DequantSpec spec_;                        // quantized values
  bool memo_;                               // rows repeat their scales: offer the 8-bit kernel a table memo
  std::span<const std::byte> values_view_;  // mmap mode: the guarded mapping of the values
  const codecs::Kernels& k_ = codecs::active_kernels();  // taken once per tensor
  codecs::BitmaskExpandFn expand_ = nullptr;
  codecs::ConvertFn convert_ = nullptr;  // values to another float output, then expand_out_
  codecs::BitmaskExpandFn expand_out_ = nullptr;
  uint64_t osz_ = 0;  // that output's element size
  std::unique_ptr<Scales> scales_;
};

}  // namespace

SparseIndex load_sparse_index(const Checkpoint::Impl& ck, const DecodePlan& plan) {
  // Prefix sums of per-row popcounts: where each row's values start. They must add up to the
  // stored value count, agree with row_offsets when present, and be 2 per 4 for 2:4. The mask
  // is copied with a positional read (a file truncated since open is an error, not SIGBUS).
  const TensorInfo& t = *plan.t;
  const TensorPart& values = need_part(ck, plan, Role::compressed);
  const TensorPart& mask = need_part(ck, plan, Role::bitmask);
  const uint64_t rows = plan.geo.rows, cols = plan.geo.cols, mbytes = (cols + 7) / 8;
  const uint64_t vsz = dtype_bits(values.dtype) / 8;
  assert(vsz >= 1 && mask.nbytes == rows * mbytes);  // format table
  SparseIndex ix;
  ix.mask.resize(mask.nbytes);
  ck.file_of(mask).read_at(mask.offset, ix.mask);
  ix.start.resize(rows + 1);
  const auto* mb = reinterpret_cast<const uint8_t*>(ix.mask.data());
  for (uint64_t r = 0; r < rows; ++r) {
    if (!codecs::bitmask_padding_clear(mb + r * mbytes, cols))
      fail(ck, t, ErrorKind::corrupt_tensor,
           "bitmask row " + std::to_string(r) + " has bits set past column " + std::to_string(cols));
    const uint64_t n = codecs::bitmask_row_popcount(mb + r * mbytes, cols);
    if (t.format == Format::sparse_24_bitmask && n != cols / 2)
      fail(ck, t, ErrorKind::corrupt_tensor,
           "2:4 bitmask row " + std::to_string(r) + " keeps " + std::to_string(n) + " values, not " +
               std::to_string(cols / 2));
    ix.start[r + 1] = ix.start[r] + n;
  }
  const uint64_t stored = values.nbytes / vsz;
  if (ix.start[rows] != stored)
    fail(ck, t, ErrorKind::corrupt_tensor,
         "bitmask has " + std::to_string(ix.start[rows]) + " set bits but " + std::to_string(stored) +
             " values are stored");
  if (const TensorPart* ro = plan.part(Role::row_offsets)) {
    std::vector<std::byte> raw(ro->nbytes);
    ck.file_of(*ro).read_at(ro->offset, raw);
    for (uint64_t r = 0; r < rows; ++r) {
      int64_t v;
      std::memcpy(&v, raw.data() + 8 * r, 8);
      if (v < 0 || static_cast<uint64_t>(v) != ix.start[r])
        fail(ck, t, ErrorKind::corrupt_tensor,
             "row_offsets[" + std::to_string(r) + "] = " + std::to_string(v) + " but the bitmask puts that row at " +
                 std::to_string(ix.start[r]));
    }
  }
  return ix;
}

std::unique_ptr<RowDecoder> make_decoder(const Checkpoint::Impl& ck, const DecodePlan& plan, DType out) {
  switch (plan.codes) {
    case format::Codes::sparse: return std::make_unique<SparseDecoder>(ck, plan, out);
    case format::Codes::packed_int: return std::make_unique<PackedIntDecoder>(ck, plan, out);
    case format::Codes::byte: return std::make_unique<NaiveDecoder>(ck, plan, out);
    case format::Codes::e2m1: return std::make_unique<Fp4Decoder>(ck, plan, out);
    case format::Codes::e2m3: return std::make_unique<Fp6Decoder>(ck, plan, out);
    case format::Codes::marlin: fail(ck, *plan.t, ErrorKind::unsupported, plan.refusal(out, false));
    case format::Codes::none: break;  // decode_dense / decode_low_rank
  }
  fail(ck, *plan.t, ErrorKind::unsupported, "no decoder for format " + std::string(format_name(plan.t->format)));
}

}  // namespace ctstream::reader
