// writer — `compress_checkpoint`: read a dense checkpoint tensor by tensor, decide per tensor,
// compress (src/writer/quantize.hpp), write shards + index + config.json into a temporary
// directory beside the output, copy the other files, rename into place.
//
// Output layouts and config follow compressed-tensors 0.20.0 for the quantized formats
// (ct20: compressors/pack_quantized/base.py, naive_quantized/base.py, nvfp4/base.py;
// compressors/model_compressors/model_compressor.py `update_config`) and 0.12.2 for the sparse
// formats (ct12: compressors/sparse_compressors/*.py, config/base.py `SparsityCompressionConfig`).
#include "ctstream/writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "codecs/half.hpp"
#include "ctstream/error.hpp"
#include "ctstream/safetensors_writer.hpp"
#include "format/format_table.hpp"
#include "format/scheme.hpp"
#include "format/targets.hpp"
#include "io/output.hpp"
#include "writer/quantize.hpp"

namespace ctstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using writer::WeightArgs;

constexpr const char* kVersion020 = "0.20.0";  // layout + config of the current library line
constexpr const char* kVersion012 = "0.12.2";  // the last line with sparse compressors

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

bool is_float(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
bool is_quantized_format(Format f) {
  return f == Format::pack_quantized || f == Format::int_quantized || f == Format::float_quantized ||
         f == Format::nvfp4_pack_quantized;
}
bool is_sparse_format(Format f) { return f == Format::sparse_bitmask || f == Format::sparse_24_bitmask; }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// ------------------------------------------------------------------ scheme resolution

struct Resolved {
  Format format;
  WeightArgs args;           // quantized formats
  bool activations = false;  // int/float: dynamic input activations declared
  std::string scheme;        // human-readable
};

Resolved resolve(const CompressOptions& o) {
  Resolved r;
  r.format = o.format;
  auto bad = [](const std::string& m) { fail(ErrorKind::invalid_argument, "", "", m); };
  const std::string fname(format_name(o.format));
  switch (o.format) {
    case Format::dense:
      if (o.dtype && !is_float(*o.dtype)) bad("dense: dtype must be bf16, fp16 or fp32");
      r.scheme = o.dtype ? "dense " + std::string(dtype_name(*o.dtype)) : "dense copy";
      return r;
    case Format::sparse_bitmask: r.scheme = "bitmask"; return r;
    case Format::sparse_24_bitmask: r.scheme = "2:4"; return r;
    case Format::pack_quantized:
    case Format::int_quantized:
      r.args.type = QuantType::int_;
      r.args.num_bits = o.num_bits ? o.num_bits : (o.format == Format::pack_quantized ? 4 : 8);
      r.args.strategy = o.strategy.value_or(o.format == Format::pack_quantized ? QuantStrategy::group : QuantStrategy::channel);
      if (r.args.num_bits < 1 || r.args.num_bits > 8) bad(fname + ": bits must be 1..8");
      break;
    case Format::float_quantized:
      r.args.type = QuantType::float_;
      r.args.num_bits = o.num_bits ? o.num_bits : 8;
      r.args.strategy = o.strategy.value_or(QuantStrategy::channel);
      if (r.args.num_bits != 8) bad("float-quantized: only 8-bit (FP8 E4M3) weights");
      break;
    case Format::nvfp4_pack_quantized:
      r.args.type = QuantType::float_;
      r.args.num_bits = o.num_bits ? o.num_bits : 4;
      r.args.strategy = o.strategy.value_or(QuantStrategy::tensor_group);
      r.args.fp8_scale = true;
      if (r.args.num_bits != 4) bad("nvfp4-pack-quantized: weights are 4-bit FP4");
      if (r.args.strategy != QuantStrategy::tensor_group) bad("nvfp4-pack-quantized: strategy is tensor_group (group 16)");
      break;
    default:
      fail(ErrorKind::unsupported, "", "", "the writer cannot produce format '" + fname +
           "' (supported: dense, sparse-bitmask, sparse-24-bitmask, pack-quantized, int-quantized, "
           "float-quantized, nvfp4-pack-quantized)");
  }
  auto& a = r.args;
  a.symmetric = o.symmetric;
  if (!a.symmetric && a.type == QuantType::float_)
    bad(fname + ": asymmetric quantization is only supported for INT weights (compressed-tensors "
        "raises for FP4 and has no asymmetric FP8 kernels)");
  switch (a.strategy) {
    case QuantStrategy::tensor:
    case QuantStrategy::channel: break;
    case QuantStrategy::group:
      if (o.group_size == 0) bad("group size must be positive");
      a.group_size = o.group_size;
      break;
    case QuantStrategy::tensor_group:
      if (o.format != Format::nvfp4_pack_quantized) bad("tensor_group strategy is nvfp4 only");
      a.group_size = 16;
      break;
    case QuantStrategy::block:
      if (o.block_rows == 0 || o.block_cols == 0) bad("block dimensions must be positive");
      if (o.format == Format::pack_quantized) bad("pack-quantized: block strategy is not supported (use group)");
      a.block_rows = o.block_rows;
      a.block_cols = o.block_cols;
      break;
    default: bad(fname + ": strategy '" + std::string(strategy_name(a.strategy)) + "' cannot quantize weights");
  }
  r.activations = (o.format == Format::int_quantized || o.format == Format::float_quantized) && o.input_activations;
  std::string s = (a.type == QuantType::int_ ? "int" : "fp") + std::to_string(a.num_bits) + " " +
                  std::string(strategy_name(a.strategy));
  if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group) s += std::to_string(a.group_size);
  if (a.strategy == QuantStrategy::block) s += std::to_string(a.block_rows) + "x" + std::to_string(a.block_cols);
  s += a.symmetric ? " sym" : " asym";
  r.scheme = s;
  return r;
}

// ------------------------------------------------------------------ target matching

/// --targets / --ignore: the library's grammar (format/targets.hpp); the class names "Linear" and
/// "Embedding" are matched by the name heuristics below (the writer has no model).
struct Matcher {
  format::TargetList list;
  bool matches(const std::string& module, const TensorInfo& t) const;
};

bool embedding_like(const std::string& module) {
  const std::string last = lower(module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1));
  return last.find("embed") != std::string::npos || last == "wte" || last == "wpe";
}
bool head_like(const std::string& module) {
  const std::string last = module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1);
  return last == "lm_head" || last == "embed_out";
}
/// "Linear" heuristic: a 2-D `.weight` that is neither an embedding, a norm nor the output head.
bool linear_like(const std::string& module, const TensorInfo& t) {
  if (t.shape.size() != 2 || !ends_with(t.name, ".weight")) return false;
  const std::string l = lower(module);
  return !embedding_like(module) && !head_like(module) && l.find("norm") == std::string::npos;
}

bool Matcher::matches(const std::string& module, const TensorInfo& t) const {
  return list.matches(module, [&](const std::string& cls) {
    if (cls == "Linear") return linear_like(module, t);
    if (cls == "Embedding") return t.shape.size() == 2 && embedding_like(module);
    return false;
  });
}

Matcher parse_matcher(const std::vector<std::string>& v, const char* what) {
  for (const auto& s : v)
    if (s.empty()) fail(ErrorKind::invalid_argument, "", "", std::string(what) + " entry is empty");
  Matcher m{format::TargetList::parse(v, ErrorKind::invalid_argument, "", what)};
  for (const auto& t : m.list.targets())
    if (t.kind == format::Target::Kind::class_name && t.text != "Linear" && t.text != "Embedding")
      fail(ErrorKind::unsupported, "", "", std::string(what) + " class '" + t.text +
           "' cannot be matched without the model; use module names or re: patterns (\"Linear\" and "
           "\"Embedding\" are matched by name heuristics)");
  return m;
}

// ------------------------------------------------------------------ plan

struct OutEntry {
  std::string key;
  DType dtype;
  Shape shape;
  uint64_t bytes = 0;
};

struct Item {
  const TensorInfo* t = nullptr;
  bool compress = false;
  DType work = DType::F32;  // dtype the tensor is written / quantized in (D)
  bool convert = false;     // float values are rounded from t->dtype to `work`
  std::string module;
  std::vector<OutEntry> out;
  uint64_t nnz = 0;                // sparse-bitmask
  float tmin = 0, tmax = 0;        // nvfp4 scan
  float global_scale = 1.f;        // nvfp4
  size_t shard = 0;
};

uint64_t bytes_of(DType d, const Shape& s) {
  uint64_t n = 1;
  for (auto v : s) n *= v;
  return (n * dtype_bits(d) + 7) / 8;
}

void add(Item& it, std::string key, DType d, Shape s) {
  const uint64_t b = bytes_of(d, s);
  it.out.push_back({std::move(key), d, std::move(s), b});
}

QuantArgs quant_args(const WeightArgs& a) {
  QuantArgs q;
  q.num_bits = a.num_bits;
  q.type = a.type;
  q.strategy = a.strategy;
  q.symmetric = a.symmetric;
  q.group_size = a.group_size;
  q.block_rows = a.block_rows;
  q.block_cols = a.block_cols;
  return q;
}

/// The format table's geometry of a weight the writer compresses; refused exactly as the reader
/// would refuse it.
std::optional<format::Geometry> geometry_of(const TensorInfo& t, const Resolved& r, format::Why& why) {
  const QuantArgs q = quant_args(r.args);
  return format::geometry(r.format, t.shape, is_quantized_format(r.format) ? &q : nullptr, why);
}

/// Output entries of a compressed weight: names, dtypes, shapes and order from the format table.
void plan_entries(Item& it, const Resolved& r) {
  format::Why why;
  const auto g = geometry_of(*it.t, r, why);
  for (const auto& p : format::plan_parts(*g, it.work, it.nnz))
    add(it, it.module + "." + std::string(format::role_name(p.role)), p.dtype, p.shape);
}

/// Shape / dtype requirements of the format for a tensor chosen for compression.
void check_compressible(const Item& it, const Resolved& r, const std::string& file) {
  const TensorInfo& t = *it.t;
  const std::string fname(format_name(r.format));
  if (!is_float(it.work))
    fail(ErrorKind::unsupported, file, t.name, "dtype " + std::string(dtype_name(t.dtype)) + " cannot be stored as " +
         fname + " (needs F32, F16 or BF16 weights); add the module to --ignore");
  format::Why why;
  if (!geometry_of(t, r, why))
    fail(ErrorKind::invalid_argument, file, t.name, fname + " cannot store this weight: " + why +
         " (compressed-tensors requires it); choose other arguments, or --ignore the module");
}

// ------------------------------------------------------------------ small file helpers

void fsync_dir(const fs::path& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

/// Writes a small file exclusively (a name that exists, a planted link included, is an error).
void write_text(const fs::path& p, const std::string& text) {
  io::TempFile f(p.parent_path(), p.filename().string());
  if (std::fwrite(text.data(), 1, text.size(), f.stream()) != text.size())
    fail(ErrorKind::io, p.string(), "", std::string("write failed: ") + std::strerror(errno));
  f.commit_to(p);
}

/// Removes the temporary output directory unless released.
struct TempDirGuard {
  fs::path path;
  bool keep = false;
  ~TempDirGuard() {
    if (!keep && !path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

std::string dtype_torch_name(DType d) {
  return d == DType::BF16 ? "bfloat16" : d == DType::F16 ? "float16" : "float32";
}

// ------------------------------------------------------------------ numbers

struct ErrStats {
  double max_abs = 0, sum_x2 = 0, sum_e2 = 0;
  bool exact = true;
  void add(float ref, float dec) {
    if (std::isnan(ref) && std::isnan(dec)) return;
    const double e = static_cast<double>(dec) - static_cast<double>(ref);
    if (e != 0 || std::isnan(e)) exact = false;
    if (std::isnan(e)) {
      max_abs = std::numeric_limits<double>::infinity();
      return;
    }
    max_abs = std::max(max_abs, std::fabs(e));
    sum_x2 += static_cast<double>(ref) * ref;
    sum_e2 += e * e;
  }
  void fill(TensorReport& tr, uint64_t n) const {
    tr.exact = exact;
    tr.max_abs_error = max_abs;
    tr.rms_error = n ? std::sqrt(sum_e2 / static_cast<double>(n)) : 0;
    tr.snr_db = exact || sum_e2 == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(sum_x2 / sum_e2);
  }
};

/// f32 values (exact in d) -> stored bytes of dtype d.
void store(const float* v, uint64_t n, DType d, std::byte* out) {
  if (d == DType::F32) {
    std::memcpy(out, v, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t b = codecs::f32_bits(v[i]);
    const uint16_t h = d == DType::BF16 ? codecs::f32_to_bf16(b) : codecs::f32_to_f16(b);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

template <class T>
std::span<const std::byte> as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// ------------------------------------------------------------------ the job

class Job {
 public:
  Job(const fs::path& in, const fs::path& out, const CompressOptions& o)
      : in_(in), out_(out), o_(o), r_(resolve(o)), t0_(std::chrono::steady_clock::now()) {}
  CompressReport run();

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void check_cancel() const {
    if (o_.cancel && o_.cancel->load()) fail(ErrorKind::io, out_.string(), "", "cancelled; nothing was written");
  }
  std::string file_of(const TensorInfo& t) const {
    return t.parts.empty() ? in_.string() : ckpt_->files()[t.parts[0].file].string();
  }
  void prepare_output();
  void plan();
  void scan();
  void write_shards();
  void write_item(Item& it, SafetensorsWriter& w);
  void write_config();
  void copy_others();
  void commit();

  fs::path in_, out_, tmp_;
  const CompressOptions& o_;
  Resolved r_;
  std::chrono::steady_clock::time_point t0_;
  std::optional<Checkpoint> ckpt_;
  std::vector<Item> items_;
  std::vector<std::string> shard_names_;
  CompressReport rep_;
  TempDirGuard guard_;
  uint64_t bytes_total_ = 0;
  std::vector<std::string> ignore_out_;  // config ignore list
};

void Job::prepare_output() {
  out_ = fs::absolute(out_).lexically_normal();
  if (out_.filename().empty()) out_ = out_.parent_path();
  const fs::path parent = out_.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    fail(ErrorKind::io, out_.string(), "", "parent directory " + parent.string() + " does not exist");
  // OUT may neither be IN, contain IN (replacing OUT would delete the input) nor lie inside IN
  // (the output would be read back as input); compared on resolved paths, links followed.
  const fs::path in_c = fs::weakly_canonical(in_, ec), out_c = fs::weakly_canonical(out_, ec);
  auto within = [](const fs::path& inner, const fs::path& outer) {  // inner is outer or below it
    std::string i = inner.generic_string(), o = outer.generic_string();
    while (o.size() > 1 && o.back() == '/') o.pop_back();
    while (i.size() > 1 && i.back() == '/') i.pop_back();
    return i == o || (i.size() > o.size() && i.compare(0, o.size(), o) == 0 && (o == "/" || i[o.size()] == '/'));
  };
  if (within(in_c, out_c))
    fail(ErrorKind::invalid_argument, out_.string(), "",
         in_c == out_c ? "output directory is the input" : "output directory contains the input " + in_.string() +
                                                               " (replacing it would delete the input)");
  if (within(out_c, in_c))
    fail(ErrorKind::invalid_argument, out_.string(), "", "output directory lies inside the input " + in_.string());
  if (fs::exists(out_, ec)) {
    if (!fs::is_directory(out_, ec)) fail(ErrorKind::io, out_.string(), "", "exists and is not a directory");
    if (!fs::is_empty(out_, ec) && !o_.overwrite)
      fail(ErrorKind::io, out_.string(), "", "output directory exists and is not empty (pass --overwrite to replace it)");
  }
  try {
    tmp_ = io::make_temp_dir(parent, out_.filename().string(), "tmp");
  } catch (const Error& e) {
    fail(ErrorKind::io, out_.string(), "", std::string("output directory is not writable: ") + e.what());
  }
  guard_.path = tmp_;
}

void Job::plan() {
  const Matcher targets = parse_matcher(o_.targets.empty() ? std::vector<std::string>{"Linear"} : o_.targets, "targets");
  const Matcher ignore = parse_matcher(o_.ignore, "ignore");
  std::set<std::string> compressed_modules;
  for (const TensorInfo& t : ckpt_->tensors()) {
    Item it;
    it.t = &t;
    it.work = t.dtype;
    if (o_.dtype && is_float(t.dtype)) {
      it.work = *o_.dtype;
      it.convert = it.work != t.dtype;
    }
    bytes_total_ += t.stored_bytes();
    if (r_.format != Format::dense && t.shape.size() == 2 && ends_with(t.name, ".weight") && t.numel() > 0) {
      it.module = t.name.substr(0, t.name.size() - 7);
      if (targets.matches(it.module, t) && !ignore.matches(it.module, t)) {
        it.compress = true;
        check_compressible(it, r_, file_of(t));
        compressed_modules.insert(it.module);
      }
    }
    if (!it.compress) add(it, t.name, it.work, t.shape);
    items_.push_back(std::move(it));
  }
  if (r_.format != Format::dense && compressed_modules.empty())
    fail(ErrorKind::invalid_argument, in_.string(), "", "no tensor matches the targets (2-D `.weight` tensors of modules "
         "matched by --targets and not by --ignore); nothing to compress");
  // Config `ignore`: the user's patterns, plus every module holding an uncompressed `.weight`
  // (so that no loader - class-based or the library's name-based model-free converter - takes
  // it for a quantized one). Modules ending in "norm" are skipped: never Linear, and the
  // library's name matching skips them itself (utils/match.py `match_quantizable_tensors`).
  ignore_out_ = o_.ignore;
  std::set<std::string> seen(o_.ignore.begin(), o_.ignore.end());
  for (const Item& it : items_) {
    const TensorInfo& t = *it.t;
    if (!ends_with(t.name, ".weight")) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    if (compressed_modules.count(module) || ends_with(module, "norm") || ignore.matches(module, t)) continue;
    if (seen.insert(module).second) ignore_out_.push_back(module);
  }
}

void Job::scan() {
  std::vector<Item*> need;
  for (auto& it : items_)
    if (it.compress && (r_.format == Format::sparse_bitmask || r_.format == Format::nvfp4_pack_quantized)) need.push_back(&it);
  uint64_t total = 0, done = 0;
  for (auto* it : need) total += it->t->stored_bytes();
  std::vector<float> buf;
  for (size_t k = 0; k < need.size(); ++k) {
    check_cancel();
    Item& it = *need[k];
    const uint64_t n = it.t->numel();
    buf.resize(n);
    ckpt_->decode_into(*it.t, std::as_writable_bytes(std::span(buf)), DType::F32);
    if (it.convert)
      for (auto& v : buf) v = writer::round_to(it.work, v);
    if (r_.format == Format::sparse_bitmask) {
      uint64_t nnz = 0;
      for (float v : buf) nnz += (codecs::f32_bits(v) & 0x7FFFFFFFu) != 0;
      it.nnz = nnz;
    } else {
      const auto [lo, hi] = writer::min_max(buf.data(), n);
      it.tmin = lo;
      it.tmax = hi;
    }
    done += it.t->stored_bytes();
    if (o_.progress)
      o_.progress({CompressProgress::Phase::scan, k + 1, need.size(), done, total, it.t->name, elapsed()});
  }
  if (r_.format == Format::nvfp4_pack_quantized) {
    std::map<std::string, Item*> by_module;
    for (auto& it : items_)
      if (it.compress) by_module[it.module] = &it;
    for (auto& it : items_)
      if (it.compress) it.global_scale = writer::nvfp4_global_scale(it.tmin, it.tmax, it.work);
    if (o_.fuse_global_scales) {
      // llm-compressor observers/helpers.py FUSED_LAYER_NAMES + fuse_weight_observers: the
      // layers of a fused group share one global scale computed over all of them.
      static const std::vector<std::vector<std::string>> groups = {
          {"gate_proj", "up_proj"}, {"q_proj", "k_proj", "v_proj"}, {"q_a_proj", "kv_a_proj_with_mqa"}, {"w1", "w3"}};
      for (const auto& [module, it] : by_module) {
        const size_t dot = module.rfind('.');
        const std::string parent = dot == std::string::npos ? "" : module.substr(0, dot + 1);
        const std::string last = module.substr(dot == std::string::npos ? 0 : dot + 1);
        for (const auto& g : groups) {
          if (g[0] != last) continue;
          std::vector<Item*> members;
          for (const auto& nm : g) {
            auto f = by_module.find(parent + nm);
            if (f != by_module.end()) members.push_back(f->second);
          }
          if (members.size() != g.size()) continue;  // a member missing or not compressed
          float lo = members[0]->tmin, hi = members[0]->tmax;
          for (auto* m : members) lo = std::min(lo, m->tmin), hi = std::max(hi, m->tmax);
          const float gs = writer::nvfp4_global_scale(lo, hi, members[0]->work);
          for (auto* m : members) m->global_scale = gs;
        }
      }
    }
  }
}

void Job::write_item(Item& it, SafetensorsWriter& w) {
  const TensorInfo& t = *it.t;
  TensorReport tr;
  tr.name = t.name;
  tr.input_dtype = t.dtype;
  tr.shape = t.shape;
  tr.input_bytes = t.stored_bytes();
  for (const auto& e : it.out) tr.output_bytes += e.bytes;
  const std::string file = file_of(t);

  if (!it.compress) {
    // Copied (or converted) as is, in chunks of rows along dim 0, so a large embedding costs
    // ~kChunk of memory rather than its size.
    constexpr uint64_t kChunk = 16ull << 20;
    tr.format = Format::dense;
    tr.output_dtype = it.work;
    const uint64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const uint64_t row_elems = rows ? t.numel() / rows : 0;
    const uint64_t row_bytes = std::max<uint64_t>(1, row_elems * 4);
    const uint64_t step = t.shape.empty() || t.format != Format::dense || dtype_bits(t.dtype) < 8 ? std::max<uint64_t>(rows, 1)
                                                                       : std::max<uint64_t>(1, kChunk / row_bytes);
    const bool via_f32 = is_float(t.dtype) && (it.convert || t.format != Format::dense);
    ErrStats st;
    std::vector<float> v;
    std::vector<std::byte> outb;
    for (uint64_t r0 = 0; r0 < std::max<uint64_t>(rows, 1); r0 += step) {
      const uint64_t r1 = std::min(rows, r0 + step);
      const std::optional<Slice> sl = t.shape.empty() || (r0 == 0 && r1 == rows) ? std::nullopt
                                                                                 : std::optional<Slice>(Slice{0, r0, r1});
      const uint64_t n = t.shape.empty() ? t.numel() : (r1 - r0) * row_elems;
      outb.resize((n * dtype_bits(it.work) + 7) / 8);
      if (via_f32) {
        v.resize(n);
        ckpt_->decode_into(t, std::as_writable_bytes(std::span(v)), DType::F32, sl);
        if (it.convert) {
          for (uint64_t i = 0; i < n; ++i) {
            const float c = writer::round_to(it.work, v[i]);
            if (o_.compute_errors) st.add(v[i], c);
            v[i] = c;
          }
        }
        store(v.data(), n, it.work, outb.data());
      } else {
        ckpt_->decode_into(t, outb, it.work, sl);
      }
      w.write(outb);
      if (rows == 0) break;
    }
    st.fill(tr, t.numel());
    rep_.tensors.push_back(std::move(tr));
    return;
  }

  tr.format = r_.format;
  tr.scheme = r_.scheme;
  const uint64_t R = t.shape[0], C = t.shape[1], n = R * C;
  std::vector<float> v(n);
  ckpt_->decode_into(t, std::as_writable_bytes(std::span(v)), DType::F32);
  std::vector<float> orig;
  if (it.convert) {
    if (o_.compute_errors) orig = v;
    for (auto& x : v) x = writer::round_to(it.work, x);
  }
  const std::vector<float>& ref = it.convert && o_.compute_errors ? orig : v;
  ErrStats st;

  if (is_quantized_format(r_.format)) {
    for (uint64_t i = 0; i < n; ++i)
      if (!std::isfinite(v[i]))
        fail(ErrorKind::invalid_argument, file, t.name, "contains NaN or Inf at element " + std::to_string(i) +
             "; it cannot be quantized (--ignore the module)");
    const auto& a = r_.args;
    const auto qp = writer::compute_qparams(v.data(), R, C, it.work, a,
                                            a.strategy == QuantStrategy::tensor_group ? std::optional<float>(it.global_scale) : std::nullopt);
    std::vector<uint8_t> codes(n);
    writer::quantize(v.data(), R, C, it.work, a, qp, codes.data());
    const uint64_t ns = qp.scale.size();
    std::vector<std::byte> scale_b(ns * 4);
    if (r_.format == Format::nvfp4_pack_quantized) {
      for (uint64_t i = 0; i < ns; ++i) scale_b[i] = static_cast<std::byte>(writer::f32_to_e4m3(qp.scale[i]));
      scale_b.resize(ns);
    } else {
      store(qp.scale.data(), ns, it.work, scale_b.data());
      scale_b.resize(ns * (dtype_bits(it.work) / 8));
    }
    switch (r_.format) {
      case Format::pack_quantized: {
        const auto packed = writer::pack_int32_rows(reinterpret_cast<const int8_t*>(codes.data()), R, C, a.num_bits);
        w.write(as_bytes_of(packed));
        w.write(scale_b);
        const std::vector<int64_t> shape{static_cast<int64_t>(R), static_cast<int64_t>(C)};
        w.write(as_bytes_of(shape));
        if (!a.symmetric) {
          std::vector<int8_t> zp(ns);
          for (uint64_t i = 0; i < ns; ++i) zp[i] = static_cast<int8_t>(qp.zero_point[i]);
          if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::channel)
            w.write(as_bytes_of(writer::pack_int32_cols(zp.data(), qp.shape[0], qp.shape[1], a.num_bits)));
          else
            w.write(as_bytes_of(zp));
        }
        break;
      }
      case Format::int_quantized:
      case Format::float_quantized: {
        w.write(as_bytes_of(codes));
        w.write(scale_b);
        if (!a.symmetric) {
          std::vector<int8_t> zp(ns);
          for (uint64_t i = 0; i < ns; ++i) zp[i] = static_cast<int8_t>(qp.zero_point[i]);
          w.write(as_bytes_of(zp));
        }
        break;
      }
      case Format::nvfp4_pack_quantized: {
        std::vector<uint8_t> packed(n / 2);
        writer::pack_fp4(codes.data(), n, packed.data());
        w.write(as_bytes_of(packed));
        w.write(scale_b);
        const std::vector<float> g{qp.global_scale};
        w.write(as_bytes_of(g));
        break;
      }
      default: break;
    }
    tr.output_dtype = writer::dequantized_dtype(a, it.work);
    if (o_.compute_errors) {
      std::vector<float> deq(n);
      writer::dequantize(codes.data(), R, C, it.work, a, qp, deq.data());
      for (uint64_t i = 0; i < n; ++i) st.add(ref[i], deq[i]);
    } else {
      st.exact = false;
    }
  } else {  // sparse: values kept in `work` dtype
    tr.output_dtype = it.work;
    const unsigned eb = dtype_bits(it.work) / 8;
    std::vector<std::byte> raw(n * eb);
    store(v.data(), n, it.work, raw.data());
    const std::vector<int64_t> shape{static_cast<int64_t>(R), static_cast<int64_t>(C)};
    std::vector<uint8_t> mask(R * ((C + 7) / 8));
    if (r_.format == Format::sparse_bitmask) {
      const uint64_t nnz = writer::count_nonzero(raw.data(), n, it.work);
      if (nnz != it.nnz)
        fail(ErrorKind::io, file, t.name, "tensor changed while it was being compressed (non-zero count differs between passes)");
      std::vector<std::byte> values(nnz * eb);
      std::vector<int64_t> row_offsets(R);
      writer::bitmask_compress(raw.data(), R, C, it.work, values.data(), mask.data(), row_offsets.data());
      w.write(as_bytes_of(shape));
      w.write(values);
      w.write(as_bytes_of(mask));
      w.write(as_bytes_of(row_offsets));
      if (o_.compute_errors)  // the library decodes zeros where nothing is stored
        for (uint64_t i = 0; i < n; ++i) st.add(ref[i], (codecs::f32_bits(v[i]) & 0x7FFFFFFFu) ? v[i] : 0.f);
    } else {
      std::vector<uint8_t> keep(n);
      tr.pruned = writer::mask_24(raw.data(), n, it.work, keep.data());
      if (tr.pruned && !o_.prune_24)
        fail(ErrorKind::invalid_argument, file, t.name, "is not 2:4 sparse (" + std::to_string(tr.pruned) +
             " groups of 4 hold more than 2 non-zeros); pass --prune-24 to keep the 2 largest of every 4, as "
             "compressed-tensors' compressor does");
      std::vector<std::byte> values(n / 2 * eb);
      writer::sparse24_compress(raw.data(), R, C, it.work, keep.data(), values.data(), mask.data());
      const std::vector<int64_t> shape21 = shape;  // stored as [2, 1]
      w.write(as_bytes_of(shape21));
      w.write(values);
      w.write(as_bytes_of(mask));
      if (o_.compute_errors)
        for (uint64_t i = 0; i < n; ++i) st.add(ref[i], keep[i] ? v[i] : 0.f);
    }
  }
  st.fill(tr, n);
  if (!o_.compute_errors) {
    tr.snr_db = 0;
    tr.exact = false;
  }
  rep_.tensors.push_back(std::move(tr));
}

void Job::write_shards() {
  // Greedy shards in input order; a module's parts stay in one shard.
  uint64_t cur = 0;
  size_t shard = 0;
  for (auto& it : items_) {
    uint64_t b = 0;
    for (const auto& e : it.out) b += e.bytes;
    if (cur > 0 && cur + b > o_.shard_bytes) {
      ++shard;
      cur = 0;
    }
    it.shard = shard;
    cur += b;
  }
  const size_t nshards = items_.empty() ? 1 : shard + 1;
  for (size_t s = 0; s < nshards; ++s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
    shard_names_.push_back(nshards == 1 ? "model.safetensors" : buf);
  }
  size_t done = 0;
  uint64_t bytes_done = 0;
  size_t i = 0;
  for (size_t s = 0; s < nshards; ++s) {
    check_cancel();
    std::vector<SafetensorsWriter::Entry> entries;
    size_t j = i;
    for (; j < items_.size() && items_[j].shard == s; ++j)
      for (const auto& e : items_[j].out) entries.push_back({e.key, e.dtype, e.shape});
    SafetensorsWriter w(tmp_ / shard_names_[s], std::move(entries),
                        {{"format", "pt"}, {"writer", std::string("ctstream ") + "compress"}});
    for (; i < j; ++i) {
      check_cancel();
      write_item(items_[i], w);
      ++done;
      bytes_done += items_[i].t->stored_bytes();
      if (o_.progress)
        o_.progress({CompressProgress::Phase::write, done, items_.size(), bytes_done, bytes_total_, items_[i].t->name, elapsed()});
    }
    w.commit();
    rep_.files.push_back(shard_names_[s]);
  }
  if (nshards > 1) {
    json wm = json::object();
    uint64_t total = 0;
    for (const auto& it : items_)
      for (const auto& e : it.out) {
        wm[e.key] = shard_names_[it.shard];
        total += e.bytes;
      }
    json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", wm}};
    write_text(tmp_ / "model.safetensors.index.json", idx.dump(2) + "\n");
    rep_.files.push_back("model.safetensors.index.json");
  }
}

json weight_args_json(const WeightArgs& a) {
  json w = {{"dynamic", false},
            {"num_bits", a.num_bits},
            {"strategy", std::string(strategy_name(a.strategy))},
            {"symmetric", a.symmetric},
            {"type", a.type == QuantType::int_ ? "int" : "float"}};
  w["group_size"] = (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group)
                        ? json(a.group_size) : json(nullptr);
  if (a.strategy == QuantStrategy::block) w["block_structure"] = {a.block_rows, a.block_cols};
  if (a.fp8_scale) w["scale_dtype"] = "torch.float8_e4m3fn";
  return w;
}

void Job::write_config() {
  json cfg = json::object();
  const std::string& text = ckpt_->config_json();
  if (!text.empty()) {
    try {
      cfg = json::parse(text);
    } catch (const json::exception& e) {
      fail(ErrorKind::invalid_config, (in_ / "config.json").string(), "", std::string("config.json is not valid JSON: ") + e.what());
    }
    if (!cfg.is_object()) fail(ErrorKind::invalid_config, (in_ / "config.json").string(), "", "config.json is not a JSON object");
  }
  // The input's own compression settings no longer apply: every tensor was decoded.
  cfg.erase("quantization_config");
  cfg.erase("compression_config");
  cfg.erase("sparsity_config");
  if (o_.dtype && !text.empty()) {  // what transformers' save_pretrained records after model.to(dtype)
    cfg["torch_dtype"] = dtype_torch_name(*o_.dtype);
    if (cfg.contains("dtype")) cfg["dtype"] = dtype_torch_name(*o_.dtype);
  }
  const json targets = o_.targets.empty() ? json::array({"Linear"}) : json(o_.targets);
  if (is_quantized_format(r_.format)) {
    const std::string f(format_name(r_.format));
    json ia = nullptr;
    if (r_.activations) {
      const bool block = r_.args.strategy == QuantStrategy::block;
      ia = {{"dynamic", true},
            {"group_size", block ? json(128) : json(nullptr)},
            {"num_bits", 8},
            {"strategy", block ? "group" : "token"},
            {"symmetric", true},
            {"type", r_.args.type == QuantType::int_ ? "int" : "float"}};
    }
    cfg["quantization_config"] = {
        {"config_groups",
         {{"group_0",
           {{"format", f}, {"input_activations", ia}, {"output_activations", nullptr}, {"targets", targets},
            {"weights", weight_args_json(r_.args)}}}}},
        {"format", f},
        {"global_compression_ratio", nullptr},
        {"ignore", ignore_out_},
        {"kv_cache_scheme", nullptr},
        {"moe_sparsity_config", nullptr},
        {"quant_method", "compressed-tensors"},
        {"quantization_status", "compressed"},
        {"sparsity_config", json::object()},
        {"transform_config", json::object()},
        {"version", kVersion020}};
  } else if (is_sparse_format(r_.format)) {
    // llm-compressor's SparsityConfigMetadata: global_sparsity = zeros / parameters, model-wide.
    double zeros = 0, total = 0;
    for (const auto& tr : rep_.tensors) {
      if (!is_float(tr.input_dtype)) continue;
      uint64_t n = 1;
      for (auto d : tr.shape) n *= d;
      total += static_cast<double>(n);
    }
    for (const auto& it : items_) zeros += static_cast<double>(it.compress && r_.format == Format::sparse_bitmask ? it.t->numel() - it.nnz : 0);
    if (r_.format == Format::sparse_24_bitmask)
      for (const auto& it : items_) zeros += it.compress ? static_cast<double>(it.t->numel()) / 2 : 0;
    cfg["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"sparsity_config",
         {{"format", std::string(format_name(r_.format))},
          {"global_sparsity", total > 0 ? zeros / total : 0.0},
          {"ignore", ignore_out_},
          {"registry_requires_subclass", false},
          {"sparsity_structure", r_.format == Format::sparse_24_bitmask ? "2:4" : "unstructured"},
          {"targets", targets}}},
        {"transform_config", json::object()},
        {"version", kVersion012}};
  } else if (text.empty()) {
    return;  // dense output of a bare file: nothing to say
  }
  write_text(tmp_ / "config.json", cfg.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  rep_.files.push_back("config.json");
}

void Job::copy_others() {
  std::error_code ec;
  if (!o_.copy_other_files || !fs::is_directory(in_, ec)) return;
  std::set<fs::path> own;
  for (const auto& f : ckpt_->files()) own.insert(fs::weakly_canonical(f, ec));
  static const char* skip_ext[] = {".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf", ".ot", ".safetensors"};
  const fs::path out_canon = fs::weakly_canonical(out_, ec);
  const fs::path tmp_canon = fs::weakly_canonical(tmp_, ec);
  for (auto itr = fs::recursive_directory_iterator(in_, ec); !ec && itr != fs::recursive_directory_iterator(); itr.increment(ec)) {
    const fs::path p = itr->path();
    const std::string name = p.filename().string();
    const fs::path canon = fs::weakly_canonical(p, ec);
    if (name.empty() || name[0] == '.' || canon == out_canon || canon == tmp_canon) {
      if (itr->is_directory(ec)) itr.disable_recursion_pending();
      continue;
    }
    const fs::path rel = fs::relative(p, in_, ec);
    if (itr->is_directory(ec)) continue;
    if (!itr->is_regular_file(ec)) continue;  // follows symlinks (HF cache snapshots)
    const std::string rels = rel.generic_string();
    if (rel == "config.json" || own.count(canon) || ends_with(name, ".safetensors.index.json")) continue;
    bool weights = false;
    for (const char* e : skip_ext) weights = weights || ends_with(lower(name), e);
    if (weights) {
      rep_.skipped.push_back(rels);
      continue;
    }
    const fs::path dst = tmp_ / rel;
    fs::create_directories(dst.parent_path(), ec);
    if (ec) fail(ErrorKind::io, dst.string(), "", "cannot create directory: " + ec.message());
    fs::copy_file(p, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) fail(ErrorKind::io, dst.string(), "", "cannot copy " + p.string() + ": " + ec.message());
    rep_.copied.push_back(rels);
  }
  if (ec) fail(ErrorKind::io, in_.string(), "", "cannot list the input directory: " + ec.message());
}

void Job::commit() {
  check_cancel();
  std::error_code ec;
  fsync_dir(tmp_);
  fs::path old;
  if (fs::exists(out_, ec)) {
    if (fs::is_empty(out_, ec)) {
      fs::remove(out_, ec);
    } else {
      old = tmp_.parent_path() / ("." + out_.filename().string() + ".ctstream-old-" + io::random_token());
      fs::rename(out_, old, ec);
    }
    if (ec) fail(ErrorKind::io, out_.string(), "", "cannot replace the existing output directory: " + ec.message());
  }
  fs::rename(tmp_, out_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, out_, ec);
    fail(ErrorKind::io, out_.string(), "", "cannot rename the finished output into place: " + ec.message());
  }
  guard_.keep = true;
  fsync_dir(out_.parent_path());
  if (!old.empty()) fs::remove_all(old, ec);
}

CompressReport Job::run() {
  in_ = fs::absolute(in_).lexically_normal();
  ckpt_.emplace(Checkpoint::open(in_, o_.open));
  prepare_output();
  plan();
  scan();
  for (auto& it : items_)
    if (it.compress) plan_entries(it, r_);
  write_shards();
  write_config();
  copy_others();
  commit();
  for (const auto& tr : rep_.tensors) {
    rep_.input_bytes += tr.input_bytes;
    rep_.output_bytes += tr.output_bytes;
    ++rep_.format_counts[std::string(format_name(tr.format))];
  }
  rep_.seconds = elapsed();
  return std::move(rep_);
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

CompressReport compress_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out_dir,
                                   const CompressOptions& options) {
  Job job(in, out_dir, options);
  return job.run();
}

std::string describe_scheme(const CompressOptions& options) { return resolve(options).scheme; }

std::string report_json(const CompressReport& r, const CompressOptions& o) {
  json tensors = json::array();
  for (const auto& t : r.tensors)
    tensors.push_back({{"name", t.name},
                       {"format", std::string(format_name(t.format))},
                       {"scheme", t.scheme},
                       {"input_dtype", std::string(dtype_name(t.input_dtype))},
                       {"output_dtype", std::string(dtype_name(t.output_dtype))},
                       {"shape", t.shape},
                       {"input_bytes", t.input_bytes},
                       {"output_bytes", t.output_bytes},
                       {"exact", t.exact},
                       {"max_abs_error", t.max_abs_error},
                       {"rms_error", t.rms_error},
                       {"snr_db", num_or_null(t.snr_db)},
                       {"pruned_groups", t.pruned}});
  json j = {{"format", std::string(format_name(o.format))},
            {"scheme", describe_scheme(o)},
            {"input_bytes", r.input_bytes},
            {"output_bytes", r.output_bytes},
            {"ratio", r.ratio()},
            {"seconds", r.seconds},
            {"format_counts", r.format_counts},
            {"files", r.files},
            {"copied", r.copied},
            {"skipped", r.skipped},
            {"tensors", tensors}};
  return j.dump(2) + "\n";
}

}  // namespace ctstream
