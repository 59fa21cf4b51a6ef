"""The Python surface under process-level hazards (each case runs in a child interpreter, so that a
crash or a hang fails the test instead of taking pytest down):

* no torch tensor is ever a view of the read-only file mapping (torch has no read-only tensors:
  writing through one killed the process with SIGSEGV); numpy views stay read-only;
* a file truncated by another process while tensors and parts are held: everything handed out
  by default (part, part(copy=False), packed, get, tensors, safe_open) is private memory, so it
  still reads the bytes it had and the next read is Error(truncated), never SIGBUS; the one
  opt-in view (part(unsafe_view=True)) dies of exactly the SIGBUS its docstring names;
* Ctrl-C interrupts compress / save_file without a progress callback: KeyboardInterrupt, and
  nothing is left behind;
* fork(): a child continuing its parent's started tensors() iterator gets a clear error instead
  of waiting forever for the parent's worker thread; a checkpoint decodes (and the writer
  compresses) in a forked child even after the parent ran OpenMP-parallel decodes.
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures")
CK = os.path.join(FIX, "ct", "v020_int8_w8a8_channel_sym_bf16")


def _run(code: str, *args, timeout: int = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


# ---- views of the file mapping ------------------------------------------------------------------

def test_torch_parts_are_never_views_of_the_mapping():
    _run("""
        import sys, warnings, torch, ctstream
        warnings.simplefilter("error")  # torch's "non-writable array" warning would be a view
        ck = ctstream.open(sys.argv[1], framework="pt")
        for info in ck.infos():
            for p in info.parts:
                want = ck.part(info.name, p.role).clone()
                for v in (ck.part(info.name, p.role, copy=False), ck.part(info.name, p.role),
                          ck.packed(info.name)[p.role]):
                    v.view(torch.uint8).add_(1)  # SIGSEGV when v is a view of the PROT_READ mapping
                assert torch.equal(ck.part(info.name, p.role, copy=False), want), info.name  # file untouched
        with ctstream.safe_open(sys.argv[1], "pt", packed=True) as f:
            for k in f.keys():
                f.get_tensor(k).view(torch.uint8).add_(1)
                f.get_slice(k)[:].view(torch.uint8).add_(1)
        import ctstream.vllm as cv
        for packed in (True, False):
            for name, t in cv.weights_iterator(sys.argv[1], packed=packed):
                t.view(torch.uint8).add_(1)
        print("ok")
        """, CK)


def test_numpy_part_views_stay_read_only():
    np = pytest.importorskip("numpy")
    with ctstream.open(CK, framework="np") as ck:
        info = ck.infos()[0]
        role = info.parts[0].role
        v = ck.part(info.name, role, unsafe_view=True)
        assert not v.flags.writeable
        with pytest.raises(ValueError):
            v.flags.writeable = True
        with pytest.raises(ValueError):
            v[...] = 0
        assert ck.part(info.name, role).flags.writeable  # a copy is yours
        assert np.array_equal(ck.part(info.name, role), v)


# What every surface hands out, held across a truncation of the file by someone else, then
# touched byte by byte and compared with what the safetensors library read before it.
_TRUNCATE = """
    import os, sys, numpy as np, torch, ctstream
    from safetensors import safe_open
    d, io, how = sys.argv[1:4]
    f = os.path.join(d, "model.safetensors")
    def raw(a):  # every byte of a (reading them touches them)
        if isinstance(a, torch.Tensor):
            return a.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return np.asarray(a).tobytes()
    with safe_open(f, "pt") as s:  # the reference: safetensors' own reading, before the truncation
        ref = {k: raw(s.get_tensor(k)) for k in s.keys()}
    ck = ctstream.open(d, framework="np", io=io)
    held = []
    if how == "default":
        for info in ck.infos():
            for p in info.parts:
                held += [(p.key, ck.part(info.name, p.role)), (p.key, ck.part(info.name, p.role, copy=False)),
                         (p.key, ck.packed(info.name)[p.role])]
        dense = [i.name for i in ck.infos() if i.format == "dense"]
        held += [(n, ck.get(n)) for n in dense] + list(ck.tensors(names=dense))
        with ctstream.safe_open(d, "pt", packed=True) as so:  # (numpy safe_open refuses bf16, as safetensors)
            held += [(k, so.get_tensor(k)) for k in so.keys()]
    else:
        # the part ending last in the file: its bytes past the first page lose their backing
        info, p = max(((i, p) for i in ck.infos() for p in i.parts), key=lambda ip: ip[1].offset + ip[1].nbytes)
        assert p.offset + p.nbytes > os.sysconf("SC_PAGE_SIZE")
        held.append((p.key, ck.part(info.name, p.role, unsafe_view=True)))
    assert len(held) >= (4 if how == "default" else 1) and all(k in ref for k, _ in held), len(held)
    os.truncate(f, 16)
    print("truncated", flush=True)
    for k, a in held:
        assert raw(a) == ref[k], k
    info = ck.infos()[0]
    for read in (lambda: ck.part(info.name, info.parts[0].role, copy=False), lambda: ck.get(info.name)):
        try:
            read()
        except ctstream.Error as e:
            assert e.kind == "truncated", e.kind
        else:
            raise SystemExit("a read after the truncation succeeded")
    print("ok")
"""


@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_truncated_while_held_is_never_sigbus(tmp_path, io):
    d = tmp_path / "ck"
    shutil.copytree(CK, d)
    r = _run(_TRUNCATE, d, io, "default")
    assert r.stdout.split() == ["truncated", "ok"]


def test_unsafe_view_risks_exactly_sigbus(tmp_path):
    """The opt-in view's docstring says: touched after a truncation, it kills the process with
    SIGBUS. Held to its word, so the day it becomes safe the docstring is updated too."""
    d = tmp_path / "ck"
    shutil.copytree(CK, d)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_TRUNCATE), str(d), "mmap", "unsafe"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGBUS and r.stdout.split() == ["truncated"], (r.returncode, r.stdout, r.stderr)


def test_unsafe_view_is_numpy_only():
    with ctstream.open(CK, framework="pt") as ck:
        info = ck.infos()[0]
        with pytest.raises(ctstream.Error) as e:
            ck.part(info.name, info.parts[0].role, unsafe_view=True)
        assert e.value.kind == "invalid_argument"
    with ctstream.open(CK, framework="np", io="pread") as ck:  # no mapping: a copy
        info = ck.infos()[0]
        assert ck.part(info.name, info.parts[0].role, unsafe_view=True).flags.writeable


def test_wrap_copies_read_only_arrays_for_torch():
    from ctstream._dtypes import _wrap

    np = pytest.importorskip("numpy")
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    t = _wrap(a, "F32", "pt")
    t.add_(1)
    assert a.tolist() == [0, 1, 2, 3, 4, 5]


# ---- Ctrl-C during a write ----------------------------------------------------------------------

_INTERRUPT = """
    import os, signal, sys, time, torch, ctstream
    mode, src, out = sys.argv[1:4]
    parent = os.path.dirname(out)
    before = set(os.listdir(parent))
    # A real SIGINT 0.1 s into the call, sent by a kernel timer (no helper thread that a loaded
    # machine could starve until the write is over): the write takes seconds, so it lands inside
    # it; were the call still in its Python prelude, that too must leave nothing behind.
    # Python leaves SIGINT ignored when it starts ignored (a background job of a non-interactive
    # shell, as CI may run this): Ctrl-C semantics need Python's own handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))
    try:
        if mode == "compress":
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            ctstream.compress(src, out, format="int-quantized")
        else:
            g = torch.Generator().manual_seed(0)
            tensors = {f"m{i}.weight": torch.randn(256, 256, generator=g) for i in range(400)}
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            ctstream.save_file(tensors, out, format="int-quantized")
    except KeyboardInterrupt:
        print("interrupted")
    else:
        print("completed")
    time.sleep(0.2)
    print(sorted(set(os.listdir(parent)) - before))
"""


@pytest.mark.parametrize("mode", ["compress", "save_file"])
def test_ctrl_c_aborts_a_write_without_progress_callback(tmp_path, mode):
    src = tmp_path / "src"
    if mode == "compress":
        g = torch.Generator().manual_seed(0)
        ctstream.save_file({f"m{i}.weight": torch.randn(256, 256, generator=g) for i in range(400)}, src,
                           format="dense", dtype="float32")
    work = tmp_path / "work"
    work.mkdir()
    r = _run(_INTERRUPT, mode, src, work / "out")
    assert r.stdout.splitlines() == ["interrupted", "[]"], r.stdout + r.stderr  # nothing left behind


# ---- fork ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_ckpt(tmp_path_factory):
    """Tensors large enough for multi-threaded (OpenMP) decodes."""
    d = tmp_path_factory.mktemp("fork") / "ck"
    g = torch.Generator().manual_seed(1)
    ctstream.save_file({f"m{i}.weight": torch.randn(1024, 1024, generator=g) for i in range(6)}, d,
                       format="int-quantized")
    return d


def test_forked_child_cannot_continue_a_started_iterator(big_ckpt):
    r = _run("""
        import gc, os, signal, sys, ctstream
        ck = ctstream.open(sys.argv[1], framework="np", threads=4, budget="4MB")
        it = ck.tensors()
        first = next(it)[0]
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a hang is killed: the parent sees SIGALRM
            try:
                next(it)
            except ctstream.Error as e:
                assert e.kind == "forked" and "fork" in str(e) and "open the checkpoint again" in str(e), e
            else:
                os._exit(3)
            try:
                list(it)
            except ctstream.Error:
                pass
            else:
                os._exit(4)
            assert it.__length_hint__() >= 0
            fresh = [n for n, _ in ck.tensors()]  # a new iterator works in the child
            assert fresh == ck.keys(), fresh
            with ctstream.open(sys.argv[1], framework="np", threads=4) as ck2:
                assert [n for n, _ in ck2.tensors()] == ck.keys()
            del it
            gc.collect()  # dropping the parent's iterator must not wait for its worker
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
        assert [n for n, _ in it] == ck.keys()[1:]  # the parent's iterator is unaffected
        print("ok", first)
        """, big_ckpt)
    assert r.stdout.startswith("ok")


def test_forked_child_decodes_and_writes_after_parallel_decodes(big_ckpt, tmp_path):
    _run("""
        import os, signal, sys, numpy as np, ctstream, torch
        ck = ctstream.open(sys.argv[1], framework="np", threads=4)
        name = ck.keys()[0]
        want = ck.get(name)  # OpenMP team on this thread: its pool does not survive fork
        want_slice = ck.get_slice(name)[100:900]
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)
            assert np.array_equal(ck.get(name), want)  # the parent's checkpoint
            assert np.array_equal(ck.get_slice(name)[100:900], want_slice)
            out = np.empty_like(want)
            ck.get(name, out=out)
            assert np.array_equal(out, want)
            with ctstream.open(sys.argv[1], framework="np") as ck2:  # a fresh one, default threads
                assert np.array_equal(ck2.get(name), want)
            ctstream.save_file({"a.weight": torch.randn(1024, 1024)}, sys.argv[2], format="int-quantized")
            ctstream.compress(sys.argv[1], sys.argv[2] + "-c", format="dense", dtype="bfloat16")
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
        assert np.array_equal(ck.get(name), want)
        """, big_ckpt, tmp_path / "child-out")
    assert (tmp_path / "child-out" / "model.safetensors").exists()
    assert (tmp_path / "child-out-c" / "model.safetensors").exists()


# ---- interpreter exit ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_big(tmp_path_factory):
    """A plain F32 file of 8 x 8 MiB: a decode long enough for the interpreter to exit meanwhile."""
    from safetensors.numpy import save_file
    import numpy as np
    p = tmp_path_factory.mktemp("exit") / "big.safetensors"
    save_file({f"t{i}": np.full((2048, 1024), i, dtype=np.float32) for i in range(8)}, str(p))
    return p


@pytest.mark.parametrize("how", ["get", "tensors"])
def test_interpreter_exit_with_a_daemon_thread_inside_ctstream(plain_big, how):
    # A daemon thread decoding while the interpreter exits took the GIL back after finalization had
    # begun: CPython ended it with pthread_exit, whose unwind through a noexcept frame aborted the
    # process ("terminate called without an active exception", rc 134, 9 runs in 10). The atexit
    # hook now waits for the calls in flight, and later ones park. Each case exits repeatedly at a
    # different point of the thread's loop.
    code = """
        import sys, threading, time
        sys.modules["torch"] = None  # numpy only: torch's own daemon-thread exit is not under test
        import numpy as np, ctstream
        how, path = sys.argv[1], sys.argv[2]
        ck = ctstream.open(path, framework="np", threads=1, budget="9MB")
        def loop():
            while True:
                if how == "tensors":
                    for _ in ck.tensors():
                        pass
                else:
                    for k in ck.keys():
                        ck.get(k)
        threading.Thread(target=loop, daemon=True).start()
        time.sleep(float(sys.argv[3]))
        print("exiting", flush=True)
        """
    for delay in (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2):
        r = _run(code, how, plain_big, delay)
        assert r.stdout == "exiting\n", r.stdout


def test_interpreter_exit_when_a_callback_calls_ctstream_again(plain_big, tmp_path):
    # The atexit hook waits for the calls in flight; a call made from inside one of them (a
    # writer's progress callback decoding) must go on, or the outer call never returns and the
    # exit hangs. An atexit handler registered before ctstream was imported runs after its hook,
    # on the main thread, and may still call ctstream.
    code = """
        import atexit, sys, threading, time
        sys.modules["torch"] = None
        path, out = sys.argv[1], sys.argv[2]
        done = []
        def late():  # on the main thread, and on a (non-daemon) thread it waits for
            done.append(float(ctstream.open(path).get("t3")[0, 0]))
            t = threading.Thread(target=lambda: done.append(float(ctstream.open(path).get("t4")[0, 0])))
            t.start()
            t.join()
            print("late", done == [3.0, 4.0], flush=True)
        atexit.register(late)
        import numpy as np, ctstream
        ck = ctstream.open(path, framework="np", threads=1)
        def progress(d):
            ck.get("t1")
        def loop():
            while True:
                ctstream.compress(path, out, format="int-quantized", overwrite=True, progress=progress)
        threading.Thread(target=loop, daemon=True).start()
        time.sleep(float(sys.argv[3]))
        print("exiting", flush=True)
        """
    for delay in (0.05, 0.3):
        r = _run(code, plain_big, tmp_path / "out", delay, timeout=120)
        assert r.stdout == "exiting\nlate True\n", r.stdout


def test_a_forked_child_exits_after_its_parent_was_inside_ctstream(plain_big):
    # The exit counts are copied into a child: a fork while another thread was inside a decode
    # left the child's count at 1 for a thread it does not have, and its exit waited forever.
    r = _run("""
        import os, sys, threading, time
        sys.modules["torch"] = None
        import numpy as np, ctstream
        ck = ctstream.open(sys.argv[1], framework="np", threads=1)
        stop = []
        buf = np.empty((2048, 1024), np.float32)
        def loop():  # into its own buffer: making arrays imports numpy each time (nanobind), and
            while not stop:  # a fork while another thread holds an import lock hangs the child
                for k in ck.keys():
                    ck.get(k, out=buf)
        t = threading.Thread(target=loop)
        t.start()
        time.sleep(0.05)
        for _ in range(3):
            pid = os.fork()
            if pid == 0:  # a normal exit: atexit handlers, the hook among them, run
                ck2 = ctstream.open(sys.argv[1], framework="np")
                assert float(ck2.get("t2")[0, 0]) == 2.0
                sys.exit(0)
            _, st = os.waitpid(pid, 0)
            assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
        stop.append(1)
        t.join()
        print("ok")
        """, plain_big, timeout=120)
    assert r.stdout == "ok\n"
