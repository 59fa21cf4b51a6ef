#include "writer/source.hpp"

#include <cstring>
#include <set>

#include "codecs/convert.hpp"
#include "ctstream/error.hpp"
#include "format/file_names.hpp"

namespace ctstream {
namespace {

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

/// rows of a tensor along dim 0 (1 for a 0-d tensor) and the elements in one row.
std::pair<uint64_t, uint64_t> rows_of(const TensorInfo& t) {
  if (t.shape.empty()) return {1, 1};
  const uint64_t rows = t.shape[0];
  return {rows, rows ? t.numel() / rows : 0};
}

}  // namespace

const std::map<std::string, std::vector<std::string>>& TensorSource::module_classes() const {
  static const std::map<std::string, std::vector<std::string>> none;
  return none;
}

const std::map<std::string, std::string>& TensorSource::conv_modules() const {
  static const std::map<std::string, std::string> none;
  return none;
}

// ---- a checkpoint on disk ----------------------------------------------------------------------

namespace writer {

CheckpointSource::CheckpointSource(const std::filesystem::path& in, const OpenOptions& open)
    : ck_(Checkpoint::open(in, open)), in_(in) {
  std::error_code ec;
  dir_ = std::filesystem::is_directory(in, ec) ? in : in.parent_path();
}

std::string CheckpointSource::origin(size_t i) const {
  const TensorInfo& t = ck_.tensors()[i];
  return t.parts.empty() ? in_.string() : ck_.files()[t.parts[0].file].string();
}

void CheckpointSource::read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) {
  const TensorInfo& t = ck_.tensors()[i];
  if (validated_.insert(i).second) ck_.validate(t);
  const auto [rows, row_elems] = rows_of(t);
  const std::optional<Slice> sl =
      t.shape.empty() || (r0 == 0 && r1 == rows) ? std::nullopt : std::optional<Slice>(Slice{0, r0, r1});
  ck_.decode_into(t, out, dtype, sl);
}

}  // namespace writer

// ---- tensors in memory -------------------------------------------------------------------------

BufferSource::BufferSource(std::vector<Entry> entries, Fetch fetch, Model model)
    : fetch_(std::move(fetch)), model_(std::move(model)) {
  if (!fetch_) fail(ErrorKind::invalid_argument, "memory", "", "no fetch function");
  std::set<std::string> seen;
  infos_.reserve(entries.size());
  for (auto& e : entries) {
    if (e.name.empty()) fail(ErrorKind::invalid_argument, "memory", "", "a tensor has an empty name");
    if (!seen.insert(e.name).second) fail(ErrorKind::invalid_argument, "memory", e.name, "duplicate tensor name");
    uint64_t n = 1;
    for (uint64_t d : e.shape)
      if (__builtin_mul_overflow(n, d, &n) || n > (uint64_t{1} << 60))
        fail(ErrorKind::invalid_argument, "memory", e.name, "shape too large");
    const uint64_t bits = n * dtype_bits(e.dtype);
    if (bits % 8) fail(ErrorKind::invalid_argument, "memory", e.name, "size is not a whole number of bytes");
    TensorInfo t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    TensorPart p;
    p.role = "weight";
    p.key = t.name;
    p.dtype = t.dtype;
    p.shape = t.shape;
    p.nbytes = bits / 8;
    t.parts.push_back(std::move(p));
    infos_.push_back(std::move(t));
  }
  for (const auto& [name, text] : model_.extra_files)
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos || name == format::kConfigName || name.ends_with(format::kWeightsSuffix) ||
        name.ends_with(format::kIndexSuffix))
      fail(ErrorKind::invalid_argument, "memory", "",
           "extra file name '" + name + "' is not a plain file name beside the weights (or is one the writer writes)");
}

void BufferSource::read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) {
  const TensorInfo& t = infos_.at(i);
  if (cached_ != i) {
    bytes_ = {};
    cached_ = SIZE_MAX;
    bytes_ = fetch_(i);  // the caller's exception as it was thrown (the writer calls read through call_source)
    cached_ = i;
    if (bytes_.size() != t.parts[0].nbytes)
      fail(ErrorKind::invalid_argument, "memory", t.name,
           "holds " + std::to_string(bytes_.size()) + " bytes, its dtype " + std::string(dtype_name(t.dtype)) +
               " and shape need " + std::to_string(t.parts[0].nbytes));
  }
  const auto [rows, row_elems] = rows_of(t);
  if (r0 > r1 || r1 > rows) fail(ErrorKind::internal, "memory", t.name, "row range out of bounds");
  const uint64_t n = (r1 - r0) * row_elems, first = r0 * row_elems;
  const uint64_t out_bits = n * dtype_bits(dtype);
  if (out.size() != (out_bits + 7) / 8) fail(ErrorKind::internal, "memory", t.name, "output size mismatch");
  if (dtype == t.dtype) {
    if ((first * dtype_bits(dtype)) % 8) fail(ErrorKind::internal, "memory", t.name, "sub-byte rows");
    std::memcpy(out.data(), bytes_.data() + first * dtype_bits(dtype) / 8, out.size());
    return;
  }
  if (!is_float_output(dtype) || !is_float(t.dtype))
    fail(ErrorKind::invalid_argument, "memory", t.name,
         "cannot convert " + std::string(dtype_name(t.dtype)) + " to " + std::string(dtype_name(dtype)));
  if (is_float_output(t.dtype)) {
    codecs::convert(t.dtype, bytes_.data() + first * dtype_bits(t.dtype) / 8, dtype, out.data(), n);
    return;
  }
  // F64, F8, F4: through f32 (the same rule as the reader's dtype conversion)
  constexpr uint64_t kChunk = 4096;
  float tmp[kChunk];
  for (uint64_t k = 0; k < n; k += kChunk) {
    const uint64_t m = std::min(kChunk, n - k);
    if (!codecs::widen_to_f32(t.dtype, bytes_.data(), first + k, m, tmp))
      fail(ErrorKind::unsupported, "memory", t.name, "cannot convert " + std::string(dtype_name(t.dtype)));
    codecs::convert(DType::F32, tmp, dtype, out.data() + k * dtype_bits(dtype) / 8, m);
  }
}

}  // namespace ctstream
