"""int8 calibration: the uint8 (scale, zero point) of every cut tensor, from torch fp32 min/max over frames of the
training video that no run evaluates, and the calibration inputs of a stage (the tensor at its first cut).

Every worker computes the same parameters from the same frames, so a stage's output quantisation is the next
stage's input quantisation; they also travel with each tensor and the receiver checks them.

Two rules make a cut cost no more than the unsplit int8 model (measured on trained mobilenet_v2, issue 24,
docs/results/engine "int8 at inner cuts"):

- a cut whose every reader clamps it first (ReLU, ReLU6: a cut between a BatchNorm and its activation) is
  quantised over the clamped range only, e.g. [0, 6] instead of [-4.2, 2.6]: values outside it read the same after
  the clamp, so this is exact and the steps are finer (the unsplit model quantises after the activation too);
- a cut where one scale for the whole tensor rounds too much away (the relative RMS error that rounding leaves
  after the segment reading the cut, on the calibration frames, above MAX_READ_ERROR: a raw convolution output
  whose BatchNorm scales up the channels of small range) gets no parameters: it travels as float, and the stage
  after it keeps the nodes reading it fp32 (ort_int8.quantize_stage)."""
from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from cnnvideo.artifacts import atomic_tmp, calibration_file
from cnnvideo.model.engines.base import EngineError, QParams

log = logging.getLogger(__name__)


# relative RMS error that a cut's uint8 rounding leaves after the segment reading it, above which the cut stays
# float. Trained mobilenet_v2, 480x720, vtest.avi frames 400-550: the raw depthwise outputs before their BatchNorm
# have 0.106 (features.2.conv.1.0; the fp32 model with only that cut rounded agrees on top-1 for 0.75 of 40 frames,
# RMS logit error 0.26), 0.062 and 0.061 (features.4/17.conv.1.0: 0.030 and 0.041, the whole int8 model's own
# error is 0.043), features.2.conv.0.0 0.042 (0.071, top-1 0.825); the block outputs the planners cut at
# (features.3.add 0.020, features.4.conv.2 0.022) and the clamped BatchNorm outputs (<= 0.024) stay below 0.04
MAX_READ_ERROR = 0.04
RULES = "ranges clipped to the readers' clamp; float where the rounding error after the reader > %g" % MAX_READ_ERROR
_CLAMPS = {"ReLU": (0.0, np.inf), "relu": (0.0, np.inf), "relu_": (0.0, np.inf), "Relu": (0.0, np.inf),
           "ReLU6": (0.0, 6.0), "relu6": (0.0, 6.0)}


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


def reader_clamp(graph, cut: int) -> Optional[Tuple[float, float]]:
    """(lo, hi) that every layer reading the tensor at `cut` clamps it to before anything else (ReLU, ReLU6), None
    when some reader does not (or nothing reads it)."""
    layer = graph.cuts[cut].layer
    bounds = [_CLAMPS.get(ly.kind) for ly in graph.layers if layer in ly.inputs]
    if not bounds or any(b is None for b in bounds):
        return None
    return max(b[0] for b in bounds), min(b[1] for b in bounds)


def read_error(reader, x: np.ndarray, qp: QParams) -> np.ndarray:
    """[sum of squared error, sum of squares] of the output of `reader` (the segment after a cut, a torch module)
    on x rounded to uint8 with qp against it on x itself: a raw convolution output's BatchNorm scales each
    channel's rounding error by that channel's 1/std, a clamp removes the error it clips away."""
    import torch

    rounded = torch.from_numpy(qp.dequantize(qp.quantize(x)))
    ref = reader(torch.from_numpy(np.array(x, dtype=np.float32)))  # copies: a reader may work in place
    got = reader(rounded)
    d = (got - ref).double()
    return np.array([float((d * d).sum()), float((ref.double() ** 2).sum())])


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
        self.read_errors: Dict[int, float] = {}  # cut -> relative rounding error after its reader (when measured)

    @classmethod
    def measure(cls, graph, frames: np.ndarray, digest: str) -> "Calibration":
        """Run the fp32 torch model segment by segment over `frames`: min/max per cut (clipped to its readers'
        clamp), then a second pass for the rounding error each cut's uint8 leaves after the segment reading it
        (read_error); cuts above MAX_READ_ERROR get no parameters (they travel float)."""
        import torch

        k = graph.num_segments
        lo, hi = np.full(k + 1, np.inf), np.full(k + 1, -np.inf)
        modules = [graph.stage_module(s, s + 1) for s in range(k)]

        def tensors(frame):
            x = torch.from_numpy(np.ascontiguousarray(frame[np.newaxis]))
            for s, m in enumerate(modules):
                x = m(x)
                yield s + 1, x

        with torch.no_grad():
            for frame in frames:
                for c, x in tensors(frame):
                    lo[c] = min(lo[c], float(x.min()))
                    hi[c] = max(hi[c], float(x.max()))
            for c in range(1, k):
                clamp = reader_clamp(graph, c)
                if clamp is not None:
                    lo[c], hi[c] = max(lo[c], clamp[0]), min(hi[c], clamp[1])
            qp = {c: qparams_from_range(lo[c], hi[c]) for c in range(1, k)}
            sums = np.zeros((k, 2))
            for frame in frames:
                for c, x in tensors(frame):
                    if c in qp and x.dtype.is_floating_point:  # (an ONNX model's integer cut: as before)
                        sums[c] += read_error(modules[c], x.numpy(), qp[c])
        errors = {c: float(np.sqrt(sums[c, 0] / max(sums[c, 1], 1e-30))) for c in qp}
        for c in sorted(c for c, e in errors.items() if e > MAX_READ_ERROR):
            log.info("int8 calibration: cut %d (%s) stays float: its uint8 rounding leaves a relative RMS error of "
                     "%.3f after the next layer", c, graph.cuts[c].name, errors[c])
            del qp[c]
        cal = cls(graph, frames, qp, digest)
        cal.read_errors = errors
        return cal

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
        if not set(cuts.tolist()) <= set(range(1, graph.num_segments)) or not np.all(scale > 0):
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
    digest = hashlib.sha1(("%s|%s|%s" % (model_key, spec.label, RULES)).encode()).hexdigest()[:16]
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
    log.info("int8 calibration of %d cuts (%d float) on %d frames (%s) stored in %s", len(cal.qparams),
             graph.num_segments - 1 - len(cal.qparams), len(frames), spec.label, path)
    return cal
