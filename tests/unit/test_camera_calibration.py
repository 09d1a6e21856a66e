"""int8 calibration on the camera's own frames (issue 46 item 1): black, flat and frozen frames never calibrate, the
calibration does not change with `frames:`, one of another model or frame size is refused with one line, and it
crosses the wire and the disk without pickle, digest checked."""
import dataclasses
import functools
import logging

import numpy as np
import pytest

from cnnvideo.model.engines import QParams
from cnnvideo.model.engines import camera_calibration as cc
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.rpc import convert
from cnnvideo.video.frames import synthetic_frames

FRAME = (64, 96)


@functools.lru_cache(maxsize=1)
def _graph():
    return LayerGraph.from_model(build_model("mobilenet_v2", "random", seed=0), FRAME)


def _scene(n, seed=1):
    return list(synthetic_frames(n, FRAME, seed=seed))


def _items(frames):
    return [(f, i / 25.0) for i, f in enumerate(frames)]


def test_black_flat_and_frozen_frames_are_skipped_with_one_log_line(caplog):
    scene = _scene(30)
    black = [np.zeros(FRAME + (3,), np.uint8)] * 6
    flat = [np.full(FRAME + (3,), 128, np.uint8)] * 3
    frozen = [scene[0]] * 4  # a stalled encoder repeats its last picture
    frames = black + flat + scene[:1] + frozen + scene[1:]
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        s = cc.sample_frames(_items(frames), count=4, stride=2, source="cam.mp4")
    assert len(s.frames) == 4
    assert s.skipped == {"black": 6, "flat": 3, "frozen": 3}  # after a refusal the next frame is looked at
    assert s.indices[0] == 9  # the first frame with a scene
    assert all(b - a >= 2 for a, b in zip(s.indices, s.indices[1:]))
    assert all(frames[i] is f for i, f in zip(s.indices, s.frames))
    assert s.times == [round(i / 25.0, 3) for i in s.indices]
    lines = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "6 black" in lines[0].getMessage() and "3 frozen" in lines[0].getMessage()


def test_a_camera_with_no_scene_is_refused():
    with pytest.raises(cc.NoSceneError, match="no frame with a scene.*8 black"):
        cc.sample_frames(_items([np.zeros(FRAME + (3,), np.uint8)] * 8), count=4, stride=1, source="cam")


def test_sensor_noise_is_not_frozen():
    rng = np.random.RandomState(0)
    base = _scene(1)[0].astype(np.int16)
    frames = [np.clip(base + rng.normal(0, 2, base.shape).round(), 0, 255).astype(np.uint8) for _ in range(6)]
    assert len(cc.sample_frames(_items(frames), count=6, stride=1, source="cam").frames) == 6


@pytest.fixture(scope="module")
def calibration():
    s = cc.sample_frames(_items(_scene(20)), count=3, stride=4, source="media/cam.avi")
    return cc.measure(_graph(), "mobilenet_v2 64x96 weights abc", s)


def test_the_calibration_does_not_change_with_frames(calibration, tmp_path):
    """The digest names the model, frame size, rules and frame bytes: the same camera frames give the same
    calibration (and so the same stage files) whatever the run's `frames:`; in video mode the first calibration
    frame follows the trainer's frames, not the run's."""
    from cnnvideo.config import from_dict

    again = cc.measure(_graph(), "mobilenet_v2 64x96 weights abc",
                       cc.sample_frames(_items(_scene(20)), count=3, stride=4, source="media/cam.avi"))
    assert again.digest == calibration.digest and again.qparams == calibration.qparams
    starts = set()
    for frames in (40, 240):
        starts.add(from_dict({"frames": frames, "precision": "int8"}, check_files=False).calibration_start)
    assert starts == {from_dict({}, check_files=False).trainer.frames}
    assert calibration.indices == [0, 4, 8] and calibration.qparams
    other = cc.measure(_graph(), "mobilenet_v2 64x96 weights abc",
                       cc.sample_frames(_items(_scene(20, seed=5)), count=3, stride=4, source="media/cam.avi"))
    assert other.digest != calibration.digest


def test_wire_and_disk_round_trips(calibration, tmp_path):
    back = convert.calibration_from_pb(convert.calibration_to_pb(calibration))
    assert back.digest == calibration.digest and back.qparams == calibration.qparams
    np.testing.assert_array_equal(back.frames(), calibration.frames())
    path = str(tmp_path / "cal.npz")
    cc.store(calibration, path)
    stored = cc.load_stored(path, calibration.model_key, FRAME, _graph().num_segments)
    assert stored is not None and stored.digest == calibration.digest and stored.indices == calibration.indices
    assert calibration.wire_bytes < 20_000


def test_another_model_or_frame_size_is_refused_with_one_line(calibration, tmp_path, caplog):
    g = _graph()
    with pytest.raises(cc.CalibrationRefused) as exc:
        calibration.check("resnet50 64x96 weights def", FRAME, g.num_segments)
    assert "\n" not in str(exc.value) and "mobilenet_v2 64x96 weights abc" in str(exc.value)
    with pytest.raises(cc.CalibrationRefused):
        calibration.check(calibration.model_key, (96, 128), g.num_segments)
    path = str(tmp_path / "cal.npz")
    cc.store(calibration, path)
    with caplog.at_level(logging.WARNING, logger=cc.__name__):
        assert cc.load_stored(path, "resnet50 64x96 weights def", FRAME, g.num_segments) is None
    assert len(caplog.records) == 1 and "refused" in caplog.records[0].getMessage()


def test_a_message_whose_digest_does_not_match_is_refused(calibration):
    msg = convert.calibration_to_pb(calibration)
    msg.scale[0] = msg.scale[0] * 2 if msg.scale else 1.0
    msg.jpeg[0] = msg.jpeg[1]
    with pytest.raises(cc.CalibrationRefused, match="digest"):
        convert.calibration_from_pb(msg)


def test_the_worker_factory_takes_the_camera_calibration(calibration):
    """StageFactory.with_calibration: the cut parameters are the master's, bit for bit; another model is refused."""
    from cnnvideo.model.engines import EngineSpec, StageFactory

    g = _graph()
    f = StageFactory(g, EngineSpec("torch", "int8"), "/nonexistent", calibration.model_key)
    cam = f.with_calibration(calibration)
    for cut, qp in calibration.qparams.items():
        assert cam.qparams(cut) == qp
    other = StageFactory(g, EngineSpec("torch", "int8"), "/nonexistent", "other model")
    with pytest.raises(cc.CalibrationRefused):
        other.with_calibration(calibration)
    assert isinstance(next(iter(calibration.qparams.values())), QParams)


def test_a_recipe_travels_is_in_the_digest_and_sets_the_workers_knobs(calibration, tmp_path):
    """A calibration's recipe (the master's fit check) reaches the workers' factory on the wire and from the stored
    file, and changes the digest (so the stage files); the engine's own recipe ('') keeps the digest of before."""
    from cnnvideo.model.engines import EngineSpec, StageFactory

    head = dataclasses.replace(calibration, recipe="fp32-head", fit=[{"recipe": "default", "f1": 0.9}])
    assert head.digest != calibration.digest
    assert dataclasses.replace(calibration, fit=[{"f1": 0.5}]).digest == calibration.digest
    back = convert.calibration_from_pb(convert.calibration_to_pb(head))
    assert back.recipe == "fp32-head" and back.digest == head.digest
    path = str(tmp_path / "cal.npz")
    cc.store(head, path)
    stored = cc.load_stored(path, head.model_key, FRAME, _graph().num_segments)
    assert stored.recipe == "fp32-head" and stored.fit == head.fit and stored.report()["recipe"] == "fp32-head"
    f = StageFactory(_graph(), EngineSpec("torch", "int8"), "/nonexistent", calibration.model_key)
    assert (f.with_calibration(calibration).stem, f.with_calibration(calibration).heads) == ("model", 0)
    assert (f.with_calibration(back).stem, f.with_calibration(back).heads) == ("head", 2)


def test_an_unknown_recipe_is_refused_with_one_line(calibration):
    """A message naming a recipe this worker does not know (its digest right) is refused when checked, in one line."""
    msg = convert.calibration_to_pb(calibration)
    msg.recipe = "everything fp32\nplease"
    msg.digest = dataclasses.replace(calibration, recipe=msg.recipe).digest
    cal = convert.calibration_from_pb(msg)
    with pytest.raises(cc.CalibrationRefused, match="recipe") as exc:
        cal.check(cal.model_key, FRAME, _graph().num_segments)
    assert "\n" not in str(exc.value)
