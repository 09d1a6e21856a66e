"""The master's lifecycle, as glue: set up, run the frames through the pool, resync after faults, report.

Each job is a part beside it that can be tested alone: `setup` (links, costs, predictors, source, scheduler: the
role takes over what it makes), `sending` (take a frame, plan and route it, send the input hop), `receiving` (the
result and stage streams), `recovery` (resync after a fault, the stall watch), `finishing` (report and exit policy)
and `view` (the live page). Parts never assign into the role: the run's flags change through `runstate.RunState`,
the pool's state is `pool.Pool`'s, and a completed frame goes to the consumers registered with
`delivery.ResultConsumers`."""
from __future__ import annotations

import array
import gc
import logging
import os
import threading
import time
import uuid
from typing import Dict, List, Optional

from cnnvideo.config import Config
from cnnvideo.model.onnx_graph import unpack_outputs
from cnnvideo.plan import schedulers
from cnnvideo.plan.plan import Plan
from cnnvideo.results.progress import ProgressFile
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import convert, net
from cnnvideo.wire import settings

from .calibrating import calibration_report
from .delivery import ResultConsumers
from .events import MasterEvents
from .feed import Feed
from .finishing import Finisher
from .join_server import JoinServer
from .links import MasterError, WorkerLinks
from .outputs import OutputStore
from .pool import Pool
from .pool.joins import Joins
from .recalibration import Recalibration
from .receiving import StreamReader
from .recovery import Recovery, wait_watching
from .results_log import ResultsLog
from .runstate import RunState
from .sending import FrameSender
from .setup import Setup
from .setup_progress import SetupProgress
from .telemetry import Telemetry
from .thumbs import Thumbnails
from .tracking import FrameTracker
from .view import LivePage
from .warming import StageWarmer

log = logging.getLogger(__name__)

__all__ = ["MasterError", "MasterRole", "OutputStore"]


class MasterRole:
    """Owns one run over the configured video: its links, its frame tracker, its output store. The run's flags
    (`cond`, `failure`, ...) are read here and change only through `run`'s methods."""

    def __init__(self, cfg: Config, out_dir: str, run_id: Optional[str] = None) -> None:
        self.cfg = cfg
        self.out = out_dir
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._addresses = list(cfg.cluster.workers)  # the config's; the links' from setup on (workers join)
        self.max_bytes = cfg.max_message_bytes
        self.timeout = cfg.limits.rpc_timeout_s
        self.wait_s = cfg.reliability.peer_wait_s if cfg.reliability.restart else 0.0  # for a restarting peer
        self.links: Optional[WorkerLinks] = None
        self.run = RunState()  # lock, failure, closing, intake ended, start, last progress: the parts end it
        self.tracker = FrameTracker(0, cfg.reliability.retries, cfg.in_flight)
        self.pool = Pool(cfg, self.W)  # membership, routes, input links, results in frame order
        self.delivering = threading.Lock()  # one thread hands results on at a time (never taken holding `cond`)
        self.outputs = OutputStore(os.path.join(out_dir, ".outputs-%s.raw" % self.run_id))
        self.progress = ProgressFile(out_dir, cfg.frames, self.run_id)  # progress.json for tools watching the run
        self.results: Optional[ResultsLog] = None  # opened at the start of the run
        self.weights_used: Optional[str] = None  # which weights the master's check model has
        self.telemetry = Telemetry()  # spans, hop totals, engines (under cond)
        self.feed = Feed(cfg)  # frames as they arrive; pixels held only while in flight
        self.live = cfg.source.mode == "live"  # schedulers see only the past (else offline look-ahead)
        self.capture_latency = array.array("d")  # capture-to-result seconds of completed frames (8 bytes each)
        self.checker = None  # OnlineChecker with check: true
        self.consumers = ResultConsumers()  # where each completed frame goes, in frame order
        self.thumbs = Thumbnails(self.feed.run_length)  # report.html's strip of labelled frames
        self.consumers.register(lambda d: self.thumbs.add(d.frame, d.rgb, d.detections), holding_lock=True)
        self.scheduler: Optional[schedulers.Scheduler] = None
        self.predictors = None
        self.setup_s: Dict[str, float] = {}  # each setup step's time
        self.reference = None  # the unsplit model for the exactness check
        self.onnx_graph = None  # an ONNX model's graph (how its outputs are packed)
        self.calibration = None  # int8: the camera's own calibration (camera_calibration), sent in RunSetup
        self.calibration_report = calibration_report(cfg)  # report.json `int8_calibration`
        self.detecting = None  # MasterDetections for a detector (boxes per frame), None for a classifier
        self.recalibration: Optional[Recalibration] = None  # redoes a stale int8 calibration while the run goes on
        self.restarts = 0
        self.worker_restarts = [0] * self.W
        self.setup_progress = SetupProgress()  # the step setup is in: logged when slow, shown on the live page
        self.setup = Setup(self, self.setup_progress)
        self.warmer = StageWarmer(self.setup.push.prepare)  # a re-plan switches once its stages are built everywhere
        self.sending = FrameSender(self)
        self.reader = StreamReader(self)
        self.recovery = Recovery(self)
        self.joins = JoinServer(self, Joins(self, self.recovery.lock))  # workers joining (cluster.join)
        self.finisher = Finisher(self)
        self.page = LivePage(self)
        self.events = MasterEvents(self)  # events (events.enabled) and the Prometheus metrics (/metrics)

    W = property(lambda self: len(self.addresses))  # workers in the pool (grows as workers join)
    cond = property(lambda self: self.run.cond)
    failure = property(lambda self: self.run.failure)
    closing = property(lambda self: self.run.closing)
    feed_done = property(lambda self: self.run.feed_done)
    source_error = property(lambda self: self.run.source_error)
    interrupted = property(lambda self: self.run.interrupted)
    t_run = property(lambda self: self.run.t_run)
    last_event = property(lambda self: self.run.last_event)

    @property
    def addresses(self) -> List[str]:
        """Each worker's address, by id: the config's, then those that joined."""
        return self.links.addresses if self.links is not None else self._addresses

    infos = property(lambda self: self.links.infos if self.links is not None else [])  # each worker's Info

    def start(self) -> None:
        """Everything before the first frame (see `setup.Setup`); the role takes over what it made. The live page
        and the metrics serve from the start: the page shows setup's progress."""
        self.events.start_metrics()
        self.page.start()
        self.setup_progress.start()
        got = self.setup.run()
        self.links, self.scheduler, self.predictors = got.links, got.scheduler, got.predictors
        self.onnx_graph, self.detecting, self.reference = got.onnx_graph, got.detecting, got.reference
        self.checker, self.weights_used, self.setup_s = got.checker, got.weights_used, got.seconds
        self.calibration, self.telemetry.overheads = got.calibration, got.overheads  # calibration None: the video's
        self.calibration_report = got.calibration_report or self.calibration_report
        self.recalibration = Recalibration.for_run(self, got.graph)  # (int8 on the camera's calibration)
        self.events.start()  # (events.enabled) the events pipeline; MQTT connects in the background
        if self.detecting is None and self.onnx_graph is None:  # a classifier: each result's top-5 in its record
            self.outputs.add_sink(self.tracker.label_top5)

    def serve(self) -> int:
        """Run every frame through the pool, then report; 0 when every frame completed, else MasterError."""
        net.on_signals(self._on_signal)
        try:
            self.count_restarts(self.links.fetch_infos(self.wait_s))  # a worker restarted during setup
            self.setup.check_infos()
            first = self.scheduler.initial_plan() if self.scheduler is not None else None
            self.setup.start_workers(self.setup_msg(0, first), first)  # each builds (or loads) its stage of it
            if first is not None:
                self.warmer.mark_ready(first)
            self.open_streams(0)
        except MasterError as exc:
            if not self.cfg.reliability.restart:
                raise
            self.fault(str(exc), 0)  # the run loop resyncs first, waiting for the worker
        self.setup_progress.done()
        self.results = ResultsLog(os.path.join(self.out, "results.jsonl"), self.cfg.events.camera)
        self.consumers.register(self.results.on_result, holding_lock=True)
        if self.checker is not None:  # outside the lock: an offline check may wait
            checker = self.checker
            self.consumers.register(lambda d: d.rgb is not None and checker.offer(d.frame, d.rgb, d.output),
                                    holding_lock=False)
        # outside the lock too (a snapshot is written on a track's end): a detector's boxes (frame pixels) become
        # tracks, a classifier's top-1 label changes (no boxes)
        self.consumers.register(lambda d: self.events.hook(d.frame, d.captured, d.detections, d.rgb),
                                holding_lock=False)
        # setup's objects (models, graphs: ~200K) move out of the collector's reach: a full collection over them
        # cost 89 ms when one landed inside the run
        gc.collect()
        gc.freeze()
        t0 = self.tracker.t0 = time.time()
        self.run.started(t0)
        self.joins.start()
        self._run_loop()
        wall = time.time() - t0
        if self.failure is None:
            self.sending.drain(self.timeout)  # the last send's accounting (a result can come back before it)
            self.reader.wait_reports(15.0)  # the last stage reports (on their own streams: seconds late on a busy host)
        else:
            self.recovery.name_dead_worker()
        self.reader.deliver(final=True)  # results still held for frame order
        self.run.close()
        self.links.end_run(self.run_id)
        return self.finisher.finish(wall)

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
                wait_watching(self, ready)
                if self.failure is not None or (self.feed_done and tr.done() and tr.pending_fault is None):
                    return
                fault = tr.pending_fault
                nxt = tr.next_frame() if fault is None and tr.retry_q else None
                take = fault is None and nxt is None and not self.feed_done
            if fault is not None:
                self.recovery.recover(fault)
                self.reader.deliver()  # frames dropped by the resync no longer hold later results
            elif take:
                nxt = self.sending.take()
            if nxt is not None:
                self.sending.send(*nxt)

    def _on_signal(self, signum: int) -> None:
        """First signal: take no new frame, drain those in flight, report. A second one stops at once."""
        if self.run.interrupt(signum):
            log.info("signal %d: no new frames; draining %d in flight", signum, self.tracker.in_flight())
            self.feed.stop()
            with self.cond:
                self.cond.notify_all()
        else:
            self.fail("interrupted by signal %d" % signum)

    def setup_msg(self, gen: int, warm: Optional[Plan] = None, worker: int = -1) -> pb.RunSetup:
        return self.setup.run_message(gen, warm, worker)  # (a part of its own: the recovery's tests fake it)

    def open_streams(self, gen: int, only: Optional[List[int]] = None) -> None:
        """The result and stage streams of generation `gen` on every worker of `only` (default all)."""
        with self.cond:
            self.pool.membership.opened_streams(range(self.W) if only is None else only)
        self.links.open_streams(self.run_id, gen, self.reader.results, self.reader.stages, only=only)

    def live_workers(self) -> List[int]:  # the workers frames may go to: all but those left out
        return self.pool.live()

    def settings_pb(self, keys) -> pb.Settings:
        """The master's settings that change results, for a request (a role whose own differ refuses it)."""
        return convert.settings_to_pb(settings.of(self.cfg, keys, "master"))

    def count_restarts(self, restarted: List[int]) -> None:
        if restarted:
            self.warmer.forget()
        for w in restarted:
            self.restarts += 1
            self.worker_restarts[w] += 1

    def fail(self, message: str) -> None:  # the run cannot go on: stop with `message`
        self.run.fail(message)

    def fault(self, message: str, gen: Optional[int] = None, worker: Optional[int] = None,
              epoch: Optional[int] = None) -> None:
        """Something broke in generation `gen` (None = the current one): resync and re-send the frames in flight
        if roles are restarted (reliability.restart), else stop like fail(). Faults of older generations are
        stale (the resync that followed them already re-sent their frames), and so are those of a `worker` a pool
        plan has left out, or of its streams before they were last opened (`epoch`)."""
        with self.cond:
            if gen is not None and gen != self.tracker.generation:
                log.debug("stale fault of generation %d: %s", gen, message)
                return
            if worker is not None and self.pool.membership.stale(worker, epoch):
                log.debug("stale fault of w%d (left out, or streams since reopened): %s", worker, message)
                return
            if not self.cfg.reliability.restart:
                self.run.fail_locked(message)
            elif self.tracker.fault(message, gen):
                log.warning("fault: %s", message)
            self.cond.notify_all()

    def model_outputs(self, y):
        """{output name: array} of a result of a multi-output ONNX model (unpacked), else `y` itself."""
        if self.onnx_graph is not None and len(self.onnx_graph.cuts[-1].tensors) > 1:
            return unpack_outputs(y, self.onnx_graph.cuts[-1])
        return y

    def use_calibration(self, calibration, why: str) -> None:
        """A new int8 calibration takes over (recalibration.py) with a resync, whose StartRun carries it."""
        with self.cond:
            self.calibration = calibration
            self.tracker.fault(why)
            self.cond.notify_all()

    def replan(self, scheduler: schedulers.Scheduler) -> None:  # the pool changed (a worker joined): hold `cond`
        self.scheduler = scheduler

    def stop(self) -> None:
        self.joins.stop()
        self.events.close()  # after a failed run too: the last tracks end and MQTT says `offline`
        self.feed.close()
        if self.checker is not None:
            self.checker.close(timeout=0)
        self.page.stop()
        self.run.close()
        self.outputs.close()
        if self.results is not None:
            self.results.close()
        if self.links is not None:
            self.links.close()
