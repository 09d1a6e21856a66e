"""Per-segment compute of an ONNX Runtime stage, from ORT's own per-node profile (not torch's shares).

Exported stages name every node and tensor under the segment it came from (`/s<k>/...`, see
`ort_engine.export_stage`), and those names survive quantisation and ORT's graph rewrites: a rewritten node
takes the name of one of its original nodes or of an original tensor (`/s3/.../Clip_output_0_nchwc`). A fused
node is named after the last node it swallowed (Conv+BatchNorm+ReLU6 after the ReLU6's segment), so its time goes
to the latest segment at or before that name that holds an original node of the fused node's main operator (the
Conv). Nodes ORT adds with no such name (layout reorders) go with the node run just before them.

ORT's node times are wall times. Under a CFS cap (a Pi stand-in at cpus 0.1) each run of a 30 ms stage is throttled
two or three times for up to 90 ms, and each stall lands inside whichever node was running: one node's median over
5 runs then held most of the model (trained MobileNetV2 int8 at 480x720 under cap 0.1: segments 0..8 got 0.07 of
the time on one worker, 0.46 on another; 0.235 when timed alone), and the planners cut where no cut balances.
So each node counts its fastest run (`fastest_nodes`), and runs start at random points of the CFS period, so that a
stall does not fall on the same node every time.

A pause alone does not move the stalls: it refills the quota, so every run then starts with a full quota and is
throttled first after the same `quota` of CPU, inside the same node (at cap 0.1, MobileNetV2's `/s11` conv stalled in
9 of 10 runs), and that node's fastest run still held a stall. Under a cap each run therefore first burns a random
share of the quota (`run_schedule`), which puts the first stall at a random CPU offset. What stall the fastest runs
still hold shows against the plain run's CPU clock, which a throttle stops: beyond the profiler's own small cost
per event, the kernels' excess over it is taken from the longest nodes, where a stall of tens of ms hides
(`node_profile`). Under a cap each node also gets twice the runs. Before, all of that excess counted as the
profiler's cost and came out of every event alike, which emptied the early segments' many short nodes: cut 9 of
MobileNetV2 read 0.02-0.06 of the model under cap 0.1 against 0.17-0.19 uncapped (issue 43).

A stage extracted from an ONNX-file model (the person detector) carries the model's own node names, not `/s<k>/`
scopes: `SegmentNames` finds their segments from the graph (ORT's kernels keep or extend an original node's or
tensor's name: `..._token_12`, `...:0_nchwc`, `...:0_QuantizeLinear`). Without it that detector's profile fell back to
timing four int8 chunks, each paying its own quantise and dequantise of a 150x150x96 cut: 1.6x the whole stage
(0.010 against 0.0063 s uncapped; at cap 0.1 the profiles said 0.19 s a frame where runs took 0.116 s).
A Loop's or If's own kernel event already holds the time of the nodes run inside it, which ORT lists too: those are
dropped (`kernel_events`). The profiler's own cost per kernel event is taken out before the split
(`without_profiler_cost`).
"""
from __future__ import annotations

import json
import os
import random
import re
import tempfile
import time
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set

import numpy as np

from cnnvideo.cpucap import CFS_PERIOD_S, cfs_quota
from cnnvideo.model.engines.ort_session import session

SEGMENT_SCOPE = "s%d"  # the torch module name each segment is exported under (node names start /s<k>/)
_SEGMENT = re.compile(r"(?:^|/)s(\d+)[/.]")  # a node's scope (/s3/...) or a weight's name (s3.model...)
_OP_PREFIXES = ("QLinear", "Fused", "Nhwc", "Nchwc", "Dynamic", "Q")
_CONTROL_FLOW = ("Loop", "If", "Scan")
_KERNEL = "_kernel_time"
# the most the profiler itself adds to one kernel event (measured 4.7 us on the detector's int8 stage): a larger
# excess of the kernels over the plain run is a CFS stall left in some node, not the profiler's cost
PROFILER_EVENT_US = 10.0
CAPPED_RUNS_FACTOR = 2  # profiled runs under a CFS cap, per run asked for


def base_op(op: str) -> str:
    """The operator an ORT kernel computes, without its fusion or quantisation prefix (QLinearConv, QGemm,
    NhwcMaxPool -> Conv, Gemm, MaxPool; QuantizeLinear stays)."""
    changed = True
    while changed:
        changed = False
        for p in _OP_PREFIXES:
            if op.startswith(p) and op[len(p):len(p) + 1].isupper():
                op, changed = op[len(p):], True
    return op


def segment_of(name: str) -> Optional[int]:
    """The segment a node or tensor name was exported under (`/s<k>/...`, or `s<k>.` for a weight's nodes), None
    if it carries none."""
    found = _SEGMENT.search(name)
    return int(found.group(1)) if found else None


def segment_ops(model) -> Dict[int, Set[str]]:
    """Segment -> base operators of the nodes exported under it (of an onnx ModelProto)."""
    ops: Dict[int, Set[str]] = {}
    for node in model.graph.node:
        k = segment_of(node.name)
        if k is not None:
            ops.setdefault(k, set()).add(base_op(node.op_type))
    return ops


class SegmentNames:
    """Segment of an ORT kernel of a stage cut from an ONNX-file model, by name: `names` maps the model's node and
    tensor names to segments (`OnnxGraph.node_segments`), `ops` each segment's op types. A kernel's name is tried
    whole, then shortened at its last `_` or `:` (never past its last `/`) until a known name is left."""

    def __init__(self, names: Mapping[str, int], ops: Dict[int, Set[str]]) -> None:
        self.names = dict(names)
        self.ops = {k: {base_op(o) for o in v} for k, v in ops.items()}

    def __call__(self, kernel: str) -> Optional[int]:
        name = kernel[:-len(_KERNEL)] if kernel.endswith(_KERNEL) else kernel
        floor = name.rfind("/")
        while name:
            k = self.names.get(name)
            if k is not None:
                return k
            cut = max(name.rfind("_"), name.rfind(":"))
            if cut <= floor:
                return None
            name = name[:cut]
        return None


def attribute(events: Iterable[dict], start: int, end: int, ops: Dict[int, Set[str]],
              locate: Callable[[str], Optional[int]] = segment_of) -> np.ndarray:
    """Microseconds per segment start..end-1 summed over ORT trace events (`Node` events ending `_kernel_time`, in
    the order run); see the module docstring for how each event finds its segment (`locate`: by its `/s<k>/` scope,
    or a `SegmentNames`)."""
    out = np.zeros(end - start)
    last = start
    for e in kernel_events(events):
        k = locate(e["name"])
        if k is None or not start <= k < end:
            k = last
        else:
            op = base_op(str(e.get("args", {}).get("op_name", "")))
            j = k
            while j >= start and op not in ops.get(j, ()):
                j -= 1
            k = j if j >= start else k
        out[k - start] += float(e.get("dur", 0.0))
        last = k
    return out


def kernel_events(events: Iterable[dict]) -> List[dict]:
    """The kernel-time events of one run (`Node` events ending `_kernel_time`), in the order run, without those
    run inside a Loop, If or Scan, nested ones included (the enclosing control-flow node's own event holds their
    time). Each is a copy with `held`: how many kernel events it holds (1 + those run inside it)."""
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith(_KERNEL)]
    nodes.sort(key=lambda e: e.get("ts", 0))
    spans = [(id(e), e.get("ts", 0), e.get("ts", 0) + e.get("dur", 0)) for e in nodes
             if e.get("args", {}).get("op_name") in _CONTROL_FLOW]
    inside = {id(e) for e in nodes if any(a <= e.get("ts", 0) <= b and i != id(e) for i, a, b in spans)}
    held = {i: sum(1 for e in nodes if id(e) in inside and id(e) != i and a <= e.get("ts", 0) <= b)
            for i, a, b in spans}
    return [dict(e, held=1 + held.get(id(e), 0)) for e in nodes if id(e) not in inside]


def without_profiler_cost(events: List[dict], plain_us: float) -> List[dict]:
    """The events with the profiler's own cost taken out of each: the same `o` microseconds per kernel event it
    holds, `o` being what the kernel times sum to beyond `plain_us` (the stage run without the profiler), spread
    evenly over every kernel event. Profiling is not free: the detector's int8 stage took 8.9 ms alone and its
    kernels summed to 11.0 ms (436 events, 4.7 us each), and a share of that per event over-weights segments of
    many small nodes (its NMS Loop holds 215) against those of a few big convolutions: its second stage was
    predicted 1.1 ms (40%) slow at cut 27, and 0.2 ms after. Unchanged when the kernels sum to less."""
    held = np.array([float(e.get("held", 1)) for e in events])
    dur = np.array([float(e.get("dur", 0.0)) for e in events])
    if not len(events) or held.sum() <= 0:
        return list(events)
    o = max(0.0, (dur.sum() - float(plain_us)) / held.sum())
    return [dict(e, dur=max(0.0, d - o * h)) for e, d, h in zip(events, dur, held)]


def without_leftover_stall(events: List[dict], leftover_us: float) -> List[dict]:
    """The events with `leftover_us` taken from the longest ones, down to a common level (water-filling from the
    top): a CFS stall that every run of a node held stays in its fastest run, and a stall lasts up to a period
    less the quota (90 ms at cap 0.1), far longer than an unstalled node. Unchanged when nothing is left over."""
    dur = np.array([float(e.get("dur", 0.0)) for e in events])
    if not len(events) or leftover_us <= 0:
        return list(events)
    leftover_us = min(float(leftover_us), float(dur.sum()))
    top = np.sort(dur)[::-1]
    above = np.cumsum(top) - top * np.arange(1, len(top) + 1)  # taken if cut to each node's level, longest first
    i = int(np.searchsorted(above, leftover_us))  # the first level that takes enough
    n = max(i, 1)
    level = (top[:n].sum() - leftover_us) / n
    return [dict(e, dur=min(d, level)) for e, d in zip(events, dur)]


def run_schedule(runs: int, quota_s: float, period_s: float, seed: int = 0) -> List[tuple]:
    """(pause seconds, CPU seconds to burn) before each profiled run: a random pause of up to a CFS period, and
    under a cap (`quota_s` > 0) a random share of the quota burnt first, so the run's first throttle falls after a
    random amount of its own CPU, not always after one full quota (see the module docstring)."""
    pause, burn = random.Random(seed), random.Random(seed + 1)
    return [(pause.uniform(0.0, period_s), burn.uniform(0.0, quota_s) if quota_s > 0 else 0.0)
            for _ in range(max(int(runs), 1))]


def burn_cpu(seconds: float) -> None:
    """Spin on this thread until it has used `seconds` of CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def node_profile(per_run: List[List[dict]], plain_us: Optional[float]) -> List[dict]:
    """One run's kernel events, each at its fastest over `per_run` (`fastest_nodes`), less what they sum to beyond
    `plain_us` (the stage's fastest run without the profiler, on its thread's CPU clock, which a throttle stops):
    up to PROFILER_EVENT_US per event held is the profiler's own cost and comes out of every event alike
    (`without_profiler_cost`); more is a stall that every run of some node held, taken from the longest nodes
    (`without_leftover_stall`)."""
    best = fastest_nodes(per_run)
    if plain_us is None or not best:
        return best
    held = sum(float(e.get("held", 1)) for e in best)
    total = sum(float(e.get("dur", 0.0)) for e in best)
    best = without_profiler_cost(best, max(float(plain_us), total - PROFILER_EVENT_US * held))
    return without_leftover_stall(best, sum(float(e.get("dur", 0.0)) for e in best) - float(plain_us))


def plain_seconds(run: Callable[[], object], threads: int, runs: int, pause: random.Random) -> float:
    """The fastest of `runs` runs of `run` without the profiler, each after a random pause like the profiled runs:
    its thread's CPU time on one thread (a CFS throttle does not count in it, as it does not in a node's fastest
    run), wall time on more (their work is on other threads)."""

    clock = time.thread_time if int(threads) == 1 else time.perf_counter
    best = float("inf")
    run()
    for _ in range(max(int(runs), 1)):
        time.sleep(pause.uniform(0.0, CFS_PERIOD_S))
        t = clock()
        run()
        best = min(best, clock() - t)
    return best


def fastest_nodes(runs: List[List[dict]]) -> List[dict]:
    """One run's kernel events (the first's order) with each node's duration its minimum over `runs`: a CFS
    throttle adds its wait to one node of one run, and a node's fastest run is free of it unless every run stalled
    in that node."""
    best: Dict[str, float] = {}
    for events in runs:
        for e in events:
            d = float(e.get("dur", 0.0))
            best[e["name"]] = min(best.get(e["name"], d), d)
    return [dict(e, dur=best[e["name"]]) for e in runs[0]] if runs else []


def segment_kernel_seconds(data: bytes, start: int, end: int, x: np.ndarray, threads: int, runs: int = 3,
                           names: Optional[SegmentNames] = None,
                           plain: Optional[Callable[[], object]] = None) -> np.ndarray:
    """Kernel seconds per segment start..end-1 of the stage model `data` on input `x`: each node at its fastest of
    `runs` runs (after a warm-up; `fastest_nodes`), each run after a random pause of up to a CFS period, in a session
    with ORT's profiler on, configured as the engine's (`ort_session.session`); zeros when the model's names carry
    no segments and no `names` are given. With `plain` (the same stage on x in a session without the profiler),
    the profiler's per-event cost is taken out first (`without_profiler_cost`). The trace file is removed."""
    import onnx

    locate: Callable[[str], Optional[int]] = segment_of
    if names is not None:  # a stage extracted from an ONNX-file model: its node names carry no scopes
        ops, locate = names.ops, names
    else:
        ops = segment_ops(onnx.load_from_string(data))
    if not ops:
        return np.zeros(end - start)
    folder = tempfile.mkdtemp(prefix="cnnvideo-ortprof-")
    path = ""
    try:
        sess = session(data, threads, "stage %d..%d" % (start, end), os.path.join(folder, "p"))
        name = sess.get_inputs()[0].name
        sess.run(None, {name: x})  # warm-up (first-run allocations): its nodes are dropped below
        runs = max(int(runs), 1)
        quota, period = cfs_quota()
        if quota > 0:  # each node needs a run free of stalls: it stalls in a share (its CPU / the quota) of them
            runs *= CAPPED_RUNS_FACTOR
        for wait, burn in run_schedule(runs, quota, period or CFS_PERIOD_S):
            time.sleep(wait)
            burn_cpu(burn)
            sess.run(None, {name: x})
        path = sess.end_profiling()
        with open(path) as fh:
            events: List[dict] = json.load(fh)
        model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e.get("ts", 0))[1:]
        per_run = [kernel_events(e for e in events if r["ts"] <= e.get("ts", -1) <= r["ts"] + r["dur"])
                   for r in model_runs]
        if not per_run:
            return np.zeros(end - start)
        plain_us = None if plain is None else 1e6 * plain_seconds(plain, threads, runs, random.Random(0))
        best = node_profile(per_run, plain_us)
        return attribute(best, start, end, ops, locate) / 1e6
    finally:
        for f in [path] + [os.path.join(folder, n) for n in os.listdir(folder)]:
            if f and os.path.exists(f):
                os.remove(f)
        os.rmdir(folder)
