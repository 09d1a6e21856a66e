"""Sending frames: take the next frame from the source, choose its plan, encode the input hop's delta and send
it to worker 0 (paced like a shaped link under `local.links: paced`)."""
from __future__ import annotations

import logging
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
        try:
            if self.pacer is not None:
                self.pacer.wait(task.ByteSize())
            m.links.stubs[0].Process(task, timeout=m.timeout)
        except grpc.RpcError as exc:
            m.fault("worker w0 at %s is down (cannot send frame %d: %s)" % (m.addresses[0], f, net.code_name(exc)),
                    gen)
            return
        t2 = time.time()
        with m.cond:
            m.telemetry.span(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
            m.telemetry.span(rpt.StageSpan(f, "m", "send", t1, t2, len(data)))
            m.telemetry.hop("m->w0").add(len(data), x.size * 4, t2 - t1, keyframe[0])
            m.events.hop_sent("m->w0", len(data))
            m.scheduler.observe(Transfer(0, len(data), t2 - t1))
            if not keyframe[0] and m.cfg.delta.skip_unchanged:  # the share of unchanged frames, measured live
                m.scheduler.observe(InputDelta(unchanged))
        if m.view is not None:
            m.view.plan = list(cuts)
        m.publish()
        if f % 10 == 0 and not resend:
            log.info("sent frame %d/%s (plan %s, %d bytes, %d completed)", f + 1, m.cfg.frames or "-", cuts,
                     len(data), m.tracker.completed)
