// ctstream._ctstream — what the binding's source files share: raising ctstream's Python errors.
#pragma once
#include <nanobind/nanobind.h>

#include <string>

namespace ctstream_py {

extern PyObject* g_error;    // ctstream.Error (a RuntimeError)
extern PyObject* g_classes;  // kind name -> subclass of Error (registered by ctstream/__init__.py)

/// Sets ctstream.<class of kind> (kind / file / tensor attributes) as the pending Python error.
void set_error(const std::string& kind, const std::string& message, const std::string& file, const std::string& tensor);
/// Raises ctstream.<class of kind> from binding code (arguments the C++ API never sees).
[[noreturn]] void raise(const char* kind, const std::string& message, const std::string& tensor = "");

/// Interpreter exit. A thread that takes the GIL (or runs Python code, which drops and retakes it)
/// once the interpreter finalizes does not return: CPython up to 3.13 ends it with pthread_exit,
/// and that forced unwind through a noexcept frame -- nb::gil_scoped_release's destructor,
/// nanobind's dispatch -- calls std::terminate: a daemon thread inside ctstream at exit aborted
/// the whole process. So every binding call that releases the GIL holds an InCall, and an atexit
/// hook (registered at import; atexit runs before the interpreter finalizes) waits, the GIL
/// released, for the calls in flight to return. A daemon thread's call begun after it parks the
/// thread for good (the process is exiting: a daemon thread never runs again; CPython 3.14 parks
/// such threads itself); a call from inside another, from the thread that ran the hook, or from a
/// non-daemon thread (a later atexit handler waits for it) goes on. Unlocked and Locked park too
/// where the interpreter is already finalizing.
class InCall {
 public:
  InCall();
  ~InCall();
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;
};
void park_if_finalizing() noexcept;

/// nb::gil_scoped_release / nb::gil_scoped_acquire that park rather than end the thread.
class Unlocked {
 public:
  Unlocked() noexcept : state_(PyEval_SaveThread()) {}
  ~Unlocked() {
    park_if_finalizing();
    PyEval_RestoreThread(state_);
  }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  PyThreadState* state_;
};
class Locked {
 public:
  Locked() noexcept : state_((park_if_finalizing(), PyGILState_Ensure())) {}
  ~Locked() { PyGILState_Release(state_); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  PyGILState_STATE state_;
};

/// ctstream._ctstream._compress_tensors / _compress_checkpoint (writer_binding.cpp).
void bind_writer(nanobind::module_& m);

}  // namespace ctstream_py
