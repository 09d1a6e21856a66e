"""`cnnvideo bench engine`: the JSON contract (summary per engine and precision) on a tiny synthetic clip, and
one clear error line for a calibration with no frames."""
import json
import subprocess
import sys

import pytest

from cnnvideo.model import engines
from cnnvideo.video.frames import synthetic_frames, write_video

pytestmark = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")


def _bench(*extra):
    return subprocess.run([sys.executable, "-m", "cnnvideo", "bench", "engine", "--json", "--model", "mobilenet_v2",
                           "--frame-size", "64", "96", "--frames", "3", "--repeat", "1", "--calibration-frames", "2"]
                          + list(extra), capture_output=True, text=True, timeout=600)


def test_bench_engine_json(tmp_path):
    """Every engine-precision has speedup, max_abs_err (int8 also top-1 agreement); ORT fp32 is within 1e-4 of
    torch, whole and split; each stage really ran on the engine it is listed under."""
    video = write_video(str(tmp_path / "v.avi"), synthetic_frames(12, (64, 96), seed=2))
    proc = _bench("--video", video, "--calibration-start", "6", "--cache-dir", str(tmp_path / "cache"),
                  "--heldout", "7:1:3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["heldout"]["frames"] == 3 and out["reference_top2_margin"]["min"] >= 0
    held = out["results"]["onnxruntime-int8"]["heldout"]
    assert set(held) == {"top1_agreement", "top5_overlap", "top1_in_top5", "split_top1_agreement"}
    assert out["results"]["onnxruntime-fp32"]["heldout"]["top1_agreement"] == 1.0
    assert set(out["summary"]) == {"torch-fp32", "onnxruntime-fp32", "onnxruntime-int8"}
    assert set(out["summary"]["onnxruntime-int8"]) == {"speedup_vs_torch_fp32", "max_abs_err", "top1_agreement"}
    fp32 = out["results"]["onnxruntime-fp32"]
    assert fp32["max_abs_err"] <= 1e-4 and fp32["split_max_abs_err"] <= 1e-4
    assert fp32["engines_run"] == ["onnxruntime-fp32"] and len(fp32["stage_s"]) == 2
    assert out["results"]["onnxruntime-int8"]["engines_run"] == ["onnxruntime-int8"]


def test_bench_engine_no_calibration_frames(tmp_path):
    """A calibration start past the clip: one error line naming the video, exit 2."""
    video = write_video(str(tmp_path / "v.avi"), synthetic_frames(4, (64, 96), seed=2))
    proc = _bench("--video", video, "--calibration-start", "100", "--engines", "torch-fp32,onnxruntime-int8")
    assert proc.returncode == 2
    assert "int8 calibration without frames" in proc.stderr and "v.avi" in proc.stderr


def test_bench_engine_bad_heldout(tmp_path):
    """--heldout that overlaps the calibration frames, or lies past the clip: one error line, exit 2."""
    video = write_video(str(tmp_path / "v.avi"), synthetic_frames(12, (64, 96), seed=2))
    for spec, words in (("6:1:2", "are evaluation or calibration frames"), ("9:1:5", "has 12 frames, frame 13"),
                        ("9:x", "must be START:STRIDE:COUNT")):
        proc = _bench("--video", video, "--calibration-start", "6", "--engines", "torch-fp32", "--heldout", spec)
        assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, spec
