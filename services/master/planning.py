"""Turn worker costs, predictors and bandwidths into CostInputs, and pick per-frame plans with a scheduler."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo import costmodel, schedulers
from cnnvideo.costmodel import CostInputs, Plan

log = logging.getLogger(__name__)


def cost_inputs(seg_time: np.ndarray, bandwidth: Sequence[float], dense: np.ndarray, predictors=None,
                input_nz: Optional[np.ndarray] = None) -> CostInputs:
    """CostInputs from [W, K] segment times, bytes/s per hop, dense bytes per cut and (optional) predictors."""
    dense = np.asarray(dense, dtype=np.float64)
    if predictors is not None and predictors.n_cuts == dense.size:
        full = np.asarray(predictors.full_bytes(), dtype=np.float64)
        if input_nz is not None:
            delta = np.asarray(predictors.predict_bytes(np.asarray(input_nz, dtype=np.float64)), dtype=np.float64)
        else:
            delta = full
    else:
        if predictors is not None:
            log.warning("predictors cover %d cuts, the model has %d: using dense sizes", predictors.n_cuts, dense.size)
        full = delta = dense
    return CostInputs(bytes_full=full, bytes_delta=delta, seg_time=np.asarray(seg_time, dtype=np.float64),
                      bandwidth=np.asarray(bandwidth, dtype=np.float64), result_bytes=float(dense[-1]))


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
        if name != "das":
            self.current = schedulers.schedule(name, inputs, in_flight, delta, **self.options)
            self.decisions.append((0, list(self.current.cuts)))

    def plan_for(self, frame: int, finished: Optional[Sequence[float]] = None, now: float = 0.0) -> Plan:
        """The plan of `frame` (frames must be asked in order)."""
        if self.name != "das":
            return self.current
        if frame % self.group_size == 0 or self.current is None:
            frame_bytes = None
            if self.predictors is not None and self.frame_nz is not None and self.delta:
                group = self.frame_nz[frame:frame + self.group_size]
                if len(group):
                    frame_bytes = np.atleast_2d(self.predictors.predict_bytes(group))
                    if frame == 0:  # the first frame is a keyframe on every hop
                        frame_bytes[0] = self.inputs.bytes_full
            opts = dict(self.options)
            opts.setdefault("group_size", self.group_size)
            plan, _ = schedulers.das_decide(self.inputs, self.in_flight, self.delta, frame_bytes=frame_bytes,
                                            prev=self.current, finished=finished, now=now, **opts)
            if self.current is None or plan.cuts != self.current.cuts:
                self.decisions.append((frame, list(plan.cuts)))
                log.info("das: frames %d.. -> plan %s", frame, list(plan.cuts))
            self.current = plan
        return self.current

    def predicted_period(self) -> Optional[float]:
        """Steady seconds per frame of the current plan, from the cost model."""
        if self.current is None:
            return None
        return costmodel.per_frame_time(self.current, self.inputs, self.in_flight, delta=self.delta)
