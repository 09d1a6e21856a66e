"""The master's lifecycle, as glue: set up, run the frames through the chain, resync after faults, report.

Each job is a part beside it that can be tested alone: `setup` (links, costs, predictors, source, scheduler),
`sending` (take a frame, plan it, send the input hop), `receiving` (the result and stage streams), `recovery`
(resync after a fault, the stall watch), `finishing` (report and exit policy) and `view` (the live page). The
state they share lives here: `tracking` (frame records, in flight, re-sends, generations), `links`, `outputs`,
`results` (results.jsonl), `telemetry` (spans, hop totals, engines) and `thumbs` (report.html's strip)."""
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
from cnnvideo.plan import schedulers
from cnnvideo.plan.plan import Plan
from cnnvideo.results import labels
from cnnvideo.results.progress import ProgressFile
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import convert, net
from cnnvideo.wire import settings

from . import reporting
from .calibrating import calibration_report
from .events import MasterEvents
from .feed import Feed
from .finishing import Finisher
from .links import MasterError, WorkerLinks
from .outputs import OutputStore
from .pool import Pool
from .receiving import StreamReader
from .recovery import Recovery, wait_watching
from .results_log import ResultsLog
from .sending import FrameSender
from .setup import SETUP_TIMEOUT_S, Setup
from .telemetry import Telemetry
from .thumbs import Thumbnails
from .tracking import FrameTracker
from .view import LivePage, ViewState
from .warming import StageWarmer

log = logging.getLogger(__name__)

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
        self.wait_s = cfg.reliability.peer_wait_s if cfg.reliability.restart else 0.0  # for a restarting peer
        self.links: Optional[WorkerLinks] = None
        self.cond = threading.Condition()
        self.failure: Optional[str] = None
        self.closing = False
        self.tracker = FrameTracker(0, cfg.reliability.retries, cfg.in_flight)
        self.pool = Pool(cfg, self.W)  # membership, routes, input links, results in frame order
        self.delivering = threading.Lock()  # one thread hands results on at a time (never taken holding `cond`)
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
        self.scheduler: Optional[schedulers.Scheduler] = None
        self.predictors = None
        self.setup_s: Dict[str, float] = {}
        self.t_run = 0.0
        self.reference = None  # the unsplit model for the exactness check
        self.onnx_graph = None  # an ONNX model's graph (how its outputs are packed)
        self.calibration = None  # int8: the camera's own calibration (camera_calibration), sent in RunSetup
        self.calibration_report = calibration_report(cfg)  # report.json `int8_calibration`
        self.detecting = None  # MasterDetections for a detector (boxes per frame), None for a classifier
        self.restarts = 0
        self.worker_restarts = [0] * self.W
        # a re-plan switches once every worker has built its stages (asked through the links made by start())
        self.warmer = StageWarmer(lambda plan: self.links.prepare(plan, self.live_workers()))
        self.setup = Setup(self)
        self.sending = FrameSender(self)
        self.reader = StreamReader(self)
        self.recovery = Recovery(self)
        self.finisher = Finisher(self)
        self.page = LivePage(self)
        self.events = MasterEvents(self)  # events (events.enabled) and the Prometheus metrics (/metrics)

    @property
    def infos(self) -> List[pb.WorkerInfo]:
        return self.links.infos if self.links is not None else []

    def start(self) -> None:
        """Everything before the first frame (see `setup.Setup`)."""
        self.setup.run()

    def serve(self) -> int:
        """Run every frame through the chain, then report; 0 when every frame completed, else MasterError."""
        net.on_signals(self._on_signal)
        self.page.start()
        try:
            self.count_restarts(self.links.fetch_infos(self.wait_s))  # a worker restarted during setup
            self.setup.check_infos()
            self.links.start_run(self.setup_msg(0, self._first_plan()), timeout=SETUP_TIMEOUT_S)
            if self._first_plan() is not None:
                self.warmer.mark_ready(self._first_plan())  # StartRun's warm plan built it
            self.open_streams(0)
        except MasterError as exc:
            if not self.cfg.reliability.restart:
                raise
            self.fault(str(exc), 0)  # the run loop resyncs first, waiting for the worker
        self.results = ResultsLog(os.path.join(self.out, "results.jsonl"), self.cfg.events.camera)
        # setup's objects (models, graphs: ~200K) move out of the collector's reach: a full collection over them
        # cost 89 ms when one landed inside the run
        gc.collect()
        gc.freeze()
        t0 = self.t_run = self.tracker.t0 = time.time()
        self._run_loop()
        wall = time.time() - t0
        if self.failure is None:
            self.sending.drain(self.timeout)  # the last send's accounting (a result can come back before it)
        else:
            self.recovery.name_dead_worker()
        self.reader.deliver(final=True)  # results still held for frame order
        with self.cond:
            self.closing = True
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
        if self.interrupted is None:
            self.interrupted = signum
            log.info("signal %d: no new frames; draining %d in flight", signum, self.tracker.in_flight())
            self.feed.stop()
            with self.cond:
                self.cond.notify_all()
        else:
            self.fail("interrupted by signal %d" % signum)

    def setup_msg(self, gen: int, warm: Optional[Plan] = None) -> pb.RunSetup:
        """StartRun's message for generation `gen` (the workers build their stage of plan `warm` before
        answering)."""
        d = self.cfg.delta
        return pb.RunSetup(run_id=self.run_id, mode=self.cfg.mode, input_threshold=d.input_threshold,
                           threshold=d.threshold, fp16=d.fp16, n_workers=self.W, generation=gen,
                           settings=self.settings_pb(settings.WORKER_KEYS),
                           warm=None if warm is None else convert.stage_plan_to_pb(warm.cuts, warm.stage_of(self.W)),
                           skip_unchanged=d.skip_unchanged, camera=self.cfg.events.camera,
                           calibration=(None if self.calibration is None
                                        else convert.calibration_to_pb(self.calibration)))

    def _first_plan(self) -> Optional[Plan]:
        """The scheduler's first plan (the workers build its stages before the run), None if there is none."""
        return self.scheduler.initial_plan() if self.scheduler is not None else None

    def open_streams(self, gen: int, only: Optional[List[int]] = None) -> None:
        """The result and stage streams of generation `gen` on every worker of `only` (default all)."""
        with self.cond:
            self.pool.membership.opened_streams(range(self.W) if only is None else only)
        self.links.open_streams(self.run_id, gen, self.reader.results, self.reader.stages, only=only)

    def live_workers(self) -> List[int]:
        """The workers frames may go to: all but those left out after a fault."""
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

    def fail(self, message: str) -> None:
        """The run cannot go on: stop with `message`."""
        with self.cond:
            if self.failure is None:
                self.failure = message
                log.debug("failure: %s", message)
            self.cond.notify_all()

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
            if worker is not None and (worker in self.pool.membership.out or
                                       (epoch is not None and epoch != self.pool.membership.stream_epochs[worker])):
                log.debug("stale fault of w%d (left out, or streams since reopened): %s", worker, message)
                return
            if not self.cfg.reliability.restart:
                if self.failure is None:
                    self.failure = message
            elif self.tracker.fault(message, gen):
                log.warning("fault: %s", message)
            self.cond.notify_all()

    def model_outputs(self, y):
        """{output name: array} of a result of a multi-output ONNX model (unpacked), else `y` itself."""
        if self.onnx_graph is not None and len(self.onnx_graph.cuts[-1].tensors) > 1:
            from cnnvideo.model.onnx_graph import unpack_outputs

            return unpack_outputs(y, self.onnx_graph.cuts[-1])
        return y

    def events_hook(self, frame: int, capture_time: float, detections=None, rgb=None) -> list:
        """One completed frame into the events pipeline (call without holding `cond`): `capture_time` in epoch
        seconds (feed.captured_at), `detections` a detector's decoded List[Detection] in frame pixels, or None
        for a classifier (its top-1 label from the frame record's top5 then makes "label changed" events),
        `rgb` the frame's pixels (H x W x 3 uint8) for snapshots, or None. Returns the frame's events."""
        return self.events.hook(frame, capture_time, detections, rgb)

    def _label(self, frame: int, output) -> None:
        """Output-store sink: the frame's top-5 (index, ImageNet name, softmax score) into its record (a classifier's
        outputs only)."""
        rec = self.tracker.records.get(frame)
        if rec is not None and self.detecting is None and self.onnx_graph is None:
            rec.top5 = [list(t) for t in labels.topk(output, 5)]

    def plan_layers(self, cuts: List[int]) -> List[List[str]]:
        return reporting.plan_layers(self.infos[0], cuts, self.W)

    def publish(self, state: str = "running") -> None:
        """Rewrite progress.json (cnnvideo.results.progress) from the tracker's counters."""
        tr = self.tracker
        self.progress.update(state=state, sent=tr.next_new, completed=tr.completed, dropped=tr.dropped,
                             generation=tr.generation)

    def stop(self) -> None:
        self.events.close()  # after a failed run too: the last tracks end and MQTT says `offline`
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
