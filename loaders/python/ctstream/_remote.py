"""Checkpoints in object storage (``s3://``, ``http(s)://``; docs/design/object_storage.md): what
the Python surface needs beyond ``open``, which takes a URL as it is. Paths that are URLs are never
``abspath``/``realpath``ed (``os.path`` would turn ``s3://b/k`` into ``<cwd>/s3:/b/k``), and files
beside the weights (config.json, tokenizer files) are read with ctstream's own client: the same
credentials, endpoint and error rules (messages name the redacted URL, never a credential)."""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Iterable, List, Optional, Tuple

from . import _ctstream as _native
from ._ctstream import Error

_SCHEMES = ("s3://", "http://", "https://")
# The files vLLM (and transformers) read from a model directory besides the weights, and the most
# bytes each may have (a larger object is refused after one 64 KiB request, never downloaded).
_MiB = 1 << 20
SMALL_FILES: Tuple[Tuple[str, int], ...] = (
    ("config.json", 16 * _MiB),
    ("generation_config.json", 1 * _MiB),
    ("model.safetensors.index.json", 64 * _MiB),
    ("decompose_config.json", 16 * _MiB),
    ("tokenizer.json", 64 * _MiB),
    ("tokenizer_config.json", 16 * _MiB),
    ("tokenizer.model", 64 * _MiB),
    ("special_tokens_map.json", 1 * _MiB),
    ("added_tokens.json", 16 * _MiB),
    ("vocab.json", 64 * _MiB),
    ("merges.txt", 64 * _MiB),
    ("chat_template.jinja", 1 * _MiB),
    ("chat_template.json", 1 * _MiB),
    ("preprocessor_config.json", 1 * _MiB),
    ("processor_config.json", 1 * _MiB),
)


def is_remote(path) -> bool:
    """Whether ``path`` is an object-storage URL (the reader's rule, src/io/url.hpp is_remote_url:
    the scheme's case does not matter)."""
    return isinstance(path, str) and path[:8].lower().startswith(_SCHEMES)


def shown(url: str) -> str:
    """A URL as the reader names it (``Checkpoint.files``, messages): without its query and
    fragment (src/io/url.cpp redact_url: a presigned URL's signature is never shown)."""
    cut = [i for i in (url.find("?"), url.find("#")) if i >= 0]
    return url[: min(cut)] if cut else url


def directory_of(url: str) -> str:
    """The prefix a checkpoint URL names, with a trailing '/': the URL itself, or the folder of a
    ``*.safetensors`` object (where the reader looks for config.json). An http(s) URL's query and
    fragment are its own object's: the objects beside it are asked for without them, as the reader
    does (src/format/remote_shards.cpp); an s3:// key is literal text."""
    if not url[:5].lower() == "s3://":
        url = shown(url)
    if url.endswith(".safetensors"):
        return url[: url.rfind("/") + 1]
    return url if url.endswith("/") else url + "/"


def read_small(url: str, max_bytes: int) -> bytes:
    """A whole small object, at most ``max_bytes`` (HeaderTooLargeError beyond)."""
    return _native._read_small_remote(url, int(max_bytes))


def read_config(url: str) -> Optional[str]:
    """config.json beside a remote checkpoint, None when there is none."""
    try:
        return read_small(directory_of(url) + "config.json", 16 * _MiB).decode("utf-8")
    except Error as e:
        if e.kind == "file_not_found":
            return None
        raise


def pull_model_files(url: str, cache_root: str, names: Iterable[Tuple[str, int]] = SMALL_FILES) -> str:
    """Copies the small files of the checkpoint at ``url`` (``names``: file name and size cap;
    absent ones are skipped -- on s3:// also those S3 denies, its answer for a missing key to a caller
    without s3:ListBucket --, config.json must exist) into ``cache_root/<sha256(url)[:8]>`` and
    returns that directory: what an engine that reads config and tokenizer from a local directory
    needs, the weights staying remote. Written atomically: the files are fetched into a temporary
    directory beside it, which is renamed into place, or, where the directory exists already (an
    earlier pull, another process on this host), moved in file by file with os.replace; so a
    process reading it never sees a partial file."""
    base = directory_of(url)
    os.makedirs(cache_root, exist_ok=True)
    dest = os.path.join(cache_root, hashlib.sha256(url.encode("utf-8")).hexdigest()[:8])
    tmp = tempfile.mkdtemp(prefix=".pull-", dir=cache_root)
    got: List[str] = []
    try:
        for name, cap in names:
            data = _native._read_small_remote(base + name, int(cap), name != "config.json")
            if data is None:
                continue
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
            got.append(name)
        try:
            os.rename(tmp, dest)  # atomic; fails when dest exists and is not empty
            tmp = None
        except OSError:
            os.makedirs(dest, exist_ok=True)
            for name in got:
                os.replace(os.path.join(tmp, name), os.path.join(dest, name))
    finally:
        if tmp is not None:
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)
    return dest
