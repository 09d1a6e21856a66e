"""What a worker costs, measured where it runs: compute per segment and hop codec time per cut.

Timed by the process's CPU clock, then scaled by the wall/CPU ratio of whole passes. Under a CFS cap
(`cpus: 0.2`) a short segment's wall time is either its CPU time or that plus a whole throttle wait,
so per-segment wall times are noise; CPU times are not, and the ratio over whole passes (~1/cap, plus
any contention) turns them back into the wall seconds the pipeline sees.

The codec part times what a worker does around its compute for every frame: decode the hop update that
came in and encode the one it sends on, at each cut, for a realistic update (the tensors of a random
frame and of the same frame with one block changed, so the change spreads through the layers as motion
does).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import numpy as np

from cnnvideo.wire.hop import HopReceiver, HopSender
from cnnvideo.wire.protocol import HopSettings

log = logging.getLogger(__name__)

CHANGED_SHARE = 0.1  # share of the frame's area redrawn for the codec profile's second frame


@dataclass
class WorkerProfile:
    """Seconds (wall, under this process's CPU share) per segment [K], and per cut [K+1] to encode / decode
    one delta update; wall_per_cpu is the measured wall/CPU ratio used to scale CPU times; reference is what
    `rescale` times again and compares with: the wall seconds of one torch fp32 pass when profiled (0: the sum of
    `seconds`, right only for a torch fp32 profile), or, when `reference_bounds` holds cut bounds (a profile on
    another engine or int8), the summed wall seconds of those engine stages run one after another."""

    seconds: np.ndarray
    encode: np.ndarray
    decode: np.ndarray
    wall_per_cpu: float
    reference: float = 0.0
    reference_bounds: Tuple[int, ...] = ()

    def to_arrays(self) -> dict:
        """Plain float arrays (np.savez without pickle)."""
        return {"seconds": self.seconds, "encode": self.encode, "decode": self.decode,
                "wall_per_cpu": np.array([self.wall_per_cpu]), "reference": np.array([self.reference]),
                "reference_bounds": np.array(self.reference_bounds, dtype=np.int64)}

    def scaled(self, factor: float, reference: float) -> "WorkerProfile":
        """Every time scaled by factor, with the reference measured now."""
        return WorkerProfile(seconds=self.seconds * factor, encode=self.encode * factor, decode=self.decode * factor,
                             wall_per_cpu=self.wall_per_cpu * factor, reference=reference,
                             reference_bounds=self.reference_bounds)

    @classmethod
    def from_arrays(cls, d, k: int) -> "WorkerProfile":
        """Inverse of to_arrays; ValueError unless the shapes fit K segments and every value is finite (a cache
        written before `reference` existed is malformed: the worker profiles again)."""
        try:
            out = cls(np.asarray(d["seconds"], dtype=np.float64), np.asarray(d["encode"], dtype=np.float64),
                      np.asarray(d["decode"], dtype=np.float64), float(np.asarray(d["wall_per_cpu"]).reshape(-1)[0]),
                      float(np.asarray(d["reference"]).reshape(-1)[0]),
                      tuple(int(b) for b in np.asarray(d["reference_bounds"]).reshape(-1)))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError("malformed worker profile: %s" % exc) from None
        shapes = (out.seconds.shape, out.encode.shape, out.decode.shape)
        if shapes != ((k,), (k + 1,), (k + 1,)):
            raise ValueError("worker profile shapes %s do not fit %d segments" % (shapes, k))
        bounds = out.reference_bounds
        if bounds and (bounds[0] != 0 or bounds[-1] != k or any(a >= b for a, b in zip(bounds, bounds[1:]))):
            raise ValueError("worker profile reference bounds %s do not cover %d segments in order" % (bounds, k))
        if not all(np.all(np.isfinite(a)) for a in (out.seconds, out.encode, out.decode, [out.reference])):
            raise ValueError("worker profile has non-finite values")
        return out


def device_tag(cpuinfo: str = "/proc/cpuinfo") -> str:
    """What kind of device this process profiles on: the CPU model (x86 `model name`, or a Pi's board `Model` and
    its core's `CPU part`), the architecture and the cores it may use. Workers with the same tag and CPU cap are the
    same device for the cost model (costinputs.pool_alike); '' when the CPU model cannot be read."""
    import platform

    fields = {}
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        return ""
    model = fields.get("model name") or fields.get("model") or ""
    part = fields.get("cpu part", "")
    if not model and not part:
        return ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
    return "%s%s/%s/%d cores" % (model, " part %s" % part if part else "", platform.machine(), cores)


def _segment_modules(graph) -> list:
    return [graph.stage_module(k, k + 1) for k in range(graph.num_segments)]


def _random_frame(graph, seed: int = 0) -> np.ndarray:
    rng = np.random.RandomState(seed)
    return rng.randint(0, 256, size=graph.cuts[0].shape).astype(np.uint8)


def _changed_frame(frame: np.ndarray, seed: int = 1) -> np.ndarray:
    """The frame with one block (CHANGED_SHARE of the area) redrawn."""
    out = frame.copy()
    h, w = out.shape[-3], out.shape[-2]
    bh, bw = max(int(h * CHANGED_SHARE ** 0.5), 1), max(int(w * CHANGED_SHARE ** 0.5), 1)
    rng = np.random.RandomState(seed)
    out[..., h // 3:h // 3 + bh, w // 3:w // 3 + bw, :] = rng.randint(0, 256, size=out[..., :bh, :bw, :].shape)
    return out


def _pass(modules, frame) -> Tuple[np.ndarray, float, float, List[np.ndarray]]:
    """One pass segment by segment: CPU seconds per segment, wall and CPU of the pass, the cut tensors."""
    import torch

    cpu = np.zeros(len(modules))
    x = torch.from_numpy(frame)
    tensors = [frame]
    w0, c0 = time.perf_counter(), time.process_time()
    for k, module in enumerate(modules):
        c = time.process_time()
        x = module(x)
        cpu[k] = time.process_time() - c
        tensors.append(x)
    wall, total = time.perf_counter() - w0, time.process_time() - c0
    return cpu, wall, total, tensors


def profile_compute(graph, iters: int = 3) -> Tuple[np.ndarray, float, List[np.ndarray]]:
    """(seconds per segment [K], wall/CPU ratio, cut tensors of the random frame) after one warm-up pass."""
    import torch

    if iters < 1:
        raise ValueError("iters must be >= 1, got %r" % (iters,))
    modules = _segment_modules(graph)
    frame = _random_frame(graph)
    with torch.no_grad():
        _pass(modules, frame)
        runs = [_pass(modules, frame) for _ in range(iters)]
    cpu = np.median(np.stack([r[0] for r in runs]), axis=0)
    wall = sum(r[1] for r in runs)
    total = sum(r[2] for r in runs)
    ratio = wall / total if total > 0 else 1.0
    tensors = [t if isinstance(t, np.ndarray) else t.numpy() for t in runs[-1][3]]
    log.debug("profiled %d segments: %.4f s CPU per pass, wall/CPU %.2f", len(modules), float(cpu.sum()), ratio)
    return cpu * ratio, ratio, tensors


def profile_segments(graph, iters: int = 3) -> np.ndarray:
    """Seconds per segment (length K) under this process's CPU share: profile_compute's times alone."""
    return profile_compute(graph, iters)[0]


def rescale(prof: WorkerProfile, graph, passes: int = 3, stages=None) -> Tuple[WorkerProfile, float]:
    """(prof scaled to this machine's speed now, the factor): the profile's reference pass timed again, against
    the time it had when profiled. Much cheaper than a new profile; tracks a host that got slower or faster since
    the profile was cached, including CPU taken from this container's cap by anything else in it.

    A profile on another engine or int8 (`reference_bounds` set) with its `stages` is rescaled by its own engine
    stages, timed as when profiled (`rescale_engine`): a torch pass's factor was applied to ONNX Runtime stages
    7-27x faster than torch in the compose runs, and under a CFS cap the two slow down differently. Otherwise
    it is `passes` back-to-back whole torch passes of the random frame (after a warm-up) against the torch pass
    the profile was taken with (its `reference`; for an old torch profile the sum of its seconds). (Timing by
    CPU clock instead was steadier but, in the 480x720 runs, further from the stage times measured afterwards:
    17% vs 9% mean error.)"""
    import torch

    if prof.reference_bounds and stages is not None:
        return rescale_engine(prof, stages, graph, passes)
    modules = _segment_modules(graph)
    frame = _random_frame(graph)
    with torch.no_grad():
        _pass(modules, frame)
        runs = [_pass(modules, frame) for _ in range(max(int(passes), 1))]
    now = sum(r[1] for r in runs) / len(runs)
    cpu = sum(r[2] for r in runs) / len(runs)
    total = rescale_reference(prof)
    factor = now / total if total > 0 and now > 0 else 1.0
    log.info("profile rescaled by %.3f (whole torch pass %.3f s now, %.3f s profiled; wall/CPU %.2f)", factor, now,
             total, now / cpu if cpu > 0 else float("nan"))
    return prof.scaled(factor, now), factor


def rescale_engine(prof: WorkerProfile, stages, graph, iters: int = 3) -> Tuple[WorkerProfile, float]:
    """(prof scaled, the factor) by the engine stages of its `reference_bounds`, run one after another on the
    random frame (each stage's output is the next one's input, so no torch pass is needed) and timed by
    `_engine_time` as when profiled, against its `reference`."""
    bounds = prof.reference_bounds
    now = 0.0
    x = _random_frame(graph)
    for a, b in zip(bounds, bounds[1:]):
        st = stages.stage(a, b)
        now += _engine_time(st.run, x, iters)
        x = st.run(x)
    factor = now / prof.reference if prof.reference > 0 and now > 0 else 1.0
    log.info("profile rescaled by %.3f (%d %s-%s stages %.4f s now, %.4f s profiled)", factor, len(bounds) - 1,
             stages.spec.engine, stages.precision, now, prof.reference)
    return prof.scaled(factor, now), factor


def rescale_reference(prof: WorkerProfile) -> float:
    """Wall seconds of the torch fp32 pass a profile was taken with: its `reference`, else the sum of its
    segment seconds (a torch fp32 profile made before `reference` existed)."""
    return float(prof.reference) if prof.reference > 0 else float(prof.seconds.sum())


def profile_codec(graph, tensors: List[np.ndarray], ratio: float,
                  sender_for: Callable[[int], object], max_bytes: int, iters: int = 2,
                  convert: Optional[Callable[[List[np.ndarray]], List[np.ndarray]]] = None
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """(encode, decode) seconds per cut [K+1] of one delta update, from the CPU clock times ratio; `convert` maps
    the cut tensors to what travels (int8: uint8 values)."""
    import torch

    modules = _segment_modules(graph)
    with torch.no_grad():
        second = _pass(modules, _changed_frame(tensors[0]))[3]
    second = [t if isinstance(t, np.ndarray) else t.numpy() for t in second]
    if convert is not None:
        tensors, second = convert(tensors), convert(second)
    enc = np.zeros(len(tensors))
    dec = np.zeros(len(tensors))
    for k, (a, b) in enumerate(zip(tensors, second)):
        e, d = [], []
        for _ in range(max(int(iters), 1)):
            sender, receiver = sender_for(k), HopReceiver(max_bytes)
            receiver.decode(sender.encode(np.ascontiguousarray(a), keyframe=True))
            c = time.process_time()
            buf = sender.encode(np.ascontiguousarray(b))
            e.append(time.process_time() - c)
            c = time.process_time()
            receiver.decode(buf)
            d.append(time.process_time() - c)
        enc[k], dec[k] = min(e), min(d)
    return enc * ratio, dec * ratio


def senders_for(delta_options) -> Callable[[int], object]:
    """sender_for(cut) building the HopSender a worker uses at that cut, from a config's `delta` options
    (protocol.HopSettings.sender: the uint8 frame at cut 0 takes the pixel threshold, later cuts the float
    threshold and fp16)."""
    return HopSettings.from_delta(delta_options).sender


ENGINE_CHUNKS = 4  # stages timed on a non-torch engine to scale the per-segment torch profile (no node profile)


def engine_chunks(seconds: np.ndarray, n: int = ENGINE_CHUNKS) -> List[Tuple[int, int]]:
    """Up to n consecutive (start, end) cut ranges covering all segments, of about equal compute."""
    k = len(seconds)
    cum = np.cumsum(seconds)
    total = cum[-1] if k and cum[-1] > 0 else 1.0
    bounds = sorted({0, k} | {int(np.clip(np.searchsorted(cum, total * i / n) + 1, 1, k)) for i in range(1, n)})
    return list(zip(bounds, bounds[1:]))


ENGINE_MIN_WALL_S = 1.0  # an engine stage is timed back to back for at least this long (10 CFS periods)


def _engine_time(fn, x, iters: int, min_wall: float = ENGINE_MIN_WALL_S, max_runs: int = 100) -> float:
    """Wall seconds of fn(x) under this process's CPU share: median CPU time times the wall/CPU ratio of runs
    back to back for at least `iters` runs and `min_wall` seconds (up to `max_runs`). Under a CFS cap a short run
    either fits in one quota slice (wall = CPU) or waits out a throttle (wall several times CPU): three runs of
    an ONNX Runtime stage (~20 ms) gave ratios anywhere in between; over ten periods the ratio is the cap's."""
    fn(x)  # warm-up (and, on ORT, the first-run allocations)
    cpu, walls = [], 0.0
    while len(cpu) < max(int(iters), 1) or (walls < min_wall and len(cpu) < max_runs):
        w, c = time.perf_counter(), time.process_time()
        fn(x)
        cpu.append(time.process_time() - c)
        walls += time.perf_counter() - w
    total = sum(cpu)
    return float(np.median(cpu)) * (walls / total if total > 0 else 1.0)


# per-node profiles are medians of at least this many runs: with profile_iters 1 a single profiled run put one
# stall (58% of MobileNetV2's time) into one segment, a different one on each worker, and `adaptive` then saw no
# better plan than a badly unbalanced one
NODE_PROFILE_RUNS = 5


def engine_scale(stages, seconds: np.ndarray, tensors: List[np.ndarray], iters: int = 3
                 ) -> Tuple[np.ndarray, Tuple[int, ...], float]:
    """(engine seconds per segment, the stage bounds timed, their summed seconds) on the worker's engine
    (`engines.StageFactory`). The whole model runs as one engine stage, timed back to back (`_engine_time`), and
    that time is split over its segments by ORT's own per-node profile of the same stage (`OrtStage.
    segment_seconds`): an int8 stage's segments do not slow down in torch's proportions (its first convolution and
    classifier stay fp32, the rest runs u8 kernels). Where the stage gives no per-node times (it fell back to
    torch), the older way applies: ENGINE_CHUNKS stages, each segment scaled by its
    range's engine/torch ratio. Int8 stages are fed the quantised tensor. The bounds and sum are what
    `rescale_engine` times again."""
    k = len(seconds)
    st = stages.stage(0, k)
    x = tensors[0] if st.q_in is None else st.q_in.quantize(tensors[0])
    own = st.segment_seconds(x, max(int(iters), NODE_PROFILE_RUNS)) if hasattr(st, "segment_seconds") else None
    if own is not None:
        got = _engine_time(st.run, x, iters)
        out = got * own / own.sum()
        log.info("stage 0..%d on %s-%s: %.4f s (%.4f s in ORT's nodes) vs %.4f s torch fp32; per segment from ORT's "
                 "node profile", k, st.engine, st.precision, got, float(own.sum()), float(seconds.sum()))
        return out, (0, k), got
    factor = np.ones(k)
    chunks = engine_chunks(seconds)
    total = 0.0
    for a, b in chunks:
        st = stages.stage(a, b)
        x = tensors[a] if st.q_in is None else st.q_in.quantize(tensors[a])
        ref = float(seconds[a:b].sum())
        got = _engine_time(st.run, x, iters)
        total += got
        if st.engine == "torch" and st.precision == "fp32" and st.q_in is None and st.q_out is None:
            continue  # a torch fallback stage: timed for the reference, its segments keep their torch profile
        if ref > 0:
            factor[a:b] = got / ref
        log.info("stage %d..%d on %s-%s: %.4f s vs %.4f s torch fp32 (x%.2f)", a, b, st.engine, st.precision,
                 got, ref, ref / got if got > 0 else float("nan"))
    return seconds * factor, tuple(int(c) for c in [chunks[0][0]] + [b for _, b in chunks]), total


def _quantised(tensors: List[np.ndarray], stages) -> List[np.ndarray]:
    """The cut tensors as an int8 worker sends them (uint8 at inner cuts)."""
    out = []
    for k, t in enumerate(tensors):
        qp = stages.qparams(k) if stages is not None else None
        out.append(qp.quantize(t) if qp is not None else t)
    return out


def profile_worker(graph, iters: int = 3, sender_for: Optional[Callable[[int], object]] = None,
                   max_bytes: int = 1 << 30, stages=None) -> WorkerProfile:
    """Compute and codec profile of this process (see the module docstring); with `stages` (a StageFactory on
    another engine or int8) the segment times are scaled to that engine and the codec is timed on the tensors
    it sends."""
    seconds, ratio, tensors = profile_compute(graph, iters)
    reference = float(seconds.sum())  # the torch fp32 pass, before any engine scaling (what rescale compares)
    bounds: Tuple[int, ...] = ()
    if stages is not None and (stages.spec.engine != "torch" or stages.precision != "fp32"):
        seconds, bounds, reference = engine_scale(stages, seconds, tensors, iters)
    if sender_for is None:
        def sender_for(k: int) -> object:
            return HopSender()
    enc, dec = profile_codec(graph, tensors, ratio, sender_for, max_bytes,
                             convert=(lambda ts: _quantised(ts, stages)) if stages is not None else None)
    return WorkerProfile(seconds=seconds, encode=enc, decode=dec, wall_per_cpu=float(ratio), reference=reference,
                         reference_bounds=bounds)


def fastest_profile(profiles) -> WorkerProfile:
    """One profile from several engines' (label -> WorkerProfile, torch first) for the planner under `engine:
    auto`: each segment at its fastest engine's seconds (a lower bound of the stage the worker then runs on one
    engine, equal where one engine wins all of a stage's segments), the codec of the first (the same tensors
    travel whichever engine computes), rescaled by torch passes like a torch profile (no engine bounds)."""
    items = list(profiles.values())
    if not items:
        raise ValueError("fastest_profile needs at least one profile")
    first = items[0]
    seconds = np.min(np.stack([p.seconds for p in items]), axis=0)
    return WorkerProfile(seconds=seconds, encode=first.encode, decode=first.decode, wall_per_cpu=first.wall_per_cpu,
                         reference=rescale_reference(first), reference_bounds=())
