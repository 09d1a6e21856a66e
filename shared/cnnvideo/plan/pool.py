"""The cost model of every plan (stages x replicas), and the search for the best of each shape (pure functions).

A plan (cnnvideo.plan.plan.Plan) has S stages; stage s runs segments cuts[s] .. cuts[s+1]-1 on each
worker of groups[s], and each frame visits one replica of each stage (the master sends it to the one with the
fewest frames outstanding). The two ends are the chain (one worker per stage) and full replication (one stage,
the whole model, on every worker).

Cost of a replica r of stage s for cuts i..j: its link carries the tensor at cut i into r, and r works on it
(decode, compute, encode, the gRPC messages; the last stage also sends the result). Link and CPU overlap across
frames, as in the chain, so r takes max(transfer, work) seconds a frame, and the stage's rate is the sum of its
replicas' rates (least-outstanding dispatch gives a faster replica more frames). A replica that sees every Rth
frame compares with frame f-R, so its delta is larger: bytes grow as stride ** STRIDE_EXPONENT, up to the whole
tensor. The master is a stage too (its CPU per frame), and with m frames in flight the period is at least the
frame's latency / m (Little's law). The master's seconds per frame are CostInputs.master_time.

    T = max(max_s 1 / sum_r 1 / max(transfer_r, work_r), master, (latency + turnaround) / m)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan.costmodel import STRIDE_EXPONENT, CostInputs, best_path
from cnnvideo.plan.plan import Plan

INF = float("inf")

# shapes `cnnvideo plan` lists, and what each means
SHAPES = ("edge", "chain", "replicas", "hybrid")

Groups = Tuple[Tuple[int, ...], ...]


def stride_bytes(inputs: CostInputs, stride: float, delta: bool = True) -> np.ndarray:
    """[K+1] bytes per frame of each cut's hop when the receiver sees every `stride`-th frame."""
    if not delta:
        return inputs.bytes_full
    exponent = np.full(inputs.bytes_delta.shape, STRIDE_EXPONENT)
    exponent[0] = inputs.input_stride_exponent
    grown = inputs.bytes_delta * float(max(stride, 1.0)) ** exponent
    return np.minimum(grown, np.maximum(inputs.bytes_full, inputs.bytes_delta))


def link_strides(groups: Groups) -> List[float]:
    """Stride of the frames each stage's replicas get over one link: stage 0 from the master (its replica count),
    stage s > 0 from one replica of stage s-1 (the product of both counts)."""
    sizes = [len(g) for g in groups]
    return [float(sizes[0])] + [float(a * b) for a, b in zip(sizes, sizes[1:])]


class _Tables:
    """What every grouping's search shares: each worker's work for every cut range [W, K+1, K+1] (inf where
    j <= i: a pool stage has at least one segment) and each cut's bytes per stride."""

    def __init__(self, inputs: CostInputs, delta: bool) -> None:
        self.inputs, self.delta = inputs, delta
        n = inputs.n_segments + 1
        begin, end = inputs.work_bounds()
        rows = np.arange(inputs.n_workers)[:, None, None]
        work = np.array(inputs.work_wall(end[:, None, :] - begin[:, :, None], rows))
        work[:, np.tril_indices(n)[0], np.tril_indices(n)[1]] = INF
        self.work = work
        self.work_last = work + inputs.result_time()
        self._bytes: Dict[float, np.ndarray] = {}

    def transfer(self, group: Sequence[int], stride: float) -> np.ndarray:
        """[R, K+1] seconds of the tensor at each cut into each replica of `group`."""
        if stride not in self._bytes:
            self._bytes[stride] = stride_bytes(self.inputs, stride, self.delta)
        return self._bytes[stride][None, :] / self.inputs.bandwidth[np.asarray(group, dtype=int)][:, None]

    def stage_period(self, group: Sequence[int], stride: float, last: bool) -> np.ndarray:
        """[K+1, K+1] seconds per frame of a stage on `group` for cuts i..j: each replica takes max(transfer,
        work), and their rates add up."""
        g = np.asarray(group, dtype=int)
        work = (self.work_last if last else self.work)[g]
        each = np.maximum(self.transfer(group, stride)[:, :, None], work)
        if len(group) == 1:
            return each[0]
        rate = (1.0 / each).sum(axis=0)
        with np.errstate(divide="ignore"):
            return np.where(rate > 0, 1.0 / np.maximum(rate, 1e-300), INF)


@dataclass
class PoolCosts:
    """What the cost model says of one pool plan (seconds)."""

    stage_period: List[float]  # per stage: 1 / (sum of its replicas' rates)
    replica_time: List[List[float]]  # per stage, per replica: max(transfer, work)
    transfer: List[List[float]]  # per stage, per replica: seconds of its input's transfer
    work: List[List[float]]  # per stage, per replica: seconds of its work (decode, compute, encode, messages)
    link_bytes: List[float]  # per stage: predicted bytes per frame on one of its input links
    latency: float  # one frame through an empty pool (mean replica per stage)
    master: float  # the master's seconds per frame
    period: float  # steady seconds per frame (the objective)

    @property
    def fps(self) -> float:
        return 1.0 / self.period if self.period > 0 else INF

    def stage_costs(self) -> List[float]:
        """[2S] each stage's transfer and work seconds a frame, alternating, its replicas' rates added up (a
        chain's: costmodel.stage_costs)."""
        out: List[float] = []
        for transfer, work in zip(self.transfer, self.work):
            out += [_combined(transfer), _combined(work)]
        return out


def _combined(seconds: Sequence[float]) -> float:
    """Seconds a frame of replicas that each take `seconds` and share the frames (their rates add up)."""
    t = np.asarray(seconds, dtype=np.float64)
    return float(1.0 / np.sum(1.0 / t)) if np.all(t > 0) else 0.0


def pool_costs(plan: Plan, inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> PoolCosts:
    """The cost model of a plan. A chain (one worker per stage) gets the steady period of the chain's pipelined
    recurrence (costmodel.steady_period of costmodel.stage_costs), with the master's time as a floor."""
    groups = plan.groups
    if plan.cuts[-1] != inputs.n_segments or any(w >= inputs.n_workers for g in groups for w in g):
        raise ValueError("plan %s does not fit %d workers x %d segments" % (plan, inputs.n_workers,
                                                                          inputs.n_segments))
    strides = link_strides(groups)
    periods, times, transfers, works, link_bytes, latency = [], [], [], [], [], 0.0
    begin, end = inputs.work_bounds()
    for s, g in enumerate(groups):
        i, j = plan.cuts[s], plan.cuts[s + 1]
        gi = np.asarray(g, dtype=int)
        nbytes = float(stride_bytes(inputs, strides[s], delta)[i])
        transfer = nbytes / inputs.bandwidth[gi]
        work = np.asarray(inputs.work_wall(end[gi, j] - begin[gi, i], gi), dtype=np.float64)
        if s == len(groups) - 1:
            work = work + inputs.result_time()
        each = np.maximum(transfer, work)
        periods.append(float(1.0 / np.sum(1.0 / np.maximum(each, 1e-12))))
        times.append([float(t) for t in each])
        transfers.append([float(t) for t in transfer])
        works.append([float(t) for t in work])
        link_bytes.append(nbytes)
        latency += float(np.mean(transfer + work))
    period = max(max(periods), float(inputs.master_time))
    if in_flight > 0:
        period = max(period, (latency + inputs.turnaround) / in_flight)
    return PoolCosts(periods, times, transfers, works, link_bytes, latency, float(inputs.master_time), period)


def pool_period(plan: Plan, inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> float:
    """Steady seconds per frame of `plan` (the pool objective)."""
    return pool_costs(plan, inputs, in_flight, delta).period


def best_cuts(groups: Groups, inputs: CostInputs, delta: bool = True, tables: Optional[_Tables] = None
              ) -> Tuple[Optional[Tuple[int, ...]], float]:
    """(cuts, bottleneck) minimising the slowest stage for these groups (each stage non-empty), by a min-max
    dynamic programme over the cuts; (None, inf) if the stages cannot all be non-empty."""
    if len(groups) > inputs.n_segments:
        return None, INF
    tables = tables or _Tables(inputs, delta)
    strides = link_strides(groups)
    layers = [tables.stage_period(g, strides[s], s == len(groups) - 1) for s, g in enumerate(groups)]
    bottleneck, cuts = best_path(layers, np.maximum)
    return cuts, bottleneck


def candidate_groups(n_workers: int, max_enumerate: int = 4, max_stages: int = 3) -> Iterator[Groups]:
    """Every way to give workers stages (some may be left out) for n_workers <= max_enumerate; beyond it, the
    workers in index order cut into at most `max_stages` consecutive groups (all used). Each stage has at least
    one worker. (The chain of every worker is the chain scheduler's, `plans.optimal_result`.)"""
    if n_workers <= max_enumerate:
        seen = set()
        for n_stages in range(1, n_workers + 1):
            for assign in itertools.product(range(-1, n_stages), repeat=n_workers):
                if set(range(n_stages)) - set(assign):
                    continue
                groups = tuple(tuple(w for w in range(n_workers) if assign[w] == s) for s in range(n_stages))
                if groups not in seen:
                    seen.add(groups)
                    yield groups
        return
    for bits in itertools.product((0, 1), repeat=n_workers - 1):
        if sum(bits) >= max_stages:
            continue
        groups, cur = [], [0]
        for w, cut in enumerate(bits, start=1):
            if cut:
                groups.append(tuple(cur))
                cur = []
            cur.append(w)
        groups.append(tuple(cur))
        yield tuple(groups)


def shape_of(groups: Groups, n_workers: int) -> str:
    """The shape a plan's groups have: edge (one worker does everything), chain (one worker per stage, more than
    one stage), replicas (one stage, several workers) or hybrid."""
    if len(groups) == 1:
        return "edge" if len(groups[0]) == 1 else "replicas"
    return "chain" if all(len(g) == 1 for g in groups) else "hybrid"


@dataclass
class Candidate:
    """The best plan of one shape and what the cost model predicts for it."""

    shape: str
    plan: Plan
    period: float
    costs: PoolCosts

    @property
    def fps(self) -> float:
        return 1.0 / self.period if self.period > 0 else INF


def best_by_shape(inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> Dict[str, Candidate]:
    """The best pool plan of each shape (SHAPES) over every candidate grouping, by the pool objective; ties go to
    fewer stages, then fewer workers."""
    out: Dict[str, Candidate] = {}
    tables = _Tables(inputs, delta)
    for groups in candidate_groups(inputs.n_workers):
        cuts, _ = best_cuts(groups, inputs, delta, tables)
        if cuts is None:
            continue
        plan = Plan(cuts, groups)
        costs = pool_costs(plan, inputs, in_flight, delta)
        shape = shape_of(groups, inputs.n_workers)
        have = out.get(shape)
        if have is None or _rank(costs.period, groups) < _rank(have.period, have.plan.groups):
            out[shape] = Candidate(shape, plan, costs.period, costs)
    return out


def _rank(period: float, groups: Groups) -> Tuple[float, int, int]:
    return (round(period, 12), len(groups), sum(len(g) for g in groups))


# a plan with fewer stages is taken over a faster one predicted within this share: each stage adds a hop, its
# messages and a link whose stride is the product of two replica counts, which the model under-prices (the uneven
# caps of docs/results/pool: a hybrid predicted 1% faster than full replication ran 16% slower)
SIMPLER_WITHIN = 0.05


def best_pool(inputs: CostInputs, in_flight: int = 0, delta: bool = True) -> Candidate:
    """The best pool plan of any shape; one with fewer stages wins when its period is within SIMPLER_WITHIN of the
    fastest."""
    cands = list(best_by_shape(inputs, in_flight, delta).values())
    fastest = min(c.period for c in cands)
    near = [c for c in cands if c.period <= fastest * (1.0 + SIMPLER_WITHIN)]
    return min(near, key=lambda c: (len(c.plan.cuts), c.period))


def full_replication(inputs: CostInputs) -> Plan:
    """The whole model on every worker."""
    return Plan((0, inputs.n_segments), (tuple(range(inputs.n_workers)),))


__all__ = ["Candidate", "PoolCosts", "SHAPES", "SIMPLER_WITHIN", "STRIDE_EXPONENT", "best_by_shape", "best_cuts",
           "best_pool", "candidate_groups", "full_replication", "link_strides", "pool_costs", "pool_period",
           "shape_of", "stride_bytes"]
