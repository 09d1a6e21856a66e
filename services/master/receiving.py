"""The workers' two streams to the master: results (the last worker's output per frame, decoded and recorded)
and stage reports (spans, engines, hop bytes, the compute and transfer times the scheduler observes)."""
from __future__ import annotations

import logging
import threading
import time

import grpc
import numpy as np

from cnnvideo.plan.schedulers import Compute, Transfer
from cnnvideo.results import report as rpt
from cnnvideo.rpc import net
from cnnvideo.wire.hop import HopReceiver

from .delivery import Completed
from .outputs import OutputError

log = logging.getLogger(__name__)


class StreamReader:
    """Reads one generation's streams of worker w into the role `m` (its tracker, outputs, telemetry)."""

    def __init__(self, m) -> None:
        self.m = m
        self.reports = 0  # stage reports of frames taken in (under m.cond)

    def results(self, w: int, call, gen: int) -> None:
        m = self.m
        receiver = HopReceiver(m.max_bytes)  # one per stream: the worker's result sender starts with a keyframe
        name = "worker w%d at %s" % (w, m.addresses[w])
        who = dict(worker=w, epoch=m.pool.membership.stream_epochs[w])  # opened just before this thread started
        y = None  # the stream's previous result: an unchanged one (an empty update) is reused as it is
        try:
            for res in call:
                if res.run_id != m.run_id or res.generation != gen:
                    log.warning("ignoring a result of run %s generation %d from w%d", res.run_id, res.generation, w)
                    continue
                now = time.time()
                try:
                    out = receiver.decode(res.output.data)
                    reused = receiver.last_unchanged and y is not None
                    if not reused:
                        y = np.array(out, copy=True)
                except ValueError as exc:
                    m.fault("worker w%d sent an undecodable result for frame %d: %s" % (w, res.frame_id, exc), gen,
                            **who)
                    return
                if not self._record(w, res, y, gen, now, reused):
                    return
                m.progress.publish(m.tracker)
            if not m.closing:
                m.fault("%s ended its result stream" % name, gen, **who)
        except grpc.RpcError as exc:
            if not m.closing:
                m.fault("%s is down (result stream lost: %s)" % (name, net.code_name(exc)), gen, **who)

    def _record(self, w: int, res, y: np.ndarray, gen: int, now: float, reused: bool = False) -> bool:
        """Record one result (received at `now`, decoded just before this call), then hand on every frame that may
        go on in frame order (ordering.ReorderBuffer); False when a resync made this stream stale."""
        m = self.m
        t_dec = time.time()
        f = res.frame_id
        with m.cond:
            if gen != m.tracker.generation:
                return False  # a resync started: this stream's results are stale
            if not m.tracker.complete(f, gen, w, t_dec):
                log.warning("ignoring duplicate/unexpected result for frame %d from w%d", f, w)
                return True
            rec = m.tracker.records[f]
            rec.reused = reused
            m.pool.dispatcher.release(rec.route)
            try:
                m.outputs.put(f, y)
            except OutputError as exc:
                m.run.fail_locked(str(exc))
            captured = m.feed.captured_at.get(f, t_dec)
            m.capture_latency.append(t_dec - captured)
            m.events.processed(captured, t_dec)
            m.run.progressed(now)
            hop = "w%d->m" % w
            m.telemetry.hop(hop).add(len(res.output.data), res.output.bytes_dense, now - res.sent_at,
                                     res.output.keyframe)
            m.events.hop_sent(hop, len(res.output.data))
            m.telemetry.span(rpt.StageSpan(f, "m", "receive", res.sent_at, now, len(res.output.data)))
            m.telemetry.span(rpt.StageSpan(f, "m", "decode", now, t_dec))
            m.pool.ordering.add(f, (y, reused, captured, t_dec, hop, len(res.output.data)))
            m.cond.notify_all()
        self.deliver()
        return True

    def deliver(self, final: bool = False) -> None:
        """Hand on, in frame order, the completed frames no earlier frame in flight holds back, or with `final`
        (the end of the run) all of them (call without holding `cond`; one caller at a time, so the order holds
        across the result streams)."""
        m = self.m
        with m.delivering:
            with m.cond:
                ready = m.pool.ordering.drain() if final else m.pool.ordering.pop_ready(m.tracker.oldest_pending())
            for f, item in ready:
                self._deliver(f, *item)

    def _deliver(self, f: int, y: np.ndarray, reused: bool, captured: float, t_dec: float, hop: str,
                 nbytes: int) -> None:
        """One completed frame, decoded into boxes for a detector, to the consumers registered for results
        (delivery.ResultConsumers); the feed then lets go of its pixels."""
        m = self.m
        with m.cond:
            done = Completed(f, y, reused, captured, t_dec, hop, nbytes, rgb=m.feed.pixels.get(f),
                             detections=m.detecting.frame(f, m.model_outputs(y)) if m.detecting is not None else None,
                             top5=m.tracker.records[f].top5 or [])
            m.consumers.deliver_locked(done)
            m.feed.release(f)
        m.consumers.deliver_unlocked(done)

    def wait_reports(self, timeout: float) -> None:
        """At the end of the run, wait up to `timeout` for the stage reports still on their way: a worker reports its
        stage after it has forwarded the frame, so the last stage's result can reach the master before the reports
        of the stages before it (the report would then count none of them: a skipped stage went missing)."""
        m = self.m
        with m.cond:
            want = sum(len(r.route) for r in m.tracker.records.values() if r.status == "completed")
            m.cond.wait_for(lambda: self.reports >= want or m.failure is not None, timeout)

    def stages(self, w: int, call, gen: int) -> None:
        m = self.m
        actor = "w%d" % w
        name = "worker w%d at %s" % (w, m.addresses[w])
        who = dict(worker=w, epoch=m.pool.membership.stream_epochs[w])
        try:
            for rep in call:
                if rep.run_id != m.run_id or rep.generation != gen:
                    continue
                if rep.error:
                    m.fault("worker w%d reports: %s" % (w, rep.error), gen, **who)
                    continue
                if rep.leaving:  # SIGTERM on the worker: drained, then left out (in a thread: it waits)
                    threading.Thread(target=m.recovery.replicas.leave, args=(w, gen), name="leave-w%d" % w,
                                     daemon=True).start()
                    continue
                with m.cond:
                    if gen != m.tracker.generation:
                        return
                    self._stage_report(w, actor, rep)
                    self.reports += 1
                    m.cond.notify_all()
            if not m.closing:
                m.fault("%s ended its stage stream" % name, gen, **who)
        except grpc.RpcError as exc:
            if not m.closing:
                m.fault("%s is down (stage stream lost: %s)" % (name, net.code_name(exc)), gen, **who)

    def _stage_report(self, w: int, actor: str, rep) -> None:
        """Spans, engine, hop bytes and observations of one StageReport (holding the role's lock)."""
        m = self.m
        m.run.progressed()
        if rep.engine:
            m.telemetry.engine(w, rep.engine, rep.engine_note)
        m.events.stage_report(w, rep)
        if m.telemetry.overheads is not None:
            m.telemetry.overheads.stage_report(w, rep)
        for st in rep.stages:
            m.telemetry.span(rpt.StageSpan(rep.frame_id, actor, st.stage, st.start, st.end, st.bytes, st.cpu))
            if st.stage == "compute":
                m.telemetry.compute(w, rep.start_cut, rep.end_cut, st.end - st.start, rep.skipped)
                if not rep.skipped:  # a skipped stage says nothing about the stage's speed
                    m.scheduler.observe(Compute(w, rep.start_cut, rep.end_cut, st.end - st.start))
        if rep.end_cut < len(m.infos[0].cuts) - 1 and 0 <= rep.hop_out < m.W:  # forwarded (else: to the master)
            send = [st for st in rep.stages if st.stage == "send"]
            wire = (send[0].end - send[0].start) if send else 0.0
            hop = "w%d->w%d" % (w, rep.hop_out)
            m.telemetry.hop(hop).add(rep.bytes_out, rep.dense_out, wire, rep.keyframe_out)
            m.events.hop_sent(hop, rep.bytes_out)
            if m.results is not None:
                m.results.hop(rep.frame_id, hop, rep.bytes_out)
            m.scheduler.observe(Transfer(rep.hop_out, rep.bytes_out, wire))
