"""Downloads a package's source distribution from PyPI into a cache and prints its path.

    python tools/fetch_sdist.py safetensors 0.8.0 [CACHE_DIR]

The sdist is found on PyPI's simple index (PEP 503: the links of https://pypi.org/simple/NAME/,
each ending in #sha256=...) and checked against that hash. `pip download --no-binary` cannot do
this for a package built by a Rust toolchain: it builds the package's metadata first. Used for the
upstream test suites that ship in sdists (tests/python/test_safetensors_upstream.py).
"""
import hashlib
import os
import re
import sys
import urllib.parse
import urllib.request


def fetch(name: str, version: str, cache: str) -> str:
    os.makedirs(cache, exist_ok=True)
    fname = f"{name}-{version}.tar.gz"
    path = os.path.join(cache, fname)
    if os.path.exists(path):
        return path
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    with urllib.request.urlopen(f"{index}/{name}/", timeout=60) as r:
        page = r.read().decode()
    m = re.search(r'href="([^"]*/' + re.escape(fname) + r')#sha256=([0-9a-f]{64})"', page)
    if not m:
        raise SystemExit(f"{fname} is not on {index}/{name}/")
    url, want = urllib.parse.urljoin(f"{index}/{name}/", m.group(1)), m.group(2)
    with urllib.request.urlopen(url, timeout=120) as r:
        data = r.read()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise SystemExit(f"{url}: sha256 {got}, the index says {want}")
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    cache = sys.argv[3] if len(sys.argv) > 3 else os.path.expanduser("~/.cache/ctstream/sdist")
    print(fetch(sys.argv[1], sys.argv[2], cache))
