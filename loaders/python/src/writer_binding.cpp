// ctstream._ctstream — the writer: compress a checkpoint on disk, or tensors handed over one at a
// time by Python (ctstream.save_model / save_file). The GIL is released while compressing and
// taken back only to fetch the next tensor or report progress; an exception raised by Python
// there (KeyboardInterrupt included: pending signal handlers run there even without a progress
// callback) aborts the write - nothing is left behind - and is re-raised as it was.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "binding.hpp"
#include "ctstream/ctstream.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ctstream_py {
namespace {

using ctstream::CompressOptions;

/// A Python exception raised inside a callback, kept to be re-raised once the writer has cleaned up.
struct Pending {
  std::optional<nb::python_error> error;
  [[noreturn]] void stash_and_abort(nb::python_error&& e, const std::string& tensor) {
    const std::string what = e.what();
    error.emplace(std::move(e));
    throw ctstream::Error(ctstream::ErrorKind::io, "", tensor, "aborted by a Python exception: " + what);
  }
};

template <class T>
std::optional<T> get(const nb::dict& d, const char* key) {
  if (!d.contains(key)) return std::nullopt;
  nb::object v = d[key];
  if (v.is_none()) return std::nullopt;
  T out;
  if (!nb::try_cast<T>(v, out)) raise("invalid_argument", std::string(key) + ": wrong type");
  return out;
}

CompressOptions options_from(const nb::dict& d) {
  static const std::set<std::string> known = {"format",
                                              "bits",
                                              "strategy",
                                              "group_size",
                                              "block",
                                              "symmetric",
                                              "activations",
                                              "fuse_global_scales",
                                              "prune_24",
                                              "targets",
                                              "ignore",
                                              "dtype",
                                              "shard_size",
                                              "overwrite",
                                              "copy_other_files",
                                              "compute_errors",
                                              "io",
                                              "threads",
                                              "rank",
                                              "energy"};
  for (auto [k, v] : d) {
    std::string key;
    if (!nb::try_cast<std::string>(k, key) || !known.count(key))
      raise("invalid_argument", "unknown writer option '" + key + "'");
  }
  CompressOptions o;
  if (auto f = get<std::string>(d, "format")) o.format = ctstream::writer_format_from_name(*f);
  if (auto b = get<unsigned>(d, "bits")) o.num_bits = *b;
  if (auto s = get<std::string>(d, "strategy")) o.strategy = ctstream::writer_strategy_from_name(*s);
  if (auto g = get<uint64_t>(d, "group_size")) {
    o.group_size = *g;
    if (!o.strategy) o.strategy = ctstream::QuantStrategy::group;
  }
  if (auto b = get<std::tuple<uint64_t, uint64_t>>(d, "block")) {
    std::tie(o.block_rows, o.block_cols) = *b;
    if (!o.strategy) o.strategy = ctstream::QuantStrategy::block;
  }
  if (auto v = get<bool>(d, "symmetric")) o.symmetric = *v;
  if (auto v = get<bool>(d, "activations")) o.input_activations = *v;
  if (auto v = get<bool>(d, "fuse_global_scales")) o.fuse_global_scales = *v;
  if (auto v = get<bool>(d, "prune_24")) o.prune_24 = *v;
  if (auto v = get<uint64_t>(d, "rank")) o.rank = *v;
  if (auto v = get<double>(d, "energy")) o.energy = *v;
  if (auto v = get<std::vector<std::string>>(d, "targets")) o.targets = *v;
  if (auto v = get<std::vector<std::string>>(d, "ignore")) o.ignore = *v;
  if (auto s = get<std::string>(d, "dtype")) {
    const auto dt = ctstream::dtype_from_user(*s);
    if (!dt) raise("invalid_argument", "dtype must be bfloat16, float16 or float32; got '" + *s + "'");
    o.dtype = *dt;  // a dtype that is not a float output: describe_scheme() below
  }
  if (auto v = get<uint64_t>(d, "shard_size")) o.shard_bytes = *v;
  if (auto v = get<bool>(d, "overwrite")) o.overwrite = *v;
  if (auto v = get<bool>(d, "copy_other_files")) o.copy_other_files = *v;
  if (auto v = get<bool>(d, "compute_errors")) o.compute_errors = *v;
  if (auto s = get<std::string>(d, "io")) {
    if (*s != "mmap" && *s != "pread") raise("invalid_argument", "io must be 'mmap' or 'pread'");
    o.open.io = *s == "mmap" ? ctstream::IoMode::mmap : ctstream::IoMode::pread;
  }
  if (auto v = get<unsigned>(d, "threads")) o.open.threads = *v;
  o.validate();                        // the writer's rules on the options, as the CLI applies them
  (void)ctstream::describe_scheme(o);  // an inconsistent combination fails here, before any work
  return o;
}

/// Installs the progress hook, always: after each tensor (on the calling thread, the GIL taken
/// back) it runs Python's pending signal handlers - Ctrl-C raises KeyboardInterrupt there, which
/// aborts the write - then the user's `progress`, if any. (The writer offers no finer hook: a
/// Ctrl-C lands once the tensor being compressed is done.)
void set_progress(CompressOptions& o, nb::object progress, const std::shared_ptr<Pending>& pending) {
  auto fn = progress.is_none() ? nullptr : std::make_shared<nb::object>(std::move(progress));
  o.progress = [fn, pending](const ctstream::CompressProgress& p) {
    Locked gil;
    try {
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      if (!fn) return;
      nb::dict d;
      d["phase"] = p.phase == ctstream::CompressProgress::Phase::scan ? "scan" : "write";
      d["tensors_done"] = p.tensors_done;
      d["tensors_total"] = p.tensors_total;
      d["bytes_done"] = p.bytes_done;
      d["bytes_total"] = p.bytes_total;
      d["tensor"] = p.tensor;
      d["elapsed_s"] = p.elapsed_s;
      (*fn)(d);
    } catch (nb::python_error& e) {
      pending->stash_and_abort(std::move(e), p.tensor);
    }
  };
}

/// Runs `work` without the GIL; a stashed Python exception wins over the writer's own error.
template <class F>
std::string run_released(F&& work, const std::shared_ptr<Pending>& pending, const std::function<void()>& cleanup) {
  InCall in_call;  // through the Python callbacks of `work` and `cleanup`
  std::string out;
  std::exception_ptr failure;
  {
    Unlocked unlocked;
    try {
      out = work();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  cleanup();
  if (pending->error) {
    nb::python_error e = std::move(*pending->error);
    pending->error.reset();
    throw e;
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

/// The Python fetch callable behind a BufferSource: returns an object exposing a C-contiguous
/// buffer (e.g. a uint8 numpy view of a torch tensor); the buffer is held until the next call.
struct PyFetch {
  nb::object fn;
  Py_buffer view{};
  bool held = false;
  std::shared_ptr<Pending> pending;
  std::vector<std::string> names;

  void release_view() {  // GIL held
    if (held) PyBuffer_Release(&view);
    held = false;
  }
  std::span<const std::byte> operator()(size_t i) {
    Locked gil;
    release_view();
    try {
      if (PyErr_CheckSignals() != 0) throw nb::python_error();  // Ctrl-C between tensors
      nb::object r = fn(i);
      if (PyObject_GetBuffer(r.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
      held = true;
      return {static_cast<const std::byte*>(view.buf), static_cast<size_t>(view.len)};
    } catch (nb::python_error& e) {
      pending->stash_and_abort(std::move(e), i < names.size() ? names[i] : "");
    }
  }
};

std::string compress_tensors(const std::string& out_dir,
                             const std::vector<std::tuple<std::string, std::string, std::vector<uint64_t>>>& entries,
                             nb::object fetch, const nb::dict& options, const std::string& config_json,
                             const std::map<std::string, std::vector<std::string>>& module_classes,
                             const std::map<std::string, std::string>& extra_files,
                             const std::map<std::string, std::string>& conv_modules, nb::object progress) {
  auto pending = std::make_shared<Pending>();
  CompressOptions o = options_from(options);
  set_progress(o, std::move(progress), pending);
  std::vector<ctstream::BufferSource::Entry> es;
  auto pf = std::make_shared<PyFetch>();
  pf->fn = std::move(fetch);
  pf->pending = pending;
  for (const auto& [name, dtype, shape] : entries) {
    const auto d = ctstream::dtype_from_name(dtype);
    if (!d) raise("invalid_argument", "unknown dtype '" + dtype + "'", name);
    es.push_back({name, *d, ctstream::Shape(shape.begin(), shape.end())});
    pf->names.push_back(name);
  }
  std::optional<ctstream::BufferSource> src;
  try {
    src.emplace(
        std::move(es), [pf](size_t i) { return (*pf)(i); },
        ctstream::BufferSource::Model{config_json, module_classes, extra_files, conv_modules});
  } catch (const ctstream::Error& e) {
    set_error(std::string(ctstream::error_kind_name(e.kind())), e.what(), e.file(), e.tensor());
    throw nb::python_error();
  }
  return run_released([&] { return ctstream::report_json(ctstream::compress(*src, out_dir, o), o); }, pending,
                      [&] { pf->release_view(); });
}

std::string compress_checkpoint(const std::string& in, const std::string& out_dir, const nb::dict& options,
                                nb::object progress) {
  auto pending = std::make_shared<Pending>();
  CompressOptions o = options_from(options);
  set_progress(o, std::move(progress), pending);
  return run_released([&] { return ctstream::report_json(ctstream::compress_checkpoint(in, out_dir, o), o); }, pending,
                      [] {});
}

}  // namespace

void bind_writer(nb::module_& m) {
  m.def("_compress_tensors", &compress_tensors, "out_dir"_a, "entries"_a, "fetch"_a, "options"_a, "config_json"_a,
        "module_classes"_a, "extra_files"_a, "conv_modules"_a = std::map<std::string, std::string>{},
        "progress"_a = nb::none(),
        "Compresses tensors fetched one at a time (fetch(i) -> C-contiguous buffer) into out_dir; returns the "
        "report as JSON. Use ctstream.save_model / ctstream.save_file.");
  m.def("_compress_checkpoint", &compress_checkpoint, "input"_a, "out_dir"_a, "options"_a, "progress"_a = nb::none(),
        "Compresses a checkpoint on disk into out_dir; returns the report as JSON. Use ctstream.compress.");
}

}  // namespace ctstream_py
