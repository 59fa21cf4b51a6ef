#include "format/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/checked.hpp"
#include "ctstream/error.hpp"
#include "format/json.hpp"

namespace ctstream::format {
namespace {

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

}  // namespace

uint64_t parse_prefix(std::span<const std::byte> prefix, uint64_t file_size, uint64_t max_header,
                      const std::string& file) {
  if (file_size < 8 || prefix.size() < 8)
    fail(ErrorKind::truncated, file, "",
         "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[static_cast<size_t>(i)]);
  if (n > max_header)
    fail(ErrorKind::header_too_large, file, "",
         "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_header) + " bytes");
  if (n > file_size - 8)
    fail(
        ErrorKind::header_too_large, file, "",
        "header length " + std::to_string(n) + " runs past the end of the " + std::to_string(file_size) + "-byte file");
  return n;
}

namespace {

// SAX handler for the header: builds StEntry values directly (no JSON DOM; opening a
// 1,000-tensor checkpoint is dominated by this parse), with exactly the serde model of
// safetensors 0.8 (safetensors/src/tensor.rs `HashMetadata`, `TensorInfo`, `Dtype`):
//   * the root is an object; `__metadata__` is null or a map of string to string (a repeated key
//     inside it keeps the last value; a second `__metadata__` is an error);
//   * every other key is a tensor: an object with dtype, shape and data_offsets (unknown fields
//     ignored whatever they hold, a repeated known field an error), or - serde's sequence form
//     of a struct - an array of exactly those three values in that order; a tensor name given
//     twice keeps its last entry (the serde map overwrites);
//   * dtype is a variant name, or the map form {"F32": null}; shape a list of non-negative
//     integers; data_offsets exactly two (a float, `-0` or a negative number is refused);
//   * at most 127 nested containers (serde_json's recursion limit of 128), ignored fields too.
class HeaderSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  static constexpr size_t kMaxDepth = 127;
  HeaderSax(StHeader& h, const std::string& file) : h_(h), file_(file) {}

  bool null() override { return scalar(Scalar::null, "null"); }
  bool boolean(bool) override { return scalar(Scalar::other, "a boolean"); }
  bool number_integer(number_integer_t) override {
    // nlohmann reports non-negative integers through number_unsigned; this one is negative or -0
    return scalar(Scalar::other, "a negative number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (!st_.empty() && (top() == F::shape || top() == F::offsets)) {
      (top() == F::shape ? cur_.shape : offsets_).push_back(v);
      return true;
    }
    return scalar(Scalar::other, "a number");
  }
  bool number_float(number_float_t, const string_t&) override { return scalar(Scalar::other, "a fraction"); }
  bool binary(binary_t&) override { return scalar(Scalar::other, "binary"); }
  bool string(string_t& v) override {
    if (!st_.empty() && top() == F::metadata) {
      h_.metadata[meta_key_] = v;
      return true;
    }
    if (!st_.empty() && slot() == Slot::dtype) {
      set_dtype(v);
      advance();
      return true;
    }
    return scalar(Scalar::other, "a string");
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    switch (top()) {
      case F::root:
        // A tensor name with an embedded NUL is valid JSON and safetensors 0.8 loads it, but every
        // C-string surface (the C ABI's tensor_info.name, a CLI argument, ctstream_find) would cut
        // it at the NUL: "x\u0000evil" would be listed and found as "x", beside a real "x". So no
        // surface ever hands out two names that compare equal, it is refused here, once, at open.
        if (k.find('\0') != string_t::npos) {
          std::string shown;
          for (char c : k) shown += c == '\0' ? std::string("\\u0000") : std::string(1, c);
          fail(ErrorKind::invalid_header, file_, shown, "tensor name contains a NUL character (\\u0000)");
        }
        key_ = k;
        break;
      case F::metadata: meta_key_ = k; break;
      case F::entry_obj: {
        field_ = k == "dtype"          ? Slot::dtype
                 : k == "shape"        ? Slot::shape
                 : k == "data_offsets" ? Slot::offsets
                                       : Slot::other;
        bool* seen = field_ == Slot::dtype     ? &has_dtype_
                     : field_ == Slot::shape   ? &has_shape_
                     : field_ == Slot::offsets ? &has_offsets_
                                               : nullptr;
        if (seen && *seen) fail(ErrorKind::invalid_header, file_, key_, "field '" + k + "' given twice");
        break;
      }
      case F::dtype_map:
        if (++map_keys_ > 1) fail(ErrorKind::invalid_header, file_, key_, "dtype map must have exactly one key");
        set_dtype(k);
        break;
      default: break;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    fail(ErrorKind::invalid_header, file_, "", std::string("header is not valid JSON: ") + ex.what());
  }

 private:
  // The containers being parsed, innermost last.
  enum class F { root, metadata, entry_obj, entry_arr, dtype_map, shape, offsets, skip };
  // What the next value inside an entry is.
  enum class Slot { none, dtype, shape, offsets, other };
  enum class Scalar { null, other };
  F top() const { return st_.back(); }
  // The entry field the next value fills (objects: by key; arrays: by position).
  Slot slot() const {
    if (top() == F::entry_obj) return field_;
    if (top() == F::entry_arr)
      return pos_ == 0 ? Slot::dtype : pos_ == 1 ? Slot::shape : pos_ == 2 ? Slot::offsets : Slot::none;
    return Slot::none;
  }
  void advance() {  // a value of an entry array is complete: the next one fills the next slot
    if (top() == F::entry_arr) ++pos_;
  }
  void set_dtype(const std::string& v) {
    auto d = dtype_from_name(v);
    if (!d) fail(ErrorKind::unknown_dtype, file_, key_, "unknown dtype '" + v + "'");
    cur_.dtype = *d;
    has_dtype_ = true;
  }
  void mark(Slot s) {
    if (s == Slot::shape) has_shape_ = true;
    if (s == Slot::offsets) has_offsets_ = true;
  }
  bool open(bool object) {
    if (st_.size() >= kMaxDepth)
      fail(ErrorKind::invalid_header, file_, "", "header nests deeper than " + std::to_string(kMaxDepth) + " levels");
    if (st_.empty()) {
      if (!object) fail(ErrorKind::invalid_header, file_, "", "header is not a JSON object");
      st_.push_back(F::root);
      return true;
    }
    switch (top()) {
      case F::root:
        if (key_ == "__metadata__") {
          if (!object) fail(ErrorKind::invalid_header, file_, "", "__metadata__ is not an object");
          if (seen_meta_) fail(ErrorKind::invalid_header, file_, "", "__metadata__ given twice");
          seen_meta_ = true;
          h_.metadata.clear();
          h_.has_metadata = true;
          st_.push_back(F::metadata);
        } else {
          cur_ = StEntry{key_, DType::U8, {}, 0, 0};
          has_dtype_ = has_shape_ = has_offsets_ = false;
          offsets_.clear();
          field_ = Slot::none;
          pos_ = 0;
          st_.push_back(object ? F::entry_obj : F::entry_arr);
        }
        return true;
      case F::metadata:
        fail(ErrorKind::invalid_header, file_, "", "__metadata__ value for '" + meta_key_ + "' is not a string");
      case F::entry_obj:
      case F::entry_arr: {
        const Slot s = slot();
        if (top() == F::entry_arr && s == Slot::none)
          fail(ErrorKind::invalid_header, file_, key_, "entry array must be [dtype, shape, data_offsets]");
        if (s == Slot::dtype && object) {
          map_keys_ = 0;
          st_.push_back(F::dtype_map);
        } else if (s == Slot::dtype) {
          fail(ErrorKind::invalid_header, file_, key_, "dtype is an array, not a string");
        } else if ((s == Slot::shape || s == Slot::offsets) && !object) {
          mark(s);
          st_.push_back(s == Slot::shape ? F::shape : F::offsets);
        } else if (s == Slot::shape) {
          fail(ErrorKind::invalid_header, file_, key_, "shape is not an array");
        } else if (s == Slot::offsets) {
          fail(ErrorKind::invalid_header, file_, key_, "data_offsets is not a [begin, end] pair");
        } else {
          st_.push_back(F::skip);  // an unknown field: ignored, whatever it holds
        }
        return true;
      }
      case F::dtype_map: fail(ErrorKind::invalid_header, file_, key_, "dtype map value must be null");
      case F::shape:
      case F::offsets:
        fail(ErrorKind::invalid_header, file_, key_,
             std::string(top() == F::shape ? "shape" : "data_offsets") + " must hold non-negative integers, got " +
                 (object ? "an object" : "an array"));
      case F::skip: st_.push_back(F::skip); return true;
    }
    return true;
  }
  bool close() {
    const F f = top();
    st_.pop_back();
    if (f == F::entry_obj || f == F::entry_arr) {
      if (f == F::entry_arr && pos_ != 3)
        fail(ErrorKind::invalid_header, file_, key_,
             "entry array must be [dtype, shape, data_offsets], it has " + std::to_string(pos_) + " elements");
      finish_entry();
    } else if (f == F::dtype_map) {
      if (map_keys_ != 1) fail(ErrorKind::invalid_header, file_, key_, "dtype map must have exactly one key");
      advance();
    } else if (f == F::shape || f == F::offsets) {
      advance();
    }
    return true;
  }
  // A scalar value (not a shape / offset integer, not a dtype or metadata string).
  bool scalar(Scalar kind, const char* what) {
    if (st_.empty()) fail(ErrorKind::invalid_header, file_, "", "header is not a JSON object");
    switch (top()) {
      case F::root:
        if (key_ == "__metadata__") {
          if (kind == Scalar::null) {  // `"__metadata__": null` = no metadata
            if (seen_meta_) fail(ErrorKind::invalid_header, file_, "", "__metadata__ given twice");
            seen_meta_ = true;
            return true;
          }
          fail(ErrorKind::invalid_header, file_, "", "__metadata__ is not an object");
        }
        fail(ErrorKind::invalid_header, file_, key_, std::string("entry is ") + what + ", not an object");
      case F::metadata:
        fail(ErrorKind::invalid_header, file_, "", "__metadata__ value for '" + meta_key_ + "' is not a string");
      case F::dtype_map:
        if (kind != Scalar::null) fail(ErrorKind::invalid_header, file_, key_, "dtype map value must be null");
        return true;
      case F::shape:
      case F::offsets:
        fail(ErrorKind::invalid_header, file_, key_,
             std::string(top() == F::shape ? "shape" : "data_offsets") + " must hold non-negative integers, got " +
                 what);
      case F::entry_obj:
      case F::entry_arr:
        switch (slot()) {
          case Slot::dtype:
            fail(ErrorKind::invalid_header, file_, key_, std::string("dtype is ") + what + ", not a string");
          case Slot::shape: fail(ErrorKind::invalid_header, file_, key_, "shape is not an array");
          case Slot::offsets: fail(ErrorKind::invalid_header, file_, key_, "data_offsets is not a [begin, end] pair");
          case Slot::none:
            fail(ErrorKind::invalid_header, file_, key_, "entry array must be [dtype, shape, data_offsets]");
          case Slot::other: return true;  // an unknown field, ignored
        }
        return true;
      case F::skip: return true;
    }
    return true;
  }
  void finish_entry() {
    const std::string& name = cur_.name;
    if (!has_dtype_) fail(ErrorKind::invalid_header, file_, name, "entry has no dtype");
    if (!has_shape_) fail(ErrorKind::invalid_header, file_, name, "entry has no shape");
    if (!has_offsets_) fail(ErrorKind::invalid_header, file_, name, "entry has no data_offsets");
    if (offsets_.size() != 2) fail(ErrorKind::invalid_header, file_, name, "data_offsets is not a [begin, end] pair");
    cur_.begin = offsets_[0];
    cur_.end = offsets_[1];
    if (cur_.end < cur_.begin)
      fail(ErrorKind::invalid_header, file_, name,
           "data_offsets end " + std::to_string(cur_.end) + " is before begin " + std::to_string(cur_.begin));
    // A name given twice keeps its last entry (safetensors' serde map overwrites the first).
    auto [it, fresh] = index_.emplace(name, h_.entries.size());
    if (fresh) h_.entries.push_back(std::move(cur_));
    else h_.entries[it->second] = std::move(cur_);
  }

  StHeader& h_;
  const std::string& file_;
  std::vector<F> st_;
  std::string key_, meta_key_;
  Slot field_ = Slot::none;
  size_t pos_ = 0, map_keys_ = 0;
  bool seen_meta_ = false;
  StEntry cur_{};
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  std::vector<uint64_t> offsets_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace

StHeader parse_header(std::string_view json, uint64_t header_len, uint64_t file_size, const std::string& file) {
  StHeader h;
  h.data_start = 8 + header_len;
  const uint64_t data_len = file_size - h.data_start;
  {
    // No raw NUL anywhere (json.cpp parse_json: nlohmann's lexer stops at one, and would accept
    // `{...}\0<anything>`; serde_json refuses it as trailing characters or invalid UTF-8).
    if (const size_t at = json.find('\0'); at != std::string_view::npos)
      fail(ErrorKind::invalid_header, file, "", "header is not valid JSON: a NUL byte at offset " + std::to_string(at));
    // The root must be an object: look at the first non-space byte before handing over.
    size_t i = 0;
    while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r')) ++i;
    if (i == json.size() || json[i] != '{') {
      // Valid JSON of the wrong shape, or not JSON at all: a (DOM-free) SAX pass tells which.
      const bool valid = json_depth_ok(json, HeaderSax::kMaxDepth);
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
  std::set<std::string_view> names;
  for (const auto& e : entries) {
    // A JSON object keeps one value per key: a second entry would silently replace the first and
    // leave a header whose offsets no longer cover the data.
    if (!names.insert(e.name).second)
      throw Error(ErrorKind::invalid_argument, "", e.name, "tensor name appears twice in one safetensors header");
    // The reader refuses such a name (HeaderSax::key): never write what cannot be read back.
    if (e.name.find('\0') != std::string::npos)
      throw Error(ErrorKind::invalid_argument, "", "", "tensor name contains a NUL character (\\u0000)");
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
