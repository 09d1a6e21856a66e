"""`model: <path>.onnx` end to end: `cnnvideo local` (trainer, 2 workers, master as real processes) splits an ONNX
file exported from torchvision and gives the unsplit model's outputs."""
from __future__ import annotations

import pytest

from .helpers import base_config, hop, run_local

pytestmark = pytest.mark.slow
pytest.importorskip("onnxruntime")


def _export_mobilenet(path: str) -> str:
    """mobilenet_v2 (seeded random weights) exported with dynamic batch, H and W."""
    from tests.onnx_export import export_torchvision

    export_torchvision("mobilenet_v2", path, (96, 128))
    return path


def test_local_run_of_an_onnx_file(tmp_path, synthetic_video):
    """A 2-worker delta run (lbs: both workers compute) of an ONNX file: every frame completes on ONNX Runtime
    stages cut from the file, outputs equal the unsplit ORT model within 1e-4 (the master's online check), the
    first stage starts with the frame preprocessing prepended to the model."""
    model = _export_mobilenet(str(tmp_path / "mobilenet_v2.onnx"))
    data = base_config(synthetic_video, str(tmp_path / "cache"), model=model, engine="onnxruntime", frames=12,
                       scheduler="lbs")
    proc, report, _ = run_local(tmp_path, data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 12 and report["lost"] == 0
    assert report["max_abs_err"] is not None and report["max_abs_err"] <= 1e-4
    assert hop(report, "m->w0")["bytes_dense"] == 12 * 96 * 128 * 3 * 4
    assert len(report["plan"]) == 2 and all(report["plan"]), report["plan"]  # both workers compute a stage
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-fp32"]] * 2, report["engines"]
    assert report["plan"][0][:5] == ["preprocess/transpose", "preprocess/to_float", "preprocess/div255",
                                     "preprocess/sub_mean", "preprocess/div_std"]
