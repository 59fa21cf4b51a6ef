// The public C++ API throws ctstream::Error and nothing else. Every entry point runs its body
// through at_boundary(): an Error passes unchanged (given the call's tensor when it names none),
// an allocation failure becomes Error{out_of_memory}, a std::filesystem error (a link loop, a name
// too long, a directory that cannot be listed: the environment, not a bug) Error{io} naming its
// path, and anything else (a bug) Error{internal}, named after the file and tensor the call
// concerned. An exception thrown by one of the caller's own callbacks (a progress report, a sink,
// a destination, a fetch) is not ours: call_caller() carries it through as CallerThrew, and
// at_boundary rethrows it to the caller as it was thrown.
#pragma once
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "ctstream/error.hpp"

namespace ctstream::detail {

/// An exception thrown by a caller's callback, on its way back to the caller unchanged.
struct CallerThrew {
  std::exception_ptr thrown;
};

/// Calls the caller's callback `f`: whatever it throws leaves as CallerThrew.
template <class F, class... Args>
decltype(auto) call_caller(F&& f, Args&&... args) {
  try {
    return std::forward<F>(f)(std::forward<Args>(args)...);
  } catch (...) {
    throw CallerThrew{std::current_exception()};
  }
}

/// Calls an object the caller supplied that ctstream's own code may also stand behind (a
/// TensorSource): a ctstream::Error passes as itself, and so does a failed allocation (reported
/// as out_of_memory); anything else is the caller's own, and leaves as CallerThrew.
template <class F, class... Args>
decltype(auto) call_source(F&& f, Args&&... args) {
  try {
    return std::forward<F>(f)(std::forward<Args>(args)...);
  } catch (const Error&) {
    throw;
  } catch (const CallerThrew&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (...) {
    throw CallerThrew{std::current_exception()};
  }
}

template <class F>
auto at_boundary(const std::string& file, const std::string& tensor, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const CallerThrew& c) {
    std::rethrow_exception(c.thrown);
  } catch (const Error& e) {
    // An error from below the reader (a remote read that gave up, an I/O fault) knows its file but
    // not the tensor being read: the entry point names it.
    if (!e.tensor().empty() || tensor.empty()) throw;
    std::string_view msg = e.what();
    if (const std::string prefix = e.file() + ": "; !e.file().empty() && msg.substr(0, prefix.size()) == prefix)
      msg.remove_prefix(prefix.size());
    throw Error(e.kind(), e.file().empty() ? file : e.file(), tensor, std::string(msg));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::out_of_memory, file, tensor, "out of memory");
  } catch (const std::filesystem::filesystem_error& e) {
    throw Error(ErrorKind::io, e.path1().empty() ? file : e.path1().string(), tensor, e.code().message());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::internal, file, tensor, std::string("internal error (please report): ") + e.what());
  } catch (...) {
    throw Error(ErrorKind::internal, file, tensor, "internal error (please report): unknown exception");
  }
}

}  // namespace ctstream::detail
