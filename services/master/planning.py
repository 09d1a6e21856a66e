"""Pick per-frame plans with a scheduler (CostInputs come from cnnvideo.costinputs, the builder `plan` uses too)."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo import adapt, costmodel, schedulers
from cnnvideo.costinputs import build as cost_inputs
from cnnvideo.costinputs import cpu_model
from cnnvideo.costmodel import CostInputs, Plan

log = logging.getLogger(__name__)

__all__ = ["Planner", "cost_inputs", "cpu_model"]


class Planner:
    """Gives each frame its plan: one fixed plan, or (das) one per group of frames from predicted sizes."""

    def __init__(self, name: str, inputs: CostInputs, in_flight: int, delta: bool, group_size: int,
                 options: Dict[str, Any], predictors=None, frame_nz: Optional[np.ndarray] = None) -> None:
        self.name = name
        self.inputs = inputs
        self.in_flight = in_flight
        self.delta = delta
        self.group_size = max(int(group_size), 1)
        self.options = dict(options)
        self.predictors = predictors
        self.frame_nz = frame_nz  # [N, 3] input change rates per frame
        self.current: Optional[Plan] = None
        self.decisions: List[Tuple[int, List[int]]] = []  # (first frame, cuts)
        self.estimates: Optional[adapt.Estimates] = None
        self.adapt_log: List[Dict[str, Any]] = []  # adaptive: one entry per group check
        if name == "adaptive":
            self.estimates = adapt.Estimates(inputs.n_workers, alpha=float(self.options.get("alpha", 0.3)),
                                             min_samples=int(self.options.get("min_samples", 2)))
        if name != "das":
            self.current = schedulers.schedule(name, inputs, in_flight, delta, **self.options)
            self.decisions.append((0, list(self.current.cuts)))

    def needs_state(self, frame: int) -> bool:
        """True if plan_for(frame) will decide (das at a group boundary) and wants the tracker's state."""
        return self.name == "das" and (frame % self.group_size == 0 or self.current is None)

    def plan_for(self, frame: int, in_flight: Sequence[Tuple[float, Sequence[int]]] = (),
                 finished: Sequence[float] = (), now: float = 0.0) -> Plan:
        """The plan of `frame` (frames asked in order); das decides per group from the tracker's state:
        in_flight = (send time, cuts) of frames not finished yet, finished = finish times of done frames
        (oldest first), all in seconds since the run started."""
        if self.name == "adaptive" and frame > 0 and frame % self.group_size == 0:
            return self._adapt(frame)
        if not self.needs_state(frame):
            return self.current
        frame_bytes = None
        if self.predictors is not None and self.frame_nz is not None and self.delta:
            group = self.frame_nz[frame:frame + self.group_size]
            if len(group):
                frame_bytes = np.atleast_2d(self.predictors.predict_bytes(group))
                if frame == 0:  # the first frame is a keyframe on every hop
                    frame_bytes[0] = self.inputs.bytes_full
        ready, fin = self.estimate_state(in_flight, finished, now)
        opts = dict(self.options)
        opts.setdefault("group_size", self.group_size)
        plan, _ = schedulers.das_decide(self.inputs, self.in_flight, self.delta, frame_bytes=frame_bytes,
                                        prev=self.current, ready=ready, finished=fin, now=now, **opts)
        if self.current is None or plan.cuts != self.current.cuts:
            self.decisions.append((frame, list(plan.cuts)))
            log.info("das: frames %d.. -> plan %s", frame, list(plan.cuts))
        self.current = plan
        return self.current

    # ------------------------------------------------------------------ adaptive: measurements in, re-plans out
    def observe_transfer(self, hop: int, nbytes: int, seconds: float) -> None:
        """A message of nbytes crossed hop `hop` (into worker hop) in `seconds` on the wire."""
        if self.estimates is not None:
            self.estimates.add_transfer(hop, nbytes, seconds)

    def observe_compute(self, w: int, start_cut: int, end_cut: int, seconds: float) -> None:
        """Worker w computed segments start_cut..end_cut-1 in `seconds`."""
        if self.estimates is not None and end_cut > start_cut:
            predicted = adapt.predicted_compute(self.inputs.seg_time, w, start_cut, end_cut)
            self.estimates.add_compute(w, seconds, predicted)

    def _adapt(self, frame: int) -> Plan:
        gain = float(self.options.get("gain", 0.1))
        new, cur, best, measured = adapt.replan(self.inputs, self.estimates, self.current.cuts, self.in_flight,
                                                self.delta, gain)
        entry: Dict[str, Any] = {"frame": frame, "current_period_s": round(cur, 5), "best_period_s": round(best, 5)}
        entry.update(self.estimates.snapshot())
        if new is not None:
            log.info("adaptive: frames %d.. -> plan %s (measured period %.3f s -> %.3f s)", frame, list(new), cur,
                     best)
            self.current = Plan(tuple(new))
            self.decisions.append((frame, list(new)))
            entry["switched_to"] = list(new)
        self.measured_inputs = measured
        self.adapt_log.append(entry)
        return self.current

    def report_extra(self, frames: int, cuts: Sequence[int]) -> Dict[str, Any]:
        """Cost-model figures for the report: predicted stage costs and makespan of `cuts` over `frames` frames
        (first frame a keyframe on every hop), plus the adaptive scheduler's log."""
        plan = Plan(tuple(int(c) for c in cuts))
        stages = costmodel.stage_costs(plan, self.inputs, self.delta)
        first = costmodel.frame_stage_costs(plan, self.inputs, None, None, self.delta)[0]
        costs = np.tile(stages, (max(int(frames), 1), 1))
        costs[0] = first
        done = costmodel.simulate(costs, self.in_flight)
        out: Dict[str, Any] = {
            "predicted_stage_s": [round(float(c), 6) for c in stages],
            "predicted_makespan_s": round(float(done[-1, -1]), 6),
            "predicted_fps": round(float(frames) / float(done[-1, -1]), 5) if done[-1, -1] > 0 else None,
            "configured_bandwidth_Bps": [float(b) for b in self.inputs.bandwidth],
        }
        if self.estimates is not None:
            out["adaptation"] = {"checks": self.adapt_log, "final": self.estimates.snapshot()}
        return out

    def estimate_state(self, in_flight: Sequence[Tuple[float, Sequence[int]]], finished: Sequence[float],
                       now: float) -> Tuple[Optional[np.ndarray], Optional[List[float]]]:
        """Stage-ready times [2W] and finish times (oldest first) estimated by simulating the frames in flight."""
        fin = [float(t) for t in finished]
        ready = None
        if in_flight:
            costs = np.stack([costmodel.stage_costs(Plan(tuple(c)), self.inputs, self.delta) for _, c in in_flight])
            start = np.array([float(s) for s, _ in in_flight])
            done = costmodel.simulate(costs, 0, start=start)
            ready = np.maximum(done[-1], now)
            fin.extend(float(t) for t in np.maximum(done[:, -1], now))
        if self.in_flight > 0:
            fin = fin[-self.in_flight:]
        return ready, (fin or None)

    def predicted_period(self) -> Optional[float]:
        """Steady seconds per frame of the current plan, from the cost model."""
        if self.current is None:
            return None
        return costmodel.per_frame_time(self.current, self.inputs, self.in_flight, delta=self.delta)
