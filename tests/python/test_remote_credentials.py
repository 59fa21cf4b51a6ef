"""Credential hygiene (issue 29, docs/design/object_storage.md step 13): every surface - the CLI
(`inspect --json`, `verify`), Python (`open`, `safe_open`, `load_model`, `ctstream.vllm.
weights_iterator`, the small-file pull of the vLLM plugin) and the C ABI - run with sentinel
access key / secret / session token values against servers that refuse them: a real S3 server
with other keys (`rclone serve s3`: 403), a hostile one that echoes the request's Authorization
and x-amz-security-token headers into its error XML and response headers (403, and 503 SlowDown,
retried), and a closed port. None of the sentinel strings may appear in an exception (message,
repr, attributes), in stdout/stderr, or in `--json` output."""
import http.server
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from xml.sax.saxutils import escape

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "remote"))
import servers  # noqa: E402 - tests/remote/servers.py

ctstream = pytest.importorskip("ctstream")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACK = os.path.join(ROOT, "tests", "fixtures", "ct", "v012_pack_w4_g32_sym_bf16")
KEY, SECRET, TOKEN = "AKIASENTINELKEY77777", "sentinel-secret-value-77777", "sentinel-session-token-77777"
SENTINELS = (KEY, SECRET, TOKEN)


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with an S3 error whose <Message>, <Code>-adjacent elements and
    headers repeat what the client sent: the worst a server can do with the credentials."""
    status = 403

    def _answer(self, body=True):
        auth = self.headers.get("Authorization", "")
        tok = self.headers.get("x-amz-security-token", "")
        code = "SlowDown" if self.status == 503 else "AccessDenied"
        xml = (f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>token {escape(tok)} auth "
               f"{escape(auth)}</Message><AWSAccessKeyId>{escape(auth)}</AWSAccessKeyId>"
               f"<RequestId>{escape(tok)}</RequestId></Error>").encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(xml)))
        self.send_header("x-amz-request-id", tok[:100])
        self.send_header("x-echo-auth", auth[:200])
        if self.status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        if body:
            self.wfile.write(xml)

    def do_GET(self):  # noqa: N802
        self._answer()

    def do_HEAD(self):  # noqa: N802
        self._answer(body=False)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module", params=["denied", "echo403", "echo503", "closed"])
def server(request, tmp_path_factory):
    """(endpoint, expected C ABI status) for one refusing server."""
    kind = request.param
    if kind == "denied":
        root = tmp_path_factory.mktemp("s3deny")
        shutil.copytree(PACK, root / "bkt" / "pack")
        with servers.rclone_serve("s3", root, "AKIAOTHERKEY00000000,other-secret-0000000000") as port:
            yield f"http://127.0.0.1:{port}"
        return
    httpd = None
    port = servers.free_port()
    if kind.startswith("echo"):
        handler = type("Echo", (_Echo,), {"status": int(kind[4:])})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()


@pytest.fixture
def sentinel_env(server, tmp_path, monkeypatch):
    empty = tmp_path / "aws_empty"
    empty.write_text("")
    env = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN,
           "AWS_ENDPOINT_URL": server, "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": str(empty),
           "AWS_SHARED_CREDENTIALS_FILE": str(empty), "CTSTREAM_S3_MAX_ATTEMPTS": "2"}
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _clean(text, what):
    for s in SENTINELS:
        assert s not in text, f"{what} holds the credential {s!r}:\n{text}"


# The Python surfaces run in a process of their own: the S3 client reads CTSTREAM_S3_* once per
# process (its options are fixed at first use, docs/design/object_storage.md), so a test that set
# them after another test's remote read in this process would get that test's retry count (5 slow
# attempts against the 503 server, not 2). Each call's exception is printed as one JSON line.
_SURFACES = textwrap.dedent("""
    import json, os
    import torch
    import ctstream
    from ctstream import _remote
    from ctstream.vllm import weights_iterator

    def error_text(e):
        return " | ".join([str(e), repr(e)] + [str(getattr(e, a, "")) for a in ("kind", "file", "tensor")] +
                          [str(a) for a in getattr(e, "args", ())])

    calls = {
        "open": lambda: ctstream.open("s3://bkt/pack"),
        "safe_open": lambda: ctstream.safe_open("s3://bkt/pack/model.safetensors", framework="pt"),
        "load_model": lambda: ctstream.load_model(torch.nn.Linear(2, 2), "s3://bkt/pack"),
        "weights_iterator": lambda: next(iter(weights_iterator("s3://bkt/pack"))),
        "pull_model_files": lambda: _remote.pull_model_files("s3://bkt/pack", os.environ["AWS_CONFIG_FILE"] + ".d"),
    }
    for name, call in calls.items():
        try:
            call()
            print(json.dumps({"surface": name, "raised": None}), flush=True)
        except Exception as e:  # noqa: BLE001 - which class is not the point here
            print(json.dumps({"surface": name, "raised": error_text(e)}), flush=True)
""")


def test_python_surfaces(sentinel_env):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", _SURFACES], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [x["surface"] for x in results] == ["open", "safe_open", "load_model", "weights_iterator",
                                                "pull_model_files"], r.stdout + r.stderr
    for x in results:
        text = x["raised"]
        assert text is not None, f"{x['surface']} raised nothing"
        assert "s3://bkt/pack" in text, (x["surface"], text)  # the error says what failed ...
        _clean(text, x["surface"])  # ... and nothing of the credentials
    _clean(r.stdout + r.stderr, "stdout/stderr")


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_cli(sentinel_env, command):
    cli = os.environ.get("CTSTREAM_CLI") or os.path.join(ROOT, "build", "bin", "ctstream")
    if not os.access(cli, os.X_OK):
        pytest.skip("needs the CLI (CTSTREAM_CLI)")
    args = [cli, command] + (["--json"] if command == "inspect" else []) + ["s3://bkt/pack"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert r.returncode != 0
    assert "s3://bkt/pack" in r.stdout + r.stderr
    _clean(r.stdout + r.stderr, " ".join(args[1:]))


def test_c_abi(sentinel_env):
    cli = os.environ.get("CTSTREAM_CLI")
    exe = None
    for d in ([os.path.dirname(cli)] if cli else []) + [os.path.join(ROOT, "build", "bin")]:
        if os.access(os.path.join(d, "test_c_abi_remote"), os.X_OK):
            exe = os.path.join(d, "test_c_abi_remote")
    if exe is None:
        pytest.skip("test_c_abi_remote not built")
    r = subprocess.run([exe, "fails", "s3://bkt/pack", "io", *SENTINELS], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    _clean(r.stdout + r.stderr, "test_c_abi_remote")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
