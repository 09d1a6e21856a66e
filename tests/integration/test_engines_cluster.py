"""`cnnvideo local` with the ONNX Runtime engine: fp32 is exact against the master's torch reference; int8 hands
uint8 tensors (with their scale and zero point) between workers and the report says which engine ran where."""
from __future__ import annotations

import pytest

from cnnvideo.model import engines

from .helpers import base_config, hop, run_local

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def _ok(proc, report):
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] and report["lost"] == 0


def test_onnxruntime_fp32_cluster_matches_torch_within_1e4(tmp_path, synthetic_video, cache_dir):
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
    assert 0.0 <= report["top1_agreement"] <= 1.0  # computed (a share), not None


def test_adaptive_replan_waits_for_the_new_plans_stages(tmp_path, synthetic_video):
    """A stale profile (the first 60% of the segments 50x too fast, the rest 20x too slow) makes `adaptive` put too
    much on worker 0, then re-plan mid-run to cuts no worker has built. The frames keep the plan they run while the
    workers export the new stages in the background (report.json `plan_warming`: switched at a later frame than
    asked, after at least two polls), so no frame waits for an ONNX export; every frame completes within 1e-4 of
    torch and runs the first plan or one that was built before frames took it."""
    import glob
    import os

    import numpy as np

    cache = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache, model="mobilenet_v2", engine="onnxruntime", frames=3,
                       scheduler="optimal", trainer={"frames": 12}, frame_size=[160, 240],
                       bandwidth=[1000.0],  # compute, not links or the master, sets the cut
                       cost_model={"master_turnaround_s": 0.0})
    proc, report, _ = run_local(tmp_path, data, name="profile")  # profiles both workers into the cache
    _ok(proc, report)
    files = glob.glob(os.path.join(cache, "costs", "*onnxruntime-fp32*.npz"))
    assert files, os.listdir(cache)
    for path in files:
        with np.load(path, allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files}
        k = arrays["seconds"].size
        arrays["seconds"][: int(0.6 * k)] *= 0.02
        arrays["seconds"][int(0.6 * k):] *= 20.0  # the rest 20x too slow: compute, not codec or messages, sets the cut
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
    data.update(frames=160, scheduler="adaptive", group_size=10, in_flight=4, scheduler_options={"min_samples": 1,
                                                                                                   "pool": False})
    proc, report, _ = run_local(tmp_path, data, name="adaptive")  # re-planning a chain's cut
    _ok(proc, report)
    assert report["max_abs_err"] <= 1e-4
    warmed = [w for w in report["plan_warming"] if w["switched_frame"] is not None]
    assert warmed, (report["plan_decisions"], report["plan_warming"])
    for w in warmed:
        assert w["switched_frame"] > w["asked_frame"] and w["polls"] >= 2 and w["refused"] is None, w
    first = report["plan_decisions"][0]["cuts"]
    allowed = {tuple(first)} | {tuple(w["cuts"]) for w in warmed}
    frames_on = {}
    for rec in report["per_frame"]:
        assert tuple(rec["cuts"]) in allowed, rec
        frames_on.setdefault(tuple(rec["cuts"]), []).append(rec["frame"])
    for w in warmed:  # no frame took the plan before every worker had built it
        assert min(frames_on.get(tuple(w["cuts"]), [w["switched_frame"]])) >= w["switched_frame"], (w, frames_on)
