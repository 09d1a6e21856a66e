"""A run calibrates int8 on its own camera's frames (issue 46 item 1), real processes: the master samples the
camera's first frames (skipping its black ones), the workers build their int8 stages with that calibration, the
report says which frames calibrated the run, and a run with another `frames:` reuses the stored calibration and
builds no stage again."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from cnnvideo.model import engines

from .helpers import base_config, run_local

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]


@pytest.fixture(scope="module")
def camera_video(tmp_path_factory):
    """A clip whose first 5 frames are black (a covered lens), then a scene."""
    from cnnvideo.video.frames import synthetic_frames, write_video

    frames = [np.zeros((96, 128, 3), np.uint8)] * 5 + list(synthetic_frames(35, (96, 128), seed=3))
    return write_video(str(tmp_path_factory.mktemp("camera") / "camera.avi"), iter(frames))


def test_a_run_calibrates_on_its_own_cameras_frames(tmp_path, camera_video):
    cache = str(tmp_path / "cache")
    data = base_config(camera_video, cache, model="mobilenet_v2", engine="onnxruntime", precision="int8",
                       frames=8, scheduler="lbs", trainer={"frames": 12},
                       int8={"calibration": "camera", "calibration_frames": 4, "calibration_stride": 3})
    proc, report, _ = run_local(tmp_path, data, name="first")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == 8
    cal = report["int8_calibration"]
    assert cal["source"] == camera_video and cal["count"] == 4 and cal["stored"] is False
    assert cal["skipped"].get("black") == 5 and cal["frame_indices"] == [5, 8, 11, 14]
    assert len(cal["digest"]) == 16 and 0 < cal["wire_bytes"] < 100_000
    assert [e["ran"] for e in report["engines"]] == [["onnxruntime-int8"], ["onnxruntime-int8"]]
    assert proc.stderr.count("int8 calibration %s of %s" % (cal["digest"], camera_video)) == 2  # each worker
    assert "skipped 5 black" in proc.stderr
    stages = sorted(glob.glob(os.path.join(cache, "onnx", "*-int8-*.onnx")))

    data["frames"] = 12  # another `frames:`: the same calibration, no stage built again
    proc, report, _ = run_local(tmp_path, data, name="second")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["int8_calibration"]["digest"] == cal["digest"] and report["int8_calibration"]["stored"] is True
    assert sorted(glob.glob(os.path.join(cache, "onnx", "*-int8-*.onnx"))) == stages
    assert "built into" not in proc.stderr, [ln for ln in proc.stderr.splitlines() if "built into" in ln][:3]
