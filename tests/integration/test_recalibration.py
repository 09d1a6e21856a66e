"""A stale int8 calibration is redone while the run goes on (issue 46 item 1), real processes: a camera that starts
at dusk calibrates on dark frames; when daylight comes the int8 boxes stop agreeing with the unsplit fp32 model,
the master notices it from the online check, calibrates again on the camera's next frames, has every worker build
its stage on the new calibration and switches with a resync: every frame completes, and the boxes agree again."""
from __future__ import annotations

import os

import numpy as np
import pytest

from cnnvideo.model import engines

from .helpers import REPO, base_config, run_local

# serial: the switch must come while the camera still plays; beside a loaded parallel tier (load 15 on 2 cores) the
# master's calibration and quantization took longer than the clip's 45 s. (Run until its event instead, beside
# that tier, it met a loop's dusk frames again after the switch, and the file ran out: a serial run of a fixed
# clip stays the surer test. It did find a bug: recalibration.py's backlog counted the checker's missed samples.)
pytestmark = [pytest.mark.slow, pytest.mark.serial,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]

SIZE = (240, 320)
DARK, DAY = 60, 240  # frames at dusk (vtest at a quarter of its light), then in daylight
FRAMES = 450  # 45 s: the recalibration takes 15-30 s on a loaded 2-core host, then a window of checks follows


@pytest.fixture(scope="module")
def dusk_then_day(tmp_path_factory):
    from cnnvideo.video.frames import read_frames, write_video

    video = os.path.join(REPO, "media", "vtest.avi")
    if not os.path.isfile(video):
        pytest.skip("media/vtest.avi missing (make video)")
    frames = list(read_frames(video, SIZE, limit=DARK + DAY, loop=False))
    dark = [(f.astype(np.float32) * 0.25).astype(np.uint8) for f in frames[:DARK]]
    return write_video(str(tmp_path_factory.mktemp("dusk") / "dusk.avi"), iter(dark + frames[DARK:]))


def test_a_stale_calibration_is_redone_without_stopping_the_run(tmp_path, dusk_then_day, person_detector):
    # played as a camera (10 fps, looping): it runs on while the master sets up, so the run's first frames may be
    # dusk or day; the first calibration is dusk's either way (the file's first frames, read apart)
    data = base_config(dusk_then_day, str(tmp_path / "cache"), model="person-ssdlite", engine="onnxruntime",
                       precision="int8", frame_size=list(SIZE), frames=FRAMES, in_flight=4,
                       scheduler="replicas", bandwidth=[3.0, 3.0], trainer={"frames": 8},
                       source={"realtime": True, "fps": 10, "loop": True},
                       int8={"calibration": "camera", "calibration_frames": 8, "calibration_stride": 2,
                             "recalibrate_below": 0.8, "recalibrate_window": 24})
    del data["weights"]  # (a detector's weights are in its file)
    proc, report, _ = run_local(tmp_path, data, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == report["frames"] == FRAMES and report["lost"] == 0
    cal = report["int8_calibration"]
    assert max(cal["frame_indices"]) < DARK  # the run's first calibration: dusk frames
    redone = [e for e in cal.get("refreshed", []) if e["switched"]]
    assert redone, (cal, [ln for ln in proc.stderr.splitlines() if "calibration" in ln][-10:])
    first = redone[0]
    assert first["stale_f1"] < 0.8 and first["replaced"] == cal["digest"] and first["digest"] != cal["digest"]
    # the first 24 checked frames after the switch agree again (the new calibration's stage scores about 0.96 on
    # these day frames offline; a window of 24 frames holds about 70 boxes)
    assert first["f1_after"] is not None and first["f1_after"] >= 0.85, first
    # the new calibration went through the master's fit check too (calibration_fit), and says which recipe it kept
    assert first["recipe"] in ("default", "fp32-head") and first["fit"] and first["fit"][0]["recipe"] == "default"
    assert report["reliability"]["resyncs"] >= 1
    assert "is stale: F1" in proc.stderr and "replaces stale" in proc.stderr
    # the workers built the new stages from the master's file before the switch: none quantized its own
    assert "quantizing int8 here" not in proc.stderr
