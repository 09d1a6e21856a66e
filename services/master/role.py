"""The master's lifecycle: set up (workers, costs, video, predictors, scheduler), run the frames through the
chain, resync after faults, report. The parts it glues live beside it: `tracking` (frame records, in flight,
re-sends, generations), `links` (channels, setup calls, streams, resync), `outputs` (the output store), `results`
(results.jsonl, a line per finished frame with its top-5), `checks` (the workers' setup answers), `telemetry`
(spans, hop totals, engines), `thumbs` (report.html's strip) and `reporting` (report.json's per-frame parts)."""
from __future__ import annotations

import array
import logging
import os
import threading
import time
import uuid
from typing import Dict, List, Optional, Sequence

import grpc
import numpy as np

from cnnvideo.config import Config
from cnnvideo.master import reporting
from cnnvideo.master.checks import check_infos, codec_times
from cnnvideo.master.feed import Feed, SourceError
from cnnvideo.master.links import MasterError, WorkerLinks
from cnnvideo.master.outputs import OutputError, OutputStore
from cnnvideo.master.results import ResultsLog
from cnnvideo.master.telemetry import Telemetry
from cnnvideo.master.thumbs import Thumbnails
from cnnvideo.master.tracking import FrameTracker
from cnnvideo.master.view import ViewState, describe
from cnnvideo.master.warming import StageWarmer
from cnnvideo.plan import schedulers
from cnnvideo.plan.costinputs import build as cost_inputs
from cnnvideo.plan.costinputs import cpu_model, payload_share
from cnnvideo.plan.schedulers import Compute, InputDelta, PipelineState, Transfer
from cnnvideo.results import labels
from cnnvideo.results import report as rpt
from cnnvideo.results.progress import ProgressFile
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import convert, net
from cnnvideo.wire import settings
from cnnvideo.wire.hop import HopReceiver
from cnnvideo.wire.pacing import pacer_for
from cnnvideo.wire.protocol import HopPlanner, HopSettings

log = logging.getLogger(__name__)

# frames a deferred check holds (each an RGB frame: 1 MB at 480x720) before it starts checking during the run
DEFER_QUEUE = 64

STARTUP_TIMEOUT_S = 600.0  # servers may still be loading models / profiling
SETUP_TIMEOUT_S = 1800.0  # trainer fitting on a slow machine

__all__ = ["MasterError", "MasterRole", "OutputStore"]


class MasterRole:
    """Owns one run over the configured video: its links, its frame tracker, its output store."""

    def __init__(self, cfg: Config, out_dir: str, run_id: Optional[str] = None) -> None:
        self.cfg = cfg
        self.out = out_dir
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.W = cfg.n_workers
        self.addresses = list(cfg.cluster.workers)
        self.max_bytes = cfg.max_message_bytes
        self.timeout = cfg.limits.rpc_timeout_s
        self.wait_s = cfg.reliability.reconnect_s if cfg.reliability.restart else 0.0  # for a restarting peer
        self.links: Optional[WorkerLinks] = None
        self.cond = threading.Condition()
        self.failure: Optional[str] = None
        self.closing = False
        self.tracker = FrameTracker(0, cfg.reliability.retries, cfg.in_flight)
        self.outputs = OutputStore(os.path.join(out_dir, ".outputs-%s.raw" % self.run_id))
        self.progress = ProgressFile(out_dir, cfg.frames, self.run_id)  # progress.json for tools watching the run
        self.outputs.add_sink(self._label)
        self.results: Optional[ResultsLog] = None  # opened at the start of the run
        self.weights_used: Optional[str] = None  # which weights the master's check model has
        self.telemetry = Telemetry()  # spans, hop totals, engines (under cond)
        self.last_event = time.time()
        self.feed = Feed(cfg)  # frames as they arrive; pixels held only while in flight
        self.live = cfg.source.mode == "live"  # schedulers see only the past (else offline look-ahead)
        self.feed_done = False  # no new frames: the run has its frames, the source ended or a signal came
        self.source_error: Optional[str] = None
        self.interrupted: Optional[int] = None  # the signal that ended the run
        self.capture_latency = array.array("d")  # capture-to-result seconds of completed frames (8 bytes each)
        self.checker = None  # OnlineChecker with check: true
        self.view: Optional[ViewState] = None
        self.live_view = None
        self.thumbs = Thumbnails()  # report.html's strip of labelled frames
        self.pacer = pacer_for(cfg, 0)  # `local.links: paced`: the input hop waits bytes / rate like a shaped link
        self.scheduler: Optional[schedulers.Scheduler] = None
        self.predictors = None
        self.setup_s: Dict[str, float] = {}
        self.t_run = 0.0
        self.reference = None  # whole-model executor for the exactness check
        self.restarts = 0
        self.worker_restarts = [0] * self.W
        settings = HopSettings.from_delta(cfg.delta, cfg.mode)
        self.sender = settings.sender(0)  # the input hop (uint8 frame)
        self.hop_plan = HopPlanner(self.W, cfg.mode, cfg.delta.keyframe_every)
        self.seq0 = 0
        self.cut0_shape: tuple = ()
        # a re-plan switches once every worker has built its stages (asked through the links made by start())
        self.warmer = StageWarmer(lambda cuts: self.links.prepare(cuts))
        self.sent_cuts: Optional[List[int]] = None  # the plan of the newest frame sent

    @property
    def infos(self) -> List[pb.WorkerInfo]:
        return self.links.infos if self.links is not None else []

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        """Connect, check the workers, get their costs, get predictors, open the source (live: take a few frames
        to see the input change), build the scheduler. A worker or trainer that restarts meanwhile is waited for
        (backoff, up to reliability.reconnect_s)."""
        OutputStore.remove_stale(self.out, keep=self.outputs.path)
        t0 = time.time()
        self.links = WorkerLinks(self.addresses, self.cfg.cluster.trainer, self.max_bytes, self.timeout)
        self.links.wait_serving(STARTUP_TIMEOUT_S)
        self.links.fetch_infos(self.wait_s)
        self._check_infos()
        self.cut0_shape = tuple(self.infos[0].cuts[0].shape)
        request = pb.CostRequest(iters=self.cfg.profile_iters, rescale=self.cfg.profile_rescale,
                                 settings=self._settings(settings.WORKER_KEYS))
        costs = self._all_costs(request)
        seg_time = np.stack([convert.from_array(c.seconds) for c in costs])
        codec_time = codec_times(costs, seg_time.shape[1] + 1)
        self.setup_s["connect_info_costs"] = time.time() - t0
        if self.cfg.check:  # the reference model is loaded up front: memory does not jump at the end of the run
            from cnnvideo.model.executor import StageExecutor
            from cnnvideo.model.graph import LayerGraph
            from cnnvideo.model.zoo import load_model

            model, info = load_model(self.cfg.model, self.cfg.weights, self.cfg.seed)
            self.weights_used = info.describe()
            log.info("weights: %s", self.weights_used)
            graph = LayerGraph.from_model(model, tuple(self.cfg.frame_size))
            self.reference = StageExecutor(graph, 0, len(graph.cuts) - 1)
        t2 = time.time()
        self.predictors = self._get_predictors()
        self.setup_s["predictors"] = time.time() - t2
        t1 = time.time()
        try:
            self.feed.open()  # offline: one pass over the clip for its input change (no frames kept)
            if self.live:
                self.feed.warm_up(min(self.cfg.group_size, 8) + 1)
        except SourceError as exc:
            raise MasterError(str(exc)) from None
        self.setup_s["open_source"] = time.time() - t1
        if self.cfg.check:
            from cnnvideo.results.checking import OnlineChecker

            block = not self.feed.source.live  # a file read as fast as asked may wait: every sample is checked
            defer = block and self.cfg.check_defer  # held (up to DEFER_QUEUE frames) until the last result
            self.checker = OnlineChecker(self.reference.run, self.cfg.check_share,
                                         queue=DEFER_QUEUE if defer else 16 if block else 4, block=block, defer=defer)
        dense = np.array([c.bytes_dense for c in self.infos[0].cuts], dtype=np.float64)
        frame_nz = self.feed.ahead  # offline look-ahead; None live (the scheduler gets the recent change)
        delta = self.cfg.mode == "delta"
        mean_nz = self.feed.mean_change()
        inputs = cost_inputs(seg_time, self.cfg.bandwidth_bytes(), dense, self.predictors, mean_nz, *codec_time,
                             delta_mode=delta, share=payload_share(self.cfg.local.links),
                             turnaround=self.cfg.master_turnaround_s,
                             p_unchanged=None if delta and self.cfg.delta.skip_unchanged else 0.0,
                             **cpu_model(costs, self.cfg.in_flight, self.cfg.net_cpu_ns_per_byte,
                                         self.cfg.net_cpu_us_per_message))
        self.scheduler = schedulers.create(self.cfg.scheduler, inputs, self.cfg.in_flight, delta,
                                           self.cfg.scheduler_options, self.cfg.group_size, self.predictors, frame_nz)
        self.scheduler.initial_plan()
        log.info("setup done in %.1f s: %s source %s (%s mode), %d cuts, scheduler %s", time.time() - t0,
                 self.feed.source.kind, self.feed.source.stats()["video"], "live" if self.live else "offline",
                 len(dense), self.cfg.scheduler)

    def _all_costs(self, request) -> list:
        """Every worker's Costs answer. A rescale times whole passes on the worker now, so it is timed under the
        concurrency the run will have: with more than one frame in flight all workers compute at once (asked
        all at once: on a shared host each sees the others' load), with one they take turns (asked in turn).
        On this 2-core host at caps 0.4 a worker computed 2-3.5x slower while the other computed too."""
        if self.cfg.in_flight <= 1 or self.W <= 1:
            return [self._setup_call(w, "Costs", request, SETUP_TIMEOUT_S) for w in range(self.W)]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.W) as pool:
            futures = [pool.submit(self._setup_call, w, "Costs", request, SETUP_TIMEOUT_S) for w in range(self.W)]
            return [f.result() for f in futures]

    def _setup_call(self, w: int, method: str, request, timeout: float):
        """A setup call to worker w that waits out a restart of it (reliability.restart)."""
        if self.wait_s > 0:
            return self.links.call_waiting(w, method, request, timeout, self.wait_s)
        return self.links.call(w, method, request, timeout)

    def _check_infos(self) -> None:
        check_infos(self.infos, self.cfg.model, self.cfg.frame_size, self.addresses)

    def _get_predictors(self):
        from cnnvideo.plan.predict import Predictors

        req = pb.PredictorRequest(settings=self._settings(settings.TRAINER_KEYS))
        backoff = net.Backoff(self.cfg.reliability.reconnect_s)
        while True:
            try:
                msg = self.links.trainer.GetPredictors(req, timeout=SETUP_TIMEOUT_S)
                break
            except grpc.RpcError as exc:
                retry = self.cfg.reliability.restart and exc.code() in (grpc.StatusCode.UNAVAILABLE,
                                                                        grpc.StatusCode.CANCELLED)
                if not retry or not backoff.wait():
                    raise MasterError("trainer at %s: GetPredictors failed: %s" % (self.cfg.cluster.trainer,
                                                                                   net.code_name(exc))) from None
                log.warning("trainer at %s unavailable (%s); retrying", self.cfg.cluster.trainer, net.code_name(exc))
        try:
            return Predictors.from_arrays(convert.from_arrays(msg.arrays))
        except ValueError as exc:
            raise MasterError("trainer sent unusable predictors: %s" % exc) from None

    # ------------------------------------------------------------------ the run
    def _on_signal(self, signum: int) -> None:
        """First signal: take no new frame, drain those in flight, report. A second one stops at once."""
        if self.interrupted is None:
            self.interrupted = signum
            log.info("signal %d: no new frames; draining %d in flight", signum, self.tracker.in_flight())
            self.feed.stop()
            with self.cond:
                self.cond.notify_all()
        else:
            self.fail("interrupted by signal %d" % signum)

    def _start_live_view(self) -> None:
        lv = self.cfg.live_view
        if not lv.port:
            return
        from cnnvideo.results.liveview import LiveView

        self.view = ViewState(["m"] + ["w%d" % w for w in range(self.W)])
        self.telemetry.on_span = self.view.note_span
        self.live_view = LiveView(lv.port, self._view_state, lv.host)
        self.live_view.start()

    def _view_state(self):
        """The live page's JSON (from the HTTP thread)."""
        with self.cond:
            tr = self.tracker
            st = self.feed.source.stats()
            counters = {"mode": "live" if self.live else "offline", "processed": tr.completed,
                        "captured": st["captured"], "skipped": st["skipped"],
                        "skipped_share": round(st["skipped"] / st["captured"], 4) if st["captured"] else None,
                        "in_flight": tr.in_flight(), "dropped": tr.dropped,
                        "plan_layers": " | ".join(str(len(x)) for x in self._plan_layers(self.view.plan))
                        if self.view.plan else ""}
            chk = self.checker.summary() if self.checker is not None else {}
            counters["checked"] = chk.get("checked")
            counters["max_abs_err"] = chk.get("max_abs_err")
            hops = [self.telemetry.hops[n] for n in sorted(self.telemetry.hops)]
            return self.view.state(self.t_run or time.time(), counters, hops, dict)

    def serve(self) -> int:
        net.on_signals(self._on_signal)
        self._start_live_view()
        try:
            self._count_restarts(self.links.fetch_infos(self.wait_s))  # a worker restarted during setup
            self._check_infos()
            self.links.start_run(self._setup_msg(0, self._first_plan()), timeout=SETUP_TIMEOUT_S)
            self.warmer.mark_ready(self._first_plan())  # StartRun's warm_cuts built it
            self.links.open_streams(self.run_id, 0, self._read_results, self._read_stages)
        except MasterError as exc:
            if not self.cfg.reliability.restart:
                raise
            self.fault(str(exc), 0)  # the run loop resyncs first, waiting for the worker
        self.results = ResultsLog(os.path.join(self.out, "results.jsonl"))
        t0 = self.t_run = self.tracker.t0 = time.time()
        self._run_loop()
        wall = time.time() - t0
        if self.failure is not None:
            self._name_dead_worker()
        self._close_run()
        return self._finish(wall)

    def _setup_msg(self, gen: int, warm_cuts: Sequence[int] = ()) -> pb.RunSetup:
        return pb.RunSetup(run_id=self.run_id, mode=self.cfg.mode, input_threshold=self.cfg.delta.input_threshold,
                           threshold=self.cfg.delta.threshold, fp16=self.cfg.delta.fp16, n_workers=self.W,
                           generation=gen, settings=self._settings(settings.WORKER_KEYS), warm_cuts=list(warm_cuts),
                           skip_unchanged=self.cfg.delta.skip_unchanged)

    def _first_plan(self) -> List[int]:
        """The cuts of the scheduler's first plan (the workers build those stages before the run), [] if none."""
        return list(self.scheduler.initial_plan().cuts) if self.scheduler is not None else []

    def _settings(self, keys) -> pb.Settings:
        """The master's settings that change results, for a request (a role whose own differ refuses it)."""
        return convert.settings_to_pb(settings.of(self.cfg, keys, "master"))

    def _count_restarts(self, restarted: List[int]) -> None:
        if restarted:
            self.warmer.forget()
        for w in restarted:
            self.restarts += 1
            self.worker_restarts[w] += 1

    def _read_results(self, w: int, call, gen: int) -> None:
        receiver = HopReceiver(self.max_bytes)  # one per stream: the worker's result sender starts with a keyframe
        name = "worker w%d at %s" % (w, self.addresses[w])
        y = None  # the stream's previous result: an unchanged one (an empty update) is reused as it is
        try:
            for res in call:
                now = time.time()
                if res.run_id != self.run_id or res.generation != gen:
                    log.warning("ignoring a result of run %s generation %d from w%d", res.run_id, res.generation, w)
                    continue
                try:
                    out = receiver.decode(res.output.data)
                    reused = receiver.last_unchanged and y is not None
                    if not reused:
                        y = np.array(out, copy=True)
                except ValueError as exc:
                    self.fault("worker w%d sent an undecodable result for frame %d: %s" % (w, res.frame_id, exc), gen)
                    return
                t_dec = time.time()
                with self.cond:
                    if gen != self.tracker.generation:
                        return  # a resync started: this stream's results are stale
                    if not self.tracker.complete(res.frame_id, gen, w, t_dec):
                        log.warning("ignoring duplicate/unexpected result for frame %d from w%d", res.frame_id, w)
                        continue
                    self.tracker.records[res.frame_id].reused = reused
                    try:
                        self.outputs.put(res.frame_id, y)
                    except OutputError as exc:
                        self.failure = self.failure or str(exc)
                    f = res.frame_id
                    captured = self.feed.captured_at.get(f, t_dec)
                    self.capture_latency.append(t_dec - captured)
                    if self.view is not None:
                        self.view.note_result(f, t_dec - captured, describe(y), t_dec)
                        if self.live_view is not None:
                            self.live_view.set_frame(self.feed.pixels.get(f))
                    rgb = self.feed.pixels.get(f)
                    self.thumbs.add(f, rgb)
                    self.feed.release(f)
                    self.last_event = now
                    self.telemetry.hop("w%d->m" % w).add(len(res.output.data), res.output.bytes_dense,
                                                         now - res.sent_at, res.output.keyframe)
                    if self.results is not None:
                        self.results.result(res.frame_id, t_dec, self.tracker.records[res.frame_id].top5 or [],
                                            "w%d->m" % w, len(res.output.data), reused)
                    self.telemetry.span(rpt.StageSpan(res.frame_id, "m", "receive", res.sent_at, now,
                                                      len(res.output.data)))
                    self.telemetry.span(rpt.StageSpan(res.frame_id, "m", "decode", now, t_dec))
                    self.cond.notify_all()
                if self.checker is not None and rgb is not None:  # outside the lock: an offline check may wait
                    self.checker.offer(f, rgb, y)
                self._publish()
            if not self.closing:
                self.fault("%s ended its result stream" % name, gen)
        except grpc.RpcError as exc:
            if not self.closing:
                self.fault("%s is down (result stream lost: %s)" % (name, net.code_name(exc)), gen)

    def _read_stages(self, w: int, call, gen: int) -> None:
        actor = "w%d" % w
        name = "worker w%d at %s" % (w, self.addresses[w])
        try:
            for rep in call:
                if rep.run_id != self.run_id or rep.generation != gen:
                    continue
                if rep.error:
                    self.fault("worker w%d reports: %s" % (w, rep.error), gen)
                    continue
                with self.cond:
                    if gen != self.tracker.generation:
                        return
                    self.last_event = time.time()
                    if rep.engine:
                        self.telemetry.engine(w, rep.engine, rep.engine_note)
                    for st in rep.stages:
                        self.telemetry.span(rpt.StageSpan(rep.frame_id, actor, st.stage, st.start, st.end, st.bytes))
                        if st.stage == "compute":
                            self.telemetry.compute(w, rep.start_cut, rep.end_cut, st.end - st.start, rep.skipped)
                            if not rep.skipped:  # a skipped stage says nothing about the stage's speed
                                self.scheduler.observe(Compute(w, rep.start_cut, rep.end_cut, st.end - st.start))
                    if rep.hop_out < self.W:
                        send = [st for st in rep.stages if st.stage == "send"]
                        wire = (send[0].end - send[0].start) if send else 0.0
                        self.telemetry.hop("w%d->w%d" % (w, rep.hop_out)).add(rep.bytes_out, rep.dense_out, wire,
                                                                              rep.keyframe_out)
                        if self.results is not None:
                            self.results.hop(rep.frame_id, "w%d->w%d" % (w, rep.hop_out), rep.bytes_out)
                        self.scheduler.observe(Transfer(rep.hop_out, rep.bytes_out, wire))
            if not self.closing:
                self.fault("%s ended its stage stream" % name, gen)
        except grpc.RpcError as exc:
            if not self.closing:
                self.fault("%s is down (stage stream lost: %s)" % (name, net.code_name(exc)), gen)

    def fail(self, message: str) -> None:
        """The run cannot go on: stop with `message`."""
        with self.cond:
            if self.failure is None:
                self.failure = message
                log.debug("failure: %s", message)
            self.cond.notify_all()

    def fault(self, message: str, gen: Optional[int] = None) -> None:
        """Something broke in generation `gen` (None = the current one): resync and re-send the frames in flight
        if roles are restarted (reliability.restart), else stop like fail(). Faults of older generations are
        stale (the resync that followed them already re-sent their frames)."""
        with self.cond:
            if gen is not None and gen != self.tracker.generation:
                log.debug("stale fault of generation %d: %s", gen, message)
                return
            if not self.cfg.reliability.restart:
                if self.failure is None:
                    self.failure = message
            elif self.tracker.fault(message, gen):
                log.warning("fault: %s", message)
            self.cond.notify_all()

    def _wait(self, predicate) -> None:
        """Wait (holding cond) until predicate() or a failure; watch for silent workers."""
        stall_s = max(self.cfg.limits.worker_down_s, 1.0)
        next_probe = time.time() + stall_s
        while self.failure is None and not predicate():
            self.cond.wait(0.2)
            now = time.time()
            if self.tracker.in_flight() and now - self.last_event > stall_s and now >= next_probe:
                next_probe = now + stall_s
                gen = self.tracker.generation
                self.cond.release()
                try:
                    dead = self.links.down(timeout=2.0)
                    if dead:
                        self.fault("%s does not answer (no progress for %.0f s)"
                                   % (self.links.name(dead[0]), now - self.last_event), gen)
                    elif now - self.last_event > max(self.timeout, 6 * stall_s):
                        self.fault("no progress for %.0f s with %d frames in flight"
                                   % (now - self.last_event, self.tracker.in_flight()), gen)
                finally:
                    self.cond.acquire()

    def _run_loop(self) -> None:
        """Send new frames and re-sends in order, within the in-flight cap; resync after every fault."""
        tr = self.tracker

        def ready() -> bool:
            if tr.pending_fault is not None:
                return True
            room = tr.cap <= 0 or tr.in_flight() < tr.cap
            if tr.retry_q or not self.feed_done:
                return room
            return tr.done()

        while True:
            with self.cond:
                self._wait(ready)
                if self.failure is not None or (self.feed_done and tr.done() and tr.pending_fault is None):
                    return
                fault = tr.pending_fault
                nxt = tr.next_frame() if fault is None and tr.retry_q else None
                take = fault is None and nxt is None and not self.feed_done
            if fault is not None:
                self._recover(fault)
            elif take:
                nxt = self._take()
            if nxt is not None:
                self._send_frame(*nxt)

    def _take(self):
        """The next new frame from the source as (frame, False), or None when there are no more (the run then
        drains); a source failure ends the intake the same way and is reported at the end."""
        try:
            f = self.feed.take()
        except SourceError as exc:
            self.source_error = str(exc)
            log.error("%s; draining the frames in flight", exc)
            f = None
        with self.cond:
            if f is None:
                self.feed_done = True
                self.cond.notify_all()
                return None
            self.tracker.n_frames = f + 1
            return self.tracker.next_frame()

    def _plan(self, f: int, resend: bool) -> List[int]:
        if resend:  # a re-send keeps the frame's plan
            with self.cond:
                return self.tracker.cuts_of(f)
        state = None
        if self.scheduler.needs_state(f):
            with self.cond:
                now = time.time()
                flying, done = self.tracker.state()
            change = self.feed.change(f, self.cfg.group_size) if self.live else None
            state = PipelineState(flying, done, now - self.t_run, change)
        return self.warmer.choose(f, list(self.scheduler.plan_for(f, state).cuts), self.sent_cuts)

    def _send_frame(self, f: int, resend: bool) -> None:
        cuts = self._plan(f, resend)
        keyframe, epochs = self.hop_plan.plan(f, cuts)
        t0 = time.time()
        x = np.ascontiguousarray(self.feed.frame(f)).reshape(self.cut0_shape)
        data = self.sender.encode(x, keyframe=keyframe[0])
        unchanged = not keyframe[0] and self.sender.last_nnz == 0  # empty input delta: every stage skips the frame
        t1 = time.time()
        with self.cond:
            gen = self.tracker.generation
            self.tracker.sent(f, cuts, t0, resend)
            if not resend:
                self.sent_cuts = list(cuts)
            if self.results is not None:
                self.results.sent(f, cuts, self.feed.captured_at.get(f, t0), len(data))
            if self.tracker.completed == 0 and f == 0:
                self.last_event = t0
        task = pb.FrameTask(run_id=self.run_id, generation=gen, frame_id=f, cuts=cuts, keyframe=keyframe,
                            epoch=epochs, hop=0, seq=self.seq0, created_at=t0, sent_at=t1,
                            payload=pb.Tensor(cut=0, data=data, keyframe=keyframe[0], bytes_dense=x.size * 4))
        self.seq0 += 1
        try:
            if self.pacer is not None:
                self.pacer.wait(task.ByteSize())
            self.links.stubs[0].Process(task, timeout=self.timeout)
        except grpc.RpcError as exc:
            self.fault("worker w0 at %s is down (cannot send frame %d: %s)" % (self.addresses[0], f,
                                                                              net.code_name(exc)), gen)
            return
        t2 = time.time()
        with self.cond:
            self.telemetry.span(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
            self.telemetry.span(rpt.StageSpan(f, "m", "send", t1, t2, len(data)))
            self.telemetry.hop("m->w0").add(len(data), x.size * 4, t2 - t1, keyframe[0])
            self.scheduler.observe(Transfer(0, len(data), t2 - t1))
            if not keyframe[0] and self.cfg.delta.skip_unchanged:  # the share of unchanged frames, measured live
                self.scheduler.observe(InputDelta(unchanged))
        if self.view is not None:
            self.view.plan = list(cuts)
        self._publish()
        if f % 10 == 0 and not resend:
            log.info("sent frame %d/%s (plan %s, %d bytes, %d completed)", f + 1, self.cfg.frames or "-", cuts,
                     len(data), self.tracker.completed)

    # ------------------------------------------------------------------ faults: resync and re-send
    def _recover(self, fault: str) -> None:
        """After `fault`: start a new generation, wait (with backoff, up to reliability.reconnect_s) until every
        worker serves, detect restarted ones, reset every hop state on both sides (all hops keyframe) and queue
        the frames that were in flight for re-sending (or drop those out of retries)."""
        rel = self.cfg.reliability
        with self.cond:
            gen, again, dropped = self.tracker.resync(fault)
            for f in dropped:
                log.error("frame %d dropped: %s", f, self.tracker.records[f].reason)
                self.feed.release(f)
        log.warning("resync %d (generation %d): %s; %d frames to re-send", self.tracker.resyncs, gen, fault,
                    len(again))
        self.links.cancel_streams()
        backoff = net.Backoff(rel.reconnect_s)
        while self.failure is None:
            down = self.links.down()
            if not down:
                try:
                    self._resync(gen)
                    break
                except (MasterError, grpc.RpcError) as exc:
                    problem = str(exc) if isinstance(exc, MasterError) else net.code_name(exc)
                    self.links.cancel_streams()
            else:
                problem = "%s is down" % self.links.name(down[0])
            if not backoff.wait():
                self.fail("%s and did not come back within %.0f s (fault: %s)" % (problem, rel.reconnect_s, fault))
                return
        with self.cond:
            self.last_event = time.time()

    def _resync(self, gen: int) -> None:
        """Fresh channels (no reconnect backoff), restart detection, StartRun(gen) everywhere, new streams; then
        every hop starts with a keyframe (fresh runs on the workers, a reset input sender here)."""
        for w in range(self.W):
            self.links.refresh(w)
        self._count_restarts(self.links.fetch_infos())
        self._check_infos()
        self.links.start_run(self._setup_msg(gen))
        self.links.open_streams(self.run_id, gen, self._read_results, self._read_stages)
        self.sender.reset()
        self.seq0 = 0
        self.hop_plan.resync()
        log.info("resynchronised at generation %d: every hop starts with a keyframe", gen)

    def _name_dead_worker(self) -> None:
        """Make the failure line name the worker that is down, if one is."""
        down = self.links.down()
        if down:
            tag = "%s is down" % self.links.name(down[0])
            if not self.failure.startswith(tag):
                self.failure = "%s: %s" % (tag, self.failure)

    def _close_run(self) -> None:
        with self.cond:
            self.closing = True
        self.links.end_run(self.run_id)

    # ------------------------------------------------------------------ results
    def _check_results(self) -> Optional[float]:
        """Let the online checker finish what is queued; record each checked frame's error."""
        if self.checker is None:
            return None
        self.checker.close()
        for f, err in self.checker.errors.items():
            rec = self.tracker.records.get(f)
            if rec is not None:
                rec.error = err
        s = self.checker.summary()
        log.info("checked %d of %d results online against the unsplit model (share %g, %d missed): max abs error "
                 "%s", s["checked"], self.tracker.completed, s["share"], s["missed"], s["max_abs_err"])
        if self.checker.problem:
            self.failure = self.failure or self.checker.problem
        return s["max_abs_err"]

    def _label(self, frame: int, output: np.ndarray) -> None:
        """Output-store sink: the frame's top-5 (index, ImageNet name, softmax score) into its record."""
        rec = self.tracker.records.get(frame)
        if rec is not None:
            rec.top5 = [list(t) for t in labels.topk(output, 5)]

    def _plan_layers(self, cuts: List[int]) -> List[List[str]]:
        return reporting.plan_layers(self.infos[0], cuts, self.W)

    def _finish(self, wall: float) -> int:
        self.feed.close()  # the capture stops: frames still queued count as skipped (captured = taken + skipped)
        max_err = self._check_results()
        n_frames = self.tracker.n_frames
        self.agreement = self.checker.agreement() if self.checker is not None else (None, None)
        tr = self.tracker
        main_plan = tr.main_plan(self.W)
        tel = self.telemetry
        hops = tel.chain_hops(self.W)
        records = tr.ordered()
        extra = {
            "run_id": self.run_id,
            "frame_size": list(self.cfg.frame_size),
            "weights": self.cfg.weights,
            "in_flight": self.cfg.in_flight,
            "group_size": self.cfg.group_size,
            "bandwidth_MBps": list(self.cfg.bandwidth),
            "cuts": main_plan,
            "cut_names": [self.infos[0].cuts[c].name for c in main_plan],
            "plan_decisions": [{"from_frame": f, "cuts": c} for f, c in self.scheduler.decisions],
            "plan_warming": self.warmer.report(),
            "engine": self.cfg.engine, "precision": self.cfg.precision,
            "engines": tel.engines_report(self.infos, self.W),
            "predicted_period_s": self.scheduler.predicted_period(),
            "setup_s": {k: round(v, 3) for k, v in self.setup_s.items()},
            "error": self.failure or self.source_error,
            "weights_used": self.weights_used,
            "top1_agreement": self.agreement[0],
            "top5_overlap": self.agreement[1],
            "top1_labels": reporting.label_counts(records),
            "thresholds": {"input": self.cfg.delta.input_threshold, "later": self.cfg.delta.threshold},
            "skip_unchanged": self.cfg.delta.skip_unchanged,
            "retried": tr.retried,
            "dropped": tr.dropped,
            "restarts": self.restarts,
            "reliability": {"resyncs": tr.resyncs, "generation": tr.generation,
                            "worker_restarts": {"w%d" % w: n for w, n in enumerate(self.worker_restarts)},
                            "ignored_results": tr.ignored, "retries": self.cfg.reliability.retries,
                            "restart": self.cfg.reliability.restart},
            "per_frame": reporting.per_frame(records),
            "times": reporting.frame_times(records, self.t_run),
            "spans": reporting.span_rows(tel.spans, self.t_run),
        }
        extra.update(self.scheduler.report(n_frames, main_plan))
        extra.update(self._live_extra(wall))
        os.makedirs(self.out, exist_ok=True)
        if self.outputs:  # model outputs of completed frames, in frame order (for cross-run comparisons)
            order = self.outputs.frames()
            self.outputs.save_npy(os.path.join(self.out, "outputs.npy"))
            extra["outputs_frames"] = order if len(order) != n_frames else "all"
        report = rpt.build(frames_total=n_frames, records=records, hops=hops, spans=tel.spans,
                           model=self.cfg.model, mode=self.cfg.mode, scheduler=self.cfg.scheduler,
                           workers=self.addresses, plan_layers=self._plan_layers(main_plan), wall_s=wall,
                           max_abs_err=max_err, extra=extra, stages=tel.stage_totals.summary(),
                           stages_skipped=tel.skips_report(self.W))
        if self.results is not None:
            report["results"] = self.results.close()  # after build: set on the report, not on extra
        rpt.write_json(report, os.path.join(self.out, "report.json"))
        rpt.write_html(report, records, tel.spans, os.path.join(self.out, "report.html"),
                       ["m"] + ["w%d" % w for w in range(self.W)], thumbs=self.thumbs.pick(records))
        self._publish("failed" if self.failure is not None or tr.dropped or report["lost"] else "done")
        log.info("%d/%d frames completed in %.2f s (%.2f fps); report in %s", report["completed"], report["frames"],
                 wall, report["throughput_fps"] or 0.0, self.out)
        if self.failure is not None:
            raise MasterError("%s; %d/%d frames completed" % (self.failure, tr.completed, n_frames))
        if self.source_error is not None:
            raise MasterError("%s; %d/%d frames completed" % (self.source_error, tr.completed, n_frames))
        if self.interrupted is not None and self.cfg.frames > 0 and n_frames < self.cfg.frames:
            raise MasterError("interrupted by signal %d after %d of %d frames (%d completed)"
                              % (self.interrupted, n_frames, self.cfg.frames, tr.completed))
        if tr.dropped:
            first = next(r for r in records if r.status == "dropped")
            raise MasterError("%d frames dropped (frame %d: %s)" % (tr.dropped, first.frame, first.reason))
        if report["lost"]:
            raise MasterError("%d frames lost" % report["lost"])
        return 0

    def _live_extra(self, wall: float):
        """Report fields of the source and real-time figures."""
        st = self.feed.stats(self.tracker.completed)
        done = self.tracker.completed
        return {
            "run_mode": "live" if self.live else "offline",
            "source": st,
            "skipped": st["skipped"],
            "capture_latency_s": rpt.latency_summary(list(self.capture_latency)),
            "processed_fps": round(done / wall, 4) if wall > 0 else None,
            "check": self.checker.summary() if self.checker is not None else None,
            "interrupted_by_signal": self.interrupted,
            "source_error": self.source_error,
            "live_view_port": self.live_view.port if self.live_view is not None else None,
            "das_input_change": ("recent sent frames (running window)" if self.live else "the clip ahead (offline)")
            if self.cfg.scheduler == "das" else None,
        }
    def _publish(self, state: str = "running") -> None:
        """Rewrite progress.json (cnnvideo.results.progress) from the tracker's counters."""
        tr = self.tracker
        self.progress.update(state=state, sent=tr.next_new, completed=tr.completed, dropped=tr.dropped,
                             generation=tr.generation)

    def stop(self) -> None:
        self.feed.close()
        if self.checker is not None:
            self.checker.close(timeout=0)
        if self.live_view is not None:
            self.live_view.stop()
            self.live_view = None
        with self.cond:
            self.closing = True
        self.outputs.close()
        if self.results is not None:
            self.results.close()
        if self.links is not None:
            self.links.close()

