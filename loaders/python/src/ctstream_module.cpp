// ctstream._ctstream — the native half of the Python package (nanobind). The pure-Python half
// (loaders/python/ctstream/__init__.py) turns what this returns into torch tensors or numpy
// arrays; this file only opens, validates, allocates and decodes (with the GIL released).
//
// Arrays are handed out as numpy arrays that own their memory (a capsule frees it): zero-copy for
// torch.from_numpy. Dtypes numpy lacks travel as same-width unsigned storage (BF16 -> uint16,
// F8_* -> uint8) together with the real dtype name, which the Python half re-views.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "binding.hpp"
#ifdef CTSTREAM_HAVE_REMOTE
#include "io/remote_file.hpp"
#endif
#include "ctstream/ctstream.hpp"
#include "io/url.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using ctstream::DType;
using ctstream::TensorInfo;
using ctstream_py::raise;
using ctstream_py::set_error;

namespace ctstream_py {
PyObject* g_error = nullptr;    // ctstream.Error(RuntimeError)
PyObject* g_classes = nullptr;  // dict: kind name -> subclass of Error (ctstream/__init__.py registers them)

// Raises the ctstream exception of `kind` (its registered class, else Error) with the attributes
// kind / file / tensor, as a Python error.
void set_error(const std::string& kind, const std::string& message, const std::string& file,
               const std::string& tensor) {
  // messages may quote bytes of a damaged file: never fail on invalid UTF-8
  auto text = [](const std::string& s) {
    return nb::steal(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace"));
  };
  PyObject* type = g_error;
  if (g_classes)
    if (PyObject* c = PyDict_GetItemString(g_classes, kind.c_str())) type = c;
  nb::object msg = text(message);
  if (!msg.is_valid()) return;
  nb::object exc = nb::steal(PyObject_CallOneArg(type, msg.ptr()));
  if (!exc.is_valid()) return;  // the call set its own error
  nb::setattr(exc, "kind", nb::str(kind.c_str()));
  nb::setattr(exc, "file", text(file));
  nb::setattr(exc, "tensor", text(tensor));
  PyErr_SetObject(type, exc.ptr());
}

[[noreturn]] void raise(const char* kind, const std::string& message, const std::string& tensor) {
  set_error(kind, message, "", tensor);
  throw nb::python_error();
}

namespace {
std::mutex g_exit_mu;
std::condition_variable g_exit_cv;
std::thread::id g_exit_thread;  // the thread that ran the atexit hook (none: not run), which never parks
unsigned g_in_calls = 0;
thread_local unsigned t_depth = 0;  // this thread's InCalls (a callback may call ctstream again)
[[noreturn]] void park() noexcept {
  for (;;) pause();
}
// fork(): the child has the forking thread only. The counts are that thread's, and no other
// thread holds the lock across the fork (taken in prepare, released on both sides).
const int g_fork_hooks = ::pthread_atfork([] { g_exit_mu.lock(); }, [] { g_exit_mu.unlock(); },
                                          [] {
                                            g_in_calls = t_depth;
                                            g_exit_thread = {};
                                            g_exit_mu.unlock();
                                          });

// Whether the calling Python thread is a daemon (GIL held; a thread threading did not make counts
// as one, as threading.current_thread() says).
bool daemon_thread() {
  try {
    return nb::cast<bool>(nb::module_::import_("threading").attr("current_thread")().attr("daemon"));
  } catch (...) {
    PyErr_Clear();
    return true;
  }
}
}  // namespace

InCall::InCall() {
  (void)g_fork_hooks;
  bool exiting;
  {
    std::lock_guard<std::mutex> lk(g_exit_mu);
    // Goes on: a call made from inside another (a Python callback of the writer calling ctstream:
    // parking it would keep the outer one, which at_exit waits for, from ever returning), and a
    // call from the thread that ran at_exit (atexit handlers registered before ctstream was
    // imported run after its hook, on that thread).
    exiting = g_exit_thread != std::thread::id() && t_depth == 0 && std::this_thread::get_id() != g_exit_thread;
  }
  // Once exiting, a daemon thread parks; any other thread was started by a later atexit handler,
  // which will wait for it: it goes on.
  if (exiting && daemon_thread()) {
    nb::set_leak_warnings(false);  // what this thread holds is never freed, by design
    (void)PyEval_SaveThread();     // the GIL for the threads still running
    park();
  }
  std::lock_guard<std::mutex> lk(g_exit_mu);
  ++g_in_calls;
  ++t_depth;
}
InCall::~InCall() {
  std::lock_guard<std::mutex> lk(g_exit_mu);
  --t_depth;
  if (--g_in_calls == 0) g_exit_cv.notify_all();
}
void park_if_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) park();
#else
  if (_Py_IsFinalizing()) park();
#endif
}
// The atexit hook (the main thread, GIL held): waits for the calls in flight, the GIL released,
// in steps that take it back to run signal handlers (Ctrl-C ends the wait with KeyboardInterrupt).
void at_exit() {
  {
    std::lock_guard<std::mutex> lk(g_exit_mu);
    g_exit_thread = std::this_thread::get_id();
    if (g_in_calls == 0) return;
  }
  nb::set_leak_warnings(false);  // the threads in flight may be parked later with what they hold
  for (;;) {
    {
      nb::gil_scoped_release unlocked;  // before finalization: taking it back returns
      std::unique_lock<std::mutex> lk(g_exit_mu);
      if (g_exit_cv.wait_for(lk, std::chrono::milliseconds(100), [] { return g_in_calls == 0; })) return;
    }
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

}  // namespace ctstream_py

namespace {

constexpr uint64_t kNoStop = std::numeric_limits<uint64_t>::max();
constexpr size_t kAlign = 64;

// ---- dtypes -------------------------------------------------------------------------------

namespace dl = nb::dlpack;

dl::dtype dl_of(dl::dtype_code c, uint8_t bits) { return dl::dtype{static_cast<uint8_t>(c), bits, 1}; }

// The exact DLPack dtype of a ctstream dtype (what torch exports for it).
dl::dtype exact_dl(DType d) {
  using C = dl::dtype_code;
  switch (d) {
    case DType::BOOL: return dl_of(C::Bool, 8);
    case DType::U8: return dl_of(C::UInt, 8);
    case DType::I8: return dl_of(C::Int, 8);
    case DType::I16: return dl_of(C::Int, 16);
    case DType::U16: return dl_of(C::UInt, 16);
    case DType::I32: return dl_of(C::Int, 32);
    case DType::U32: return dl_of(C::UInt, 32);
    case DType::I64: return dl_of(C::Int, 64);
    case DType::U64: return dl_of(C::UInt, 64);
    case DType::F16: return dl_of(C::Float, 16);
    case DType::BF16: return dl_of(C::Bfloat, 16);
    case DType::F32: return dl_of(C::Float, 32);
    case DType::F64: return dl_of(C::Float, 64);
    case DType::C64: return dl_of(C::Complex, 64);
    case DType::F8_E5M2: return dl_of(C::Float8_E5M2, 8);
    case DType::F8_E4M3: return dl_of(C::Float8_E4M3FN, 8);
    case DType::F8_E8M0: return dl_of(C::Float8_E8M0FNU, 8);
    case DType::F8_E4M3FNUZ: return dl_of(C::Float8_E4M3FNUZ, 8);
    case DType::F8_E5M2FNUZ: return dl_of(C::Float8_E5M2FNUZ, 8);
    case DType::F4: return dl_of(C::Float4_E2M1FN, 4);
    case DType::F6_E2M3: return dl_of(C::Float6_E2M3FN, 6);
    case DType::F6_E3M2: return dl_of(C::Float6_E3M2FN, 6);
  }
  return dl_of(C::UInt, 8);
}

bool sub_byte(DType d) { return ctstream::dtype_bits(d) < 8; }

// What numpy can hold: the exact dtype, or same-width unsigned storage for the ones it lacks.
dl::dtype storage_dl(DType d) {
  using C = dl::dtype_code;
  if (sub_byte(d)) return dl_of(C::UInt, 8);
  const dl::dtype e = exact_dl(d);
  switch (static_cast<C>(e.code)) {
    case C::Bool:
    case C::Int:
    case C::UInt:
    case C::Complex: return e;
    case C::Float: return e;                                                        // float16/32/64
    default: return dl_of(C::UInt, static_cast<uint8_t>(ctstream::dtype_bits(d)));  // bf16, fp8
  }
}

std::string dl_name(dl::dtype t) {
  using C = dl::dtype_code;
  std::string base;
  switch (static_cast<C>(t.code)) {
    case C::Int: base = "int"; break;
    case C::UInt: base = "uint"; break;
    case C::Float: base = "float"; break;
    case C::Bfloat: base = "bfloat"; break;
    case C::Complex: base = "complex"; break;
    case C::Bool: return "bool";
    case C::Float8_E4M3FN: return "float8_e4m3fn";
    case C::Float8_E5M2: return "float8_e5m2";
    case C::Float8_E8M0FNU: return "float8_e8m0fnu";
    case C::Float8_E4M3FNUZ: return "float8_e4m3fnuz";
    case C::Float8_E5M2FNUZ: return "float8_e5m2fnuz";
    default: base = "dlpack_code" + std::to_string(t.code) + "_"; break;
  }
  return base + std::to_string(t.bits);
}

// Does an `out` array of dtype `have` accept decoded elements of dtype `want`?
// Exact match, or same-width unsigned/signed integer storage for the dtypes numpy lacks
// (uint16/int16 for BF16 bits, uint8/int8 for F8_*).
bool out_dtype_ok(dl::dtype have, DType want) {
  using C = dl::dtype_code;
  if (have.lanes != 1) return false;
  if (have == exact_dl(want)) return true;
  const auto code = static_cast<C>(have.code);
  if (sub_byte(want)) return false;
  const dl::dtype e = exact_dl(want);
  const auto ecode = static_cast<C>(e.code);
  const bool raw_ok =
      ecode != C::Int && ecode != C::UInt && ecode != C::Bool && ecode != C::Float && ecode != C::Complex;
  return raw_ok && (code == C::UInt || code == C::Int) && have.bits == e.bits;
}

std::optional<DType> dtype_arg(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  auto d = ctstream::dtype_from_user(*s);
  if (!d) raise("invalid_argument", "unknown dtype '" + *s + "' (use bfloat16, float16 or float32)");
  if (!ctstream::is_float_output(*d))
    raise("invalid_argument", "dtype must be bfloat16, float16 or float32 (got '" + *s +
                                  "'); integer and bool tensors always come back as stored");
  return d;
}

// The dtype a tensor decodes to when `requested` is asked for: floating and compressed tensors
// convert, other dense tensors keep their stored dtype (the CLI's `decompress --dtype` rule).
DType resolve(const TensorInfo& t, std::optional<DType> requested) {
  ctstream::DecompressOptions o;
  o.dtype = requested;
  return ctstream::decompressed_dtype(t, o);
}

bool convertible(const TensorInfo& t) { return t.format != ctstream::Format::dense || ctstream::is_float(t.dtype); }

// ---- slices -------------------------------------------------------------------------------

struct SliceArg {
  std::optional<ctstream::Slice> slice;
  std::vector<size_t> shape;  // result shape
};

// dim < 0: the whole tensor. The slice is checked and shaped by the core (Checkpoint::output_shape:
// stop clamps to the dimension, start past it is an invalid_argument error), as decode_into does.
SliceArg slice_arg(const ctstream::Checkpoint& ck, const TensorInfo& t, int64_t dim, uint64_t start, uint64_t stop) {
  SliceArg a;
  if (dim >= 0) {
    if (static_cast<uint64_t>(dim) >= t.shape.size())  // before the narrowing to the core's unsigned dim
      raise("index",
            "slice dimension " + std::to_string(dim) + " out of range for '" + t.name + "' with " +
                std::to_string(t.shape.size()) + " dimensions",
            t.name);
    a.slice = ctstream::Slice{static_cast<unsigned>(dim), start, stop};
  }
  const std::vector<uint64_t> shape = ck.output_shape(t, a.slice);
  a.shape.assign(shape.begin(), shape.end());
  return a;
}

// ---- output arrays ------------------------------------------------------------------------

struct Buffer {
  std::byte* data;
  nb::capsule owner;
};

// Output buffers. Large ones are their own anonymous mappings, so freeing an array gives its
// pages back to the OS at once whichever thread allocated it (malloc would keep them in a
// per-thread arena: the stream allocates on its worker, Python frees on the main thread).
// A kAlign-byte header in front of the data records how to free it.
constexpr size_t kMmapFrom = 256u << 10;
constexpr size_t kHugeFrom = 2u << 20;
void* out_alloc(uint64_t bytes) {
  if (bytes > static_cast<uint64_t>(std::numeric_limits<size_t>::max() / 2)) throw std::bad_alloc();
  const size_t total = static_cast<size_t>(bytes) + kAlign;
  void* base;
  if (total >= kMmapFrom) {
    base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    // Transparent huge pages (asked for: "madvise" mode is a common default): a fresh array is
    // first written by the decoder, one fault per 2 MiB instead of per 4 KiB (measured on a
    // 0.9 GB-bf16 int4 model, 1 thread: tensors() 0.36 s -> 0.11 s; the rest was page faults).
    if (total >= kHugeFrom) ::madvise(base, total, MADV_HUGEPAGE);
#endif
  } else {
    base = ::operator new (total, std::align_val_t{kAlign});
  }
  std::memcpy(base, &total, sizeof total);
  return static_cast<std::byte*>(base) + kAlign;
}
void out_free(void* p) noexcept {
  std::byte* base = static_cast<std::byte*>(p) - kAlign;
  size_t total;
  std::memcpy(&total, base, sizeof total);
  if (total >= kMmapFrom) ::munmap(base, total);
  else ::operator delete (base, std::align_val_t{kAlign});
}

Buffer allocate(uint64_t bytes) {
  void* p = out_alloc(bytes);
  nb::capsule owner(p, [](void* q) noexcept { out_free(q); });
  return {static_cast<std::byte*>(p), std::move(owner)};
}

// A fresh numpy array for `shape` elements of `d` (sub-byte dtypes: 1-D bytes).
// Shape of the bytes of a sub-byte tensor: the logical shape with its last dim in bytes when the
// rows are whole bytes (F4: [..., n/2] as torch's float4_e2m1fn_x2 and safetensors give it;
// F6: [..., 3n/4]), else flat.
std::vector<size_t> packed_shape(DType d, std::vector<size_t> shape, uint64_t bytes) {
  const unsigned b = ctstream::dtype_bits(d);
  if (!shape.empty() && (shape.back() * b) % 8 == 0) {
    shape.back() = shape.back() * b / 8;
    return shape;
  }
  return {static_cast<size_t>(bytes)};
}

// The numpy array shape of `shape` elements of `d` (sub-byte dtypes: packed_shape), or a ctstream
// error naming `tensor` where numpy can hold no such array:
// - more than numpy's NPY_MAXDIMS (64) dims: safetensors' numpy path refuses those too, and
//   nanobind would hand numpy an object array, or abort the process past 128;
// - numpy multiplies the dims (zero or not) in a signed 64-bit size: an empty tensor of
//   [0, 2^32, 2^32] is valid safetensors but no numpy array (numpy's bare ValueError otherwise).
std::vector<size_t> array_shape(DType d, std::vector<size_t> shape, uint64_t bytes, const std::string& tensor) {
  constexpr size_t kMaxDims = 64;
  if (shape.size() > kMaxDims)
    raise("unsupported",
          "tensor '" + tensor + "' has " + std::to_string(shape.size()) + " dims: a numpy array has at most " +
              std::to_string(kMaxDims),
          tensor);
  if (sub_byte(d)) shape = packed_shape(d, std::move(shape), bytes);
  uint64_t n = 1;
  for (size_t v : shape)
    if (v != 0 && __builtin_mul_overflow(n, static_cast<uint64_t>(v), &n)) n = UINT64_MAX;
  if (n > static_cast<uint64_t>(INT64_MAX) / 8)
    raise("unsupported",
          "tensor '" + tensor +
              "' cannot be a numpy array: the product of its non-zero dims overflows numpy's 64-bit size",
          tensor);
  return shape;
}

nb::ndarray<nb::numpy> make_array(const Buffer& b, DType d, const std::vector<size_t>& shape, uint64_t bytes,
                                  const std::string& tensor) {
  const std::vector<size_t> s = array_shape(d, shape, bytes, tensor);
  return nb::ndarray<nb::numpy>(b.data, s.size(), s.data(), b.owner, nullptr, storage_dl(d));
}

// ---- the checkpoint -------------------------------------------------------------------------

using CkPtr = std::shared_ptr<const ctstream::Checkpoint>;

class PyCheckpoint;

// ckpt.tensors(): a ctstream::Stream decodes every tensor ahead on its worker (within `budget`
// bytes) straight into buffers allocated here, which are handed to Python as arrays without a copy.
class TensorIter {
 public:
  TensorIter(CkPtr ck, std::optional<DType> dtype, uint64_t budget, unsigned threads,
             std::optional<std::vector<std::string>> names)
      : ck_(std::move(ck)),
        dtype_(dtype),
        budget_(budget),
        threads_(threads),
        names_(std::move(names)),
        st_(std::make_unique<State>()) {
    if (names_)
      for (const auto& n : *names_) (void)ck_->at(n);  // unknown names fail here, not mid-stream
  }

  nb::tuple decode_next() {
    ctstream_py::InCall in_call;
    check_process();
    std::optional<ctstream::Stream::Item> item;
    void* p = nullptr;
    {
      // Any number of Python threads may advance one iterator: they take turns (the lock is
      // taken with the GIL released, so a thread waiting for it never blocks the holder).
      ctstream_py::Unlocked unlocked;
      std::lock_guard<std::mutex> turn(st_->next_mu);
      if (!st_->stream) start();
      try {
        item = st_->stream->next();  // rethrows a decode error at its tensor
      } catch (...) {
        drop_failed();  // the stream goes on with the next tensor: so does the iterator
        throw;
      }
      if (item) p = take(item->info);
    }
    if (!item) throw nb::stop_iteration();
    nb::capsule owner(p, [](void* q) noexcept { out_free(q); });
    const Buffer b{static_cast<std::byte*>(p), std::move(owner)};
    const TensorInfo& t = *item->info;
    return nb::make_tuple(t.name,
                          make_array(b, item->dtype, {t.shape.begin(), t.shape.end()}, item->data.size(), t.name),
                          std::string(ctstream::dtype_name(item->dtype)));
  }
  // A started iterator belongs to the process that started it: its decode worker, and the locks
  // that worker may have held, do not exist in a fork()ed child, where waiting on them would hang.
  void check_process() const {
    const pid_t owner = st_->pid.load();
    if (owner != 0 && owner != ::getpid())
      raise("forked",
            "this tensor iterator was started in another process (before a fork): its decode thread does not exist "
            "here; open the checkpoint again in the child (or call tensors() again) and iterate that");
  }
  size_t remaining() const {
    const size_t total = names_ ? names_->size() : ck_->tensors().size(), done = st_->answered.load();
    return total > done ? total - done : 0;  // a stream that stopped raises on every call after
  }
  uint64_t budget() const { return budget_; }
  unsigned threads() const { return threads_; }

 private:
  void start() {
    ctstream::StreamOptions so;
    so.dtype = dtype_;
    if (budget_) so.budget_bytes = budget_;  // 0: the core's default (StreamOptions)
    so.threads = threads_;
    if (names_) so.order = *names_;
    // Called on the worker thread, in delivery order: plain aligned memory (no GIL needed);
    // ownership passes to a capsule when the tensor is delivered.
    // With a destination the stream decodes one tensor at a time, in delivery order, and asks for
    // each one's destination first: the n-th call is for the n-th tensor of the order (numbered
    // before the allocation, which may throw).
    State* st = st_.get();
    so.destination = [st](const TensorInfo& t, uint64_t bytes) {
      const size_t seq = st->asked++;
      void* p = out_alloc(bytes);
      std::lock_guard<std::mutex> lk(st->mu);
      st->pending.push_back({seq, &t, p});
      return std::span<std::byte>(static_cast<std::byte*>(p), bytes);
    };
    st_->stream = std::make_unique<ctstream::Stream>(*ck_, std::move(so));
    st_->pid.store(::getpid());
  }
  // The buffer of the tensor just delivered: the oldest pending one (a name listed twice is
  // decoded, and delivered, twice).
  void* take(const TensorInfo* t) {
    const size_t seq = st_->answered++;
    std::lock_guard<std::mutex> lk(st_->mu);
    if (st_->pending.empty() || st_->pending.front().seq != seq || st_->pending.front().info != t)
      throw std::logic_error("tensor iterator: '" + t->name + "' delivered without its buffer");  // GIL released
    void* p = st_->pending.front().data;
    st_->pending.pop_front();
    return p;
  }
  // The tensor whose decode next() just raised: its buffer, if it had one, is freed (it held
  // every later tensor's buffer up before).
  void drop_failed() {
    const size_t seq = st_->answered++;
    std::lock_guard<std::mutex> lk(st_->mu);
    if (!st_->pending.empty() && st_->pending.front().seq == seq) {
      out_free(st_->pending.front().data);
      st_->pending.pop_front();
    }
  }
  // Shared with the stream's worker; kept at a stable address so the iterator can move.
  struct State {
    std::mutex next_mu;               // one decode_next() at a time
    std::atomic<size_t> asked{0};     // destinations asked for (the worker)
    std::atomic<size_t> answered{0};  // tensors next() delivered or raised (written under next_mu)
    struct Pending {
      size_t seq;  // the tensor's place in the order
      const TensorInfo* info;
      void* data;
    };
    std::mutex mu;
    std::deque<Pending> pending;  // allocated, not yet handed to Python
    std::unique_ptr<ctstream::Stream> stream;
    std::atomic<pid_t> pid{0};  // the process whose worker runs `stream` (0: not started)
    ~State() {
      if (pid.load() != 0 && pid.load() != ::getpid()) {
        // a forked child's copy: the worker to join is the parent's, and its locks may be held
        // forever; leak the stream and its buffers (the child's copies of the parent's pages)
        (void)stream.release();
        return;
      }
      stream.reset();  // joins the worker: no allocation after this
      for (const Pending& q : pending) out_free(q.data);
    }
  };

  CkPtr ck_;
  std::optional<DType> dtype_;
  uint64_t budget_;  // bytes decoded ahead of the consumer (0: StreamOptions default)
  unsigned threads_;
  std::optional<std::vector<std::string>> names_;  // delivery order (all tensors when unset)
  std::unique_ptr<State> st_;
};

class PyCheckpoint {
 public:
  PyCheckpoint(const std::string& path, unsigned threads, const std::string& io, const std::string& order,
               uint64_t budget, const std::string& low_rank,
               std::map<std::string, std::vector<std::string>> module_classes, bool sibling_shards, bool stored_entries)
      : budget_(budget), threads_(threads) {
    ctstream::OpenOptions o;
    o.threads = threads;
    o.sibling_shards = sibling_shards;
    o.stored_entries = stored_entries;
    o.module_classes = std::move(module_classes);
    if (io == "mmap") o.io = ctstream::IoMode::mmap;
    else if (io == "pread") o.io = ctstream::IoMode::pread;
    else raise("invalid_argument", "io must be 'mmap' or 'pread', not '" + io + "'");
    if (order == "file") o.order = ctstream::Order::file;
    else if (order == "name") o.order = ctstream::Order::name;
    else raise("invalid_argument", "order must be 'file' or 'name', not '" + order + "'");
    if (low_rank == "original") o.low_rank = ctstream::LowRank::original;
    else if (low_rank == "stored") o.low_rank = ctstream::LowRank::stored;
    else raise("invalid_argument", "low_rank must be 'original' or 'stored', not '" + low_rank + "'");
    std::optional<ctstream::Checkpoint> ck;
    {
      ctstream_py::InCall in_call;
      ctstream_py::Unlocked unlocked;
      ck.emplace(ctstream::Checkpoint::open(path, o));
    }
    ck_ = std::make_shared<const ctstream::Checkpoint>(std::move(*ck));
  }

  void close() { ck_.reset(); }
  bool closed() const { return !ck_; }
  uint64_t budget() const { return budget_; }
  unsigned threads() const { return threads_; }

  const CkPtr& ck() const {
    if (!ck_) raise("closed", "operation on a closed ctstream checkpoint");
    return ck_;
  }

  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& t : ck()->tensors()) k.push_back(t.name);
    return k;
  }
  size_t size() const { return ck()->tensors().size(); }
  bool contains(const std::string& name) const { return ck()->find(name) != nullptr; }
  TensorInfo info(const std::string& name) const { return ck()->at(name); }
  std::vector<TensorInfo> infos() const {
    auto ts = ck()->tensors();
    return {ts.begin(), ts.end()};
  }
  std::vector<std::string> files() const {
    std::vector<std::string> f;
    for (const auto& p : ck()->files()) f.push_back(p.string());
    return f;
  }
  std::string config_json() const { return ck()->config_json(); }
  std::tuple<bool, std::string, std::string> config_info() const {
    const ctstream::ConfigInfo& c = ck()->config_info();
    return {c.compressed_tensors, c.file.string(), c.description};
  }
  std::optional<std::map<std::string, std::string>> metadata(uint32_t file) const {
    if (file >= ck()->files().size()) raise("index", "file index out of range");
    if (!ck()->file_has_metadata(file)) return std::nullopt;  // as safetensors: None, not {}
    return ck()->file_metadata(file);
  }

  // Decodes (a slice of) `name` into a fresh array. @return (array, dtype name)
  nb::tuple decode(const std::string& name, std::optional<std::string> dtype, int64_t dim, uint64_t start,
                   uint64_t stop) const {
    ctstream_py::InCall in_call;
    CkPtr ck = this->ck();
    const TensorInfo& t = ck->at(name);
    const DType d = resolve(t, dtype_arg(dtype));
    const SliceArg s = slice_arg(*ck, t, dim, start, stop);
    const uint64_t bytes = ck->output_bytes(t, d, s.slice);
    Buffer b = allocate(bytes);
    uint64_t n;
    {
      ctstream_py::Unlocked unlocked;
      n = ck->decode_into(t, std::span<std::byte>(b.data, bytes), d, s.slice);
      ck->release(t);  // drop its file pages from the process: RSS stays bounded across get()s
    }
    if (n != bytes)
      throw std::runtime_error("ctstream: decoded " + std::to_string(n) + " bytes, expected " + std::to_string(bytes));
    return nb::make_tuple(make_array(b, d, s.shape, bytes, name), std::string(ctstream::dtype_name(d)));
  }

  // Decodes (a slice of) `name` straight into the caller's array `out` (any DLPack / buffer
  // protocol CPU array). dtype None: out's dtype decides for floating tensors.
  // @return the dtype name written.
  std::string decode_into(const std::string& name, nb::handle out, std::optional<std::string> dtype, int64_t dim,
                          uint64_t start, uint64_t stop) const {
    ctstream_py::InCall in_call;
    CkPtr ck = this->ck();
    const TensorInfo& t = ck->at(name);
    nb::ndarray<> arr;
    if (!nb::try_cast(out, arr, /*convert=*/false)) {
      nb::ndarray<nb::ro> ro;
      if (nb::try_cast(out, ro, false))
        raise("invalid_argument", "out= for '" + name + "' is read-only; pass a writable array", name);
      throw nb::type_error(("out= for '" + name +
                            "' must be a torch.Tensor or numpy.ndarray on the CPU (any "
                            "DLPack / buffer-protocol array), not " +
                            std::string(nb::str(out.type().attr("__name__")).c_str()))
                               .c_str());
    }
    if (arr.device_type() != nb::device::cpu::value)
      raise("invalid_argument",
            "out= for '" + name + "' is not in CPU memory (DLPack device type " + std::to_string(arr.device_type()) +
                "); decode into a CPU tensor and .copy_() it",
            name);
    std::optional<DType> req = dtype_arg(dtype);
    DType d;
    if (req) {
      d = resolve(t, req);
    } else if (convertible(t)) {
      d = t.dtype;  // natural, unless out's dtype names a float output dtype
      for (DType f : {DType::BF16, DType::F16, DType::F32})
        if (arr.dtype() == exact_dl(f)) d = f;
    } else {
      d = t.dtype;
    }
    if (!out_dtype_ok(arr.dtype(), d))
      throw nb::type_error(
          ("out= for '" + name + "' has dtype " + dl_name(arr.dtype()) + ", but the tensor decodes as " +
           std::string(ctstream::dtype_name(d)) +
           (convertible(t) ? " (floating tensors: pass dtype= or an out of bfloat16, float16 or float32)"
                           : " (integer/bool tensors come back as stored)"))
              .c_str());
    const SliceArg s = slice_arg(*ck, t, dim, start, stop);
    auto shape_str = [](auto get, size_t n) {
      std::string r = "(";
      for (size_t i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(get(i));
      return r + (n == 1 ? ",)" : ")");
    };
    bool same = arr.ndim() == s.shape.size();
    for (size_t i = 0; same && i < s.shape.size(); ++i) same = arr.shape(i) == s.shape[i];
    if (!same)
      raise("invalid_argument",
            "out= for '" + name + "' has shape " + shape_str([&](size_t i) { return arr.shape(i); }, arr.ndim()) +
                ", expected " + shape_str([&](size_t i) { return s.shape[i]; }, s.shape.size()),
            name);
    // C-contiguous: strides (in elements) of the dimensions longer than 1 are row-major.
    int64_t expect = 1;
    for (size_t i = s.shape.size(); i-- > 0;) {
      if (s.shape[i] != 1 && arr.stride(i) != expect)
        raise("invalid_argument",
              "out= for '" + name +
                  "' is not C-contiguous; pass a contiguous array "
                  "(.contiguous() / np.ascontiguousarray) or decode and copy",
              name);
      expect *= static_cast<int64_t>(s.shape[i]);
    }
    const uint64_t bytes = arr.nbytes();
    std::byte* p = static_cast<std::byte*>(arr.data_handle()) + arr.byte_offset();
    {
      ctstream_py::Unlocked unlocked;
      ck->decode_into(t, std::span<std::byte>(p, static_cast<size_t>(bytes)), d, s.slice);
      ck->release(t);
    }
    return std::string(ctstream::dtype_name(d));
  }

  // Raw bytes of one stored part (keep-packed passthrough), as its stored dtype and shape.
  nb::tuple read_part(const std::string& name, const std::string& role) const {
    ctstream_py::InCall in_call;
    CkPtr ck = this->ck();
    const TensorInfo& t = ck->at(name);
    const ctstream::TensorPart* p = t.part(role);
    if (!p) {
      std::string roles;
      for (const auto& q : t.parts) roles += (roles.empty() ? "" : ", ") + q.role;
      raise("not_found", "tensor '" + name + "' has no stored part '" + role + "' (parts: " + roles + ")", name);
    }
    Buffer b = allocate(p->nbytes);
    {
      ctstream_py::Unlocked unlocked;
      ck->read_part(*p, std::span<std::byte>(b.data, p->nbytes));
    }
    return nb::make_tuple(make_array(b, p->dtype, {p->shape.begin(), p->shape.end()}, p->nbytes, name),
                          std::string(ctstream::dtype_name(p->dtype)));
  }

  // Zero-copy read-only array over one stored part in the file mapping (mmap mode), kept alive
  // by a reference to the checkpoint: what safetensors' mmap loader hands out. Only behind the
  // explicit Checkpoint.part(unsafe_view=True): the check here covers a file truncated before this
  // call; one truncated while the array lives raises SIGBUS when it is touched. `None` in pread mode.
  nb::object view_part(const std::string& name, const std::string& role) const {
    ctstream_py::InCall in_call;
    CkPtr ck = this->ck();
    if (ck->options().io != ctstream::IoMode::mmap) return nb::none();
    const TensorInfo& t = ck->at(name);
    const ctstream::TensorPart* p = t.part(role);
    if (!p) raise("not_found", "tensor '" + name + "' has no stored part '" + role + "'", name);
    const auto span = ck->part_view(*p);
    auto* keep = new CkPtr(ck);
    nb::capsule owner(keep, [](void* q) noexcept { delete static_cast<CkPtr*>(q); });
    const std::vector<size_t> shape = array_shape(p->dtype, {p->shape.begin(), p->shape.end()}, p->nbytes, name);
    auto arr = nb::ndarray<nb::numpy, nb::ro>(const_cast<std::byte*>(span.data()), shape.size(), shape.data(), owner,
                                              nullptr, storage_dl(p->dtype));
    return nb::make_tuple(arr, std::string(ctstream::dtype_name(p->dtype)));
  }

  // Drops a tensor's mapped file pages from the process (advisory; views stay valid: their pages
  // fault back in from the page cache if touched again).
  void release(const std::string& name) const { ck()->release(ck()->at(name)); }

  std::string resolved_dtype(const std::string& name, std::optional<std::string> dtype) const {
    return std::string(ctstream::dtype_name(resolve(ck()->at(name), dtype_arg(dtype))));
  }

  TensorIter iter(std::optional<std::string> dtype, std::optional<std::vector<std::string>> names) const {
    return TensorIter(ck(), dtype_arg(dtype), budget_, threads_, std::move(names));
  }

 private:
  CkPtr ck_;
  uint64_t budget_;
  unsigned threads_;
};

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const ctstream::Error& e) {
    set_error(std::string(ctstream::error_kind_name(e.kind())), e.what(), e.file(), e.tensor());
  }
}

std::vector<uint64_t> shape_of(const ctstream::Shape& s) { return {s.begin(), s.end()}; }

}  // namespace

NB_MODULE(_ctstream, m) {
  m.doc() = "ctstream native module: decode compressed-tensors checkpoints into caller memory";
  m.attr("__version__") = ctstream::version_string;
  m.def("_at_exit", &ctstream_py::at_exit,
        "Interpreter exit: no thread takes the GIL back through ctstream from here on.");
  nb::module_::import_("atexit").attr("register")(m.attr("_at_exit"));
  m.def("active_isa", [] { return std::string(ctstream::active_isa()); });
  m.def(
      "dtype_bits",
      [](const std::string& name) -> std::optional<unsigned> {
        auto d = ctstream::dtype_from_name(name);
        return d ? std::optional<unsigned>(ctstream::dtype_bits(*d)) : std::nullopt;
      },
      "name"_a, "Bits per element of a safetensors dtype name ('F4' -> 4), None for an unknown name.");
  m.def(
      "parse_bytes", [](const std::string& text) { return ctstream::parse_bytes(text); }, "text"_a,
      "Byte count of '512MB', '1.5GiB', '4096' (K/M/G/T, KB..TB = 1000^n, KiB..TiB = 1024^n); the core's "
      "grammar, shared with the CLI's --budget. Raises InvalidArgumentError.");

  m.def(
      "_read_small_remote",
      [](const std::string& url, uint64_t max_bytes, bool optional) -> std::optional<nb::bytes> {
#ifdef CTSTREAM_HAVE_REMOTE
        ctstream_py::InCall in_call;
        std::optional<std::string> s;
        {
          ctstream_py::Unlocked nogil;
          try {
            s = ctstream::io::read_small_remote(url, max_bytes);
          } catch (const ctstream::Error& e) {
            if (!optional || !ctstream::io::absent_object(url, e)) throw;
          }
        }
        if (!s) return std::nullopt;
        return nb::bytes(s->data(), s->size());
#else
        (void)max_bytes, (void)optional;
        throw ctstream::Error(ctstream::ErrorKind::unsupported, ctstream::io::redact_url(url), "",
                              "s3:// and http(s):// checkpoints need a build with -DCTSTREAM_REMOTE=ON (and libcurl)");
#endif
      },
      "url"_a, "max_bytes"_a, "optional"_a = false,
      "A whole small object (s3:// or http(s)://, credentials and endpoint as for open()): bytes, at most "
      "max_bytes (a larger object is HeaderTooLargeError; a missing one FileNotFoundError). optional: a "
      "missing object is None, and so is S3's 403 AccessDenied on s3://, its answer for a missing key to a "
      "caller without s3:ListBucket. For the files beside the weights that vLLM reads itself (config.json, "
      "tokenizer files).");

  using ctstream_py::g_classes;
  using ctstream_py::g_error;
  g_error = PyErr_NewExceptionWithDoc("ctstream.Error",
                                      "Any failure reported by ctstream (malformed file, unsupported format, "
                                      "bad argument). Attributes: kind (e.g. 'invalid_header'), file, tensor.",
                                      PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::handle(g_error);
  g_classes = PyDict_New();
  m.attr("_error_classes") = nb::handle(g_classes);  // kind -> class, filled by ctstream/__init__.py
  nb::register_exception_translator(translate);
  ctstream_py::bind_writer(m);

  nb::class_<ctstream::TensorPart>(m, "TensorPart", "One stored safetensors entry of a logical tensor.")
      .def_ro("role", &ctstream::TensorPart::role)
      .def_ro("key", &ctstream::TensorPart::key)
      .def_prop_ro("dtype", [](const ctstream::TensorPart& p) { return std::string(ctstream::dtype_name(p.dtype)); })
      .def_prop_ro("shape", [](const ctstream::TensorPart& p) { return shape_of(p.shape); })
      .def_ro("file", &ctstream::TensorPart::file)
      .def_ro("offset", &ctstream::TensorPart::offset)
      .def_ro("nbytes", &ctstream::TensorPart::nbytes)
      .def("__repr__", [](const ctstream::TensorPart& p) {
        return "TensorPart(role='" + p.role + "', key='" + p.key +
               "', dtype=" + std::string(ctstream::dtype_name(p.dtype)) + ", nbytes=" + std::to_string(p.nbytes) + ")";
      });

  nb::class_<TensorInfo>(m, "TensorInfo", "Metadata of one logical tensor (holds no data).")
      .def_ro("name", &TensorInfo::name)
      .def_prop_ro("shape", [](const TensorInfo& t) { return shape_of(t.shape); })
      .def_prop_ro(
          "dtype", [](const TensorInfo& t) { return std::string(ctstream::dtype_name(t.dtype)); },
          "natural decoded dtype (safetensors spelling, e.g. 'BF16')")
      .def_prop_ro("format", [](const TensorInfo& t) { return std::string(ctstream::format_name(t.format)); })
      .def_ro("quantized", &TensorInfo::quantized)
      .def_prop_ro("num_bits",
                   [](const TensorInfo& t) -> std::optional<unsigned> {
                     return t.quantized ? std::optional<unsigned>(t.quant.num_bits) : std::nullopt;
                   })
      .def_prop_ro("strategy",
                   [](const TensorInfo& t) -> std::optional<std::string> {
                     return t.quantized
                                ? std::optional<std::string>(std::string(ctstream::strategy_name(t.quant.strategy)))
                                : std::nullopt;
                   })
      .def_prop_ro("group_size",
                   [](const TensorInfo& t) -> std::optional<uint64_t> {
                     return t.quantized && t.quant.group_size ? std::optional<uint64_t>(t.quant.group_size)
                                                              : std::nullopt;
                   })
      .def_prop_ro("symmetric",
                   [](const TensorInfo& t) -> std::optional<bool> {
                     return t.quantized ? std::optional<bool>(t.quant.symmetric) : std::nullopt;
                   })
      .def_ro("parts", &TensorInfo::parts)
      .def_prop_ro("numel", &TensorInfo::numel)
      .def_prop_ro("stored_bytes", &TensorInfo::stored_bytes)
      .def(
          "decoded_bytes",
          [](const TensorInfo& t, std::optional<std::string> dtype) {
            return t.decoded_bytes(resolve(t, dtype_arg(dtype)));
          },
          "dtype"_a = nb::none())
      .def("__repr__", [](const TensorInfo& t) {
        std::string s = "TensorInfo(name='" + t.name + "', shape=[";
        for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
        return s + "], dtype=" + std::string(ctstream::dtype_name(t.dtype)) + ", format='" +
               std::string(ctstream::format_name(t.format)) + "')";
      });

  nb::class_<TensorIter>(m, "_TensorIter")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &TensorIter::decode_next)
      .def("__length_hint__", &TensorIter::remaining)
      .def_prop_ro("budget", &TensorIter::budget)
      .def_prop_ro("threads", &TensorIter::threads);

  nb::class_<PyCheckpoint>(m, "_Checkpoint")
      .def(nb::init<const std::string&, unsigned, const std::string&, const std::string&, uint64_t, const std::string&,
                    std::map<std::string, std::vector<std::string>>, bool, bool>(),
           "path"_a, "threads"_a = 0, "io"_a = "mmap", "order"_a = "file", "budget"_a = 0, "low_rank"_a = "original",
           "module_classes"_a = std::map<std::string, std::vector<std::string>>{}, "sibling_shards"_a = true,
           "stored_entries"_a = false)
      .def("close", &PyCheckpoint::close)
      .def_prop_ro("closed", &PyCheckpoint::closed)
      .def_prop_ro("budget", &PyCheckpoint::budget)
      .def_prop_ro("threads", &PyCheckpoint::threads)
      .def("keys", &PyCheckpoint::keys)
      .def("__len__", &PyCheckpoint::size)
      .def("__contains__", &PyCheckpoint::contains)
      .def("info", &PyCheckpoint::info, "name"_a)
      .def("infos", &PyCheckpoint::infos)
      .def("files", &PyCheckpoint::files)
      .def("config_json", &PyCheckpoint::config_json)
      .def("config_info", &PyCheckpoint::config_info)
      .def("metadata", &PyCheckpoint::metadata, "file"_a = 0)
      .def("decode", &PyCheckpoint::decode, "name"_a, "dtype"_a = nb::none(), "dim"_a = -1, "start"_a = 0,
           "stop"_a = kNoStop)
      .def("decode_into", &PyCheckpoint::decode_into, "name"_a, "out"_a, "dtype"_a = nb::none(), "dim"_a = -1,
           "start"_a = 0, "stop"_a = kNoStop)
      .def("resolved_dtype", &PyCheckpoint::resolved_dtype, "name"_a, "dtype"_a = nb::none())
      .def("read_part", &PyCheckpoint::read_part, "name"_a, "role"_a)
      .def("view_part", &PyCheckpoint::view_part, "name"_a, "role"_a)
      .def("release", &PyCheckpoint::release, "name"_a)
      .def("iter", &PyCheckpoint::iter, "dtype"_a = nb::none(), "names"_a = nb::none());
}
