"""The worker run loop in-process (no gRPC): two run loops chained by their emit callables, fed by a stand-in master
that follows cnnvideo.wire.protocol; out-of-order arrival, plan changes, a delta on a moved cut, resync."""
from __future__ import annotations

import queue
import random

import numpy as np
import pytest

from cnnvideo.wire.hop import HopReceiver
from cnnvideo.wire.protocol import HopPlanner, HopSettings, reporter
from cnnvideo.worker.runloop import (
    EmitError,
    Payload,
    Result,
    Run,
    RunSettings,
    StageReport,
    StaleError,
    Task,
    TaskError,
)

SHAPES = [(1, 4, 4, 3), (1, 3, 4, 4), (1, 3, 4, 4), (1, 8)]  # cut 0 is the uint8 frame


def _segment(k, x):
    if k == 0:
        return (x.transpose(0, 3, 1, 2).astype(np.float32) - 100.0) / 7.0
    if k == 1:
        return np.maximum(x, 0.0) * 1.5
    return (x.reshape(1, -1)[:, :8] - 0.25).astype(np.float32)


def forward(start, end, x):
    for k in range(start, end):
        x = _segment(k, x)
    return x


def frames(n, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, SHAPES[0], dtype=np.uint8)
    out = []
    for _ in range(n):
        base = base.copy()
        idx = rng.integers(0, base.size, 5)
        base.reshape(-1)[idx] = rng.integers(0, 256, 5, dtype=np.uint8)
        out.append(base)
    return out


class Chain:
    """Two engines: w0 emits straight into w1.accept; a stand-in master plans hops with protocol.HopPlanner."""

    def __init__(self, generation=0, mode="delta", fail_emit=False):
        self.settings = RunSettings("r1", 2, HopSettings(mode=mode), generation)
        self.w1 = Run(self.settings, 1, SHAPES, forward, None, 1 << 20)

        def emit(task):
            if fail_emit:
                raise EmitError("worker w1 is unreachable")
            self.w1.accept(task)

        self.w0 = Run(self.settings, 0, SHAPES, forward, emit, 1 << 20)
        self.hops = HopPlanner(2, mode)
        self.sender = self.settings.hops.sender(0)
        self.receivers = [HopReceiver(1 << 20), HopReceiver(1 << 20)]  # one per result stream
        self.seq = 0

    def task(self, f, x, cuts, keyframe=None, epochs=None):
        planned, ep = self.hops.plan(f, cuts)
        keyframe = planned if keyframe is None else keyframe
        data = self.sender.encode(x, keyframe=keyframe[0])
        t = Task("r1", f, list(cuts), Payload(0, data, keyframe[0]), hop=0, seq=self.seq, keyframe=keyframe,
                 epoch=ep if epochs is None else epochs, generation=self.settings.generation, route=[0, 1])
        self.seq += 1
        return t

    def result(self, cuts, timeout=10.0):
        w = reporter(cuts)
        res = [self.w0, self.w1][w].results.get(timeout=timeout)
        assert isinstance(res, Result) and res.worker_id == w
        return res.frame_id, np.array(self.receivers[w].decode(res.output.data))

    def close(self):
        self.w0.close()
        self.w1.close()


def _reports(run, n, timeout=10.0):
    return [run.stages.get(timeout=timeout) for _ in range(n)]


def test_plan_changes_keep_results_exact_and_keyframe_each_new_cut():
    """Frames under changing plans (including all-on-one-worker) come back bitwise equal to the unsplit
    forward; every change of a hop's cut is sent whole in a new epoch."""
    plans = [[0, 1, 3], [0, 1, 3], [0, 2, 3], [0, 2, 3], [0, 3, 3], [0, 0, 3], [0, 0, 3], [0, 1, 3]]
    chain = Chain()
    try:
        for f, (x, cuts) in enumerate(zip(frames(len(plans)), plans)):
            chain.w0.accept(chain.task(f, x, cuts))
            got_f, y = chain.result(cuts)
            assert got_f == f
            np.testing.assert_array_equal(y, forward(0, 3, x))
        # hop 1 moved at frames 2, 5 and 7; frame 4 ran on w0 alone and left hop 1 untouched
        assert chain.hops.epochs == [0, 3]
        assert not chain.w0.failed and not chain.w1.failed
    finally:
        chain.close()


def test_out_of_order_arrival_runs_in_sequence_order():
    """Tasks handed over in shuffled order are run by sequence number: deltas apply on the right base."""
    chain = Chain()
    cuts = [0, 2, 3]
    xs = frames(12, seed=3)
    tasks = [chain.task(f, x, cuts) for f, x in enumerate(xs)]
    random.Random(5).shuffle(tasks)
    try:
        for t in tasks:
            chain.w0.accept(t)
        for f, x in enumerate(xs):
            got_f, y = chain.result(cuts)
            assert got_f == f
            np.testing.assert_array_equal(y, forward(0, 3, x))
        with pytest.raises(TaskError, match="duplicate"):
            chain.w0.accept(tasks[0])
    finally:
        chain.close()


def test_a_delta_at_a_moved_cut_fails_the_run_and_names_the_hop():
    """A task whose hop-1 cut moved but is not whole is refused by worker 1 (never decoded on the wrong base): it
    reports the error on its stage stream and refuses further tasks until a resync."""
    chain = Chain()
    xs = frames(3)
    try:
        chain.w0.accept(chain.task(0, xs[0], [0, 1, 3]))
        chain.result([0, 1, 3])
        chain.w1.accept(Task("r1", 1, [0, 2, 3], Payload(2, b"", False), hop=1, seq=1, keyframe=[False, False],
                             route=[0, 1]))
        reports = _reports(chain.w1, 2)
        errors = [r.error for r in reports if isinstance(r, StageReport) and r.error]
        assert errors and "link into hop 1 moved from cut 1 to 2 without a keyframe" in errors[0]
        with pytest.raises(TaskError, match="failed"):
            chain.w1.accept(Task("r1", 2, [0, 1, 3], Payload(1, b""), hop=1, seq=2, route=[0, 1]))
    finally:
        chain.close()


def test_resync_new_generation_refuses_stale_tasks_and_restarts_hops_whole():
    """After a failure the master starts generation 1: tasks of generation 0 are stale, and the first frame of
    the new generation is a keyframe on every hop (fresh delta state on both sides), exact again."""
    old = Chain(generation=0)
    xs = frames(4)
    stale = old.task(0, xs[0], [0, 1, 3])
    old.close()
    chain = Chain(generation=1)
    try:
        with pytest.raises(StaleError):
            chain.w0.accept(stale)
        for f in range(4):
            t = chain.task(f, xs[f], [0, 1, 3])
            if f == 0:
                assert t.keyframe == [True, True]
            chain.w0.accept(t)
            _, y = chain.result([0, 1, 3])
            np.testing.assert_array_equal(y, forward(0, 3, xs[f]))
    finally:
        chain.close()


def test_emit_failure_is_reported_with_the_frame():
    """When the next worker cannot take a task, the engine reports it (frame id and the reason) instead of
    dropping it silently."""
    chain = Chain(fail_emit=True)
    try:
        chain.w0.accept(chain.task(0, frames(1)[0], [0, 1, 3]))
        rep = chain.w0.stages.get(timeout=10)
        assert rep.error == "worker w1 is unreachable" and rep.frame_id == 0
        with pytest.raises(queue.Empty):
            chain.w1.results.get(timeout=0.3)
    finally:
        chain.close()


def test_bad_plans_and_wrong_hops_are_refused_at_intake():
    """Plans that do not fit the graph, and tasks for another hop, never reach the compute loop."""
    chain = Chain()
    try:
        with pytest.raises(TaskError, match="end at cut 3"):
            chain.w0.accept(Task("r1", 0, [0, 2], Payload(0, b"x"), route=[0]))
        with pytest.raises(TaskError, match="non-decreasing"):
            chain.w0.accept(Task("r1", 0, [0, 4, 3], Payload(0, b"x"), route=[0, 1]))
        with pytest.raises(TaskError, match="route has 0 workers for 2 stages"):
            chain.w0.accept(Task("r1", 0, [0, 1, 3], Payload(0, b"x")))  # no route
        with pytest.raises(TaskError, match="task for hop 1 sent to worker 0"):
            chain.w0.accept(Task("r1", 0, [0, 1, 3], Payload(1, b"x"), hop=1, route=[0, 1]))
        with pytest.raises(TaskError, match="payload is at cut 1"):
            chain.w0.accept(Task("r1", 0, [0, 1, 3], Payload(1, b"x"), route=[0, 1]))
    finally:
        chain.close()


def test_stage_reports_carry_the_cpu_of_decode_compute_and_encode():
    """Each computed frame's report times decode, compute and encode in CPU seconds of the thread that ran them as
    well as in wall seconds: a stage that burns CPU reports it in compute (within its wall time), and a stage that
    sleeps reports wall time without CPU (what a CFS throttle's wait looks like)."""
    import time

    def busy_or_idle(start, end, x):
        if start == 0:
            t = time.thread_time()
            while time.thread_time() - t < 0.02:  # 20 ms of CPU
                np.sort(np.arange(20000)[::-1])
        else:
            time.sleep(0.03)  # 30 ms of wall, no CPU
        return forward(start, end, x)

    settings = RunSettings("r1", 2, HopSettings(mode="delta"), 0)
    w1 = Run(settings, 1, SHAPES, busy_or_idle, None, 1 << 20)
    w0 = Run(settings, 0, SHAPES, busy_or_idle, w1.accept, 1 << 20)
    chain = Chain()
    try:
        for f, x in enumerate(frames(2)):
            t = chain.task(f, x, [0, 1, 3])
            w0.accept(t)
        for run, busy in ((w0, True), (w1, False)):
            for rep in _reports(run, 2):
                spans = {s.stage: s for s in rep.stages}
                wall = spans["compute"].end - spans["compute"].start
                assert all(spans[k].cpu >= 0 for k in ("decode", "compute", "encode")), rep.stages
                if busy:
                    assert 0.019 <= spans["compute"].cpu <= wall + 0.002, (spans["compute"].cpu, wall)
                else:
                    assert wall >= 0.029 and spans["compute"].cpu < 0.01, (spans["compute"].cpu, wall)
    finally:
        w0.close()
        w1.close()
        chain.close()


def test_stage_totals_give_cpu_only_where_it_was_measured():
    """report.json `stages`: a worker's measured CPU adds cpu_s and cpu_mean_s to its stage; the master's spans, which
    carry none, keep the wall fields only."""
    from cnnvideo.results import report as rpt

    spans = [rpt.StageSpan(f, "w0", "compute", f, f + 0.5, 0, 0.05) for f in range(4)]
    spans.append(rpt.StageSpan(0, "m", "encode", 0.0, 0.01, 100))
    got = rpt.stage_summary(spans)
    assert got["w0"]["compute"] == {"count": 4, "total_s": 2.0, "bytes": 0, "mean_s": 0.5, "cpu_s": 0.2,
                                    "cpu_mean_s": 0.05}
    assert got["m"]["encode"] == {"count": 1, "total_s": 0.01, "bytes": 100, "mean_s": 0.01}


class Pool:
    """Three engines as a pool: stage 0 (cuts 0..split) on replicas w0 and w1, stage 1 on w2; each link keeps its
    own reference, a stand-in master keeps one input sender per replica and routes every frame itself."""

    def __init__(self, split=1, skip_unchanged=False):
        self.settings = RunSettings("r1", 3, HopSettings(), 0, skip_unchanged=skip_unchanged)
        self.runs = {}
        emit = lambda task: self.runs[task.receiver()].accept(task)  # noqa: E731
        for w in range(3):
            self.runs[w] = Run(self.settings, w, SHAPES, forward, emit, 1 << 20)
        self.cuts = [0, split, 3]
        self.senders = {w: self.settings.hops.sender(0) for w in (0, 1)}
        self.seq = {0: 0, 1: 0}
        self.receiver = HopReceiver(1 << 20)  # w2's result stream

    def send(self, f, x, replica):
        data = self.senders[replica].encode(x, keyframe=self.seq[replica] == 0)
        task = Task("r1", f, list(self.cuts), Payload(0, data, self.seq[replica] == 0), hop=0,
                    seq=self.seq[replica], keyframe=[False, False], epoch=[0, 0], route=[replica, 2])
        self.seq[replica] += 1
        self.runs[replica].accept(task)

    def close(self):
        for run in self.runs.values():
            run.close()


@pytest.mark.parametrize("skip_unchanged", [False, True])
def test_pool_replicas_keep_one_reference_per_link_and_stay_exact(skip_unchanged):
    """Frames routed over two replicas of stage 0 (w0, w1) into one replica of stage 1 (w2): w2 decodes each
    sender's deltas against that sender's own reference, so every result is bitwise the unsplit forward, and the
    stage reports name the worker each output went to. Repeated frames (unchanged input) skip exactly too."""
    pool = Pool(skip_unchanged=skip_unchanged)
    xs = frames(10, seed=7)
    xs[5] = xs[4] = xs[3]  # unchanged inputs on both links
    route = [0, 1, 1, 0, 1, 0, 0, 0, 1, 1]
    try:
        for f, (x, r) in enumerate(zip(xs, route)):
            pool.send(f, x, r)
            res = pool.runs[2].results.get(timeout=10)
            assert res.frame_id == f and res.worker_id == 2
            np.testing.assert_array_equal(np.array(pool.receiver.decode(res.output.data)), forward(0, 3, x))
        reports = [pool.runs[w].stages.get(timeout=5) for w in route]
        assert [r.hop_out for r in reports] == [2] * len(route) and all(r.hop_in == 0 for r in reports)
        assert set(pool.runs[2].links_in) == {0, 1} and set(pool.runs[0].links_in) == {-1}
        assert not any(run.failed for run in pool.runs.values())
    finally:
        pool.close()


def test_pool_refuses_a_task_routed_to_another_worker_or_naming_a_worker_twice():
    """Route checks at intake: the receiver must be the worker the route names at the task's hop, and a route names
    distinct workers of the cluster."""
    pool = Pool()
    try:
        with pytest.raises(TaskError, match="not the worker its route names"):
            pool.runs[0].accept(Task("r1", 0, [0, 1, 3], Payload(0, b"x"), route=[1, 2]))
        with pytest.raises(TaskError, match="distinct workers"):
            pool.runs[0].accept(Task("r1", 0, [0, 1, 3], Payload(0, b"x"), route=[0, 0]))
        with pytest.raises(TaskError, match="distinct workers"):
            pool.runs[0].accept(Task("r1", 0, [0, 1, 3], Payload(0, b"x"), route=[0, 5]))
    finally:
        pool.close()


class Hybrid:
    """Three engines as a hybrid pool plan, `groups` the replicas of each of its two stages; a stand-in master keeps
    one input sender per first-stage replica and routes every frame itself. Workers in `dead` are unreachable (an
    emit to one raises EmitError after `on_dead(task)`, e.g. the master's Peer call arriving meanwhile)."""

    def __init__(self, groups, split=1, skip_unchanged=False):
        self.settings = RunSettings("r1", 3, HopSettings(), 0, skip_unchanged=skip_unchanged)
        self.groups = groups
        self.cuts = [0, split, 3]
        self.dead = set()
        self.on_dead = lambda task: None
        self.runs = {w: self._run(w) for w in (0, 1, 2)}
        self.senders, self.seq = {}, {}
        self.receivers = {}  # result stream per reporting worker

    def _emit(self, task):
        if task.receiver() in self.dead:
            self.on_dead(task)
            raise EmitError("worker w%d is unreachable" % task.receiver())
        self.runs[task.receiver()].accept(task)

    def _run(self, w):
        return Run(self.settings, w, SHAPES, forward, self._emit, 1 << 20)

    def restart(self, w):
        """A fresh run on w (the master's take_back): its links start over on its side."""
        self.runs[w].close()
        self.runs[w] = self._run(w)
        self.dead.discard(w)
        self.receivers.pop(w, None)
        self.senders.pop(w, None)
        self.seq.pop(w, None)

    def task(self, f, x, route):
        first = route[0]
        sender = self.senders.setdefault(first, self.settings.hops.sender(0))
        seq = self.seq.get(first, 0)
        data = sender.encode(x, keyframe=seq == 0)
        self.seq[first] = seq + 1
        return Task("r1", f, list(self.cuts), Payload(0, data, seq == 0), hop=0, seq=seq, keyframe=[False, False],
                    epoch=[0, 0], route=list(route))

    def result(self, w, x, timeout=10.0):
        """The next result of reporting worker w, checked bitwise against the unsplit forward of x."""
        res = self.runs[w].results.get(timeout=timeout)
        assert isinstance(res, Result) and res.worker_id == w
        y = np.array(self.receivers.setdefault(w, HopReceiver(1 << 20)).decode(res.output.data))
        np.testing.assert_array_equal(y, forward(0, 3, x))
        return res.frame_id

    def close(self):
        for run in self.runs.values():
            run.close()


def _forwards(run, n, timeout=10.0):
    """The next n stage reports of `run` that are forwards (hop_out names a worker), as (frame, to, keyframe)."""
    out = []
    while len(out) < n:
        r = run.stages.get(timeout=timeout)
        assert isinstance(r, StageReport) and not r.error, r
        out.append((r.frame_id, r.hop_out, r.keyframe_out))
    return out


def test_a_left_out_sender_loses_its_link_and_waiting_tasks_downstream_and_comes_back_with_a_keyframe():
    """Hybrid (stage 0 on w0 and w1, stage 1 on w2): w2 holds a task of w1 out of order when the master leaves w1 out.
    Run.peer drops w2's receive state from w1 with that task, refuses w1's tasks while it is out, and the link from
    w0 keeps its reference (its next payload to w2 is a delta, still exact). Taken back, a fresh w1 starts over at
    sequence 0 with a keyframe, which w2 accepts; every result stays exact."""
    hy = Hybrid([[0, 1], [2]])
    xs = frames(9, seed=11)
    try:
        for f in range(4):
            hy.runs[f % 2].accept(hy.task(f, xs[f], [f % 2, 2]))
            assert hy.result(2, xs[f]) == f
        w2 = hy.runs[2]
        assert w2.links_in[1].next_seq == 2
        # w1's seq 3 arrived at w2 before seq 2 (which w1 never sent: it died)
        late = Task("r1", 5, list(hy.cuts), Payload(1, b"junk", False), hop=1, seq=3, keyframe=[False, False],
                    epoch=[0, 0], route=[1, 2])
        w2.accept(late)
        assert w2.n_pending == 1
        w2.peer(1, out=True)
        assert 1 not in w2.links_in and w2.n_pending == 0 and 0 in w2.links_in
        with pytest.raises(StaleError, match="left out"):
            w2.accept(late)
        hy.runs[0].accept(hy.task(4, xs[4], [0, 2]))
        assert hy.result(2, xs[4]) == 4
        fwd = _forwards(hy.runs[0], 3)
        assert fwd[-1] == (4, 2, False)  # w0 -> w2 not restarted: a delta
        hy.restart(1)
        w2.peer(1, out=False)
        for f in range(5, 9):
            hy.runs[f % 2].accept(hy.task(f, xs[f], [f % 2, 2]))
            assert hy.result(2, xs[f]) == f
        assert [k for f, to, k in _forwards(hy.runs[1], 2)] == [True, False]  # fresh w1: keyframe, then deltas
        assert w2.links_in[1].next_seq == 2
        assert not any(run.failed for run in hy.runs.values())
    finally:
        hy.close()


def test_an_upstream_sender_drops_frames_for_a_left_out_replica_without_failing_and_keyframes_it_on_return():
    """Hybrid (stage 0 on w0, stage 1 on w1 and w2): w1 dies. A forward to it that fails while the master's Peer call
    arrives is no fault, a frame encoded for it before the call (or while it is out) is not sent, and w0's link to
    w2 keeps its reference (no keyframe). Taken back, w1 gets a keyframe at sequence 0 from w0; every result that
    comes is exact and w0's run never fails."""
    hy = Hybrid([[0], [1, 2]])
    xs = frames(10, seed=13)
    try:
        for f in range(4):
            hy.runs[0].accept(hy.task(f, xs[f], [0, 1 + f % 2]))
            assert hy.result(1 + f % 2, xs[f]) == f
        w0 = hy.runs[0]
        hy.dead.add(1)
        hy.on_dead = lambda task: w0.peer(1, out=True)  # the master's Peer call comes while the forward fails
        w0.accept(hy.task(4, xs[4], [0, 1]))  # routed to w1 before the master knew: lost, the master re-sends it
        w0.accept(hy.task(5, xs[5], [0, 1]))  # encoded for w1 while it is out: not sent
        w0.accept(hy.task(6, xs[6], [0, 2]))
        assert hy.result(2, xs[6]) == 6
        reports = _forwards(w0, 5)  # frames 4 and 5 went nowhere: no report
        assert [r[0] for r in reports] == [0, 1, 2, 3, 6] and reports[-1] == (6, 2, False)  # w0 -> w2: a delta
        assert not w0.failed and 1 not in w0.links_out.links and w0.out == {1}
        hy.restart(1)
        w0.peer(1, out=False)
        for f in range(7, 10):
            w0.accept(hy.task(f, xs[f], [0, 1 + f % 2]))
            assert hy.result(1 + f % 2, xs[f]) == f
        fwd = _forwards(w0, 3)
        assert fwd == [(7, 2, False), (8, 1, True), (9, 2, False)]  # w1's link starts with a keyframe
        assert hy.runs[1].links_in[0].next_seq == 1  # the fresh link's first task was sequence 0
        assert not any(run.failed for run in hy.runs.values())
    finally:
        hy.close()


def test_a_frame_for_a_left_out_replica_still_updates_what_an_unchanged_input_reuses():
    """skip_unchanged with stage 1 on w1 and w2: w0 computes a frame routed to w1 while w1 is out (not sent), then
    the same input again routed to w2. The unchanged input reuses the output of the frame w0 computed last (the
    dropped one), not of the one before it, so w2's result is exact."""
    hy = Hybrid([[0], [1, 2]], skip_unchanged=True)
    xs = frames(3, seed=17)
    try:
        w0 = hy.runs[0]
        w0.accept(hy.task(0, xs[0], [0, 2]))
        assert hy.result(2, xs[0]) == 0
        w0.peer(1, out=True)
        w0.accept(hy.task(1, xs[1], [0, 1]))  # computed, not sent
        w0.accept(hy.task(2, xs[1], [0, 2]))  # the same input: an empty update on the input hop
        assert hy.result(2, xs[1]) == 2
        reports = _forwards(w0, 2)
        assert [r[0] for r in reports] == [0, 2] and 1 not in w0.links_out.links and not w0.failed
    finally:
        hy.close()
