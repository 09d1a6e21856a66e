"""The master's check of a camera's int8 calibration on the calibration's own frames (issue 46 item 1: int8 on a
scene nobody tuned for). Once the camera's calibration is measured, the master builds the whole model on int8 with
the engine's recipe, runs it and the unsplit fp32 model on those frames, and scores int8's boxes against fp32's (F1,
IoU >= 0.5, the run's score threshold). Under `int8.fit_below` the camera takes the next recipe of
camera_calibration.RECIPES (more of the model kept fp32), checked the same way; the first that fits is kept, else the
last one tried, and the calibration carries it to every worker (RunSetup, its digest, its stage keys).

Why: int8's rounding moves a detector's scores by about 0.03; a scene whose people score near the threshold (walkers:
31 of 74 boxes between 0.4 and 0.6) gains or loses boxes that fp32 does not, and only keeping the backbone's path to
the finest head fp32 removes it, at 1.2x int8's CPU a frame (docs/results/int8-scenes). The check lets the cameras
that need it pay that, and no other. The stages are built by stage_push.served_factory, in the master's stage folder
with the workers' keys: the whole-model stage of the recipe kept is the one a replicas plan pushes."""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from cnnvideo.artifacts import onnx_model_path
from cnnvideo.model.engines import EngineError, ort_available
from cnnvideo.model.engines.camera_calibration import RECIPES, CameraCalibration
from cnnvideo.model.onnx_graph import unpack_outputs
from cnnvideo.results import detections as dt

from .stage_push import served_factory

log = logging.getLogger(__name__)


def why_not(cfg) -> str:
    """Why the check does not apply to this config ('' when it does): int8 on a camera's calibration, `fit_below`
    above 0, an ONNX-file detector, ONNX Runtime importable here."""
    i8 = cfg.int8
    if cfg.precision != "int8" or i8.calibration != "camera" or i8.fit_below <= 0:
        return "not asked (int8.fit_below 0, or not int8 on the camera's calibration)"
    if cfg.engine not in ("onnxruntime", "auto"):
        return "engine %s has no int8" % cfg.engine
    if not onnx_model_path(cfg.model) or not dt.is_detector(cfg.model):
        return "%s is not an ONNX detector (the check scores boxes)" % cfg.model
    ok, why = ort_available()
    return "" if ok else why


def stale(cfg, cal: CameraCalibration) -> bool:
    """True when the check applies and a stored `cal` was not checked at this config's line (a calibration stored
    before the check existed, or `int8.fit_below` changed since): the master checks it once more."""
    return not why_not(cfg) and not any(f.get("below") == cfg.int8.fit_below for f in cal.fit)


def choose(cal: CameraCalibration, score: Callable[[str], Dict[str, object]], below: float) -> None:
    """Set `cal.recipe` to the first of RECIPES whose score's F1 reaches `below` (the last tried when none does) and
    `cal.fit` to every score taken. An F1 of None (fp32 found no box on the frames) fits: there is nothing to lose."""
    cal.fit = []
    for recipe in RECIPES:
        entry = dict(score(recipe), recipe=recipe or "default", below=below)
        cal.fit.append(entry)
        cal.recipe = recipe
        f1 = entry.get("f1")
        if f1 is None or f1 >= below:
            return


def check(cfg, graph, cal: CameraCalibration) -> Optional[str]:
    """Run the check on `cal` (setting its recipe and fit entries); None when it ran, else why it did not (one line,
    logged: the calibration keeps the recipe it has)."""
    why = why_not(cfg)
    if why:
        log.info("int8 calibration %s: no fit check (%s)", cal.digest, why)
        return why
    trial = dataclasses.replace(cal)
    try:
        fp32 = served_factory(dataclasses.replace(cfg, precision="fp32"), graph).stage(0, graph.num_segments)
        score = scorer(served_factory(cfg, graph), fp32, graph, dt.spec_for(cfg.model, cfg.detect), cal)
        choose(trial, score, cfg.int8.fit_below)
    except (EngineError, ValueError) as exc:
        log.warning("int8 calibration %s: fit check failed (%s); its recipe stays %s", cal.digest, exc,
                    cal.recipe or "default")
        return str(exc)
    cal.recipe, cal.fit = trial.recipe, trial.fit
    kept = cal.fit[-1]
    log.info("int8 calibration %s: recipe %s kept (%s)", cal.digest, kept["recipe"],
             "; ".join("%s F1 %s" % (f["recipe"], f["f1"]) for f in cal.fit))
    return None


def scorer(base, fp32_stage, graph, spec: dt.DetectorSpec,
           cal: CameraCalibration) -> Callable[[str], Dict[str, object]]:
    """score(recipe) -> the F1 entry of the whole model on int8 (built by `base` on `cal` with that recipe) against
    `fp32_stage`'s boxes, on the calibration's frames as decoded from their JPEGs (what the workers calibrate on).
    The master's check and `cnnvideo bench int8-scenes` score with it."""
    h, w = graph.frame_size
    k = graph.num_segments
    frames = cal.frames()
    last = graph.cuts[-1]

    def boxes(stage) -> List[list]:
        return [dt.decode(unpack_outputs(stage.run(f[np.newaxis]), last), spec, w, h) for f in frames]

    reference = boxes(fp32_stage)

    def score(recipe: str) -> Dict[str, object]:
        t0 = time.time()
        stage = base.with_calibration(dataclasses.replace(cal, recipe=recipe, fit=[])).stage(0, k)
        if stage.precision != "int8":
            raise EngineError("the whole model did not build on int8 (%s)" % getattr(stage, "reason", "fallback"))
        agree = dt.DetectionAgreement(0.5)
        for a, b in zip(boxes(stage), reference):
            agree.add(a, b)
        s = agree.summary()
        return {"f1": s["f1"], "precision": s["precision"], "recall": s["recall"], "frames": s["frames"],
                "reference_boxes": s["reference_boxes"], "int8_boxes": s["split_boxes"],
                "seconds": round(time.time() - t0, 2)}

    return score
