"""The master's camera calibration (services/master/calibrating.py): a live source's first frames calibrate and are
counted apart from the run's, a camera with no scene leaves the workers on the video's calibration (one line), and
the next run reuses the stored calibration whatever its `frames:`."""
import functools
import threading
from types import SimpleNamespace

import numpy as np

from cnnvideo.config import from_dict
from cnnvideo.master.calibrating import calibration_report, camera_calibration
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.video.frames import synthetic_frames

FRAME = (64, 96)


@functools.lru_cache(maxsize=1)
def _graph():
    return LayerGraph.from_model(build_model("mobilenet_v2", "random", seed=0), FRAME)


class FakeSource:
    def __init__(self, frames):
        self.items = [SimpleNamespace(rgb=f, t=i / 25.0) for i, f in enumerate(frames)]
        self.ended = False

    def get(self, timeout=0.5):
        if not self.items:
            self.ended = True
            return None
        return self.items.pop(0)


def _feed(frames):
    return SimpleNamespace(source=FakeSource(frames), stopping=threading.Event(), to_calibration=0)


def _cfg(tmp_path, **over):
    data = {"model": "mobilenet_v2", "weights": "random", "frame_size": list(FRAME), "precision": "int8",
            "engine": "onnxruntime", "video": "http://127.0.0.1:9/cam.mjpg", "cache_dir": str(tmp_path),
            "int8": {"calibration_frames": 3, "calibration_stride": 2}}
    data.update(over)
    return from_dict(data, check_files=False)


def test_a_live_camera_calibrates_on_its_first_frames_and_the_next_run_reuses_it(tmp_path):
    black = [np.zeros(FRAME + (3,), np.uint8)] * 2
    feed = _feed(black + list(synthetic_frames(10, FRAME, seed=4)))
    cal, rep = camera_calibration(_cfg(tmp_path), _graph(), feed, from_source=True)
    assert cal is not None and rep["frame_indices"] == [2, 4, 6] and rep["skipped"] == {"black": 2}
    assert rep["stored"] is False and feed.to_calibration == 7  # frames 0..6: the run starts at the 8th
    again, rep2 = camera_calibration(_cfg(tmp_path, frames=500), _graph(), _feed([]), from_source=True)
    assert again.digest == cal.digest and rep2["stored"] is True


def test_a_camera_with_no_scene_leaves_the_video_calibration(tmp_path, caplog):
    feed = _feed([np.zeros(FRAME + (3,), np.uint8)] * 30)
    cal, rep = camera_calibration(_cfg(tmp_path), _graph(), feed, from_source=True)
    assert cal is None and rep["source"] == "video" and "no frame with a scene" in rep["camera_refused"]
    assert any("trainer's video instead" in r.getMessage() for r in caplog.records)


def test_the_video_calibration_report_names_its_frames():
    cfg = from_dict({"precision": "int8", "int8": {"calibration": "video", "calibration_frames": 3}},
                    check_files=False)
    rep = calibration_report(cfg)
    assert rep["source"] == "video" and rep["frame_indices"] == [cfg.trainer.frames + 5 * k for k in range(3)]
    assert calibration_report(from_dict({}, check_files=False)) is None
