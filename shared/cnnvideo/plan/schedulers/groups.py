"""DAS: a plan per group of frames from the sizes the trainer's predictors expect for each cut and the frames
in flight (das_decide), by dynamic programming over the group's frames."""
from __future__ import annotations

import itertools
import logging
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan.costmodel import CostInputs, simulate
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers.plans import INF, lbs, optimal

log = logging.getLogger(__name__)


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
    if prev is None or prev.n_stages != w1 - 1:
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


def _group_start(n_frames: int, in_flight: int, finished: Optional[Sequence[float]], now: float,
                 turnaround: float = 0.0) -> np.ndarray:
    """Earliest start per group frame: now, and the finish (plus the master's turnaround) of the frame in_flight
    places earlier if known."""
    start = np.full(n_frames, float(now))
    if in_flight > 0 and finished is not None and len(finished):
        fin = np.asarray(finished, dtype=np.float64)
        for g in range(min(n_frames, in_flight)):
            j = fin.size + g - in_flight
            if j >= 0:
                start[g] = max(start[g], fin[j] + turnaround)
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
    start = _group_start(n_frames, in_flight, finished, now, inputs.turnaround)
    ready_arr = None if ready is None else np.asarray(ready, dtype=np.float64)

    def finish(cuts: np.ndarray) -> np.ndarray:
        costs = group_costs(cuts, inputs, frame_bytes, prev, delta)
        done = simulate(costs, in_flight, ready=ready_arr, start=start, turnaround=inputs.turnaround)
        return done[:, -1, -1]

    if _n_plans(inputs.n_workers, inputs.n_segments) <= max_plans:
        cuts = all_plans(inputs.n_workers, inputs.n_segments)
        times = finish(cuts)
        best = _argmin_prefer(times, cuts, prev)
        return Plan(tuple(cuts[best])), float(times[best])
    starts = [_das_dp(inputs, frame_bytes, prev, ready_arr, start, delta),
              np.array(optimal(inputs, in_flight, delta, pool=False).cuts), np.array(lbs(inputs).cuts)]
    if prev is not None and prev.n_stages == inputs.n_workers and prev.cuts[-1] == inputs.n_segments:
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
        if prev is None or prev.n_stages != n_workers:
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
