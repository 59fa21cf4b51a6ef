"""Local servers for the Python and vLLM tests of remote checkpoints (tests/python/test_remote*.py,
tests/vllm/test_vllm.py): where rclone is, a free port, and `rclone serve s3|http` up and torn down.
Standard library and pytest only: the vLLM tests import it from their own venv.
"""
import contextlib
import os
import shutil
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rclone():
    """The rclone binary: $CTSTREAM_RCLONE, the repo's .venv (tools/setup_python.sh), or PATH; None when none."""
    for c in (os.environ.get("CTSTREAM_RCLONE"), os.path.join(ROOT, ".venv", "bin", "rclone"), shutil.which("rclone")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, what="server", limit_s=30):
    """Returns once 127.0.0.1:port accepts a connection; fails the test when `proc` exited or
    limit_s passed."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                pytest.fail(f"{what} did not start")
            time.sleep(0.1)


@contextlib.contextmanager
def rclone_serve(kind, root, auth_key=None):
    """`rclone serve KIND` (s3 or http) of the directory `root` on a free port; yields the port.
    Skips the test when rclone is not installed. `auth_key`: "KEY,SECRET" (s3)."""
    exe = rclone()
    if exe is None:
        pytest.skip("rclone not found (set CTSTREAM_RCLONE or run tools/setup_python.sh)")
    port = free_port()
    # --vfs-read-wait 0s: rclone's VFS otherwise holds a read that is not at the handle's current
    # offset up to 20 ms for an in-sequence one (`rclone serve s3 --help`); a tensor's parts in flight
    # at once met it on every tensor (~12 ms per tensor, 1.5 ms without).
    args = [exe, "serve", kind, "--addr", f"127.0.0.1:{port}", "--vfs-read-wait", "0s"]
    if auth_key:
        args += ["--auth-key", auth_key]
    proc = subprocess.Popen([*args, str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, f"rclone serve {kind}")
        yield port
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def hostile_serve(root):
    """tests/remote/hostile_server.py serving `root` (its `files` and `s3deny` modes) on a free
    port; yields the port."""
    import sys
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_server.py"),
                             str(port), str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, "hostile_server.py")
        yield port
    finally:
        proc.kill()
        proc.wait()
