"""The master's int8 fit check (services/master/calibration_fit.py): which recipe a camera keeps for a given score
of each, and which configs the check applies to. The check on the real detector and scenes: the bench's
`after + fit check` row (docs/results/int8-scenes) and tests/integration/test_calibration_fit.py."""
import dataclasses

import pytest

from cnnvideo.config import from_dict
from cnnvideo.errors import ConfigError
from cnnvideo.master import calibration_fit
from cnnvideo.model.engines import camera_calibration as cc


def _cal():
    return cc.CameraCalibration("m 64x96 weights w", (64, 96), "cam.avi", [0], [0.0], [b"jpeg"], {}, "rules")


def _scores(*f1s):
    seen = []

    def score(recipe):
        seen.append(recipe)
        return {"f1": f1s[len(seen) - 1], "reference_boxes": 12}

    return score, seen


def test_a_camera_that_fits_keeps_the_engines_recipe_and_is_scored_once():
    cal = _cal()
    score, seen = _scores(0.98)
    calibration_fit.choose(cal, score, 0.97)
    assert cal.recipe == "" and seen == [""] and cal.fit == [{"f1": 0.98, "reference_boxes": 12, "recipe": "default",
                                                          "below": 0.97}]


def test_a_camera_under_the_line_takes_the_next_recipe():
    cal = _cal()
    score, seen = _scores(0.917, 1.0)
    calibration_fit.choose(cal, score, 0.97)
    assert cal.recipe == "fp32-head" and seen == ["", "fp32-head"]
    assert [f["recipe"] for f in cal.fit] == ["default", "fp32-head"]
    assert dataclasses.replace(cal, recipe="").digest != cal.digest


def test_when_no_recipe_fits_the_last_tried_is_kept():
    cal = _cal()
    score, _ = _scores(0.5, 0.6)
    calibration_fit.choose(cal, score, 0.97)
    assert cal.recipe == list(cc.RECIPES)[-1] and len(cal.fit) == len(cc.RECIPES)


def test_frames_without_a_box_fit_as_they_are():
    """fp32 found no box on the frames (F1 None): nothing to lose, the engine's recipe stays."""
    cal = _cal()
    score, seen = _scores(None)
    calibration_fit.choose(cal, score, 0.97)
    assert cal.recipe == "" and seen == [""]


def test_a_stored_calibration_is_checked_again_only_when_unchecked_at_this_line():
    cfg = from_dict({"model": "person-ssdlite", "precision": "int8", "engine": "onnxruntime"}, check_files=False)
    cal = _cal()
    assert calibration_fit.stale(cfg, cal)  # stored before the check existed
    score, _ = _scores(0.98)
    calibration_fit.choose(cal, score, 0.97)
    assert not calibration_fit.stale(cfg, cal)
    assert calibration_fit.stale(dataclasses.replace(cfg, int8=dataclasses.replace(cfg.int8, fit_below=0.99)), cal)
    assert not calibration_fit.stale(dataclasses.replace(cfg, precision="fp32"), _cal())  # the check does not apply


def test_the_check_applies_to_an_int8_detector_on_its_cameras_calibration_only():
    detector = {"model": "person-ssdlite", "precision": "int8", "engine": "onnxruntime"}
    assert "not asked" in calibration_fit.why_not(from_dict(dict(detector, precision="fp32"), check_files=False))
    assert "not asked" in calibration_fit.why_not(from_dict(dict(detector, int8={"fit_below": 0}), check_files=False))
    assert "not asked" in calibration_fit.why_not(
        from_dict(dict(detector, int8={"calibration": "video"}), check_files=False))
    assert "not an ONNX detector" in calibration_fit.why_not(
        from_dict(dict(detector, model="mobilenet_v2"), check_files=False))
    assert calibration_fit.why_not(from_dict(detector, check_files=False)) == ""


def test_fit_below_outside_0_1_is_a_config_error():
    with pytest.raises(ConfigError, match="int8.fit_below"):
        from_dict({"precision": "int8", "int8": {"fit_below": 1.5}}, check_files=False)
