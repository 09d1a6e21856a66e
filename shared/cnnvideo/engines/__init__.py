"""Stage backends: run the layers between two cuts in eager torch or in an ONNX Runtime session, fp32 or int8.

One interface for every backend (`Stage.run(x) -> y`, numpy in and out). With `precision: int8`, the tensors at
inner cuts are uint8 quantised values; their (scale, zero point) per cut come from one calibration (`quant`) that
every worker computes the same way, and travel with the tensor so the receiver can check them.

`StageFactory.stage(start, end)` builds (and caches in memory) the stage a worker runs; where ONNX Runtime is not
installed (armv7, the 32-bit Pi image) or a stage cannot be exported, it falls back to torch unless configured to
stop, and says why (`Stage.engine` is the engine that really runs).
"""
from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

log = logging.getLogger(__name__)

ENGINES = ("torch", "onnxruntime")
PRECISIONS = ("fp32", "int8")
ON_ERROR = ("fallback", "stop")


class EngineError(RuntimeError):
    """A stage could not be built on the requested engine (export, cache, calibration, missing runtime)."""


@dataclass(frozen=True)
class EngineSpec:
    """What a worker was asked to run: engine, precision, intra-op threads (0 = the CPU cap), and what to do when
    the engine cannot run a stage (`fallback` to torch fp32 compute, or `stop`)."""

    engine: str = "torch"
    precision: str = "fp32"
    threads: int = 0
    on_error: str = "fallback"

    @property
    def label(self) -> str:
        """'onnxruntime-int8' style name used in reports and bench summaries."""
        return "%s-%s" % (self.engine, self.precision)


@dataclass(frozen=True)
class QParams:
    """uint8 affine quantisation of one tensor: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """float -> uint8 (round half to even, saturating), as ONNX QuantizeLinear does."""
        q = np.rint(np.asarray(x, dtype=np.float32) / np.float32(self.scale)) + self.zero_point
        return np.clip(q, 0, 255).astype(np.uint8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """uint8 -> float32, as ONNX DequantizeLinear does."""
        return ((q.astype(np.int32) - self.zero_point).astype(np.float32) * np.float32(self.scale)).astype(np.float32)

    def matches(self, scale: float, zero_point: int) -> bool:
        """True when (scale, zero_point) received with a tensor are these (scale to float32 precision)."""
        return int(zero_point) == self.zero_point and abs(float(scale) - self.scale) <= 1e-6 * max(self.scale, 1e-30)


def ort_available() -> Tuple[bool, str]:
    """(True, version) when onnxruntime imports here, else (False, why)."""
    try:
        import onnx  # noqa: F401 - the exporter's output is stamped and checked with it
        import onnxruntime
    except Exception as exc:  # ImportError, or a broken wheel (missing libs, numpy ABI)
        return False, "onnxruntime (with onnx) is not installed here (%s: %s)" % (type(exc).__name__, exc)
    return True, str(getattr(onnxruntime, "__version__", "?"))


def cpu_threads(threads: int = 0, root: str = "/sys/fs/cgroup") -> int:
    """Intra-op threads: `threads` if > 0, else the CPU cap of this container (cgroup quota, rounded up), at most
    the cores this process may run on, at least 1."""
    if threads > 0:
        return int(threads)
    from cnnvideo.plan.profiling import cfs_quota

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota, period = cfs_quota(root)
    if quota > 0 and period > 0:
        cores = min(cores, int(math.ceil(quota / period - 1e-9)))
    return max(1, cores)


class Stage:
    """The layers between two cuts on one engine. `run` takes the tensor at `start` (uint8 frame at cut 0, uint8
    quantised values at an inner cut with int8, float32 otherwise) and returns the tensor at `end`."""

    engine = "torch"
    precision = "fp32"
    reason = ""  # why this is not the requested engine ('' when it is)

    def __init__(self, start: int, end: int, q_in: Optional[QParams], q_out: Optional[QParams]) -> None:
        self.start = start
        self.end = end
        self.q_in = q_in
        self.q_out = q_out

    @property
    def empty(self) -> bool:
        """True when the stage runs no layers (it just forwards its input)."""
        return self.start == self.end

    def run(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


def check_input(x: np.ndarray, shape: Tuple[int, ...], dtype: str, where: str) -> np.ndarray:
    """x with a batch dim added to a (H,W,3) frame; ValueError naming the cut if shape or dtype differ."""
    if not isinstance(x, np.ndarray):
        raise TypeError("stage input at %s must be a numpy array, got %s" % (where, type(x).__name__))
    if x.ndim == len(shape) - 1 and tuple(x.shape) == tuple(shape[1:]):
        x = x[np.newaxis]
    if tuple(x.shape) != tuple(shape) or x.dtype != np.dtype(dtype):
        raise ValueError("stage input at %s: expected %s %s, got %s %s" % (where, dtype, tuple(shape), x.dtype,
                                                                           tuple(x.shape)))
    return x


class StageFactory:
    """Builds the stages one worker runs on its engine, each once; thread-safe.

    `key` names the model identity (model, weights digest, frame size) in cache keys; `calibration` returns the
    int8 calibration (`quant.Calibration`) and is called only when int8 is asked for."""

    def __init__(self, graph, spec: EngineSpec, cache_dir: str, key: str,
                 calibration: Optional[Callable[[], object]] = None) -> None:
        if spec.engine not in ENGINES:
            raise EngineError("engine must be one of %s, got %r" % ("|".join(ENGINES), spec.engine))
        if spec.precision not in PRECISIONS:
            raise EngineError("precision must be one of %s, got %r" % ("|".join(PRECISIONS), spec.precision))
        self.graph = graph
        self.spec = spec
        self.cache_dir = cache_dir
        self.key = key
        self._calibration_fn = calibration
        self._calibration = None
        self.int8_failed = ""  # why int8 was given up for fp32 (fallback), '' otherwise
        self._stages: Dict[Tuple[int, int], Stage] = {}
        self._lock = threading.Lock()  # guards the two dicts only, never held while a stage builds
        self._building: Dict[Tuple[int, int], threading.Lock] = {}  # one lock per stage being built
        self._calibration_lock = threading.Lock()
        self.notes: List[str] = []  # one line per fallback, for the report

    @property
    def calibration(self):
        """The int8 calibration (computed once, on first use); EngineError if there is none to be had."""
        if self._calibration is None:
            with self._calibration_lock:
                if self._calibration is None:
                    if self._calibration_fn is None:
                        raise EngineError("int8 needs a calibration, and none was configured")
                    self._calibration = self._calibration_fn()
        return self._calibration

    def qparams(self, cut: int) -> Optional[QParams]:
        """Quantisation of the tensor at `cut` (None where it travels unquantised: the frame, the output, fp32)."""
        if self.spec.precision != "int8" or self.int8_failed or cut <= 0 or cut >= self.graph.num_segments:
            return None
        try:
            return self.calibration.qparams[cut]
        except EngineError as exc:
            if self.spec.on_error == "stop":
                raise
            self.int8_failed = str(exc)
            note = "int8 given up, stages run fp32: %s" % exc
            log.warning("%s", note)
            self.notes.append(note)
            return None

    @property
    def precision(self) -> str:
        """The precision stages really run at ('fp32' after an int8 fallback)."""
        return "fp32" if self.int8_failed else self.spec.precision

    def stage(self, start: int, end: int) -> Stage:
        """The stage from cut `start` to cut `end` (built on first use, once). A stage being built (a re-plan's
        stage warming in the background) does not hold up callers of stages that are built already."""
        key = (start, end)
        with self._lock:
            st = self._stages.get(key)
            if st is not None:
                return st
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                st = self._stages.get(key)
            if st is None:
                st = self._build(start, end)
                with self._lock:
                    self._stages[key] = st
                    self._building.pop(key, None)
        return st

    def built(self, start: int, end: int) -> bool:
        """True when stage(start, end) would return at once (it is built, or it runs no layers)."""
        with self._lock:
            return start == end or (start, end) in self._stages

    def engines_used(self) -> List[str]:
        """Labels of the engines the stages built so far really run on (e.g. ['onnxruntime-int8'])."""
        with self._lock:
            return sorted({"%s-%s" % (s.engine, s.precision) for s in self._stages.values() if not s.empty})

    def _build(self, start: int, end: int) -> Stage:
        from cnnvideo.model.engines.torch_engine import TorchStage

        q_in, q_out = self.qparams(start), self.qparams(end)
        if start == end or self.spec.engine == "torch":
            return TorchStage(self.graph, start, end, q_in, q_out)
        ok, why = ort_available()
        try:
            if not ok:
                raise EngineError(why)
            from cnnvideo.model.engines.ort_engine import build_ort_stage

            return build_ort_stage(self, start, end, q_in, q_out)
        except EngineError as exc:
            if self.spec.on_error == "stop":
                raise
            note = "stage %d..%d runs on torch instead of %s: %s" % (start, end, self.spec.label, exc)
            log.warning("%s", note)
            self.notes.append(note)
            st = TorchStage(self.graph, start, end, q_in, q_out)
            st.reason = str(exc)
            return st


def weights_digest(graph) -> str:
    """sha1 (16 hex) of every parameter and buffer of the whole model: a cached stage of other weights never loads."""
    import hashlib

    if hasattr(graph, "digest"):  # an ONNX-file model (cnnvideo.model.onnx_graph): the weights are in the file
        return graph.digest
    h = hashlib.sha1()
    for name, t in sorted(graph.stage_module(0, graph.num_segments).state_dict().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(t.detach().cpu().numpy()).tobytes())
    return h.hexdigest()[:16]


def factory_for(cfg, graph) -> StageFactory:
    """The StageFactory of a Config: its engine keys, the cache folder (cache_dir/onnx) and int8 calibration on
    frames of the trainer's video that the run does not evaluate (cached in cache_dir/calibration)."""
    from cnnvideo.artifacts import calibration_path, onnx_dir
    from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure

    spec = EngineSpec(cfg.engine, cfg.precision, cfg.engine_options.threads, cfg.engine_options.on_error)
    key = "%s %dx%d weights %s" % (cfg.model, graph.frame_size[0], graph.frame_size[1], weights_digest(graph))
    cal = CalibrationSpec(cfg.calibration_video, cfg.int8.calibration_frames, cfg.calibration_start,
                          cfg.int8.calibration_stride)
    cal_path = calibration_path(cfg.cache_dir, cfg.model, graph.frame_size)

    def calibration():
        return load_or_measure(graph, cal, cal_path, key)

    return StageFactory(graph, spec, onnx_dir(cfg.cache_dir), key, calibration)
