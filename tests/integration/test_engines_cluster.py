"""`cnnvideo local` with the ONNX Runtime engine: fp32 is exact against the master's torch reference; int8 hands
uint8 tensors (with their scale and zero point) between workers and the report says which engine ran where."""
from __future__ import annotations

import pytest

from cnnvideo import engines

from .helpers import base_config, hop, run_local

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def _ok(proc, report):
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] and report["lost"] == 0


def test_onnxruntime_fp32_cluster_is_exact(tmp_path, synthetic_video, cache_dir):
    """mobilenet_v2 over 2 workers on ORT fp32: every frame within 1e-4 of torch, both workers ran ORT."""
    data = base_config(synthetic_video, cache_dir, model="mobilenet_v2", engine="onnxruntime", frames=10,
                       scheduler="lbs", trainer={"frames": 12})
    proc, report, _ = run_local(tmp_path, data, name="fp32")
    _ok(proc, report)
    assert report["max_abs_err"] <= 1e-4 and report["top1_agreement"] == 1.0
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-fp32"], ["onnxruntime-fp32"]]


def test_onnxruntime_int8_cluster_sends_uint8(tmp_path, synthetic_video, cache_dir):
    """int8: the inner hop carries uint8 (at most a quarter of float32 dense before any delta saving), the
    engines are reported, the output stays close enough for the report's top-1 agreement to be computed."""
    data = base_config(synthetic_video, cache_dir, model="mobilenet_v2", engine="onnxruntime", precision="int8",
                       frames=10, scheduler="lbs", trainer={"frames": 12},
                       int8={"calibration_frames": 4, "calibration_start": 20, "calibration_stride": 2})
    proc, report, _ = run_local(tmp_path, data, name="int8")
    _ok(proc, report)
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-int8"], ["onnxruntime-int8"]]
    inner = hop(report, "w0->w1")
    assert inner["bytes_sent"] <= 0.25 * inner["bytes_dense"] + 2048 * report["frames"], inner
    assert report["top1_agreement"] is not None
