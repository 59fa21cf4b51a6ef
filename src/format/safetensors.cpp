#include "format/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "ctstream/error.hpp"

namespace ctstream::format {
namespace {

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}


}  // namespace

uint64_t parse_prefix(std::span<const std::byte> prefix, uint64_t file_size, uint64_t max_header,
                      const std::string& file) {
  if (file_size < 8 || prefix.size() < 8)
    fail(ErrorKind::truncated, file, "", "file is " + std::to_string(file_size) +
                                             " bytes, too short for the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[static_cast<size_t>(i)]);
  if (n > max_header)
    fail(ErrorKind::header_too_large, file, "",
         "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_header) + " bytes");
  if (n > file_size - 8)
    fail(ErrorKind::header_too_large, file, "",
         "header length " + std::to_string(n) + " runs past the end of the " + std::to_string(file_size) +
             "-byte file");
  return n;
}

namespace {

// SAX handler for the header: builds StEntry values directly (no JSON DOM; opening a
// 1,000-tensor checkpoint is dominated by this parse). Type checks are those of safetensors'
// serde model: entries are objects with a string dtype, an array of non-negative integer shape
// dims and a two-element data_offsets array; __metadata__ maps strings to strings.
class HeaderSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  HeaderSax(StHeader& h, const std::string& file) : h_(h), file_(file) {}

  bool null() override { return scalar("null"); }
  bool boolean(bool) override { return scalar("a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (v >= 0) return number_unsigned(static_cast<number_unsigned_t>(v));
    return scalar("a negative number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ == 3 && array_) {
      (field_ == Field::shape ? cur_.shape : offsets_).push_back(v);
      return true;
    }
    return scalar("a number");
  }
  bool number_float(number_float_t, const string_t&) override { return scalar("a fraction"); }
  bool binary(binary_t&) override { return scalar("binary"); }
  bool string(string_t& v) override {
    if (depth_ == 2 && meta_) {
      h_.metadata[meta_key_] = v;
      return true;
    }
    if (depth_ == 2 && field_ == Field::dtype) {
      dtype_ = v;
      has_dtype_ = true;
      return true;
    }
    return scalar("a string");
  }
  bool start_object(std::size_t) override {
    if (depth_ == 1) {
      if (key_ == "__metadata__") meta_ = true;
      else cur_ = StEntry{key_, DType::U8, {}, 0, 0}, has_dtype_ = has_shape_ = has_offsets_ = false, offsets_.clear();
    } else if (depth_ >= 2) {
      nested("an object");
    }
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    if (depth_ == 1) {
      if (meta_) meta_ = false;
      else finish_entry();
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 2 && !meta_ && (field_ == Field::shape || field_ == Field::offsets)) {
      array_ = true;
      (field_ == Field::shape ? has_shape_ : has_offsets_) = true;
    } else {
      nested("an array");
    }
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    array_ = false;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      if (!seen_.insert(k).second) fail(ErrorKind::invalid_header, file_, k, "tensor name appears twice in the header");
      key_ = k;
    } else if (depth_ == 2 && meta_) {
      meta_key_ = k;
    } else if (depth_ == 2) {
      field_ = k == "dtype" ? Field::dtype : k == "shape" ? Field::shape : k == "data_offsets" ? Field::offsets : Field::other;
      if (field_ == Field::shape && has_shape_) fail(ErrorKind::invalid_header, file_, key_, "shape given twice");
      if (field_ == Field::offsets && has_offsets_) fail(ErrorKind::invalid_header, file_, key_, "data_offsets given twice");
      if (field_ == Field::dtype && has_dtype_) fail(ErrorKind::invalid_header, file_, key_, "dtype given twice");
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    fail(ErrorKind::invalid_header, file_, "", std::string("header is not valid JSON: ") + ex.what());
  }

 private:
  enum class Field { other, dtype, shape, offsets };
  // A scalar where a container (or another scalar type) was required.
  bool scalar(const char* what) {
    if (depth_ == 0) fail(ErrorKind::invalid_header, file_, "", "header is not a JSON object");
    if (depth_ == 1)
      fail(ErrorKind::invalid_header, file_, key_ == "__metadata__" ? "" : key_,
           key_ == "__metadata__" ? "__metadata__ is not an object" : std::string("entry is ") + what + ", not an object");
    if (depth_ == 2 && meta_)
      fail(ErrorKind::invalid_header, file_, "", "__metadata__ value for '" + meta_key_ + "' is not a string");
    if (depth_ == 2) {
      if (field_ == Field::dtype) fail(ErrorKind::invalid_header, file_, key_, std::string("dtype is ") + what + ", not a string");
      if (field_ == Field::shape) fail(ErrorKind::invalid_header, file_, key_, "shape is not an array");
      if (field_ == Field::offsets) fail(ErrorKind::invalid_header, file_, key_, "data_offsets is not a [begin, end] pair");
      return true;  // unknown fields are ignored, as serde does
    }
    if (depth_ == 3 && array_)
      fail(ErrorKind::invalid_header, file_, key_,
           std::string(field_ == Field::shape ? "shape" : "data_offsets") + " must hold non-negative integers, got " + what);
    return true;  // inside an ignored field
  }
  void nested(const char* what) {
    if (depth_ == 2 && meta_)
      fail(ErrorKind::invalid_header, file_, "", "__metadata__ value for '" + meta_key_ + "' is not a string");
    if (depth_ == 2 && field_ == Field::dtype) fail(ErrorKind::invalid_header, file_, key_, std::string("dtype is ") + what);
    if (depth_ == 2 && field_ == Field::shape) fail(ErrorKind::invalid_header, file_, key_, "shape is not an array");
    if (depth_ == 2 && field_ == Field::offsets)
      fail(ErrorKind::invalid_header, file_, key_, "data_offsets is not a [begin, end] pair");
    if (depth_ == 3 && array_)
      fail(ErrorKind::invalid_header, file_, key_,
           std::string(field_ == Field::shape ? "shape" : "data_offsets") + " must hold non-negative integers, got " + what);
  }
  void finish_entry() {
    const std::string& name = cur_.name;
    if (!has_dtype_ || !has_shape_ || !has_offsets_)
      fail(ErrorKind::invalid_header, file_, name, "entry needs dtype, shape and data_offsets");
    auto dtype = dtype_from_name(dtype_);
    if (!dtype) fail(ErrorKind::unknown_dtype, file_, name, "unknown dtype '" + dtype_ + "'");
    if (offsets_.size() != 2) fail(ErrorKind::invalid_header, file_, name, "data_offsets is not a [begin, end] pair");
    cur_.dtype = *dtype;
    cur_.begin = offsets_[0];
    cur_.end = offsets_[1];
    if (cur_.end < cur_.begin)
      fail(ErrorKind::invalid_header, file_, name,
           "data_offsets end " + std::to_string(cur_.end) + " is before begin " + std::to_string(cur_.begin));
    h_.entries.push_back(std::move(cur_));
  }

  StHeader& h_;
  const std::string& file_;
  int depth_ = 0;
  bool meta_ = false, array_ = false;
  std::string key_, meta_key_, dtype_;
  Field field_ = Field::other;
  StEntry cur_{};
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  std::vector<uint64_t> offsets_;
  std::unordered_set<std::string> seen_;
};

}  // namespace

StHeader parse_header(std::string_view json, uint64_t header_len, uint64_t file_size, const std::string& file) {
  StHeader h;
  h.data_start = 8 + header_len;
  const uint64_t data_len = file_size - h.data_start;
  {
    // The root must be an object: look at the first non-space byte before handing over.
    size_t i = 0;
    while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r')) ++i;
    if (i == json.size() || json[i] != '{') {
      // Valid JSON of the wrong shape, or not JSON at all: a full parse tells which.
      const bool valid = !nlohmann::json::parse(json.begin(), json.end(), nullptr, false).is_discarded();
      fail(ErrorKind::invalid_header, file, "", valid ? "header is not a JSON object" : "header is not valid JSON");
    }
    HeaderSax sax(h, file);
    nlohmann::json::sax_parse(json.begin(), json.end(), &sax, nlohmann::detail::input_format_t::json, true);
  }

  // safetensors `Metadata::validate`: sorted by offset, each tensor starts where the previous
  // ended, byte count = bits(dtype) * numel / 8, and the tensors cover the data region exactly.
  // Sorted by (begin, end) like safetensors, so an empty tensor at offset x precedes one
  // starting at x.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const StEntry& a, const StEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t expect = 0;
  for (const auto& e : h.entries) {
    if (e.begin != expect)
      fail(ErrorKind::invalid_offsets, file, e.name,
           "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") " +
               (e.begin < expect ? "overlap the previous tensor, which ends at "
                                 : "leave a gap after the previous tensor, which ends at ") +
               std::to_string(expect));
    expect = e.end;
    auto numel = detail::checked_numel(e.shape);
    auto bits = numel ? detail::checked_mul(*numel, dtype_bits(e.dtype)) : std::nullopt;
    if (!bits) fail(ErrorKind::overflow, file, e.name, "shape product overflows 64 bits");
    if (*bits % 8 != 0)
      fail(ErrorKind::size_mismatch, file, e.name,
           std::to_string(*numel) + " elements of " + std::string(dtype_name(e.dtype)) + " do not fill whole bytes");
    if (e.end - e.begin != *bits / 8)
      fail(ErrorKind::size_mismatch, file, e.name,
           "holds " + std::to_string(e.end - e.begin) + " bytes but " + std::string(dtype_name(e.dtype)) +
               " x shape needs " + std::to_string(*bits / 8));
  }
  if (expect > data_len)
    fail(ErrorKind::truncated, file, h.entries.empty() ? "" : h.entries.back().name,
         "tensor data ends at byte " + std::to_string(h.data_start + expect) + " but the file has only " +
             std::to_string(file_size) + " bytes");
  if (expect < data_len)
    fail(ErrorKind::invalid_offsets, file, "",
         "data region has " + std::to_string(data_len - expect) + " trailing bytes not covered by any tensor");
  return h;
}

std::string serialize_header(const std::vector<StEntry>& entries, const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order so the header lists tensors in file order.
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  for (const auto& e : entries) {
    nlohmann::ordered_json v;
    v["dtype"] = std::string(dtype_name(e.dtype));
    v["shape"] = e.shape;
    v["data_offsets"] = {e.begin, e.end};
    root[e.name] = std::move(v);
  }
  std::string s = root.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

}  // namespace ctstream::format
