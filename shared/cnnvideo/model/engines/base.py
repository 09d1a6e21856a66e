"""The stage interface every backend implements, its parameters and errors (no backend imported here)."""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from cnnvideo.cpucap import cfs_quota

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


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for one-line errors from libraries that raise long ones."""
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")
