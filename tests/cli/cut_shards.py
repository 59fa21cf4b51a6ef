"""Cuts a one-file checkpoint into two shards with an index, one module's weight_scale alone in
the second shard (as save_pretrained with a small max_shard_size may cut a module). Standard
library only: the safetensors layout (8-byte little-endian header length, JSON header, data).

usage: cut_shards.py IN_DIR OUT_DIR   (IN_DIR holds model.safetensors and config.json)
Prints the module's name.
"""
import json
import shutil
import struct
import sys
from pathlib import Path


def read(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return header, raw[8 + n:]


def write(path, entries):  # entries: name -> (dtype, shape, bytes)
    header, data = {}, b""
    for name, (dtype, shape, b) in entries.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True)
header, data = read(src / "model.safetensors")
entries = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
cut = sorted(k for k in entries if k.endswith(".weight_scale"))[0]
names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
write(out / names[0], {k: v for k, v in entries.items() if k != cut})
write(out / names[1], {cut: entries[cut]})
(out / "model.safetensors.index.json").write_text(json.dumps(
    {"metadata": {}, "weight_map": {k: names[k == cut] for k in entries}}))
shutil.copy(src / "config.json", out / "config.json")
print(cut[:-len(".weight_scale")])
