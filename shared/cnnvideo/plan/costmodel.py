"""Pipeline cost model: per-stage costs of a plan and the pipelined timing recurrence (pure functions).

A frame passes 2 stages per worker w: the transfer into w (hop w carries the tensor at cut c_w),
then the work on w: decode the update at cut c_w, compute segments c_w .. c_{w+1}-1, encode the update
at cut c_{w+1} (codec times are optional inputs; without them the stage is the compute alone). The last
worker also sends the model output to the master; that result transfer is charged to its work stage
(it occupies the same worker). A work stage also pays the CPU of the gRPC messages its worker handles per frame
(CostInputs.message_time x message_count: the Process call in, the one out or the result, the stage report).
Timing: done[f][s] = max(done[f-1][s], done[f][s-1]) + cost[f][s], and with an in-flight cap m > 0
frame f cannot start before frame f-m has finished its last stage plus the master's turnaround t (from a
result to sending the frame it frees room for: reading the source, bookkeeping).

Objective (used by the `optimal` scheduler, `per_frame_time(frames=0)` and the tests): the
steady-state period of that recurrence with constant per-frame costs, which is exactly the max
cycle mean of its event graph: T = max(max_s cost[s], (sum_s cost[s] + t) / m) (m = 0: max_s cost[s]).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan.plan import Plan

log = logging.getLogger(__name__)


# Growth of a hop's delta bytes with the stride between the frames a receiver sees (a pool's replica sees every Rth
# frame): vtest at 480x720, input hop, lossless: 172, 220, 251 and 273 kB a frame at strides 1, 2, 3 and 4, i.e. 1,
# 1.28, 1.46 and 1.59x; stride ** (1/3) gives 1, 1.26, 1.44 and 1.59x. A thresholded input hop grows faster
# (CostInputs.input_stride_exponent).
STRIDE_EXPONENT = 1.0 / 3.0


@dataclass
class CostInputs:
    """Plain data the cost model needs: sizes per cut, compute per segment per worker, bandwidths."""

    bytes_full: np.ndarray  # [K+1] bytes of a full (keyframe) transfer of the tensor at each cut
    bytes_delta: np.ndarray  # [K+1] predicted bytes of a delta transfer at each cut
    seg_time: np.ndarray  # [W, K] seconds of segment k on worker w
    bandwidth: np.ndarray  # [W] bytes/s of hop w (into worker w; hop 0 = master -> w0)
    result_bandwidth: Optional[float] = None  # bytes/s of the last worker -> master hop (None: bandwidth[-1])
    result_bytes: Optional[float] = None  # bytes of the result message (None: bytes_full[-1])
    encode_time: Optional[np.ndarray] = None  # [W, K+1] seconds worker w spends encoding the update at cut i
    decode_time: Optional[np.ndarray] = None  # [W, K+1] seconds worker w spends decoding the update at cut i
    # [W, 2] CFS (quota, period) seconds of capped workers whose work starts idle (fresh quota): their stages take
    # burst_wall() of the fluid time instead (None or quota 0 = the fluid time)
    burst: Optional[np.ndarray] = None
    # seconds from a result reaching the master to its sending the frame that result makes room for (with an
    # in-flight cap): frame f starts no earlier than frame f-m's result plus this
    turnaround: float = 0.0
    # [W] fluid seconds (CPU / share) worker w's work stage pays per gRPC message it handles, apart from the bytes
    # (message_count() of them a frame, inside the work stage's burst); None = nothing
    message_time: Optional[np.ndarray] = None
    # share of frames whose input does not change (an empty input delta): every stage skips them
    # (delta.skip_unchanged), so a stage's expected compute per frame is (1 - p_unchanged) x its compute
    p_unchanged: float = 0.0
    # the master's own seconds (CPU) per frame: it reads, encodes and sends every frame and decodes every result, so
    # no plan runs faster than this (cnnvideo.plan.pool counts it as a stage; 0 = not known)
    master_time: float = 0.0
    # how the input hop's delta bytes grow with the stride a replica sees them at (cnnvideo.plan.pool.stride_bytes):
    # stride ** this; a thresholded input hop grows faster than a lossless one (costinputs.input_stride_exponent)
    input_stride_exponent: float = STRIDE_EXPONENT

    def __post_init__(self) -> None:
        self.bytes_full = np.asarray(self.bytes_full, dtype=np.float64)
        self.bytes_delta = np.asarray(self.bytes_delta, dtype=np.float64)
        self.seg_time = np.atleast_2d(np.asarray(self.seg_time, dtype=np.float64))
        self.bandwidth = np.asarray(self.bandwidth, dtype=np.float64).reshape(-1)
        k = self.seg_time.shape[1]
        if self.bytes_full.shape != (k + 1,) or self.bytes_delta.shape != (k + 1,):
            raise ValueError("bytes per cut must have K+1 = %d entries" % (k + 1))
        if self.bandwidth.shape != (self.seg_time.shape[0],):
            raise ValueError("bandwidth must have one entry per worker (%d)" % self.seg_time.shape[0])
        if np.any(self.bandwidth <= 0):
            raise ValueError("bandwidth must be positive")
        if not 0.0 <= self.p_unchanged <= 1.0:
            raise ValueError("p_unchanged must be in [0, 1], got %r" % (self.p_unchanged,))
        if self.burst is not None:
            self.burst = np.broadcast_to(np.asarray(self.burst, dtype=np.float64), (self.seg_time.shape[0], 2)).copy()
        if self.message_time is not None:
            self.message_time = np.broadcast_to(np.asarray(self.message_time, dtype=np.float64),
                                                (self.seg_time.shape[0],)).copy()
        for name in ("encode_time", "decode_time"):
            value = getattr(self, name)
            if value is not None:
                value = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.seg_time.shape[0], k + 1)).copy()
                setattr(self, name, value)

    @property
    def n_workers(self) -> int:
        """W."""
        return int(self.seg_time.shape[0])

    @property
    def n_segments(self) -> int:
        """K."""
        return int(self.seg_time.shape[1])

    def hop_bytes(self, delta: bool = True) -> np.ndarray:
        """Steady-state bytes per cut: delta bytes in delta mode, full bytes in full mode."""
        return self.bytes_delta if delta else self.bytes_full

    def prefix_time(self) -> np.ndarray:
        """[W, K+1] cumulative expected compute time per frame: segments c_i..c_j-1 on w cost P[w, j] - P[w, i]
        (seg_time x (1 - p_unchanged): unchanged frames skip the compute)."""
        out = np.zeros((self.n_workers, self.n_segments + 1))
        np.cumsum(expected_compute(self.seg_time, self.p_unchanged), axis=1, out=out[:, 1:])
        return out

    def work_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """(begin [W, K+1], end [W, K+1]): worker w's work stage for cuts i..j costs end[w, j] - begin[w, i]
        (compute prefix sums, minus the decode at i and the messages a worker starting at i handles, plus the
        encode at j). Fluid seconds: work_wall() turns them into a stage's time, so the messages sit inside a
        CFS burst."""
        prefix = self.prefix_time()
        begin = prefix if self.decode_time is None else prefix - self.decode_time
        end = prefix if self.encode_time is None else prefix + self.encode_time
        if self.message_time is not None:
            begin = begin - self.message_time[:, None] * message_count(self.n_segments)[None, :]
        return begin, end

    def work_wall(self, fluid: np.ndarray, workers) -> np.ndarray:
        """Work-stage seconds from fluid ones (time = CPU / share); `workers` broadcasts to fluid's shape and
        says whose stage each entry is. With `burst`, a capped worker's stage is burst_wall() of it."""
        if self.burst is None:
            return fluid
        w = np.broadcast_to(np.asarray(workers), np.shape(fluid))
        return burst_wall(fluid, self.burst[w, 0], self.burst[w, 1])

    def result_time(self) -> float:
        """Seconds to send the model output from the last worker to the master."""
        bw = self.result_bandwidth if self.result_bandwidth is not None else self.bandwidth[-1]
        size = self.result_bytes if self.result_bytes is not None else self.bytes_full[-1]
        return float(size) / float(bw)


def expected_compute(seconds, p_unchanged: float) -> np.ndarray:
    """Expected compute seconds per frame of a stage that takes `seconds` when it computes and is skipped on the
    share `p_unchanged` of frames whose input is unchanged: (1 - p_unchanged) x seconds."""
    p = min(max(float(p_unchanged), 0.0), 1.0)
    return np.asarray(seconds, dtype=np.float64) * (1.0 - p)


def _chain_workers(plan: Plan, inputs: CostInputs) -> np.ndarray:
    """[S] the worker of each stage; ValueError unless the plan has one worker per stage, over K segments (the
    per-frame recurrence follows one route; pool.pool_costs is the steady model of every plan)."""
    if any(len(g) != 1 for g in plan.groups) or plan.cuts[-1] != inputs.n_segments:
        raise ValueError("plan %s is not one worker a stage over %d segments" % (plan, inputs.n_segments))
    rows = np.array([g[0] for g in plan.groups], dtype=int)
    if np.any(rows >= inputs.n_workers):
        raise ValueError("plan %s names a worker beyond the %d workers" % (plan, inputs.n_workers))
    return rows


def compute_costs(plan: Plan, inputs: CostInputs) -> np.ndarray:
    """[S] work seconds per stage: decode + compute + encode (the last one includes the result transfer)."""
    cuts = np.asarray(plan.cuts)
    rows = _chain_workers(plan, inputs)
    begin, end = inputs.work_bounds()
    comp = inputs.work_wall(end[rows, cuts[1:]] - begin[rows, cuts[:-1]], rows)
    comp[-1] += inputs.result_time()
    return comp


def stage_costs(plan: Plan, inputs: CostInputs, delta: bool = True) -> np.ndarray:
    """[2S] steady-state costs, alternating transfer into stage s's worker and work on it (empty stage = 0
    compute)."""
    cuts = np.asarray(plan.cuts)
    rows = _chain_workers(plan, inputs)
    out = np.empty(2 * plan.n_stages)
    out[0::2] = inputs.hop_bytes(delta)[cuts[:-1]] / inputs.bandwidth[rows]
    out[1::2] = compute_costs(plan, inputs)
    return out


def frame_stage_costs(
    plan: Plan,
    inputs: CostInputs,
    frame_bytes: Optional[np.ndarray] = None,
    prev: Optional[Plan] = None,
    delta: bool = True,
) -> np.ndarray:
    """[F, 2S] per-frame costs: frame_bytes [F, K+1] delta bytes per frame; hops whose cut differs from prev
    (or all hops when prev is None) carry a full tensor on the first frame."""
    if frame_bytes is None:
        frame_bytes = inputs.hop_bytes(delta)[None, :]
    frame_bytes = np.atleast_2d(np.asarray(frame_bytes, dtype=np.float64))
    cuts = np.asarray(plan.cuts)
    rows = _chain_workers(plan, inputs)
    hop_bytes = (frame_bytes if delta else np.broadcast_to(inputs.bytes_full, frame_bytes.shape))[:, cuts[:-1]]
    hop_bytes = np.array(hop_bytes)
    hop_bytes[0] = np.where(_new_cuts(plan, prev), inputs.bytes_full[cuts[:-1]], hop_bytes[0])
    out = np.empty((frame_bytes.shape[0], 2 * plan.n_stages))
    out[:, 0::2] = hop_bytes / inputs.bandwidth[rows]
    out[:, 1::2] = compute_costs(plan, inputs)[None, :]
    return out


def _new_cuts(plan: Plan, prev: Optional[Plan]) -> np.ndarray:
    """[S] True where hop s's cut (or worker) is not what its receiver already holds."""
    if prev is None or prev.groups != plan.groups:
        return np.ones(plan.n_stages, dtype=bool)
    return np.asarray(plan.cuts[:-1]) != np.asarray(prev.cuts[:-1])


def best_path(layers: Sequence[np.ndarray], combine=np.add) -> Tuple[float, Optional[Tuple[int, ...]]]:
    """The cheapest cuts 0 = c_0 <= ... <= c_L = K through `layers`, L [K+1, K+1] matrices where layers[l][i, j] is
    the cost of layer l running cuts i..j (inf where not allowed), costs folded along the path by `combine`
    (np.add: the total, np.maximum: the slowest). Returns (cost, cuts), or (inf, None) if no path is finite. The
    dynamic programme both searches share: the chain's stages (schedulers.plans) and a pool's (plan.pool)."""
    n = layers[0].shape[0]
    best = np.full(n, np.inf)
    best[0] = 0.0
    back = []
    for k, cost in enumerate(layers):
        if k == len(layers) - 1:  # the last layer ends at cut K: only that column matters
            total = combine(best, cost[:, -1])
            i = int(np.argmin(total))
            back.append(np.full(n, i))
            best = np.full(n, np.inf)
            best[-1] = total[i]
        else:
            total = combine(best[:, None], cost)
            arg = np.argmin(total, axis=0)
            back.append(arg)
            best = total[arg, np.arange(n)]
    if not np.isfinite(best[-1]):
        return float("inf"), None
    cuts = [n - 1]
    for k in range(len(layers) - 1, -1, -1):
        cuts.append(int(back[k][cuts[-1]]))
    return float(best[-1]), tuple(reversed(cuts))


def simulate(
    costs: np.ndarray,
    in_flight: int = 0,
    ready: Optional[np.ndarray] = None,
    start: Optional[np.ndarray] = None,
    turnaround: float = 0.0,
) -> np.ndarray:
    """done[..., F, S] of the pipeline recurrence for costs[..., F, S] (leading axes = independent batches).

    ready[..., S]: time each stage becomes free (default 0); start[..., F]: earliest start of each frame
    (default 0; callers fold in finish times of frames before this batch); in_flight m > 0: frame f starts
    no earlier than done[f-m][S-1] + turnaround.
    Uses done[f][s] = cs[s] + max(start_f, max_{k<=s} done[f-1][k] - cs[k-1]).
    """
    costs = np.asarray(costs, dtype=np.float64)
    n_frames, n_stages = costs.shape[-2], costs.shape[-1]
    batch = costs.shape[:-2]
    prev = np.zeros(batch + (n_stages,)) if ready is None else np.broadcast_to(ready, batch + (n_stages,)).copy()
    begin = np.zeros(batch + (n_frames,)) if start is None else np.broadcast_to(start, batch + (n_frames,))
    done = np.empty(costs.shape)
    cs = np.cumsum(costs, axis=-1)
    for f in range(n_frames):
        s0 = begin[..., f]
        if in_flight > 0 and f >= in_flight:
            s0 = np.maximum(s0, done[..., f - in_flight, -1] + turnaround)
        c = cs[..., f, :]
        shifted = np.concatenate([np.zeros(batch + (1,)), c[..., :-1]], axis=-1)
        acc = np.maximum.accumulate(prev - shifted, axis=-1)
        prev = c + np.maximum(acc, s0[..., None])
        done[..., f, :] = prev
    return done


def steady_period(costs: np.ndarray, in_flight: int = 0, turnaround: float = 0.0) -> np.ndarray:
    """Steady-state seconds per frame for constant stage costs [..., S]: max(max c, (sum c + turnaround) / m)."""
    costs = np.asarray(costs, dtype=np.float64)
    period = costs.max(axis=-1)
    if in_flight > 0:
        period = np.maximum(period, (costs.sum(axis=-1) + turnaround) / in_flight)
    return period


def per_frame_time(plan: Plan, inputs: CostInputs, in_flight: int = 0, frames: int = 0, delta: bool = True) -> float:
    """Seconds per frame: frames=0 the exact steady-state period (the scheduling objective);
    frames>0 the simulated makespan of that many frames from an empty pipeline divided by frames."""
    costs = stage_costs(plan, inputs, delta)
    if frames <= 0:
        return float(steady_period(costs, in_flight, inputs.turnaround))
    done = simulate(np.broadcast_to(costs, (frames, costs.size)), in_flight, turnaround=inputs.turnaround)
    return float(done[-1, -1] / frames)


def latency(plan: Plan, inputs: CostInputs, delta: bool = True) -> float:
    """Seconds one frame spends in an otherwise empty pipeline (sum of its stage costs)."""
    return float(stage_costs(plan, inputs, delta).sum())


# Relative spread of a stage's CPU time from frame to frame (uniform, +-): ONNX Runtime MobileNetV2 at cpus 0.4
# timed 0.172-0.209 s (fluid) over eight rescales in one container. A CFS burst's wall time jumps by period - quota
# where the CPU crosses a multiple of the quota, so a point estimate flips between two values on a 1% change of
# the profile (the same plan was predicted at 0.106-0.12 s and at 0.159-0.175 s of work); the expectation over
# this spread is smooth.
BURST_CPU_SPREAD = 0.1


def cfs_capped(quota, period) -> np.ndarray:
    """Where a CFS (quota, period) limits a worker at all: 0 < quota < period (0 = no cap, quota >= period: a whole
    core or more, never throttled by one thread)."""
    quota, period = np.asarray(quota, dtype=np.float64), np.asarray(period, dtype=np.float64)
    return (quota > 0) & (quota < period)


def burst_wall(fluid, quota, period, phases: int = 16, spread: float = BURST_CPU_SPREAD, samples: int = 8
               ) -> np.ndarray:
    """Expected wall seconds of a burst of work that takes `fluid` seconds at a steady CPU share quota/period,
    when it starts with a fresh CFS quota at a uniformly random point of the period (the worker was idle), and
    its CPU time varies uniformly within +-`spread` of its mean (`samples` points).
    CPU c = fluid x share runs unthrottled until the quota or the period ends; after each period boundary it
    runs `quota` and waits the rest, and the last slice does not wait. quota <= 0 or >= period: fluid."""
    fluid = np.asarray(fluid, dtype=np.float64)
    quota = np.broadcast_to(np.asarray(quota, dtype=np.float64), fluid.shape)
    period = np.broadcast_to(np.asarray(period, dtype=np.float64), fluid.shape)
    capped = cfs_capped(quota, period) & np.isfinite(fluid)
    q = np.where(capped, quota, 1.0)[..., None]
    p = np.where(capped, period, 1.0)[..., None]
    cpu_mean = np.where(capped, fluid, 0.0)[..., None] * q / p
    r = p * (np.arange(phases) + 0.5) / phases  # time to the next boundary
    first = np.minimum(q, r)
    n = max(int(samples), 1) if spread > 0 else 1  # one sample is the mean itself
    wall = np.zeros(fluid.shape)
    for m in 1.0 + spread * ((np.arange(n) + 0.5) / n * 2.0 - 1.0):
        cpu = cpu_mean * m
        rem = np.maximum(cpu - first, 0.0)
        k = np.maximum(np.ceil(rem / q) - 1.0, 0.0)
        wall += np.where(cpu <= first, cpu, r + k * p + rem - k * q).mean(axis=-1)
    return np.where(capped, wall / n, fluid)


# gRPC messages a worker that gets the frame handles per frame: it serves the Process call that brings the frame
# in, makes the Process call to the next worker or pushes the result on the master's Results stream, and pushes a
# StageReport on the Stages stream (services/worker/runloop.py `_process`, role.py `_emit`, servicer.py `_stream`)
MESSAGES_PER_FRAME = 3


def message_count(n_segments: int) -> np.ndarray:
    """[K+1] messages per frame of a worker whose range starts at cut i: MESSAGES_PER_FRAME for i < K (it gets the
    frame: it computes, or forwards to a later worker that does); 0 at i = K, where it lies past the reporter
    (protocol.reporter, the last worker with segments) and no message reaches it."""
    count = np.full(n_segments + 1, float(MESSAGES_PER_FRAME))
    count[-1] = 0.0
    return count


def with_network_cpu(inputs: CostInputs, seconds_per_byte: Sequence[float], delta: bool = True) -> CostInputs:
    """CostInputs whose work stages also pay each worker's network CPU: seconds_per_byte[w] times the steady
    bytes of the hop it receives (added to its decode at that cut) and of the hop it sends (added to its
    encode). The CPU the TCP path and gRPC take is the worker's own; under a CPU cap it slows compute too."""
    per_byte = np.asarray(seconds_per_byte, dtype=np.float64).reshape(-1, 1)
    hop = inputs.hop_bytes(delta)[None, :] * per_byte
    enc = hop if inputs.encode_time is None else inputs.encode_time + hop
    dec = hop if inputs.decode_time is None else inputs.decode_time + hop
    return dataclasses.replace(inputs, encode_time=enc, decode_time=dec)


def random_inputs(n_workers: int, n_cuts: int, seed: int = 0, codec: bool = False) -> CostInputs:
    """Random but plausible CostInputs (K = n_cuts - 1 segments) for tests and benches; codec=True adds
    encode/decode seconds per cut (a few % of a segment, larger for bigger tensors)."""
    rng = np.random.RandomState(seed)
    k = n_cuts - 1
    base = rng.gamma(2.0, 0.01, size=k)
    speed = rng.uniform(0.5, 2.0, size=(n_workers, 1))
    noise = rng.uniform(0.8, 1.25, size=(n_workers, k))
    full = np.concatenate([[3e5], rng.uniform(1e4, 2e6, size=k - 1), [4e3]])
    delta = full * rng.uniform(0.05, 0.6, size=k + 1)
    extra = {}
    if codec:
        per_byte = rng.uniform(2e-9, 2e-8, size=(n_workers, 1))
        extra = {"encode_time": per_byte * full[None, :], "decode_time": 0.5 * per_byte * full[None, :]}
    return CostInputs(
        bytes_full=full,
        bytes_delta=delta,
        seg_time=base[None, :] * speed * noise,
        bandwidth=rng.uniform(1e6, 8e6, size=n_workers),
        **extra,
    )
