"""int8 calibration on the frames the camera itself sees (issue 46 item 1).

The master samples the camera's own first frames (every `stride`-th, skipping black, flat and frozen frames with one
log line), measures the per-cut uint8 (scale, zero point) on them (quant.Calibration.measure, the same rules as
before: ranges clipped to the readers' clamp, the cuts whose rounding hurts stay float) and sends the whole
calibration in RunSetup: the frames as JPEG (what a worker needs to quantize its stage: quantize_static's ranges
inside the stage and the bias correction run on them) and the per-cut parameters (so every worker, on any CPU, uses
the master's, bit for bit). The frames are decoded with cv2.imdecode and the parameters are plain numbers: nothing
from the network is unpickled. The master measures on its own decoded JPEGs, so master and workers see the same
pixels.

The digest names the model, the frame size, the JPEG bytes and the rules: not the run's `frames:` (a new `frames:`
rebuilds no stage), and two runs of the same camera whose first frames are the same (a file) share their stages.
A live camera's first frames differ from run to run, so the master keeps the camera's calibration
(`store`/`load_stored`) and reuses it until it is refused (another model or frame size) or removed."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from cnnvideo.artifacts import atomic_tmp
from cnnvideo.model.engines.base import EngineError, QParams
from cnnvideo.model.engines.quant import RULES, Calibration

log = logging.getLogger(__name__)

BLACK_MEAN = 16.0  # mean level (0..255) under which a frame is black: a covered lens, a dead feed, night without IR
FLAT_STD = 4.0  # pixel standard deviation under which a frame shows no scene: a blank stream, one colour
FROZEN_DIFF = 0.5  # mean |difference| (levels) to the last kept frame under which the frame is frozen (a stalled
# encoder repeats its last picture; sensor noise alone moves a real camera's frames by ~1-2 levels)
JPEG_QUALITY = 90  # 70-94 kB a 480x720 frame; 75 (about 50 kB) cost 0.005-0.012 of F1 (docs/results/int8-scenes)
FORMAT = 1  # of the stored file and the digest
# The int8 recipes a calibration may ask its stages to be built with: the StageFactory knobs each sets. '' is the
# engine's own (the blocks at half the model input's resolution stay fp32); `fp32-head` also keeps every block down
# to a detector's finest head's map and its predictors fp32 (walkers F1 0.954 -> 0.993 on the AMD EPYC host, at
# 1.2x int8's CPU a frame: docs/results/int8-scenes). The master picks one per camera (master/calibration_fit.py).
RECIPES: Dict[str, Dict[str, object]] = {"": {}, "fp32-head": {"stem": "head", "heads": 2}}


class CalibrationRefused(EngineError):
    """A calibration of another model or frame size (one line that says which)."""


class NoSceneError(EngineError):
    """The camera gave no frame that carries a scene within the frames looked at."""


def frame_problem(frame: np.ndarray, last: Optional[np.ndarray]) -> str:
    """Why `frame` must not calibrate ('black', 'flat', 'frozen' against the last kept frame), '' when it may."""
    small = frame[::4, ::4].astype(np.float32)
    if float(small.mean()) < BLACK_MEAN:
        return "black"
    if float(small.std()) < FLAT_STD:
        return "flat"
    if last is not None and float(np.abs(small - last[::4, ::4].astype(np.float32)).mean()) < FROZEN_DIFF:
        return "frozen"
    return ""


@dataclass
class Sample:
    """The frames chosen to calibrate, where they came from, and what was skipped."""

    frames: List[np.ndarray]
    indices: List[int]  # the camera's frame numbers (0 = the first frame the master read)
    times: List[float]  # seconds from the first frame read
    source: str
    seen: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)


def sample_frames(items: Iterable[Tuple[np.ndarray, float]], count: int, stride: int, source: str,
                  look: int = 0) -> Sample:
    """Up to `count` frames of `items` ((rgb, capture time) in order), at least `stride` frames apart, none black,
    flat or frozen, looking at most at `look` frames (0 = count * stride * 4); one log line when some were skipped.
    NoSceneError if none qualifies."""
    if count <= 0 or stride <= 0:
        raise ValueError("calibration needs count >= 1 and stride >= 1, got %d and %d" % (count, stride))
    look = look or count * stride * 4
    sample = Sample([], [], [], source)
    t0, last, next_at = None, None, 0
    for i, (rgb, t) in enumerate(items):
        sample.seen = i + 1
        t0 = t if t0 is None else t0
        if i >= next_at:
            why = frame_problem(rgb, last)
            if why:
                sample.skipped[why] = sample.skipped.get(why, 0) + 1
            else:
                sample.frames.append(rgb)
                sample.indices.append(i)
                sample.times.append(round(float(t - t0), 3))
                last, next_at = rgb, i + stride
        if len(sample.frames) >= count or sample.seen >= look:
            break
    if sample.skipped:
        log.warning("int8 calibration: %s: skipped %s of the first %d frames (no scene to calibrate on); %d frames "
                    "kept", source, ", ".join("%d %s" % (n, k) for k, n in sorted(sample.skipped.items())),
                    sample.seen, len(sample.frames))
    if not sample.frames:
        raise NoSceneError("int8 calibration: %s gave no frame with a scene in its first %d (%s)" % (
            source, sample.seen, ", ".join("%d %s" % (n, k) for k, n in sorted(sample.skipped.items())) or "none"))
    return sample


def encode_jpeg(rgb: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [int(cv2.IMWRITE_JPEG_QUALITY), quality])
    if not ok:
        raise EngineError("int8 calibration: a frame could not be JPEG-encoded")
    return buf.tobytes()


def decode_jpeg(data: bytes, frame_size: Tuple[int, int]) -> np.ndarray:
    """(H, W, 3) uint8 RGB; CalibrationRefused when the bytes are no JPEG of that size."""
    import cv2

    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None or bgr.shape[:2] != tuple(frame_size):
        raise CalibrationRefused("int8 calibration refused: a calibration frame is not a %dx%d JPEG"
                                 % tuple(frame_size))
    return np.ascontiguousarray(bgr[..., ::-1])


@dataclass
class CameraCalibration:
    """One camera's int8 calibration as it travels and is stored: frames (JPEG), per-cut parameters, provenance."""

    model_key: str  # StageFactory.key: model, frame size, weights digest
    frame_size: Tuple[int, int]
    source: str
    indices: List[int]
    times: List[float]
    jpegs: List[bytes]
    qparams: Dict[int, QParams]
    rules: str = ""
    skipped: Dict[str, int] = field(default_factory=dict)
    recipe: str = ""  # RECIPES key: how the stages on this calibration are quantized ('' = the engine's own)
    fit: List[dict] = field(default_factory=list)  # the master's check of each recipe tried (calibration_fit)
    _frames: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def digest(self) -> str:
        """sha1 (16 hex) of the model key, frame size, rules, recipe and frame bytes: what the stage files are keyed
        by (the engine's own recipe adds nothing, so a calibration from before recipes keeps its digest)."""
        recipe = "|recipe %s" % self.recipe if self.recipe else ""
        h = hashlib.sha1(("%s|%dx%d|%s|%d%s" % (self.model_key, self.frame_size[0], self.frame_size[1], self.rules,
                                                FORMAT, recipe)).encode())
        for b in self.jpegs:
            h.update(hashlib.sha1(b).digest())
        return h.hexdigest()[:16]

    @property
    def wire_bytes(self) -> int:
        return sum(len(b) for b in self.jpegs) + 16 * len(self.qparams)

    def frames(self) -> np.ndarray:
        """(N, H, W, 3) uint8 decoded frames (decoded once)."""
        if self._frames is None:
            self._frames = np.stack([decode_jpeg(b, self.frame_size) for b in self.jpegs])
        return self._frames

    def check(self, model_key: str, frame_size, num_segments: int) -> None:
        """CalibrationRefused (one line) if this calibration is of another model, weights or frame size."""
        if self.recipe not in RECIPES:
            raise CalibrationRefused("int8 calibration %s refused: recipe %r is not one of %s" % (
                self.digest, self.recipe[:40], ", ".join(repr(r) for r in RECIPES)))
        if tuple(frame_size) != tuple(self.frame_size) or model_key != self.model_key:
            raise CalibrationRefused("int8 calibration %s refused: it is of %s, this role runs %s" % (
                self.digest, self.model_key, model_key))
        if not set(self.qparams) <= set(range(1, num_segments)) or any(q.scale <= 0 or not 0 <= q.zero_point <= 255
                                                                      for q in self.qparams.values()):
            raise CalibrationRefused("int8 calibration %s refused: its cuts do not fit a model of %d segments"
                                     % (self.digest, num_segments))

    def to_calibration(self, graph):
        """The quant.Calibration the StageFactory builds with (parameters as sent). Its frames are decoded when a
        stage is quantized here, not before: a worker that gets its stage files from the master never decodes them,
        nor imports cv2 (0.45 s of CPU, 4.5 s of a joining worker's StartRun under a 0.1 cap)."""
        cal = Calibration(graph, None, dict(self.qparams), self.digest)
        cal.set_frames_reader(self.frames)
        return cal

    def report(self) -> dict:
        """report.json `int8_calibration`: which frames calibrated the run."""
        return {"source": self.source, "count": len(self.jpegs), "frame_indices": list(self.indices),
                "frame_times_s": list(self.times), "digest": self.digest, "wire_bytes": self.wire_bytes,
                "skipped": dict(self.skipped), "quantized_cuts": sorted(self.qparams),
                "recipe": self.recipe or "default", "fit": [dict(f) for f in self.fit]}

    # ---------------------------------------------------------------- arrays (a stored file; no pickle)
    def to_arrays(self) -> dict:
        cuts = sorted(self.qparams)
        lens = np.array([len(b) for b in self.jpegs], dtype=np.int64)
        return {"format": np.array(FORMAT), "model_key": np.array(self.model_key), "source": np.array(self.source),
                "rules": np.array(self.rules), "frame_size": np.array(self.frame_size, dtype=np.int64),
                "indices": np.array(self.indices, dtype=np.int64), "times": np.array(self.times, dtype=np.float64),
                "jpeg_lengths": lens, "jpeg": np.frombuffer(b"".join(self.jpegs), dtype=np.uint8),
                "cuts": np.array(cuts, dtype=np.int64),
                "scale": np.array([self.qparams[c].scale for c in cuts], dtype=np.float64),
                "zero_point": np.array([self.qparams[c].zero_point for c in cuts], dtype=np.int64),
                "recipe": np.array(self.recipe), "fit": np.array(json.dumps(self.fit))}

    @classmethod
    def from_arrays(cls, d) -> "CameraCalibration":
        if int(d["format"]) != FORMAT:
            raise ValueError("calibration file format %d, expected %d" % (int(d["format"]), FORMAT))
        blob, lens = np.asarray(d["jpeg"], dtype=np.uint8).tobytes(), np.asarray(d["jpeg_lengths"]).tolist()
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(int).tolist()
        if offsets[-1] != len(blob):
            raise ValueError("calibration file: frame bytes do not add up")
        return cls(str(d["model_key"]), tuple(int(v) for v in d["frame_size"]), str(d["source"]),
                   [int(v) for v in d["indices"]], [float(v) for v in d["times"]],
                   [blob[a:b] for a, b in zip(offsets[:-1], offsets[1:])],
                   {int(c): QParams(float(s), int(z)) for c, s, z in zip(d["cuts"], d["scale"], d["zero_point"])},
                   str(d["rules"]), recipe=str(d["recipe"]) if "recipe" in d else "",
                   fit=_fit_list(str(d["fit"])) if "fit" in d else [])


def _fit_list(text: str) -> List[dict]:
    """The stored fit entries (JSON: a list of objects); ValueError otherwise."""
    fit = json.loads(text)
    if not isinstance(fit, list) or not all(isinstance(f, dict) for f in fit):
        raise ValueError("calibration file: its fit entries are not a list of objects")
    return fit


def measure(graph, model_key: str, sample: Sample, quality: int = JPEG_QUALITY) -> CameraCalibration:
    """The calibration of `sample` for `graph`: frames through JPEG and back, then quant.Calibration.measure on
    what a worker will decode."""
    cal = CameraCalibration(model_key, tuple(graph.frame_size), sample.source, list(sample.indices),
                            list(sample.times), [encode_jpeg(f, quality) for f in sample.frames], {}, RULES,
                            dict(sample.skipped))
    measured = Calibration.measure(graph, cal.frames(), cal.digest)
    cal.qparams = dict(measured.qparams)
    log.info("int8 calibration %s: %d frames of %s (frames %s), %d cuts quantized, %d float, %.0f kB to send",
             cal.digest, len(cal.jpegs), cal.source, span(cal.indices), len(cal.qparams),
             graph.num_segments - 1 - len(cal.qparams), cal.wire_bytes / 1e3)
    return cal


def span(indices: List[int]) -> str:
    """"0..75 every 5" (the frames of a calibration, for a log line)."""
    if len(indices) > 2:
        return "%d..%d every %d" % (indices[0], indices[-1], indices[1] - indices[0])
    return ",".join(str(i) for i in indices)


def store(cal: CameraCalibration, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = atomic_tmp(path)
    with open(tmp, "wb") as fh:
        np.savez(fh, **cal.to_arrays())
    os.replace(tmp, path)


def load_stored(path: str, model_key: str, frame_size, num_segments: int) -> Optional[CameraCalibration]:
    """The camera's stored calibration at `path`, None when there is none or it is refused or damaged (one line)."""
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            cal = CameraCalibration.from_arrays({n: data[n] for n in data.files})
        cal.check(model_key, frame_size, num_segments)
        return cal
    except CalibrationRefused as exc:
        log.warning("%s (stored in %s); calibrating again", exc, path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        log.warning("ignoring int8 calibration file %s: %s; calibrating again", path, exc)
    return None
