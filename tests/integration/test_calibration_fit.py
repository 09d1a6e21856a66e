"""The master's int8 fit check on the trained detector and a scene nobody tuned for (issue 46 item 1): on the walkers
clip (people that fp32 itself scores near the 0.5 line) int8 with the engine's recipe adds boxes on the calibration's
own frames, so the master keeps more of the model fp32 for that camera; the recipe is stored with the calibration,
travels to the workers, and their stage key is the one of the file the master built (so the push is taken, not
quantized again). The master's own code (calibrating.camera_calibration) on the real model, no mocks."""
from __future__ import annotations

import dataclasses
import os

import pytest

from cnnvideo.model import engines

from .helpers import REPO

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")]

SIZE = (480, 720)


@pytest.fixture(scope="module")
def walkers(tmp_path_factory):
    """The bench's walkers clip (tools/bench/scenes.py, 100 frames at 480x720, as `cnnvideo bench int8-scenes`)."""
    from cnnvideo.tools.bench import scenes

    photos = os.path.join(REPO, "media", "photos")
    if not os.path.isfile(os.path.join(photos, "horses.jpg")):
        pytest.skip("media/photos missing (make photos)")
    return scenes.write_clip(scenes.render("walkers", 100, SIZE, photos),
                             str(tmp_path_factory.mktemp("walkers") / "walkers.avi"))


def test_a_camera_whose_int8_boxes_do_not_fit_keeps_more_fp32_and_its_workers_build_that(tmp_path, walkers,
                                                                                          person_detector):
    from cnnvideo.artifacts import onnx_stage_path
    from cnnvideo.config import from_dict
    from cnnvideo.master.calibrating import camera_calibration
    from cnnvideo.model.engines import camera_calibration as cc
    from cnnvideo.model.engines import factory_for
    from cnnvideo.model.engines.ort_engine import load_cached, stage_key
    from cnnvideo.model.loading import load_graph
    from cnnvideo.rpc import convert

    cfg = from_dict({"model": "person-ssdlite", "precision": "int8", "engine": "onnxruntime", "video": walkers,
                     "cache_dir": str(tmp_path), "frame_size": list(SIZE)}, check_files=False)
    graph = load_graph(cfg)
    cal, rep = camera_calibration(cfg, graph, None, from_source=False)
    assert rep["recipe"] == "fp32-head", rep["fit"]
    default, head = rep["fit"]
    assert default["recipe"] == "default" and default["f1"] < 0.97 <= head["f1"], rep["fit"]
    assert default["int8_boxes"] > default["reference_boxes"] > 0  # int8 added boxes fp32 scores under the line

    again, rep2 = camera_calibration(cfg, graph, None, from_source=False)  # the stored calibration, its recipe
    assert rep2["stored"] is True and again.recipe == "fp32-head" and again.digest == cal.digest
    assert "fit_s" not in rep2  # checked at this line already: not again

    # a calibration stored before the check existed (no recipe, no fit) is checked once when it is loaded
    cc.store(dataclasses.replace(cal, recipe="", fit=[]), rep["file"])
    old, rep3 = camera_calibration(cfg, graph, None, from_source=False)
    assert rep3["stored"] is True and "fit_s" in rep3 and old.recipe == "fp32-head" and old.digest == cal.digest
    assert cc.load_stored(rep["file"], cal.model_key, SIZE, graph.num_segments).recipe == "fp32-head"

    worker = factory_for(cfg, graph).with_calibration(convert.calibration_from_pb(convert.calibration_to_pb(cal)))
    assert (worker.stem, worker.heads) == ("head", 2)
    key = stage_key(worker, 0, graph.num_segments, "int8")
    assert "fp32 heads 2" in key
    built = onnx_stage_path(os.path.join(str(tmp_path), "onnx-served"), 0, graph.num_segments, "int8", key)
    load_cached(built, key, 1)  # the master built that very stage: the push is taken as it is
