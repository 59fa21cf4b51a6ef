"""AMX tile state (ctstream._amx, asked for by the vLLM plugin; issue 25): on a host with AMX the
request gives the process XTILEDATA permission, as the kernel reports it back
(arch_prctl(ARCH_GET_XCOMP_PERM), read here independently of the module); on a host without AMX it
is a harmless no-op. Each case runs in a child interpreter, whose permission starts clear."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

ctstream = pytest.importorskip("ctstream")

# arch_prctl(ARCH_GET_XCOMP_PERM) in a child, written out here rather than taken from ctstream._amx.
_PERM = """
import ctypes
def permitted():
    fn = ctypes.CDLL(None).syscall
    fn.restype = ctypes.c_long
    mask = ctypes.c_ulong(0)
    assert fn(ctypes.c_long(158), ctypes.c_long(0x1022), ctypes.byref(mask)) == 0
    return bool(mask.value >> 18 & 1)
"""


def host_has_amx() -> bool:
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return False
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and "amx_tile" in line.split() for line in f)


def _child(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", _PERM + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout.strip()


@pytest.mark.skipif(not host_has_amx(), reason="the CPU has no AMX (no amx_tile in /proc/cpuinfo)")
def test_request_gives_this_process_amx_tile_state():
    out = _child("""
        before = permitted()
        from ctstream import _amx
        got = _amx.request_amx_tile_state()
        print(before, got, permitted())
    """)
    assert out == "False True True", out


@pytest.mark.skipif(host_has_amx(), reason="the host has AMX: covered by the test above")
def test_request_is_a_no_op_without_amx():
    code = textwrap.dedent("""
        from ctstream import _amx
        print(_amx.request_amx_tile_state(), _amx.amx_tile_permitted())
    """)
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        code += "print(permitted())\n"
    out = _child(code)
    assert out.split() in (["False", "False"], ["False", "False", "False"]), out
