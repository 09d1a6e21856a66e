"""Sending frames: take the next frame from the source, choose its plan, encode the input hop's delta and send
it to worker 0 (paced like a shaped link under `local.links: paced`).

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

import grpc
import numpy as np

from cnnvideo.master.feed import SourceError
from cnnvideo.plan.schedulers import InputDelta, PipelineState, Transfer
from cnnvideo.results import report as rpt
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import net
from cnnvideo.wire.pacing import pacer_for
from cnnvideo.wire.protocol import HopPlanner, HopSettings

log = logging.getLogger(__name__)

SEND_DEPTH = 2  # Process calls in flight on the input hop


class LinkClock:
    """When each transfer on a link with overlapping calls began, for honest transfer times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free_at = 0.0  # when the link finished its newest transfer

    def busy_start(self, sent_at: float, done_at: float) -> float:
        """A finished call's transfer began when it was sent, or when the link finished the transfer before it if
        that was later: counted from the send, an overlapped message would carry the other's wire time and the
        scheduler would see a slower link."""
        with self.lock:
            start = max(sent_at, min(self.free_at, done_at))
            self.free_at = max(self.free_at, done_at)
        return start


class FrameSender:
    """The input hop of the role `m`: its delta sender, hop plan (keyframes, epochs) and sequence numbers."""

    def __init__(self, m) -> None:
        self.m = m
        cfg = m.cfg
        self.sender = HopSettings.from_delta(cfg.delta, cfg.mode).sender(0)  # the input hop (uint8 frame)
        self.hop_plan = HopPlanner(m.W, cfg.mode, cfg.delta.keyframe_every)
        self.pacer = pacer_for(cfg, 0)  # `local.links: paced`: the input hop waits bytes / rate like a shaped link
        self.seq0 = 0
        self.cut0_shape: tuple = ()
        self.sent_cuts: Optional[List[int]] = None  # the plan of the newest frame sent
        self.outbox: queue.Queue = queue.Queue(1)  # encoded frames waiting for the transmit thread
        self.unsent = 0  # frames queued or on the wire (under `done`)
        self.done = threading.Condition()
        self.threads: List[threading.Thread] = []
        self.link = LinkClock()

    def reset(self) -> None:
        """After a resync every hop starts with a keyframe."""
        self.sender.reset()
        self.seq0 = 0
        self.hop_plan.resync()

    def take(self):
        """The next new frame from the source as (frame, False), or None when there are no more (the run then
        drains); a source failure ends the intake the same way and is reported at the end."""
        m = self.m
        try:
            f = m.feed.take()
        except SourceError as exc:
            m.source_error = str(exc)
            log.error("%s; draining the frames in flight", exc)
            f = None
        with m.cond:
            if f is None:
                m.feed_done = True
                m.cond.notify_all()
                return None
            m.tracker.n_frames = f + 1
            return m.tracker.next_frame()

    def plan(self, f: int, resend: bool) -> List[int]:
        """The cuts frame f runs with: a re-send keeps its plan; a new frame asks the scheduler, and keeps the
        current plan until every worker has built the stages of a new one."""
        m = self.m
        if resend:
            with m.cond:
                return m.tracker.cuts_of(f)
        state = None
        if m.scheduler.needs_state(f):
            with m.cond:
                now = time.time()
                flying, done = m.tracker.state()
            change = m.feed.change(f, m.cfg.group_size) if m.live else None
            state = PipelineState(flying, done, now - m.t_run, change)
        return m.warmer.choose(f, list(m.scheduler.plan_for(f, state).cuts), self.sent_cuts)

    def send(self, f: int, resend: bool) -> None:
        m = self.m
        cuts = self.plan(f, resend)
        keyframe, epochs = self.hop_plan.plan(f, cuts)
        t0 = time.time()
        x = np.ascontiguousarray(m.feed.frame(f)).reshape(self.cut0_shape)
        data = self.sender.encode(x, keyframe=keyframe[0])
        unchanged = not keyframe[0] and self.sender.last_nnz == 0  # empty input delta: every stage skips the frame
        t1 = time.time()
        with m.cond:
            gen = m.tracker.generation
            m.tracker.sent(f, cuts, t0, resend)
            if not resend:
                self.sent_cuts = list(cuts)
            if m.results is not None:
                m.results.sent(f, cuts, m.feed.captured_at.get(f, t0), len(data))
            if m.tracker.completed == 0 and f == 0:
                m.last_event = t0
        task = pb.FrameTask(run_id=m.run_id, generation=gen, frame_id=f, cuts=cuts, keyframe=keyframe,
                            epoch=epochs, hop=0, seq=self.seq0, created_at=t0, sent_at=t1,
                            payload=pb.Tensor(cut=0, data=data, keyframe=keyframe[0], bytes_dense=x.size * 4))
        self.seq0 += 1
        with m.cond:
            m.telemetry.span(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
        self._start()
        with self.done:
            self.unsent += 1
        self.outbox.put((task, x.size * 4, unchanged))
        if m.view is not None:
            m.view.plan = list(cuts)
        m.publish()
        if f % 10 == 0 and not resend:
            log.info("sent frame %d/%s (plan %s, %d bytes, %d completed)", f + 1, m.cfg.frames or "-", cuts,
                     len(data), m.tracker.completed)

    def _start(self) -> None:
        while len(self.threads) < SEND_DEPTH:
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

    def _transmit(self, task, dense: int, unchanged: bool) -> None:
        """Send one encoded frame to worker 0 and account for it; a fault names worker 0, in the task's generation."""
        m = self.m
        f, gen, n = task.frame_id, task.generation, len(task.payload.data)
        with m.cond:
            if gen != m.tracker.generation or m.failure is not None:
                return  # a resync came between: it re-sends the frame
        t1 = time.time()
        task.sent_at = t1
        try:
            if self.pacer is not None:
                self.pacer.wait(task.ByteSize())
            m.links.stubs[0].Process(task, timeout=m.timeout)
        except grpc.RpcError as exc:
            m.fault("worker w0 at %s is down (cannot send frame %d: %s)" % (m.addresses[0], f, net.code_name(exc)),
                    gen)
            return
        t2 = time.time()
        t1 = self.link.busy_start(t1, t2)
        keyframe = bool(task.payload.keyframe)
        with m.cond:
            m.telemetry.span(rpt.StageSpan(f, "m", "send", t1, t2, n))
            m.telemetry.hop("m->w0").add(n, dense, t2 - t1, keyframe)
            m.events.hop_sent("m->w0", n)
            m.scheduler.observe(Transfer(0, n, t2 - t1))
            if not keyframe and m.cfg.delta.skip_unchanged:  # the share of unchanged frames, measured live
                m.scheduler.observe(InputDelta(unchanged))
