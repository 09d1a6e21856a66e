"""Schedulers that choose one Plan from CostInputs: edge, cloud, fixed (the config's own cuts, and groups of
replicas), lbs, nsc, replicas (the whole model on every worker), optimal (the best chain, by dynamic programming
over the cuts, or the best pool plan of stages x replicas, whichever the cost model says is faster) and adaptive's
starting plan; `objective` is their common yardstick."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from cnnvideo.plan.costmodel import CostInputs, best_path, per_frame_time, stage_costs, steady_period
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.pool import best_pool, full_replication, pool_period

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


def replicas(inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Full replication: the whole model on every worker, each frame on one of them (the pool's baseline)."""
    return full_replication(inputs)


def fixed(inputs: CostInputs, in_flight: int = 0, delta: bool = True, cuts=None, groups=None, **options) -> Plan:
    """The plan the config names (`scheduler_options: {cuts: [0, c1, ..., K]}`, W+1 cuts): to pin a split, or to
    measure one against what the cost model predicts; with `groups` (the workers of each stage, e.g.
    `{cuts: [0, 12, K], groups: [[0, 1], [2]]}`) a pool plan. ValueError naming what is wrong."""
    if groups is not None:
        return _fixed_pool(inputs, cuts, groups)
    k, w = inputs.n_segments, inputs.n_workers
    want = "[0, c1, ..., %d] (%d non-decreasing cut indices)" % (k, w + 1)
    if cuts is None:
        raise ValueError("scheduler fixed needs scheduler_options.cuts: %s" % want)
    try:
        plan = tuple(int(c) for c in cuts)
    except (TypeError, ValueError):
        raise ValueError("scheduler_options.cuts must be a list of integers %s, got %r" % (want, cuts)) from None
    if (len(plan) != w + 1 or plan[0] != 0 or plan[-1] != k
            or any(b < a for a, b in zip(plan, plan[1:]))):
        raise ValueError("scheduler_options.cuts must be %s, got %r" % (want, list(plan)))
    return Plan(plan)


def _fixed_pool(inputs: CostInputs, cuts, groups) -> Plan:
    """fixed's pool plan: S+1 cuts and S groups of workers, each worker at most once, no stage without one."""
    k, w = inputs.n_segments, inputs.n_workers
    try:
        plan_cuts = tuple(int(c) for c in (cuts if cuts is not None else (0, k)))
        plan_groups = tuple(tuple(int(x) for x in g) for g in groups)
    except (TypeError, ValueError):
        raise ValueError("scheduler_options.groups must be a list of lists of worker indices, got %r"
                         % (groups,)) from None
    for s, g in enumerate(plan_groups):
        if not g:
            raise ValueError("scheduler_options.groups: stage %d has no worker" % s)
        bad = [x for x in g if not 0 <= x < w]
        if bad:
            raise ValueError("scheduler_options.groups: worker %d is not one of the %d workers" % (bad[0], w))
    named = [x for g in plan_groups for x in g]
    twice = sorted({x for x in named if named.count(x) > 1})
    if twice:
        raise ValueError("scheduler_options.groups names worker %d twice" % twice[0])
    if (len(plan_cuts) != len(plan_groups) + 1 or plan_cuts[0] != 0 or plan_cuts[-1] != k
            or any(b <= a for a, b in zip(plan_cuts, plan_cuts[1:]))):
        raise ValueError("scheduler_options.cuts must be [0, ..., %d] with one increasing cut per stage boundary "
                         "(%d stages in groups), got %r" % (k, len(plan_groups), list(plan_cuts)))
    return Plan(plan_cuts, plan_groups)


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
    layers = [np.where(comp[w] <= tau, comp[w], INF) + np.where(transfer[w] <= tau, transfer[w], INF)[:, None]
              for w in range(transfer.shape[0])]
    return best_path(layers, np.add)


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
    """Exact minimiser of T = max(B, (L + t)/m) (B = max stage cost, L = sum, t = the master's turnaround,
    m = in_flight; m = 0: T = B).

    With g(tau) = min L over plans with B <= tau (a min-plus DP per tau), T* = min over candidate tau (every
    stage cost value) of max(tau, (g(tau) + t)/m); g is non-increasing so a binary search finds the crossing.
    Ties are broken by the smallest latency.
    """
    transfer, comp = _stage_matrices(inputs, delta)
    b_star = _min_bottleneck(transfer, comp)
    if in_flight <= 0:
        lat, cuts = _min_latency(transfer, comp, b_star)
        return OptimalResult(Plan(cuts), b_star, b_star, lat)
    turn = float(inputs.turnaround)
    values = np.concatenate([transfer.ravel(), comp[np.isfinite(comp)]])
    cand = np.unique(values[values >= b_star])
    lo, hi = 0, cand.size - 1
    # smallest index with tau >= g(tau)/m (monotone predicate); if none, the answer is g(max)/m
    evals: Dict[int, Tuple[float, Optional[Tuple[int, ...]]]] = {}

    def g(i: int) -> Tuple[float, Optional[Tuple[int, ...]]]:
        if i not in evals:
            evals[i] = _min_latency(transfer, comp, float(cand[i]))
        return evals[i]

    if cand[hi] < (g(hi)[0] + turn) / in_flight:
        lat, cuts = g(hi)
        return _result(cuts, inputs, delta, in_flight, lat)
    while lo < hi:
        mid = (lo + hi) // 2
        if cand[mid] >= (g(mid)[0] + turn) / in_flight:
            hi = mid
        else:
            lo = mid + 1
    options = [g(lo)]
    if lo > 0:
        options.append(g(lo - 1))
    scored = [(float(steady_period(_costs(cuts, inputs, delta), in_flight, inputs.turnaround)), lat, cuts)
              for lat, cuts in options]
    scored.sort(key=lambda item: (item[0], item[1]))
    _, lat, cuts = scored[0]
    return _result(cuts, inputs, delta, in_flight, lat)


def _costs(cuts: Optional[Tuple[int, ...]], inputs: CostInputs, delta: bool) -> np.ndarray:
    if cuts is None:
        return np.array([INF])
    return stage_costs(Plan(cuts), inputs, delta)


def _result(cuts, inputs: CostInputs, delta: bool, in_flight: int, lat: float) -> OptimalResult:
    costs = _costs(cuts, inputs, delta)
    return OptimalResult(Plan(cuts), float(steady_period(costs, in_flight, inputs.turnaround)), float(costs.max()), lat)


def optimal(inputs: CostInputs, in_flight: int = 0, delta: bool = True, pool: bool = True, **options) -> Plan:
    """The fastest plan by the cost model: the exact best chain (see optimal_result) or, with `pool` (the default;
    `scheduler_options: {pool: false}` keeps chains), the best plan of stages x replicas (cnnvideo.plan.pool) when
    that is faster."""
    chain = optimal_result(inputs, in_flight, delta).plan
    if not pool or inputs.n_workers < 2:
        return chain
    best = best_pool(inputs, in_flight, delta)
    if best.period < objective(chain, inputs, in_flight, delta) * (1.0 - 1e-9):
        return best.plan
    return chain


# --------------------------------------------------------------------------- adaptive
def adaptive(inputs: CostInputs, in_flight: int = 0, delta: bool = True, alpha: float = 0.3, gain: float = 0.1,
             min_samples: int = 2, pool: bool = True, **options) -> Plan:
    """Online-adaptive: the steady-state optimum of the inputs it is given. The master (AdaptiveScheduler)
    re-plans every group with measured bandwidth and compute (cnnvideo.plan.adapt: EWMA `alpha`, switch when the
    new plan is faster by more than `gain`, estimates used after `min_samples` messages); with `pool` its plans
    may be stages x replicas."""
    return optimal(inputs, in_flight, delta, pool=pool)


def objective(plan: Plan, inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> float:
    """The common yardstick: steady-state seconds per frame (what `optimal` minimises), by the one cost model of
    every plan (cnnvideo.plan.pool.pool_period: a chain's is its recurrence's steady period), never below the
    master's own time per frame."""
    return pool_period(plan, inputs, in_flight, delta)
