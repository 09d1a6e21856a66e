"""Schedulers that choose a Plan (cut points) from CostInputs: lbs, edge, cloud, nsc, das, optimal.

Every scheduler has the signature fn(inputs, in_flight=0, delta=True, **options) -> Plan and is
registered in SCHEDULERS (the names a config may use); `schedule(name, ...)` dispatches. OPTIONS lists what a
config's `scheduler_options` may set, and check_options is the one validator of them (config.validate calls it).
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .costmodel import (
    CostInputs,
    Plan,
    compute_costs,
    frame_stage_costs,
    per_frame_time,
    simulate,
    stage_costs,
    steady_period,
)

log = logging.getLogger(__name__)

INF = float("inf")


# --------------------------------------------------------------------------- simple schedulers
def edge(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Everything on worker 0; the others forward the output."""
    k, w = inputs.n_segments, inputs.n_workers
    return Plan((0,) + (k,) * w)


def cloud(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Everything on the last worker; the others forward the frame."""
    k, w = inputs.n_segments, inputs.n_workers
    return Plan((0,) * w + (k,))


def capacities(inputs: CostInputs) -> np.ndarray:
    """[W] capacity per worker = worker 0's total compute / its total (the original's definition)."""
    totals = inputs.seg_time.sum(axis=1)
    totals = np.where(totals > 0, totals, np.finfo(float).tiny)
    return totals[0] / totals


# cuts this close (share of the total compute) to the balance point count as equally balanced: a ReLU or a
# flatten between two cuts costs well under this, a convolution well over it
LBS_TIE = 0.005


def lbs(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Load balance (the original's LBS): worker w gets a share of worker 0's compute proportional to its
    capacity, at the cut nearest the balance point. Cuts within LBS_TIE of it tie and the smallest tensor wins
    (a ReLU sits between two cuts of nearly equal compute; profile noise alone would otherwise pick the side,
    and the pre-ReLU side is dense)."""
    cap = capacities(inputs)
    share = np.cumsum(cap / cap.sum())[:-1]
    prefix = inputs.prefix_time()[0]
    targets = share * prefix[-1]
    dist = np.abs(prefix[None, :] - targets[:, None])  # [W-1, K+1]
    near = dist <= dist.min(axis=1, keepdims=True) + LBS_TIE * prefix[-1]
    size = np.where(near, inputs.hop_bytes(delta)[None, :], np.inf)
    pick = np.lexsort((dist, size), axis=-1)[:, 0] if size.size else np.zeros(0, dtype=int)
    pick = np.maximum.accumulate(pick) if pick.size else pick  # non-decreasing cuts
    return Plan((0,) + tuple(int(c) for c in pick) + (inputs.n_segments,))


# --------------------------------------------------------------------------- nsc
def nsc(
    inputs: CostInputs, in_flight: int = 0, delta: bool = True, frames: int = 20, max_steps: int = 0, **options
) -> Plan:
    """Neighbourhood search from LBS: move a cut beside the most loaded stage while the simulated
    time of `frames` frames improves (stages tried in decreasing load; first improving move wins)."""
    plan = lbs(inputs)
    best = per_frame_time(plan, inputs, in_flight, frames=frames, delta=delta)
    steps = max_steps or (inputs.n_segments + 1) * inputs.n_workers
    for _ in range(steps):
        costs = stage_costs(plan, inputs, delta)
        moved = False
        for s in np.argsort(-costs, kind="stable"):
            for cand in _moves_beside(plan, int(s)):
                t = per_frame_time(cand, inputs, in_flight, frames=frames, delta=delta)
                if t < best - 1e-12:
                    plan, best, moved = cand, t, True
                    break
            if moved:
                break
        if not moved:
            break
    return plan


def _moves_beside(plan: Plan, stage: int) -> List[Plan]:
    """Plans that change the cut next to a stage: transfer into w moves c_w; compute on w shrinks it."""
    w, is_compute = divmod(stage, 2)
    cuts = list(plan.cuts)
    options = []  # (cut index, new value)
    if not is_compute:
        options = [(w, cuts[w] + 1), (w, cuts[w] - 1)]
    else:
        options = [(w, cuts[w] + 1), (w + 1, cuts[w + 1] - 1)]
    out = []
    last = len(cuts) - 1
    for i, v in options:
        if 0 < i < last and cuts[i - 1] <= v <= cuts[i + 1]:
            new = list(cuts)
            new[i] = v
            out.append(Plan(tuple(new)))
    return out


# --------------------------------------------------------------------------- optimal
def _stage_matrices(inputs: CostInputs, delta: bool) -> Tuple[np.ndarray, np.ndarray]:
    """transfer [W, K+1] (hop w at cut i) and compute [W, K+1, K+1] (worker w runs cuts i..j; inf if j < i)."""
    n = inputs.n_segments + 1
    transfer = inputs.hop_bytes(delta)[None, :] / inputs.bandwidth[:, None]
    begin, end = inputs.work_bounds()
    comp = inputs.work_wall(end[:, None, :] - begin[:, :, None], np.arange(inputs.n_workers)[:, None, None])
    comp[:, np.tril_indices(n, -1)[0], np.tril_indices(n, -1)[1]] = INF
    comp[-1, :, -1] += inputs.result_time()
    return transfer, comp


def _min_latency(transfer: np.ndarray, comp: np.ndarray, tau: float) -> Tuple[float, Optional[Tuple[int, ...]]]:
    """Min total latency over plans whose every stage costs <= tau, and its cuts (None if infeasible)."""
    n_workers, n = transfer.shape
    best = np.full(n, INF)
    best[0] = 0.0
    back = []
    for w in range(n_workers):
        ok_t = transfer[w] <= tau
        cost = np.where(comp[w] <= tau, comp[w], INF) + np.where(ok_t, transfer[w], INF)[:, None]
        if w == n_workers - 1:
            total = best + cost[:, -1]
            i = int(np.argmin(total))
            back.append(np.full(n, i))
            best = np.full(n, INF)
            best[-1] = total[i]
        else:
            total = best[:, None] + cost
            arg = np.argmin(total, axis=0)
            back.append(arg)
            best = total[arg, np.arange(n)]
    if not np.isfinite(best[-1]):
        return INF, None
    cuts = [n - 1]
    for w in range(n_workers - 1, -1, -1):
        cuts.append(int(back[w][cuts[-1]]))
    return float(best[-1]), tuple(reversed(cuts))


def _min_bottleneck(transfer: np.ndarray, comp: np.ndarray) -> float:
    """Smallest achievable max stage cost over all plans (min-max DP)."""
    n_workers, n = transfer.shape
    best = np.full(n, INF)
    best[0] = 0.0
    for w in range(n_workers):
        stage = np.maximum(comp[w], transfer[w][:, None])
        if w == n_workers - 1:
            return float(np.min(np.maximum(best, stage[:, -1])))
        best = np.min(np.maximum(best[:, None], stage), axis=0)
    return INF


@dataclass
class OptimalResult:
    """The optimal plan, its objective (steady-state seconds per frame), bottleneck and latency."""

    plan: Plan
    period: float
    bottleneck: float
    latency: float


def optimal_result(inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> OptimalResult:
    """Exact minimiser of T = max(B, L/m) (B = max stage cost, L = sum, m = in_flight; m = 0: T = B).

    With g(tau) = min L over plans with B <= tau (a min-plus DP per tau), T* = min over candidate tau (every
    stage cost value) of max(tau, g(tau)/m); g is non-increasing so a binary search finds the crossing.
    Ties are broken by the smallest latency.
    """
    transfer, comp = _stage_matrices(inputs, delta)
    b_star = _min_bottleneck(transfer, comp)
    if in_flight <= 0:
        lat, cuts = _min_latency(transfer, comp, b_star)
        return OptimalResult(Plan(cuts), b_star, b_star, lat)
    values = np.concatenate([transfer.ravel(), comp[np.isfinite(comp)]])
    cand = np.unique(values[values >= b_star])
    lo, hi = 0, cand.size - 1
    # smallest index with tau >= g(tau)/m (monotone predicate); if none, the answer is g(max)/m
    evals: Dict[int, Tuple[float, Optional[Tuple[int, ...]]]] = {}

    def g(i: int) -> Tuple[float, Optional[Tuple[int, ...]]]:
        if i not in evals:
            evals[i] = _min_latency(transfer, comp, float(cand[i]))
        return evals[i]

    if cand[hi] < g(hi)[0] / in_flight:
        lat, cuts = g(hi)
        return _result(cuts, inputs, delta, in_flight, lat)
    while lo < hi:
        mid = (lo + hi) // 2
        if cand[mid] >= g(mid)[0] / in_flight:
            hi = mid
        else:
            lo = mid + 1
    options = [g(lo)]
    if lo > 0:
        options.append(g(lo - 1))
    scored = [(float(steady_period(_costs(cuts, inputs, delta), in_flight)), lat, cuts) for lat, cuts in options]
    scored.sort(key=lambda item: (item[0], item[1]))
    _, lat, cuts = scored[0]
    return _result(cuts, inputs, delta, in_flight, lat)


def _costs(cuts: Optional[Tuple[int, ...]], inputs: CostInputs, delta: bool) -> np.ndarray:
    if cuts is None:
        return np.array([INF])
    return stage_costs(Plan(cuts), inputs, delta)


def _result(cuts, inputs: CostInputs, delta: bool, in_flight: int, lat: float) -> OptimalResult:
    costs = _costs(cuts, inputs, delta)
    return OptimalResult(Plan(cuts), float(steady_period(costs, in_flight)), float(costs.max()), lat)


def optimal(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Exact min of the steady-state per-frame time (see optimal_result)."""
    return optimal_result(inputs, in_flight, delta).plan


# --------------------------------------------------------------------------- das
def all_plans(n_workers: int, n_segments: int) -> np.ndarray:
    """[P, W+1] every monotone plan (0 = c_0 <= ... <= c_W = K)."""
    combos = list(itertools.combinations_with_replacement(range(n_segments + 1), n_workers - 1))
    inner = np.array(combos, dtype=int).reshape(len(combos), n_workers - 1)
    p = inner.shape[0]
    return np.concatenate([np.zeros((p, 1), dtype=int), inner, np.full((p, 1), n_segments, dtype=int)], axis=1)


def _n_plans(n_workers: int, n_segments: int) -> int:
    from math import factorial

    n, r = n_segments + n_workers - 1, n_workers - 1
    return factorial(n) // (factorial(r) * factorial(n - r))


def group_costs(
    cuts: np.ndarray,
    inputs: CostInputs,
    frame_bytes: np.ndarray,
    prev: Optional[Plan],
    delta: bool = True,
) -> np.ndarray:
    """[P, G, 2W] stage costs of a group for many plans cuts [P, W+1] (first frame full at new cuts)."""
    cuts = np.atleast_2d(cuts)
    g = frame_bytes.shape[0]
    p, w1 = cuts.shape
    hop_cut = cuts[:, :-1]  # [P, W]
    per_frame = frame_bytes if delta else np.broadcast_to(inputs.bytes_full, frame_bytes.shape)
    hop_bytes = np.array(per_frame[:, hop_cut].transpose(1, 0, 2))  # [P, G, W]
    if prev is None or prev.n_workers != w1 - 1:
        new = np.ones(hop_cut.shape, dtype=bool)
    else:
        new = hop_cut != np.asarray(prev.cuts[:-1])[None, :]
    hop_bytes[:, 0, :] = np.where(new, inputs.bytes_full[hop_cut], hop_bytes[:, 0, :])
    begin, end = inputs.work_bounds()
    rows = np.arange(w1 - 1)[None, :]
    comp = inputs.work_wall(end[rows, cuts[:, 1:]] - begin[rows, cuts[:, :-1]], rows)
    comp[:, -1] += inputs.result_time()
    out = np.empty((p, g, 2 * (w1 - 1)))
    out[:, :, 0::2] = hop_bytes / inputs.bandwidth[None, None, :]
    out[:, :, 1::2] = comp[:, None, :]
    return out


def _group_start(n_frames: int, in_flight: int, finished: Optional[Sequence[float]], now: float) -> np.ndarray:
    """Earliest start per group frame: now, and the finish of the frame in_flight places earlier if known."""
    start = np.full(n_frames, float(now))
    if in_flight > 0 and finished is not None and len(finished):
        fin = np.asarray(finished, dtype=np.float64)
        for g in range(min(n_frames, in_flight)):
            j = fin.size + g - in_flight
            if j >= 0:
                start[g] = max(start[g], fin[j])
    return start


def das_decide(
    inputs: CostInputs,
    in_flight: int = 0,
    delta: bool = True,
    frame_bytes: Optional[np.ndarray] = None,
    prev: Optional[Plan] = None,
    ready: Optional[Sequence[float]] = None,
    finished: Optional[Sequence[float]] = None,
    now: float = 0.0,
    group_size: int = 5,
    max_plans: int = 20000,
) -> Tuple[Plan, float]:
    """DAS: pick the plan minimising the group's simulated finish time; returns (plan, finish time).

    frame_bytes [G, K+1]: predicted delta bytes per frame of the group (default: inputs.bytes_delta x group_size);
    prev: the plan in use (hops whose cut changes carry a full tensor first); ready [2W]: when each stage
    becomes free; finished: finish times of earlier frames still constraining the in-flight cap (oldest first).
    Exhaustive over all plans when there are at most max_plans (exact), else a heuristic: the best of a
    per-worker DP over cut points (keeping the prefix with the earliest group finish per cut, in-flight cap
    only from earlier frames), the steady-state optimum, LBS and prev, refined by coordinate descent on single
    cuts with the exact group simulation.
    """
    if frame_bytes is None:
        frame_bytes = np.broadcast_to(inputs.bytes_delta, (group_size, inputs.n_segments + 1))
    frame_bytes = np.atleast_2d(np.asarray(frame_bytes, dtype=np.float64))
    n_frames = frame_bytes.shape[0]
    start = _group_start(n_frames, in_flight, finished, now)
    ready_arr = None if ready is None else np.asarray(ready, dtype=np.float64)

    def finish(cuts: np.ndarray) -> np.ndarray:
        costs = group_costs(cuts, inputs, frame_bytes, prev, delta)
        done = simulate(costs, in_flight, ready=ready_arr, start=start)
        return done[:, -1, -1]

    if _n_plans(inputs.n_workers, inputs.n_segments) <= max_plans:
        cuts = all_plans(inputs.n_workers, inputs.n_segments)
        times = finish(cuts)
        best = _argmin_prefer(times, cuts, prev)
        return Plan(tuple(cuts[best])), float(times[best])
    starts = [_das_dp(inputs, frame_bytes, prev, ready_arr, start, delta),
              np.array(optimal(inputs, in_flight, delta).cuts), np.array(lbs(inputs).cuts)]
    if prev is not None and prev.n_workers == inputs.n_workers and prev.cuts[-1] == inputs.n_segments:
        starts.append(np.array(prev.cuts))
    return _refine(starts, finish, inputs.n_segments)


def _argmin_prefer(times: np.ndarray, cuts: np.ndarray, prev: Optional[Plan]) -> int:
    """Index of the min time; on a tie keep prev, else the first."""
    best = int(np.argmin(times))
    if prev is not None and cuts.shape[1] == len(prev.cuts):
        same = np.flatnonzero(np.all(cuts == np.asarray(prev.cuts)[None, :], axis=1))
        if same.size and times[same[0]] <= times[best]:
            return int(same[0])
    return best


def _das_dp(
    inputs: CostInputs,
    frame_bytes: np.ndarray,
    prev: Optional[Plan],
    ready: Optional[np.ndarray],
    start: np.ndarray,
    delta: bool,
) -> np.ndarray:
    """Heuristic DP over workers: per end cut keep the prefix whose last group frame finishes first."""
    n_workers, n = inputs.n_workers, inputs.n_segments + 1
    n_frames = frame_bytes.shape[0]
    begin, end = inputs.work_bounds()
    per_frame = frame_bytes if delta else np.broadcast_to(inputs.bytes_full, frame_bytes.shape)
    ready = np.zeros(2 * n_workers) if ready is None else ready
    # state per cut i: done times [G] of the frames leaving the previous worker (inf = unreachable)
    state = np.full((n, n_frames), INF)
    state[0] = start
    back = []
    tri = np.tril(np.ones((n, n), dtype=bool), -1)
    for w in range(n_workers):
        hop = np.array(per_frame.T, dtype=np.float64)  # [n, G] bytes at cut i per frame
        if prev is None or prev.n_workers != n_workers:
            hop[:, 0] = inputs.bytes_full
        else:
            hop[:, 0] = np.where(np.arange(n) != prev.cuts[w], inputs.bytes_full, hop[:, 0])
        t_cost = hop / inputs.bandwidth[w]  # [n, G]
        c_cost = inputs.work_wall(end[w][None, :] - begin[w][:, None], w)  # [i, j]
        if w == n_workers - 1:
            c_cost = c_cost + np.where(np.arange(n) == n - 1, inputs.result_time(), 0.0)[None, :]
        # transfer stage: depends on i only
        arrive = np.empty((n, n_frames))
        prev_t = np.full(n, ready[2 * w])
        for g in range(n_frames):
            prev_t = np.maximum(prev_t, state[:, g]) + t_cost[:, g]
            arrive[:, g] = prev_t
        # compute stage over (i, j)
        out = np.empty((n, n, n_frames))
        prev_c = np.full((n, n), ready[2 * w + 1])
        for g in range(n_frames):
            prev_c = np.maximum(prev_c, arrive[:, g][:, None]) + c_cost
            out[:, :, g] = prev_c
        out[tri] = INF
        key = out[:, :, -1] + 1e-9 * out.sum(axis=2)
        if w == n_workers - 1:
            key = np.where(np.arange(n)[None, :] == n - 1, key, INF)
        arg = np.argmin(key, axis=0)
        back.append(arg)
        state = out[arg, np.arange(n)]
    cuts = [n - 1]
    for w in range(n_workers - 1, -1, -1):
        cuts.append(int(back[w][cuts[-1]]))
    return np.array(cuts[::-1])


def _refine(
    starts: List[np.ndarray], finish: Callable[[np.ndarray], np.ndarray], n_segments: int
) -> Tuple[Plan, float]:
    """Coordinate descent from the best start: move any one cut anywhere between its neighbours while the
    exact group finish time improves (all such neighbours evaluated at once)."""
    arr = np.array(starts)
    times = finish(arr)
    j = int(np.argmin(times))
    cuts, best_t = arr[j], float(times[j])
    for _ in range(4 * n_segments):
        neigh = []
        for i in range(1, cuts.size - 1):
            values = np.arange(cuts[i - 1], cuts[i + 1] + 1)
            values = values[values != cuts[i]]
            block = np.repeat(cuts[None, :], values.size, axis=0)
            block[:, i] = values
            neigh.append(block)
        arr = np.concatenate(neigh) if neigh else np.zeros((0, cuts.size), dtype=int)
        if not arr.shape[0]:
            break
        times = finish(arr)
        j = int(np.argmin(times))
        if times[j] >= best_t - 1e-12:
            break
        cuts, best_t = arr[j], float(times[j])
    return Plan(tuple(int(c) for c in cuts)), best_t


def das(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """DAS plan for one group (see das_decide for the options)."""
    return das_decide(inputs, in_flight, delta, **options)[0]


# --------------------------------------------------------------------------- adaptive
def adaptive(inputs: CostInputs, in_flight: int = 0, delta: bool = True, alpha: float = 0.3, gain: float = 0.1,
             min_samples: int = 2, **options) -> Plan:
    """Online-adaptive: the steady-state optimum of the inputs it is given. The master (AdaptiveScheduler)
    re-plans every group with measured bandwidth and compute (cnnvideo.adapt: EWMA `alpha`, switch when the
    new plan is faster by more than `gain`, estimates used after `min_samples` messages)."""
    return optimal(inputs, in_flight, delta)


# --------------------------------------------------------------------------- registry
SCHEDULERS: Dict[str, Callable[..., Plan]] = {
    "lbs": lbs,
    "edge": edge,
    "cloud": cloud,
    "nsc": nsc,
    "das": das,
    "optimal": optimal,
    "adaptive": adaptive,
}



# options a config may set per scheduler (`scheduler_options`); anything else is an error naming the key
OPTIONS: Dict[str, Tuple[str, ...]] = {
    "lbs": (),
    "edge": (),
    "cloud": (),
    "nsc": ("frames", "max_steps"),
    "das": ("group_size", "max_plans"),
    "optimal": (),
    "adaptive": ("alpha", "gain", "min_samples"),
}
# arguments the master's planner passes at run time (per-group state), never set by a config
RUNTIME_OPTIONS: Dict[str, Tuple[str, ...]] = {"das": ("frame_bytes", "prev", "ready", "finished", "now")}

_missing = [name for name in SCHEDULERS if name not in OPTIONS]
if _missing:
    raise ImportError("schedulers without an OPTIONS entry: %s" % ", ".join(_missing))


def check_options(name: str, options: Dict[str, object], runtime: bool = False) -> None:
    """ValueError naming the first option the scheduler does not take (runtime: also allow RUNTIME_OPTIONS)."""
    if name not in SCHEDULERS:
        raise ValueError("unknown scheduler %r (known: %s)" % (name, ", ".join(SCHEDULERS)))
    allowed = OPTIONS[name] + (RUNTIME_OPTIONS.get(name, ()) if runtime else ())
    for key in options:
        if key not in allowed:
            known = ", ".join(OPTIONS[name]) or "none"
            raise ValueError("scheduler %s has no option %r (options: %s)" % (name, key, known))


def schedule(name: str, inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Run the named scheduler with its options (ValueError on an unknown name or option)."""
    check_options(name, options, runtime=True)
    plan = SCHEDULERS[name](inputs, in_flight, delta, **options)
    log.debug("scheduler %s -> %s", name, plan)
    return plan


def objective(plan: Plan, inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> float:
    """The common yardstick: steady-state seconds per frame (what `optimal` minimises)."""
    return float(steady_period(stage_costs(plan, inputs, delta), in_flight))


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
        """A measurement of the run (Transfer or Compute); static schedulers ignore them."""

    def _use(self, frame: int, plan: Plan) -> Plan:
        if self.current is None or plan.cuts != self.current.cuts:
            self.decisions.append((frame, list(plan.cuts)))
            if self.current is not None:
                log.info("%s: frames %d.. -> plan %s", self.name, frame, list(plan.cuts))
        self.current = plan
        return plan

    def predicted_period(self) -> Optional[float]:
        """Steady seconds per frame of the current plan, from the cost model."""
        if self.current is None:
            return None
        return per_frame_time(self.current, self.inputs, self.in_flight, delta=self.delta)

    def report(self, frames: int, cuts: Sequence[int]) -> Dict[str, object]:
        """Cost-model figures for the report: predicted stage costs and makespan of `cuts` over `frames` frames
        (first frame a keyframe on every hop)."""
        plan = Plan(tuple(int(c) for c in cuts))
        stages = stage_costs(plan, self.inputs, self.delta)
        first = frame_stage_costs(plan, self.inputs, None, None, self.delta)[0]
        costs = np.tile(stages, (max(int(frames), 1), 1))
        costs[0] = first
        done = simulate(costs, self.in_flight)
        return {
            "predicted_stage_s": [round(float(c), 6) for c in stages],
            "predicted_makespan_s": round(float(done[-1, -1]), 6),
            "predicted_fps": round(float(frames) / float(done[-1, -1]), 5) if done[-1, -1] > 0 else None,
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
    compute (cnnvideo.adapt)."""

    def __init__(self, *args, **kwargs) -> None:
        from . import adapt

        super().__init__(*args, **kwargs)
        inputs = self.inputs
        self.estimates = adapt.Estimates(inputs.n_workers, alpha=float(self.options.get("alpha", 0.3)),
                                         min_samples=int(self.options.get("min_samples", 2)))
        self.log: List[Dict[str, object]] = []  # one entry per group check
        self.measured_inputs: Optional[CostInputs] = None

    def plan_for(self, frame: int, state: Optional[PipelineState] = None) -> Plan:
        from . import adapt

        current = self.initial_plan()
        if frame <= 0 or frame % self.group_size:
            return current
        gain = float(self.options.get("gain", 0.1))
        new, cur, best, measured = adapt.replan(self.inputs, self.estimates, current.cuts, self.in_flight,
                                                self.delta, gain)
        entry: Dict[str, object] = {"frame": frame, "current_period_s": round(cur, 5), "best_period_s": round(best, 5)}
        entry.update(self.estimates.snapshot())
        if new is not None:
            log.info("adaptive: measured period %.3f s -> %.3f s", cur, best)
            self._use(frame, Plan(tuple(new)))
            entry["switched_to"] = list(new)
        self.measured_inputs = measured
        self.log.append(entry)
        return self.current

    def observe(self, sample) -> None:
        from . import adapt

        if isinstance(sample, Transfer):
            self.estimates.add_transfer(sample.hop, sample.nbytes, sample.seconds)
        elif isinstance(sample, Compute) and sample.end_cut > sample.start_cut:
            predicted = adapt.predicted_compute(self.inputs.seg_time, sample.worker, sample.start_cut,
                                                sample.end_cut)
            self.estimates.add_compute(sample.worker, sample.seconds, predicted)

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
    check_options(name, options or {}, runtime=True)  # a config's options were checked by config.validate
    return RUNTIME.get(name, Scheduler)(name, inputs, in_flight, delta, options, group_size, predictors, frame_nz)


__all__ = [
    "SCHEDULERS",
    "AdaptiveScheduler",
    "Compute",
    "GroupScheduler",
    "PipelineState",
    "Scheduler",
    "Transfer",
    "create",
    "OptimalResult",
    "adaptive",
    "all_plans",
    "capacities",
    "cloud",
    "compute_costs",
    "das",
    "das_decide",
    "edge",
    "group_costs",
    "lbs",
    "nsc",
    "objective",
    "optimal",
    "optimal_result",
    "schedule",
]
