"""Online estimators for adaptive re-planning: per-hop bandwidth and per-worker compute speed from the
timings a run reports (EWMA), and the decision to re-plan when the measured cost model drifts.

Pure functions plus one small mutable holder (`Estimates`) the master feeds; no I/O, no clocks.

- Hop bandwidth: an EWMA of bytes and an EWMA of wire seconds per message; the estimate is their
  ratio (so big messages weigh more than tiny deltas whose time is mostly per-message latency).
- Compute: per worker, an EWMA of measured / profiled seconds for the segments it ran (the profile
  was taken under the same CPU cap; a changed cap or a noisy neighbour shows up as a scale != 1).
- Unchanged frames: the running mean of "the frame's input delta was empty" (every stage skips such a frame),
  which replaces the trainer's measure (CostInputs.p_unchanged) once it has min_samples frames.
- Re-plan: rebuild CostInputs with the measured values, ask the static optimum for the best plan
  and switch if it beats the current plan's period under the same measured inputs by `gain`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan.costmodel import CostInputs
from cnnvideo.plan.plan import Plan


def ewma(prev: Optional[float], x: float, alpha: float) -> float:
    """Exponentially weighted moving average step (prev None: start at x)."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError("alpha must be in (0, 1], got %r" % alpha)
    return float(x) if prev is None else float(prev) + alpha * (float(x) - float(prev))


def bandwidth_from(bytes_avg: Optional[float], seconds_avg: Optional[float]) -> Optional[float]:
    """Bytes/s from averaged bytes and seconds per message (None if unknown or degenerate)."""
    if bytes_avg is None or seconds_avg is None or seconds_avg <= 0 or bytes_avg <= 0:
        return None
    return float(bytes_avg) / float(seconds_avg)


def predicted_compute(seg_time: np.ndarray, w: int, start: int, end: int) -> float:
    """Profiled seconds of segments start..end-1 on worker w."""
    return float(np.asarray(seg_time, dtype=np.float64)[w, start:end].sum())


def running_mean(prev: Optional[float], n: int, x: float) -> float:
    """Mean of n + 1 values from the mean `prev` of the first n and the next value x (prev None or n 0: x)."""
    if prev is None or n <= 0:
        return float(x)
    return float(prev) + (float(x) - float(prev)) / (n + 1)


def adapted_inputs(inputs: CostInputs, bandwidth: Sequence[Optional[float]],
                   compute_scale: Sequence[Optional[float]], p_unchanged: Optional[float] = None) -> CostInputs:
    """CostInputs with measured bandwidth per hop, profiled compute scaled per worker and the measured share of
    unchanged frames (None = keep)."""
    bw = np.array(inputs.bandwidth, dtype=np.float64)
    for w, b in enumerate(bandwidth):
        if b is not None and b > 0 and w < bw.size:
            bw[w] = b
    scale = np.ones(inputs.n_workers)
    for w, s in enumerate(compute_scale):
        if s is not None and s > 0 and w < scale.size:
            scale[w] = s
    codec = {name: None if getattr(inputs, name) is None else getattr(inputs, name) * scale[:, None]
             for name in ("encode_time", "decode_time")}  # the same CPU runs the codec
    p = inputs.p_unchanged if p_unchanged is None else min(max(float(p_unchanged), 0.0), 1.0)
    return dataclasses.replace(inputs, seg_time=inputs.seg_time * scale[:, None], bandwidth=bw, p_unchanged=p,
                               **codec)


def relative_drift(configured: Sequence[float], measured: Sequence[Optional[float]]) -> float:
    """Largest |measured / configured - 1| over the entries that are measured (0 if none)."""
    worst = 0.0
    for c, m in zip(configured, measured):
        if m is not None and c > 0:
            worst = max(worst, abs(float(m) / float(c) - 1.0))
    return worst


def should_switch(current_period: float, best_period: float, gain: float) -> bool:
    """Switch plans only if the best plan is faster than the current one by more than `gain` (hysteresis)."""
    if not np.isfinite(best_period):
        return False
    if not np.isfinite(current_period):
        return True
    return best_period < current_period * (1.0 - gain)


@dataclass
class Estimates:
    """EWMA state per hop (bytes, seconds) and per worker (compute scale), fed as reports arrive."""

    n_workers: int
    alpha: float = 0.3
    min_samples: int = 2
    min_bytes: int = 1024  # messages smaller than this say little about the rate
    hop_bytes: List[Optional[float]] = field(default_factory=list)
    hop_seconds: List[Optional[float]] = field(default_factory=list)
    hop_n: List[int] = field(default_factory=list)
    scale: List[Optional[float]] = field(default_factory=list)
    scale_n: List[int] = field(default_factory=list)
    unchanged: Optional[float] = None  # running mean of "the input delta was empty" over the frames sent
    unchanged_n: int = 0

    def __post_init__(self) -> None:
        w = self.n_workers
        self.hop_bytes = self.hop_bytes or [None] * w
        self.hop_seconds = self.hop_seconds or [None] * w
        self.hop_n = self.hop_n or [0] * w
        self.scale = self.scale or [None] * w
        self.scale_n = self.scale_n or [0] * w

    def add_transfer(self, hop: int, nbytes: int, seconds: float) -> None:
        """One message over hop `hop` (into worker hop): its size and wire seconds."""
        if not 0 <= hop < self.n_workers or nbytes < self.min_bytes or seconds <= 0:
            return
        self.hop_bytes[hop] = ewma(self.hop_bytes[hop], float(nbytes), self.alpha)
        self.hop_seconds[hop] = ewma(self.hop_seconds[hop], float(seconds), self.alpha)
        self.hop_n[hop] += 1

    def add_compute(self, w: int, measured: float, predicted: float) -> None:
        """One compute stage on worker w: measured vs profiled seconds (the first one is warm-up: skipped)."""
        if not 0 <= w < self.n_workers or predicted <= 0 or measured <= 0:
            return
        self.scale_n[w] += 1
        if self.scale_n[w] == 1:
            return
        self.scale[w] = ewma(self.scale[w], measured / predicted, self.alpha)

    def add_input(self, unchanged: bool) -> None:
        """One delta frame sent: whether its input delta was empty (its stages all skip; a keyframe is not one)."""
        self.unchanged = running_mean(self.unchanged, self.unchanged_n, 1.0 if unchanged else 0.0)
        self.unchanged_n += 1

    def p_unchanged(self) -> Optional[float]:
        """The measured share of unchanged frames once it has min_samples frames, else None."""
        return self.unchanged if self.unchanged_n >= self.min_samples else None

    def bandwidth(self) -> List[Optional[float]]:
        """Bytes/s per hop once it has min_samples messages, else None."""
        return [bandwidth_from(b, s) if n >= self.min_samples else None
                for b, s, n in zip(self.hop_bytes, self.hop_seconds, self.hop_n)]

    def compute_scale(self) -> List[Optional[float]]:
        """Measured/profiled compute per worker once it has min_samples (after warm-up), else None."""
        return [s if n > self.min_samples else None for s, n in zip(self.scale, self.scale_n)]

    def snapshot(self) -> Dict[str, List[Optional[float]]]:
        """Plain values for reports: MB/s per hop and compute scale per worker."""
        return {"bandwidth_MBps": [None if b is None else round(b / 1e6, 4) for b in self.bandwidth()],
                "compute_scale": [None if s is None else round(s, 4) for s in self.compute_scale()],
                "p_unchanged": None if self.p_unchanged() is None else round(self.p_unchanged(), 4)}


def replan(inputs: CostInputs, est: Estimates, current, in_flight: int, delta: bool,
           gain: float = 0.1, pool: bool = True) -> Tuple[Optional[object], float, float, CostInputs]:
    """(new Plan or None, current period, best period, measured inputs) under the measured cost model; `current` is
    a Plan (or a chain's cuts); with `pool` the best plan may be one of stages x replicas."""
    # not at the top: a cycle (importing schedulers runs its __init__, which imports objects, which imports adapt)
    from cnnvideo.plan.schedulers.plans import objective, optimal

    if not isinstance(current, Plan):
        current = Plan(tuple(current))
    measured = adapted_inputs(inputs, est.bandwidth(), est.compute_scale(), est.p_unchanged())
    cur = objective(current, measured, in_flight, delta)
    best_plan = optimal(measured, in_flight, delta, pool=pool)
    best = objective(best_plan, measured, in_flight, delta)
    if best_plan != current and should_switch(cur, best, gain):
        return best_plan, cur, best, measured
    return None, cur, best, measured


__all__ = ["Estimates", "adapted_inputs", "bandwidth_from", "ewma", "predicted_compute", "relative_drift",
           "replan", "running_mean", "should_switch"]
