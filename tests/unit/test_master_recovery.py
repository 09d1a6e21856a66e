"""The master's recovery bookkeeping without any network: under a pool plan of several stages (a hybrid) a replica
that is down is left out alone (no new generation, only its frames queued again, the other workers told to start
their links with it over) and taken back alone; when a stage would keep no live replica, every link resyncs."""
from __future__ import annotations

import time

from cnnvideo.master.links import MasterError
from cnnvideo.master.pool import Dispatcher, Membership
from cnnvideo.master.recovery import Recovery
from cnnvideo.master.runstate import RunState
from cnnvideo.master.tracking import FrameTracker
from cnnvideo.plan.plan import Plan

HYBRID = Plan((0, 1, 3), ((0, 1), (2,)))  # stage 0 on w0 and w1, stage 1 on w2


class Links:
    """Stand-in WorkerLinks: which workers are down, and every call the recovery makes (in order)."""

    def __init__(self, calls, down=(), refuse=()):
        self.calls = calls
        self.is_down = set(down)
        self.refuse = set(refuse)  # workers whose Peer call fails

    def down(self, timeout=1.0, only=None):
        return sorted(w for w in (range(3) if only is None else only) if w in self.is_down)

    def name(self, w):
        return "worker w%d" % w

    def tell_peers(self, run_id, gen, replicas, out, only):
        self.calls.append(("peer", gen, list(replicas), out, list(only)))
        if set(only) & self.refuse:
            raise MasterError("worker w%d: Peer failed: UNAVAILABLE" % min(set(only) & self.refuse))

    def refresh(self, w):
        self.calls.append(("refresh", w))

    def fetch_infos(self, wait_s=0.0, only=None):
        return []

    def start_run(self, setup, timeout=None, only=None):
        self.calls.append(("start_run", list(only)))


class Sending:
    def __init__(self, calls, plan):
        self.calls = calls
        self.sent_plan = plan

    def reset_link(self, w):
        self.calls.append(("reset_link", w))


class Master:
    """The parts of MasterRole the recovery touches; frames 0..5 in flight, routed alternately over w0 and w1."""

    def __init__(self, plan=HYBRID, down=(), refuse=()):
        self.calls = []
        self.W = 3
        self.run_id = "r1"
        self.run = RunState()
        self.run.started(time.time())
        self.faults = []
        self.tracker = FrameTracker(6, retries=2)
        membership = Membership(3)
        self.pool = type("Pool", (), {"membership": membership, "dispatcher": Dispatcher(3, membership)})()
        self.links = Links(self.calls, down, refuse)
        self.sending = Sending(self.calls, plan)
        push = type("StagePush", (), {"push": lambda s, plan, only=None: self.calls.append(("push", only))})()
        self.setup = type("Setup", (), {"check_infos": lambda s: None, "push": push})()
        self.feed = type("Feed", (), {"release": lambda s, f: None})()
        for f in range(6):
            route = self.pool.dispatcher.route(plan)
            self.tracker.sent(f, plan.cuts, 0.0, False, route, plan.groups)
            self.pool.dispatcher.take(route)

    cond = property(lambda self: self.run.cond)
    failure = property(lambda self: self.run.failure)
    closing = property(lambda self: self.run.closing)
    t_run = property(lambda self: self.run.t_run)
    last_event = property(lambda self: self.run.last_event)

    def live_workers(self):
        return [w for w in range(self.W) if w not in self.pool.membership.out]

    def fault(self, message, gen=None, worker=None, epoch=None):
        self.faults.append((message, gen))

    def count_restarts(self, restarted):
        pass

    def setup_msg(self, gen, warm=None, worker=-1):
        return ("setup", gen)

    def open_streams(self, gen, only=None):
        self.calls.append(("open_streams", list(only), set(self.pool.membership.out)))


def _through(m, w):
    return [f for f in range(6) if w in m.tracker.records[f].route]


def test_a_first_stage_replica_of_a_hybrid_is_left_out_alone():
    """w1 (a stage-0 replica) is down: no new generation; only the frames on routes through it are queued again,
    the others stay in flight; the dispatcher routes no frame to it; its input link here starts over and the other
    workers (w0, w2) are told it is out; the report's event says `scope: replica`."""
    m = Master(down=[1])
    rec = Recovery(m)
    through = _through(m, 1)
    assert through and len(through) < 6
    try:
        assert rec.replicas.replica_out("w1 is down")
        tr = m.tracker
        assert tr.generation == 0 and tr.resyncs == 0 and tr.replica_resyncs == 1 and tr.pending_fault is None
        assert sorted(tr.retry_q) == through and sorted(tr.flying) == sorted(set(range(6)) - set(through))
        assert m.pool.membership.out == {1} and m.pool.dispatcher.route(HYBRID) == [0, 2]
        assert m.calls == [("reset_link", 1), ("peer", 0, [1], True, [0, 2])]
        assert m.pool.membership.events[-1]["left_out"] == [1] and m.pool.membership.events[-1]["scope"] == "replica"
        assert not m.faults
    finally:
        m.run.close()  # ends the return watch


def test_a_stage_whose_last_live_replica_is_down_is_not_left_out_alone():
    """The only replica of stage 1 (w2) is down, or w1 is down while w0 is already out: no stage may lose its last
    live replica, so replica_out declines (the global resync handles it) and changes nothing."""
    for down, excluded in (([2], set()), ([1], {0})):
        m = Master(down=down)
        m.pool.membership.out = set(excluded)
        before = (sorted(m.tracker.flying), m.tracker.replica_resyncs)
        assert not Recovery(m).replicas.replica_out("down")
        assert (sorted(m.tracker.flying), m.tracker.replica_resyncs) == before
        assert m.calls == [] and m.pool.membership.out == excluded and m.tracker.generation == 0


def test_a_later_stage_replica_is_left_out_alone_and_a_peer_that_cannot_be_told_is_a_fault():
    """Stage 0 on w0, stage 1 on w1 and w2: w1 down is left out alone like a first-stage replica (the master keeps its
    input links: only w0 and w2 are told). If a worker cannot be told, that is a fault of the same generation, so
    the next recovery handles it (a global resync if it is not down)."""
    plan = Plan((0, 1, 3), ((0,), (1, 2)))
    m = Master(plan=plan, down=[1], refuse=[2])
    try:
        assert Recovery(m).replicas.replica_out("w1 is down")
        assert sorted(m.tracker.retry_q) == _through(m, 1) and m.tracker.generation == 0
        assert ("peer", 0, [1], True, [0, 2]) in m.calls
        assert len(m.faults) == 1 and "w2" in m.faults[0][0] and m.faults[0][1] == 0
    finally:
        m.run.close()


def test_a_replica_taken_back_gets_a_fresh_run_and_the_others_are_told_before_it_gets_frames():
    """take_back: a fresh run on w1 alone, its input link here starts over, w0 and w2 are told it is back (their
    links with it start over: keyframes both ways), and only then is it routed frames again; no new generation."""
    m = Master(down=[1])
    rec = Recovery(m)
    try:
        assert rec.replicas.replica_out("w1 is down")
        del m.calls[:]
        rec.replicas.take_back(1, 0)
        names = [c[0] for c in m.calls]
        # (an int8 stage file is pushed to it before its StartRun, if it lost it)
        assert names == ["refresh", "push", "start_run", "reset_link", "peer", "open_streams"], m.calls
        assert m.calls[1] == ("push", [1]) and m.calls[2] == ("start_run", [1])
        assert m.calls[4] == ("peer", 0, [1], False, [0, 2])
        assert m.calls[5][2] == {1}  # still left out while the others are told
        assert m.pool.membership.out == set() and m.tracker.generation == 0
        assert m.pool.membership.events[-1]["back"] == [1] and m.pool.membership.events[-1]["scope"] == "replica"
    finally:
        m.run.close()
