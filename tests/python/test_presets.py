"""ctstream against compressed-tensors 0.20 on checkpoints made the way users make them (the
library's model path: apply_quantization_config, observers, compress_model, save_pretrained;
the reference is the library's own load + decompress_model): every preset scheme on a small
Llama, and a few multi-group configs. The whole table (174 cases): tests/presets/run_all.sh."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("compressed_tensors")
pytest.importorskip("transformers")
pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
PRESETS = HERE.parent / "presets"
sys.path.insert(0, str(PRESETS))
from cases import CASES  # noqa: E402

# UNQUANTIZED writes no quantization_config (nothing to compare against the library)
SELECTED = [c for c in CASES if c.startswith("preset_") and c.endswith("_even") and "UNQUANTIZED" not in c] + [
    "multi_regex_w4_fp8", "multi_nvfp4_mxfp4_fp8block", "multi_layer_specific", "exact_name_overrides_class",
    "dtype_float16_W4A16_ASYM", "dtype_float32_FP8_BLOCK",
    "fp4_tensor_group32_as_mxfp4", "nvfp4_scale_bf16", "fp4_group16_no_global",
    "mxfp4_scale_e8m0_refused", "nvfp4_scale_f32_refused", "w16_channel_asym_refused"]


@pytest.mark.parametrize("case", SELECTED)
def test_preset_matches_library(case, tmp_path):
    assert case in CASES
    made = subprocess.run([sys.executable, str(PRESETS / "make_case.py"), case, str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    d = tmp_path / case
    ref = json.loads((d / "ref.json").read_text()) if (d / "ref.json").exists() else {"stage": "none"}
    assert ref["stage"] == "ok", f"the library could not build / decompress {case}: {made.stdout[-2000:]}{made.stderr[-2000:]}"
    checked = subprocess.run([sys.executable, str(PRESETS / "check_case.py"), str(d)], capture_output=True, text=True,
                             timeout=600)
    result = json.loads((d / "check.json").read_text())
    if CASES[case].get("refused"):  # the library decodes it; ctstream must refuse it at open, naming why
        kind = CASES[case]["refused"]
        assert len(result["problems"]) == 1 and result["problems"][0].startswith(f"ctstream.Error kind={kind}:"), \
            f"{case}: expected a refusal ({kind}), got {result['problems'] or 'a decode'}"
        return
    assert not result["problems"], f"{case}: {result['problems']}\n{checked.stdout[-2000:]}{checked.stderr[-2000:]}"
    assert result.get("formats"), f"{case}: ctstream saw no tensors"
