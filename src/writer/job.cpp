// writer — `compress_checkpoint`: read a dense checkpoint tensor by tensor, plan (plan.hpp),
// check the plan with the reader's own validation, compress (encode.hpp), write shards + index +
// config.json into a temporary directory beside the output, copy the other files, rename into
// place (the directory itself: io::OutputDir). Layouts and config follow compressed-tensors 0.20.0
// for the quantized formats and 0.12.2 for the sparse ones (see format/format_table.hpp and
// format/config_writer.hpp).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "codecs/encode.hpp"
#include "codecs/half.hpp"
#include "core/boundary.hpp"
#include "core/paths.hpp"
#include "ctstream/error.hpp"
#include "ctstream/safetensors_writer.hpp"
#include "ctstream/writer.hpp"
#include "format/config_writer.hpp"
#include "format/file_names.hpp"
#include "format/low_rank.hpp"
#include "format/shards.hpp"
#include "io/output_dir.hpp"
#include "writer/encode.hpp"
#include "writer/plan.hpp"
#include "writer/report.hpp"
#include "writer/source.hpp"
#include "writer/svd.hpp"

namespace ctstream {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace writer;

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Job {
 public:
  /// `in`: the input checkpoint's path when the source is one (the output may neither contain nor
  /// lie inside it; its other files are copied); empty for in-memory sources.
  Job(TensorSource& src, const fs::path& in, const fs::path& out, const CompressOptions& o)
      : src_(src), in_(in), out_(out), o_(o), r_(resolve(o)), t0_(std::chrono::steady_clock::now()) {}
  CompressReport run();

 private:
  /// The source's rows: a caller's TensorSource (or BufferSource fetch) that throws gets its own
  /// exception back from compress(), as thrown.
  void read_source(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) {
    detail::call_source([&] { src_.read(i, r0, r1, out, dtype); });
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void check_cancel() const {
    if (o_.cancel && o_.cancel->load()) fail(ErrorKind::io, out_.string(), "", "cancelled; nothing was written");
  }
  void scan();
  std::string config_text() const;
  void write_shards();
  void write_item(Item& it, SafetensorsWriter& w);
  void write_dense(Item& it, SafetensorsWriter& w, TensorReport& tr);
  void copy_others();
  void check_finite(const Item& it, const std::vector<float>& v) const;
  void write_extra_files();
  void read_whole(const Item& it, std::span<std::byte> f32) {
    read_source(it.index, 0, it.t->shape.empty() ? 1 : it.t->shape[0], f32, DType::F32);
  }

  TensorSource& src_;
  fs::path in_, out_;
  std::optional<io::OutputDir> dir_;  ///< set by run(): the temporary directory, renamed at the end
  const CompressOptions& o_;
  Resolved r_;
  std::chrono::steady_clock::time_point t0_;
  Plan plan_;
  std::vector<Item>& items_ = plan_.items;
  std::vector<std::string> shard_names_;
  CompressReport rep_;
};

void Job::scan() {
  std::vector<Item*> need;
  const bool energy = r_.format == Format::low_rank && r_.energy > 0;
  for (auto& it : items_)
    if (it.compress && (r_.format == Format::sparse_bitmask || r_.format == Format::nvfp4_pack_quantized || energy))
      need.push_back(&it);
  uint64_t total = 0, done = 0;
  for (auto* it : need) total += it->t->stored_bytes();
  std::vector<float> buf;
  for (size_t k = 0; k < need.size(); ++k) {
    check_cancel();
    Item& it = *need[k];
    const uint64_t n = it.t->numel();
    buf.resize(n);
    read_whole(it, std::as_writable_bytes(std::span(buf)));
    if (it.convert)
      for (auto& v : buf) v = round_to(it.work, v);
    if (energy) {
      // The rank the energy asks for, capped where the factors would stop being smaller.
      check_finite(it, buf);
      const uint64_t rows = it.t->shape[0], cols = it.t->numel() / rows;  // a conv as [out, in * kh * kw]
      const auto sv = singular_values(buf.data(), rows, cols, src_.origin(it.index), it.t->name);
      it.rank = std::min(rank_for_energy(sv, r_.energy), max_useful_rank(rows, cols));
    } else if (r_.format == Format::sparse_bitmask) {
      uint64_t nnz = 0;
      for (float v : buf) nnz += (codecs::f32_bits(v) & 0x7FFFFFFFu) != 0;
      it.nnz = nnz;
    } else {
      const auto [lo, hi] = min_max(buf.data(), n);
      it.tmin = lo;
      it.tmax = hi;
    }
    done += it.t->stored_bytes();
    if (o_.progress)
      detail::call_caller(o_.progress, CompressProgress{CompressProgress::Phase::scan, k + 1, need.size(), done, total,
                                                        it.t->name, elapsed()});
  }
  if (r_.format == Format::nvfp4_pack_quantized) {
    std::map<std::string, Item*> by_module;
    for (auto& it : items_)
      if (it.compress) by_module[it.module] = &it;
    for (auto& it : items_)
      if (it.compress) it.global_scale = nvfp4_global_scale(it.tmin, it.tmax, it.work);
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
          const float gs = nvfp4_global_scale(lo, hi, members[0]->work);
          for (auto* m : members) m->global_scale = gs;
        }
      }
    }
  }
}

std::string Job::config_text() const {
  format::CompressionSection s;
  s.format = r_.format;
  s.weights = r_.args;
  const ScaleForm form = scale_form(r_.format);
  s.scale_dtype = form == ScaleForm::e4m3_global ? "torch.float8_e4m3fn" : form == ScaleForm::e8m0 ? "torch.uint8" : "";
  s.input_activations = r_.activations;
  s.targets = o_.targets;
  s.ignore = plan_.config_ignore;
  s.dtype = o_.dtype;
  if (is_sparse_format(r_.format)) {
    // llm-compressor's SparsityConfigMetadata: global_sparsity = zeros / parameters, model-wide.
    double zeros = 0, total = 0;
    for (const auto& it : items_) {
      if (!is_float_output(it.t->dtype)) continue;
      total += static_cast<double>(it.t->numel());
      if (!it.compress) continue;
      zeros += r_.format == Format::sparse_bitmask ? static_cast<double>(it.t->numel() - it.nnz)
                                                   : static_cast<double>(it.t->numel()) / 2;
    }
    s.global_sparsity = total > 0 ? zeros / total : 0.0;
  }
  return format::compression_config(src_.config_json(), src_.config_origin(), s);
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
    SafetensorsWriter w(dir_->temp() / shard_names_[s], std::move(entries),
                        {{"format", "pt"}, {"writer", std::string("ctstream ") + "compress"}});
    for (; i < j; ++i) {
      check_cancel();
      write_item(items_[i], w);
      ++done;
      bytes_done += items_[i].t->stored_bytes();
      if (o_.progress)
        detail::call_caller(o_.progress, CompressProgress{CompressProgress::Phase::write, done, items_.size(),
                                                          bytes_done, plan_.input_bytes, items_[i].t->name, elapsed()});
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
    dir_->write_text(format::kIndexName, idx.dump(2) + "\n");
    rep_.files.emplace_back(format::kIndexName);
  }
}

void Job::write_dense(Item& it, SafetensorsWriter& w, TensorReport& tr) {
  // Copied (or converted) as is, in chunks of rows along dim 0, so a large embedding costs
  // ~kChunk of memory rather than its size.
  constexpr uint64_t kChunk = 16ull << 20;
  const TensorInfo& t = *it.t;
  tr.format = Format::dense;
  tr.output_dtype = it.work;
  if (t.numel() == 0) return;  // nothing to write, whatever the dims (a [2^62, 0] is no 2^62 steps)
  const uint64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const uint64_t row_elems = rows ? t.numel() / rows : 0;
  const uint64_t row_bytes = std::max<uint64_t>(1, row_elems * 4);
  const uint64_t step = t.shape.empty() || t.format != Format::dense || dtype_bits(t.dtype) < 8
                            ? std::max<uint64_t>(rows, 1)
                            : std::max<uint64_t>(1, kChunk / row_bytes);
  const bool via_f32 = is_float_output(t.dtype) && (it.convert || t.format != Format::dense);
  ErrStats st;
  std::vector<float> v;
  std::vector<std::byte> outb;
  for (uint64_t r0 = 0; r0 < std::max<uint64_t>(rows, 1); r0 += step) {
    check_cancel();  // a large tensor is many chunks: Ctrl-C is honoured within it
    const uint64_t r1 = t.shape.empty() ? 1 : std::min(rows, r0 + step);
    const uint64_t n = t.shape.empty() ? t.numel() : (r1 - r0) * row_elems;
    outb.resize((n * dtype_bits(it.work) + 7) / 8);
    if (via_f32) {
      v.resize(n);
      read_source(it.index, r0, r1, std::as_writable_bytes(std::span(v)), DType::F32);
      if (it.convert) {
        for (uint64_t i = 0; i < n; ++i) {
          const float c = round_to(it.work, v[i]);
          if (o_.compute_errors) st.add(v[i], c);
          v[i] = c;
        }
      }
      codecs::store_floats(v.data(), n, it.work, outb.data());
    } else {
      read_source(it.index, r0, r1, outb, it.work);
    }
    w.write(outb);
    if (rows == 0) break;
  }
  st.fill(tr, t.numel());
}

void Job::write_item(Item& it, SafetensorsWriter& w) {
  const TensorInfo& t = *it.t;
  TensorReport tr;
  tr.name = t.name;
  tr.input_dtype = t.dtype;
  tr.shape = t.shape;
  tr.input_bytes = t.stored_bytes();
  for (const auto& e : it.out) tr.output_bytes += e.bytes;
  if (!it.compress) {
    write_dense(it, w, tr);
    rep_.tensors.push_back(std::move(tr));
    return;
  }
  const std::string file = src_.origin(it.index);
  tr.format = r_.format;
  tr.scheme = r_.scheme;
  const uint64_t n = t.numel();
  std::vector<float> v(n);
  read_whole(it, std::as_writable_bytes(std::span(v)));
  std::vector<float> orig;
  if (it.convert) {
    if (o_.compute_errors) orig = v;
    for (auto& x : v) x = round_to(it.work, x);
  }
  const std::vector<float>& ref = it.convert && o_.compute_errors ? orig : v;
  Encoded e;
  if (is_quantized_format(r_.format)) {
    check_finite(it, v);
    e = encode_quantized(it, r_, v, o_.compute_errors, file);
  } else if (r_.format == Format::low_rank) {
    check_finite(it, v);
    e = encode_low_rank(it, v, o_.compute_errors, file);
    tr.rank = it.rank;
    tr.scheme = "rank " + std::to_string(it.rank);
  } else {
    e = encode_sparse(it, r_, v, o_.prune_24, o_.compute_errors, file);
  }
  emit(it, e, w);
  tr.output_dtype = e.decoded_dtype;
  tr.pruned = e.pruned;
  ErrStats st;
  if (o_.compute_errors) {
    for (uint64_t i = 0; i < n; ++i) st.add(ref[i], e.decoded[i]);
    st.fill(tr, n);
  } else {
    tr.exact = false;
    tr.snr_db = 0;
  }
  rep_.tensors.push_back(std::move(tr));
}

void Job::check_finite(const Item& it, const std::vector<float>& v) const {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(ErrorKind::invalid_argument, src_.origin(it.index), it.t->name,
           "contains NaN or Inf at element " + std::to_string(i) + "; it cannot be " +
               (r_.format == Format::low_rank ? "decomposed" : "quantized") +
               " (leave the module out: --ignore / ignore=)");
}

void Job::copy_others() {
  std::error_code ec;
  if (!o_.copy_other_files || in_.empty() || !fs::is_directory(in_, ec)) return;
  std::set<fs::path> own;
  for (const auto& f : static_cast<const CheckpointSource&>(src_).checkpoint().files())
    own.insert(fs::weakly_canonical(f, ec));
  static const char* skip_ext[] = {".bin",     ".pt",   ".pth",  ".ckpt", ".h5",
                                   ".msgpack", ".onnx", ".gguf", ".ot",   ".safetensors"};
  const fs::path out_canon = fs::weakly_canonical(out_, ec);
  const fs::path tmp_canon = fs::weakly_canonical(dir_->temp(), ec);
  // Where a file may resolve to: inside IN, or, for a Hugging Face cache snapshot
  // (<repo>/snapshots/<rev>/x -> ../../blobs/<hash>), inside that repo's blobs/. A link anywhere
  // else (a planted tokenizer.json -> ~/.ssh/id_rsa) is not copied into OUT, which users upload.
  const fs::path in_canon = fs::weakly_canonical(in_, ec);
  const fs::path blobs =
      in_canon.parent_path().filename() == "snapshots" ? in_canon.parent_path().parent_path() / "blobs" : fs::path{};
  const auto link_target_allowed = [&](const fs::path& target) {
    return detail::path_within(target, in_canon) || detail::path_within(target, blobs);
  };
  // Directory links are not followed (the iterator's default); a file link is copied as the
  // content it resolves to (a Hugging Face cache snapshot is links to ../../blobs/<hash>), only
  // when that is a regular file. The copy goes to the entry's own path below IN, never to where
  // a link points.
  for (auto itr = fs::recursive_directory_iterator(in_, ec); !ec && itr != fs::recursive_directory_iterator();
       itr.increment(ec)) {
    check_cancel();
    const fs::path p = itr->path();
    const std::string name = p.filename().string();
    const bool is_dir = fs::is_directory(itr->symlink_status(ec));
    const fs::path canon = fs::weakly_canonical(p, ec);
    if (name.empty() || name[0] == '.' || canon == out_canon || canon == tmp_canon) {
      if (is_dir) itr.disable_recursion_pending();
      continue;
    }
    const fs::path rel = p.lexically_relative(in_);
    if (!format::is_contained_name(rel.string())) {
      if (is_dir) itr.disable_recursion_pending();
      continue;
    }
    if (is_dir) continue;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || io::on_pseudo_fs(p))
      continue;                                 // a FIFO, device, socket, dangling link or /proc file is never opened
    if (!link_target_allowed(canon)) continue;  // a link out of the checkpoint (~/.ssh/...): not copied
    const std::string rels = rel.generic_string();
    if (rel == format::kConfigName || own.count(canon) || ends_with(name, std::string(format::kIndexSuffix))) continue;
    bool weights = false;
    for (const char* e : skip_ext) weights = weights || ends_with(lower(name), e);
    if (weights) {
      rep_.skipped.push_back(rels);
      continue;
    }
    dir_->copy_file(p, st, rel, [this] { check_cancel(); });
    rep_.copied.push_back(rels);
  }
  if (ec) fail(ErrorKind::io, in_.string(), "", "cannot list the input directory: " + ec.message());
}

void Job::write_extra_files() {
  for (const auto& [name, text] : src_.extra_files()) {
    dir_->write_text(name, text);
    rep_.files.push_back(name);
  }
}

CompressReport Job::run() {
  // OUT is checked and claimed (io::OutputDir) before any input is read.
  dir_.emplace(out_, o_.overwrite, in_);
  out_ = dir_->path();
  plan_ = make_plan(src_.tensors(), o_, r_, src_.module_classes(), src_.conv_modules(),
                    [this](size_t i) { return src_.origin(i); });
  scan();
  for (auto& it : items_)
    if (it.compress) plan_parts(it, r_);
  const std::string config = config_text();
  check_plan(plan_, r_, config);  // the reader accepts what is about to be written
  write_shards();
  if (!config.empty()) {
    dir_->write_text(format::kConfigName, config);
    rep_.files.emplace_back(format::kConfigName);
  }
  if (r_.format == Format::low_rank) {
    dir_->write_text(std::string(format::kDecomposeConfigName), format::decompose_config_json(low_rank_modules(plan_)));
    rep_.files.push_back(std::string(format::kDecomposeConfigName));
  }
  copy_others();
  write_extra_files();
  check_cancel();
  dir_->commit();
  for (const auto& tr : rep_.tensors) {
    rep_.input_bytes += tr.input_bytes;
    rep_.output_bytes += tr.output_bytes;
    ++rep_.format_counts[std::string(format_name(tr.format))];
  }
  rep_.seconds = elapsed();
  return std::move(rep_);
}

}  // namespace

CompressReport compress_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out_dir,
                                   const CompressOptions& options) {
  return detail::at_boundary(in.string(), "", [&] {
    const fs::path abs = fs::absolute(in).lexically_normal();
    // A low-rank input is read as stored: its factors are what gets compressed (e.g. to int8),
    // and its decompose_config.json is copied along and still describes them.
    OpenOptions open = options.open;
    open.low_rank = LowRank::stored;
    std::error_code ec;
    const fs::path dir = fs::is_directory(abs, ec) ? abs : abs.parent_path();
    if (options.format == Format::low_rank && fs::exists(dir / std::string(format::kDecomposeConfigName), ec))
      fail(ErrorKind::invalid_argument, (dir / std::string(format::kDecomposeConfigName)).string(), "",
           "the input is already low-rank; decompose the original checkpoint (ctstream decompress gives it back)");
    CheckpointSource src(abs, open);
    Job job(src, abs, out_dir, options);
    return job.run();
  });
}

CompressReport compress(TensorSource& source, const std::filesystem::path& out_dir, const CompressOptions& options) {
  return detail::at_boundary("", "", [&] {
    Job job(source, {}, out_dir, options);
    return job.run();
  });
}

}  // namespace ctstream
