"""Sending frames: take the next frame from the source, choose its plan and route, encode the input hop's delta
and send it to the first stage's worker (paced like a shaped link under `local.links: paced`).

A frame goes to the replica of each stage with the fewest frames outstanding (the pool's dispatcher); the pool keeps
one closed-loop input sender per first-stage replica (pool.InputLinks), so each replica gets deltas against the
frame it saw last.

The `Process` calls run on threads of their own: frame f+1 is taken and encoded while frame f is on the wire. Done in
line, the loop took 37 ms a frame for the detector at caps 0.4 (5 ms encode, 19 ms send, the rest taking and
planning), which capped every chain at 22-25 fps on a 3 MB/s link. SEND_DEPTH calls may be in flight at once, so
the next frame goes out while worker 0 answers the last: a worker out of CPU quota answers only in its next CFS
period, and with one call at a time the input hop took 25-35 ms a frame at caps 0.4 where its bytes need 21 ms of
wire. Worker 0 orders tasks by sequence number. A queued frame of an older generation (a resync came between) is
not sent: the resync re-sends it."""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import List, Optional

import numpy as np

from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers import InputDelta, PipelineState, Transfer
from cnnvideo.results import report as rpt
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import net
from cnnvideo.rpc.link import LinkError, send_with_retry
from cnnvideo.wire.protocol import HopPlanner

from .feed import SourceError
from .pool import NoReplica

log = logging.getLogger(__name__)

SEND_DEPTH = 2  # Process calls in flight on the input hop (per worker it may go to)
AWAIT_SAY_S = 15.0  # how often a pool with no worker for a stage says it waits for joins


class FrameSender:
    """The input hop of the role `m`: the hop plan (keyframes), the frames waiting to go and the threads sending
    them; each link's sender state is the pool's (m.pool.inputs)."""

    def __init__(self, m) -> None:
        self.m = m
        cfg = m.cfg
        self.links = m.pool.inputs
        self.hop_plan = HopPlanner(m.W, cfg.mode, cfg.delta.keyframe_every)
        self._cut0_shape: tuple = ()
        self.sent_plan: Optional[Plan] = None  # the plan of the newest frame sent
        self.outbox: queue.Queue = queue.Queue(1)  # encoded frames waiting for the transmit thread
        self.unsent = 0  # frames queued or on the wire (under `done`)
        self.done = threading.Condition()
        self.threads: List[threading.Thread] = []
        self.outages_seen = 0  # the source's outages so far: after each, every input link sends a keyframe

    @property
    def sent_cuts(self) -> Optional[List[int]]:
        return list(self.sent_plan.cuts) if self.sent_plan is not None else None

    def cut0_shape(self) -> tuple:
        """The shape of the model's input tensor (cut 0), as the workers gave it."""
        if not self._cut0_shape:
            self._cut0_shape = tuple(self.m.infos[0].cuts[0].shape)
        return self._cut0_shape

    def reset(self) -> None:
        """After a resync every hop starts with a keyframe (fresh senders), no frame is outstanding anywhere."""
        self.links.reset()
        self.hop_plan.resync()
        self.m.pool.dispatcher.reset()

    def reset_link(self, w: int) -> None:
        """The link to worker w alone starts over (a replica left out or taken back): a fresh sender (its next
        message is a keyframe) and sequence; frames already encoded for the old link are not sent."""
        self.links.restart(w)

    def _after_outage(self) -> None:
        """The camera came back after an outage (a stream that stopped and was reopened): its next frame to every
        first-stage worker is a keyframe, not a delta against a frame from before the gap."""
        outages = self.m.feed.source.outages
        if outages != self.outages_seen:
            self.outages_seen = outages
            self.links.all_key_due()
            log.info("the source came back after an outage (%d so far): every input link sends a keyframe", outages)

    def take(self):
        """The next new frame from the source as (frame, False), or None when there are no more (the run then
        drains); a source failure ends the intake the same way and is reported at the end."""
        m = self.m
        error = None
        try:
            f = m.feed.take()
        except SourceError as exc:
            error = str(exc)
            log.error("%s; draining the frames in flight", exc)
            f = None
        if f is None:
            m.run.intake_ended(error)
            return None
        with m.cond:
            m.tracker.known_frames(f + 1)
            return m.tracker.next_frame()

    def plan(self, f: int, resend: bool) -> Plan:
        """The plan frame f runs with: a re-send keeps its plan; a new frame asks the scheduler, and keeps the
        current plan until every worker has built the stages of a new one."""
        m = self.m
        if resend:
            with m.cond:
                rec = m.tracker.records[f]
                return Plan(tuple(rec.cuts), tuple(tuple(g) for g in rec.groups))
        state = None
        if m.scheduler.needs_state(f):
            with m.cond:
                now = time.time()
                flying, done = m.tracker.state()
            change = m.feed.change(f, m.cfg.group_size) if m.live else None
            state = PipelineState(flying, done, now - m.t_run, change)
        return m.warmer.choose(f, m.scheduler.plan_for(f, state), self.sent_plan)

    def route(self, plan: Plan) -> List[int]:
        """The worker of each stage for the next frame of `plan`; NoReplica when a stage has no worker left (all out
        after faults)."""
        with self.m.cond:
            return self.m.pool.dispatcher.route(plan)

    def await_workers(self, why: NoReplica) -> bool:
        """A new frame finds a stage with no worker because the workers left (a pool that takes joins, scaled down
        to nothing): wait until the plan the scheduler wants has a worker in every stage (a join re-planned it),
        saying so every AWAIT_SAY_S; True then, False at once without joins, or if the run fails or closes."""
        m = self.m
        if not m.cfg.cluster.join:
            return False
        said = 0.0
        with m.cond:
            while m.failure is None and not m.closing:
                wanted = m.scheduler.current
                if wanted is not None and m.pool.dispatcher.usable(wanted):
                    m.cond.wait(0.1)  # (the warmer may hold frames on the old plan a moment longer)
                    return True
                if time.time() - said >= AWAIT_SAY_S:
                    log.warning("%s: new frames wait for workers to join on %s", why, m.cfg.cluster.join)
                    said = time.time()
                m.cond.wait(0.5)
        return False

    def send(self, f: int, resend: bool) -> None:
        m = self.m
        while True:
            plan = self.plan(f, resend)
            try:
                route = self.route(plan)
                break
            except NoReplica as exc:
                if resend or not self.await_workers(exc):
                    with m.cond:
                        m.tracker.retry_q.appendleft(f)  # the resync that the fault starts sends it again
                    m.fault(str(exc))
                    return
        cuts = list(plan.cuts)
        keyframe, epochs = self.hop_plan.plan(f, cuts)
        t0 = time.time()
        x = np.ascontiguousarray(m.feed.frame(f)).reshape(self.cut0_shape())
        first = route[0]
        link = self.links.get(first)
        if not resend:
            self._after_outage()
        data, whole = link.sender.encode(0, x, planned=link.key_first() or keyframe[0])
        unchanged = not whole and link.sender.last_nnz() == 0  # empty input delta: every stage skips the frame
        t1 = time.time()
        seq = link.next_seq()
        with m.cond:
            gen = m.tracker.generation
            m.tracker.sent(f, cuts, t0, resend, route, plan.groups)
            m.pool.dispatcher.take(route)
            if not resend:
                self.sent_plan = plan
            if m.results is not None:
                m.results.sent(f, cuts, m.feed.captured_at.get(f, t0), len(data), route)
            if m.tracker.completed == 0 and f == 0:
                m.run.progressed(t0)
        task = pb.FrameTask(run_id=m.run_id, generation=gen, frame_id=f, cuts=cuts, keyframe=keyframe,
                            epoch=epochs, hop=0, seq=seq, created_at=t0, sent_at=t1,
                            route=route,
                            payload=pb.Tensor(cut=0, data=data, keyframe=whole, bytes_dense=x.size * 4))
        with m.cond:
            m.telemetry.span(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
        self._start()
        with self.done:
            self.unsent += 1
        self.outbox.put((task, x.size * 4, unchanged, self.links.epoch(first)))
        m.page.show_plan(cuts)
        m.progress.publish(m.tracker)
        if f % 10 == 0 and not resend:
            log.info("sent frame %d/%s (plan %s, to w%d, %d bytes, %d completed)", f + 1, m.cfg.frames or "-", plan,
                     first, len(data), m.tracker.completed)

    def _start(self) -> None:
        # SEND_DEPTH calls per first-stage worker: a pool's replicas each get their own transfers in flight
        while len(self.threads) < SEND_DEPTH * max(self.m.W, 1):
            t = threading.Thread(target=self._transmit_loop, name="send-w0-%d" % len(self.threads), daemon=True)
            self.threads.append(t)
            t.start()

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every encoded frame went out or was dropped as stale (its send is accounted for); False on
        timeout."""
        with self.done:
            return self.done.wait_for(lambda: self.unsent == 0, timeout)

    def _transmit_loop(self) -> None:
        m = self.m
        while True:
            try:
                item = self.outbox.get(timeout=0.5)
            except queue.Empty:
                if m.failure is not None:
                    return
                continue
            try:
                self._transmit(*item)
            finally:
                with self.done:
                    self.unsent -= 1
                    self.done.notify_all()

    def _transmit(self, task, dense: int, unchanged: bool, link_epoch: int) -> None:
        """Send one encoded frame to its first stage's worker and account for it; a fault names that worker, in the
        task's generation."""
        m = self.m
        f, gen, n = task.frame_id, task.generation, len(task.payload.data)
        w = task.route[0]
        with m.cond:
            if gen != m.tracker.generation or m.failure is not None or link_epoch != self.links.epoch(w):
                return  # a resync came between (of every link, or of this one): it re-sends the frame
        t1 = time.time()
        task.sent_at = t1
        try:
            if self.links.pacers[w] is not None:
                self.links.pacers[w].wait(task.ByteSize())
            # no retry here: a worker that is down is a fault, and the recovery re-sends the frame
            send_with_retry(lambda: m.links.stubs[w], task, m.timeout, net.Backoff(0.0), lambda: False,
                            lambda stub: None,
                            lambda problem: "worker w%d at %s is down (cannot send frame %d: %s)"
                            % (w, m.addresses[w], f, problem))
        except LinkError as exc:
            m.fault(str(exc), gen, worker=w)
            return
        t2 = time.time()
        t1 = self.links.clocks[w].busy_start(t1, t2)
        keyframe = bool(task.payload.keyframe)
        with m.cond:
            m.telemetry.span(rpt.StageSpan(f, "m", "send", t1, t2, n))
            m.telemetry.hop("m->w%d" % w).add(n, dense, t2 - t1, keyframe)
            m.events.hop_sent("m->w%d" % w, n)
            m.scheduler.observe(Transfer(w, n, t2 - t1))
            if not keyframe and m.cfg.delta.skip_unchanged:  # the share of unchanged frames, measured live
                m.scheduler.observe(InputDelta(unchanged))
