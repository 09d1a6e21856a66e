"""int8 calibration: the uint8 (scale, zero point) of every cut tensor, from torch fp32 min/max over frames of the
training video that no run evaluates, and the calibration inputs of a stage (the tensor at its first cut).

Every worker computes the same parameters from the same frames, so a stage's output quantisation is the next
stage's input quantisation; they also travel with each tensor and the receiver checks them."""
from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from cnnvideo.artifacts import atomic_tmp, calibration_file
from cnnvideo.model.engines.base import EngineError, QParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationSpec:
    """Which frames calibrate: `count` frames of `video` from frame `start`, every `stride`-th."""

    video: str
    count: int = 16
    start: int = 400
    stride: int = 10

    @property
    def label(self) -> str:
        return "%s@%d+%dx%d" % (os.path.basename(self.video), self.start, self.stride, self.count)


def read_calibration_frames(spec: CalibrationSpec, frame_size) -> np.ndarray:
    """(N, H, W, 3) uint8 frames; EngineError naming the video when it yields none at those positions."""
    from cnnvideo.video.frames import VideoError, read_frames

    if spec.count <= 0:
        raise EngineError("int8 calibration without frames: calibration count is %d" % spec.count)
    wanted = set(spec.start + i * spec.stride for i in range(spec.count))
    last = max(wanted)
    frames: List[np.ndarray] = []
    try:
        for i, frame in enumerate(read_frames(spec.video, tuple(frame_size), limit=last + 1, loop=False)):
            if i in wanted:
                frames.append(frame)
    except VideoError as exc:
        raise EngineError("int8 calibration without frames: %s" % exc) from None
    if not frames:
        raise EngineError("int8 calibration without frames: %s has no frame at %d..%d (start %d, stride %d); set "
                          "int8.calibration_start lower" % (spec.video, spec.start, last, spec.start, spec.stride))
    if len(frames) < spec.count:
        log.warning("int8 calibration: %s gave %d of %d frames", spec.video, len(frames), spec.count)
    return np.stack(frames)


def qparams_from_range(lo: float, hi: float) -> QParams:
    """uint8 asymmetric parameters covering [lo, hi] and 0 (ONNX Runtime's compute_scale_zp rule)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = float(np.float32((hi - lo) / 255.0)) if hi > lo else 1.0
    zp = int(np.clip(np.rint(-lo / scale), 0, 255))
    return QParams(scale, zp)


class Calibration:
    """Per-cut quantisation of one model at one frame size, and the frames it came from."""

    def __init__(self, graph, frames: Optional[np.ndarray], qparams: Dict[int, QParams], digest: str) -> None:
        self.graph = graph
        self._frames = frames
        self.qparams = qparams
        self.digest = digest
        self._reader = None

    @classmethod
    def measure(cls, graph, frames: np.ndarray, digest: str) -> "Calibration":
        """Run the fp32 torch model segment by segment over `frames`; min/max per cut."""
        import torch

        k = graph.num_segments
        lo, hi = np.full(k + 1, np.inf), np.full(k + 1, -np.inf)
        modules = [graph.stage_module(s, s + 1) for s in range(k)]
        with torch.no_grad():
            for frame in frames:
                x = torch.from_numpy(np.ascontiguousarray(frame[np.newaxis]))
                for s, m in enumerate(modules):
                    x = m(x)
                    lo[s + 1] = min(lo[s + 1], float(x.min()))
                    hi[s + 1] = max(hi[s + 1], float(x.max()))
        qp = {c: qparams_from_range(lo[c], hi[c]) for c in range(1, k)}
        return cls(graph, frames, qp, digest)

    def to_arrays(self) -> dict:
        cuts = sorted(self.qparams)
        return {"digest": np.array(self.digest), "cuts": np.array(cuts, dtype=np.int64),
                "scale": np.array([self.qparams[c].scale for c in cuts], dtype=np.float64),
                "zero_point": np.array([self.qparams[c].zero_point for c in cuts], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, graph, d, digest: str) -> "Calibration":
        """The calibration stored by to_arrays; ValueError if it is of another model or frames, or does not fit."""
        found = str(d["digest"]) if "digest" in d else "none"
        if found != digest:
            raise ValueError("it belongs to another model or calibration (digest %s, expected %s)" % (found, digest))
        cuts, scale, zp = (np.asarray(d[n]) for n in ("cuts", "scale", "zero_point"))
        if sorted(cuts.tolist()) != list(range(1, graph.num_segments)) or not np.all(scale > 0):
            raise ValueError("calibration does not fit a graph of %d segments" % graph.num_segments)
        return cls(graph, None, {int(c): QParams(float(s), int(z)) for c, s, z in zip(cuts, scale, zp)}, digest)

    def set_frames_reader(self, reader) -> None:
        """How to get the frames when they were not kept (a cached calibration)."""
        self._reader = reader

    @property
    def frames(self) -> np.ndarray:
        if self._frames is None:
            if self._reader is None:
                raise EngineError("int8 calibration without frames: no calibration video configured")
            self._frames = self._reader()
        return self._frames

    def inputs(self, start: int) -> List[np.ndarray]:
        """The tensor at cut `start` for every calibration frame (what a stage starting there is calibrated on)."""
        import torch

        frames = self.frames
        if start == 0:
            return [np.ascontiguousarray(f[np.newaxis]) for f in frames]
        m = self.graph.stage_module(0, start)
        with torch.no_grad():
            return [np.ascontiguousarray(m(torch.from_numpy(np.ascontiguousarray(f[np.newaxis]))).numpy())
                    for f in frames]


def load_or_measure(graph, spec: CalibrationSpec, cache_path: str, model_key: str) -> Calibration:
    """The calibration from its cache file (keyed by model and frames), else measured and stored."""
    digest = hashlib.sha1(("%s|%s" % (model_key, spec.label)).encode()).hexdigest()[:16]
    path = calibration_file(cache_path, digest)

    def reader() -> np.ndarray:
        return read_calibration_frames(spec, graph.frame_size)

    if os.path.isfile(path):
        try:
            with np.load(path, allow_pickle=False) as data:
                cal = Calibration.from_arrays(graph, {n: data[n] for n in data.files}, digest)
            cal.set_frames_reader(reader)
            return cal
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            log.warning("ignoring int8 calibration file %s: %s; measuring it again", path, exc)
    frames = reader()
    cal = Calibration.measure(graph, frames, digest)
    tmp = atomic_tmp(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(tmp, "wb") as fh:
        np.savez(fh, **cal.to_arrays())
    os.replace(tmp, path)
    log.info("int8 calibration of %d cuts on %d frames (%s) stored in %s", len(cal.qparams), len(frames), spec.label,
             path)
    return cal
