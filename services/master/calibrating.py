"""The master's int8 calibration on its camera's own first frames (config `int8.calibration: camera`): reuse the
camera's stored calibration, else sample the camera (a file is read apart from the run's source; a live source
gives its first frames, which the run then does not process), measure it, check its int8 against fp32 on its frames
(calibration_fit: the recipe it keeps), store and return it; the workers get it in RunSetup. Nothing here depends
on `frames:`."""
from __future__ import annotations

import logging
import time
from typing import Iterator, Optional, Tuple

import numpy as np

from cnnvideo import artifacts
from cnnvideo.model.engines import EngineError, model_key
from cnnvideo.model.engines import camera_calibration as cc
from cnnvideo.video.frames import read_frames

from . import calibration_fit

log = logging.getLogger(__name__)


def _file_items(video: str, frame_size, look: int) -> Iterator[Tuple[np.ndarray, float]]:
    """(rgb, seconds) of a file's first `look` frames at its own frame rate (25 if it says none)."""
    import cv2

    cap = cv2.VideoCapture(video)
    fps = cap.get(cv2.CAP_PROP_FPS) or 25.0
    cap.release()
    for i, rgb in enumerate(read_frames(video, tuple(frame_size), limit=look, loop=False)):
        yield rgb, i / fps


def _source_items(feed, look: int, timeout: float = 60.0) -> Iterator[Tuple[np.ndarray, float]]:
    """(rgb, capture time) of a live source's next frames (they are the calibration's, not the run's)."""
    deadline = time.time() + timeout
    got = 0
    while got < look and time.time() < deadline and not feed.stopping.is_set():
        item = feed.source.get(timeout=0.5)
        if item is None:
            if feed.source.ended:
                return
            continue
        got += 1
        feed.to_calibration += 1
        deadline = time.time() + timeout
        yield item.rgb, item.t


def camera_calibration(cfg, graph, feed, from_source: bool) -> Tuple[Optional[cc.CameraCalibration], dict]:
    """(the camera's calibration, its report entry); (None, entry saying why) when the camera shows no scene in
    the frames looked at and none is stored: the workers then keep their own (the trainer's video)."""
    key = model_key(cfg, graph)
    camera = cfg.events.camera
    path = artifacts.camera_calibration_file(cfg.cache_dir, cfg.model, cfg.frame_size, camera, cfg.video)
    stored = cc.load_stored(path, key, cfg.frame_size, graph.num_segments)
    if stored is not None:
        log.info("int8 calibration %s: camera %s's stored calibration (%d frames of %s, frames %s)", stored.digest,
                 camera or "-", len(stored.jpegs), stored.source, cc.span(stored.indices))
        entry = {"stored": True, "file": path}
        if calibration_fit.stale(cfg, stored):  # stored before the check, or checked at another line: once now
            t0 = time.time()
            if calibration_fit.check(cfg, graph, stored) is None:
                cc.store(stored, path)
                entry["fit_s"] = round(time.time() - t0, 2)
        return stored, dict(stored.report(), **entry)  # (the report after the check: its recipe, its digest)
    count, stride = cfg.int8.calibration_frames, cfg.int8.calibration_stride
    look = count * stride * 4
    items = _source_items(feed, look) if from_source else _file_items(cfg.video, cfg.frame_size, look)
    t0 = time.time()
    try:
        sample = cc.sample_frames(items, count, stride, cfg.video, look)
        cal = cc.measure(graph, key, sample)
    except EngineError as exc:
        log.warning("%s; the workers calibrate on the trainer's video instead", exc)
        return None, {"source": "video", "camera_refused": str(exc)}
    measured = time.time() - t0
    no_check = calibration_fit.check(cfg, graph, cal)
    cc.store(cal, path)
    entry = dict(cal.report(), stored=False, file=path, measure_s=round(measured, 2))
    if no_check:
        entry["fit_skipped"] = no_check
    else:
        entry["fit_s"] = round(time.time() - t0 - measured, 2)
    return cal, entry


def calibration_report(cfg) -> Optional[dict]:
    """report.json `int8_calibration` before the camera's is measured: the trainer's video's frames with
    `int8.calibration: video` (what the workers calibrate on), None on fp32."""
    if cfg.precision != "int8":
        return None
    i8 = cfg.int8
    return {"source": "video", "video": cfg.calibration_video, "start": cfg.calibration_start,
            "stride": i8.calibration_stride, "count": i8.calibration_frames,
            "frame_indices": [cfg.calibration_start + k * i8.calibration_stride for k in range(i8.calibration_frames)]}
