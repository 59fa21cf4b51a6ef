// io — system calls a signal can interrupt. A process that installs handlers without SA_RESTART
// (CPython does: PEP 475 retries in Python, not in C extensions) sees open()/fstat()/read()/
// write() fail with EINTR on FUSE, NFS (intr) and FIFO paths; every such call of ctstream goes
// through retry_eintr, so the caller sees only real errors.
#pragma once
#include <cerrno>

namespace ctstream::io {

/// Calls `call()` until it returns something other than -1 with errno EINTR.
template <class Call>
auto retry_eintr(Call&& call) {
  for (;;) {
    auto r = call();
    if (!(r == -1 && errno == EINTR)) return r;
  }
}

}  // namespace ctstream::io
