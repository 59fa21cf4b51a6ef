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

/// ctstream._ctstream._compress_tensors / _compress_checkpoint (writer_binding.cpp).
void bind_writer(nanobind::module_& m);

}  // namespace ctstream_py
