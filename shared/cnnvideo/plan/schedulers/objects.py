"""Schedulers over a run, as objects: an initial plan, plan_for(frame, state), observe(measurement). Scheduler
keeps one plan; GroupScheduler (das) re-plans per group; AdaptiveScheduler re-plans from measurements."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan import adapt
from cnnvideo.plan.costmodel import CostInputs, simulate, stage_costs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.pool import pool_costs, pool_period
from cnnvideo.plan.schedulers.groups import das_decide
from cnnvideo.plan.schedulers.registry import check_options, schedule

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- schedulers over a run
@dataclass
class PipelineState:
    """What the master knows when it plans a frame (seconds since the run started): (send time, cuts) of the
    frames in flight, finish times of done frames (oldest first), and now."""

    in_flight: Sequence[Tuple[float, Sequence[int]]] = ()
    finished: Sequence[float] = ()
    now: float = 0.0
    # [n, 3] input change rates a group scheduler plans the next frames with: on a live source the recent sent
    # frames' change (only the past); None = the frame_nz given at creation (offline look-ahead)
    input_change: Optional[np.ndarray] = None


@dataclass
class Transfer:
    """A message of `nbytes` crossed hop `hop` (into worker hop) in `seconds` on the wire."""

    hop: int
    nbytes: int
    seconds: float


@dataclass
class Compute:
    """Worker `worker` computed segments start_cut..end_cut-1 in `seconds`."""

    worker: int
    start_cut: int
    end_cut: int
    seconds: float


@dataclass
class InputDelta:
    """The master sent a frame's input as a delta; `unchanged`: it was empty (every stage skips that frame)."""

    unchanged: bool


class Scheduler:
    """One scheduler over one run: an initial plan, a plan per frame (asked in frame order), measurements in.

    The base class keeps one plan for the whole run (lbs, edge, cloud, nsc, optimal); subclasses re-plan per
    group (das) or from measurements (adaptive). `decisions` lists (first frame, cuts) of every plan used."""

    def __init__(self, name: str, inputs: CostInputs, in_flight: int = 0, delta: bool = True,
                 options: Optional[Dict[str, object]] = None, group_size: int = 5, predictors=None,
                 frame_nz: Optional[np.ndarray] = None) -> None:
        self.name = name
        self.inputs = inputs
        self.in_flight = in_flight
        self.delta = delta
        self.options = dict(options or {})
        self.group_size = max(int(group_size), 1)
        self.predictors = predictors  # predicted sizes per frame for group schedulers
        self.frame_nz = frame_nz  # [N, 3] input change rates per frame
        self.current: Optional[Plan] = None
        self.decisions: List[Tuple[int, List[int]]] = []
        self.plans: List[Tuple[int, Plan]] = []  # (first frame, plan) of every plan used, groups included

    def initial_plan(self) -> Plan:
        """The plan of frame 0 (decided once)."""
        if self.current is None:
            self._use(0, schedule(self.name, self.inputs, self.in_flight, self.delta, **self.options))
        return self.current

    def needs_state(self, frame: int) -> bool:
        """True if plan_for(frame) decides from the pipeline's state (the caller then builds one)."""
        return False

    def plan_for(self, frame: int, state: Optional[PipelineState] = None) -> Plan:
        """The plan of `frame`."""
        return self.initial_plan()

    def observe(self, sample) -> None:
        """A measurement of the run (Transfer, Compute or InputDelta); static schedulers ignore them."""

    def take_over(self, old: "Scheduler", frame: int) -> Plan:
        """Follow `old` from `frame` on (the pool changed: a worker joined): this one's first plan, with the record
        of the plans `old` used before it."""
        plan = self.initial_plan()
        new = plan != old.current
        self.decisions = old.decisions + ([(frame, list(plan.cuts))] if new else [])
        self.plans = old.plans + ([(frame, plan)] if new else [])
        return plan

    def _use(self, frame: int, plan: Plan) -> Plan:
        if self.current is None or plan != self.current:
            self.decisions.append((frame, list(plan.cuts)))
            self.plans.append((frame, plan))
            if self.current is not None:
                log.info("%s: frames %d.. -> plan %s", self.name, frame, plan)
        self.current = plan
        return plan

    def predicted_period(self) -> Optional[float]:
        """Steady seconds per frame of the current plan, from the cost model."""
        if self.current is None:
            return None
        return pool_period(self.current, self.inputs, self.in_flight, self.delta)

    def report(self, frames: int, cuts) -> Dict[str, object]:
        """Cost-model figures for the report of the plan `cuts` (a Plan, or a chain's cuts) over `frames` frames:
        each stage's transfer and work (alternating), each replica's time, the bytes a link carries, the latency,
        and the fps of `frames` frames whose first is a keyframe on every hop (its latency, then the steady
        period a frame)."""
        plan = cuts if isinstance(cuts, Plan) else Plan(tuple(int(c) for c in cuts))
        pc = pool_costs(plan, self.inputs, self.in_flight, self.delta)
        first = pool_costs(plan, self.inputs, 0, delta=False).latency if self.delta else pc.latency
        makespan = first + max(int(frames) - 1, 0) * pc.period
        return {
            "predicted_stage_s": [round(float(c), 6) for c in pc.stage_costs()],
            "predicted_period_s": round(pc.period, 6),
            "predicted_replica_s": [[round(float(t), 6) for t in ts] for ts in pc.replica_time],
            "predicted_link_bytes": [round(float(b), 1) for b in pc.link_bytes],
            "predicted_latency_s": round(pc.latency, 6),
            "predicted_makespan_s": round(makespan, 6),
            "predicted_fps": round(float(frames) / makespan, 5) if makespan > 0 else None,
            "configured_bandwidth_Bps": [float(b) for b in self.inputs.bandwidth],
        }


class GroupScheduler(Scheduler):
    """das: one decision per group of frames, from the group's predicted sizes and the frames in flight."""

    def initial_plan(self) -> Plan:
        return self.current if self.current is not None else self.plan_for(0, PipelineState())

    def needs_state(self, frame: int) -> bool:
        return frame % self.group_size == 0 or self.current is None

    def plan_for(self, frame: int, state: Optional[PipelineState] = None) -> Plan:
        if not self.needs_state(frame):
            return self.current
        state = state or PipelineState()
        frame_bytes = None
        group = state.input_change
        if group is None and self.frame_nz is not None:
            group = self.frame_nz[frame:frame + self.group_size]
        if self.predictors is not None and group is not None and self.delta:
            if len(group):
                frame_bytes = np.atleast_2d(self.predictors.predict_bytes(group))
                if frame == 0:  # the first frame is a keyframe on every hop
                    frame_bytes[0] = self.inputs.bytes_full
        ready, fin = self.estimate_state(state)
        opts = dict(self.options)  # a `frame_bytes` option (cnnvideo plan) stands in when nothing is predicted
        opts.setdefault("group_size", self.group_size)
        if frame_bytes is not None:
            opts["frame_bytes"] = frame_bytes
        plan, _ = das_decide(self.inputs, self.in_flight, self.delta, prev=self.current, ready=ready, finished=fin,
                             now=state.now, **opts)
        return self._use(frame, plan)

    def estimate_state(self, state: PipelineState) -> Tuple[Optional[np.ndarray], Optional[List[float]]]:
        """Stage-ready times [2W] and finish times (oldest first) estimated by simulating the frames in flight."""
        fin = [float(t) for t in state.finished]
        ready = None
        if state.in_flight:
            costs = np.stack([stage_costs(Plan(tuple(c)), self.inputs, self.delta) for _, c in state.in_flight])
            start = np.array([float(s) for s, _ in state.in_flight])
            done = simulate(costs, 0, start=start)
            ready = np.maximum(done[-1], state.now)
            fin.extend(float(t) for t in np.maximum(done[:, -1], state.now))
        if self.in_flight > 0:
            fin = fin[-self.in_flight:]
        return ready, (fin or None)


class AdaptiveScheduler(Scheduler):
    """adaptive: starts at the steady-state optimum, re-plans every group with the measured bandwidth and
    compute (cnnvideo.plan.adapt)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        inputs = self.inputs
        self.estimates = adapt.Estimates(inputs.n_workers, alpha=float(self.options.get("alpha", 0.3)),
                                         min_samples=int(self.options.get("min_samples", 2)))
        self.log: List[Dict[str, object]] = []  # one entry per group check
        self.measured_inputs: Optional[CostInputs] = None

    def plan_for(self, frame: int, state: Optional[PipelineState] = None) -> Plan:
        current = self.initial_plan()
        if frame <= 0 or frame % self.group_size:
            return current
        gain = float(self.options.get("gain", 0.1))
        new, cur, best, measured = adapt.replan(self.inputs, self.estimates, current, self.in_flight,
                                                self.delta, gain, bool(self.options.get("pool", True)))
        entry: Dict[str, object] = {"frame": frame, "current_period_s": round(cur, 5), "best_period_s": round(best, 5)}
        entry.update(self.estimates.snapshot())
        if new is not None:
            log.info("adaptive: measured period %.3f s -> %.3f s", cur, best)
            self._use(frame, new)
            entry["switched_to"] = list(new.cuts)
            entry["switched_to_groups"] = [list(g) for g in new.groups]
        self.measured_inputs = measured
        self.log.append(entry)
        return self.current

    def observe(self, sample) -> None:
        if isinstance(sample, Transfer):
            self.estimates.add_transfer(sample.hop, sample.nbytes, sample.seconds)
        elif isinstance(sample, Compute) and sample.end_cut > sample.start_cut:
            predicted = adapt.predicted_compute(self.inputs.seg_time, sample.worker, sample.start_cut,
                                                sample.end_cut)
            self.estimates.add_compute(sample.worker, sample.seconds, predicted)
        elif isinstance(sample, InputDelta):
            self.estimates.add_input(sample.unchanged)

    def report(self, frames: int, cuts: Sequence[int]) -> Dict[str, object]:
        out = super().report(frames, cuts)
        out["adaptation"] = {"checks": self.log, "final": self.estimates.snapshot()}
        return out


# the run-time class of each scheduler (the base class: one plan for the whole run)
RUNTIME: Dict[str, type] = {"das": GroupScheduler, "adaptive": AdaptiveScheduler}


def create(name: str, inputs: CostInputs, in_flight: int = 0, delta: bool = True,
           options: Optional[Dict[str, object]] = None, group_size: int = 5, predictors=None,
           frame_nz: Optional[np.ndarray] = None) -> Scheduler:
    """The named scheduler over one run (ValueError on an unknown name or option); `predictors` and
    `frame_nz` ([N, 3] input change rates per frame) let a group scheduler predict each group's sizes."""
    check_options(name, options or {}, runtime=True)  # a config's options were checked by config_validation.validate
    return RUNTIME.get(name, Scheduler)(name, inputs, in_flight, delta, options, group_size, predictors, frame_nz)
