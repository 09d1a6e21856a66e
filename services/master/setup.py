"""Before the first frame: connect, check the workers, get their costs, load the reference model, get the
predictors, open the source and build the scheduler. A worker or trainer that restarts meanwhile is waited for
(backoff, up to reliability.peer_wait_s)."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set

import grpc
import numpy as np

from cnnvideo.artifacts import onnx_model_path, trains_on_master_frames
from cnnvideo.model.loading import check_weights, load_graph
from cnnvideo.plan import schedulers
from cnnvideo.plan.costinputs import (
    alike_key,
    cpu_model,
    input_stride_exponent,
    master_time,
    payload_share,
    pool_alike,
    without_workers,
)
from cnnvideo.plan.costinputs import build as cost_inputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.predict import Predictors
from cnnvideo.plan.schedulers.registry import WHOLE_MODEL
from cnnvideo.results.exactness import OnlineChecker
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import convert, net
from cnnvideo.video.sources import kind_of
from cnnvideo.wire import settings

from .calibrating import camera_calibration
from .detecting import MasterDetections
from .feed import SourceError
from .links import MasterError, WorkerLinks
from .outputs import OutputStore
from .overhead_meter import Overheads
from .setup_progress import SetupProgress
from .stage_push import StagePush
from .worker_answers import check_infos, codec_times

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0  # servers may still be loading models / profiling
SETUP_TIMEOUT_S = 1800.0  # trainer fitting on a slow machine
# frames a deferred check holds (each an RGB frame: 1 MB at 480x720) before it starts checking during the run
DEFER_QUEUE = 64


@dataclass
class SetupProducts:
    """What setup makes for the run: the role takes them over when setup is done."""

    links: Optional[WorkerLinks] = None
    overheads: Optional[Overheads] = None  # the run's measured overheads, and the stored ones planned with
    weights_used: Optional[str] = None  # the file and hash of the weights the check model has
    onnx_graph: object = None  # an ONNX model's graph (how its outputs are packed)
    detecting: object = None  # MasterDetections for a detector, None for a classifier
    predictors: object = None
    reference: object = None  # the unsplit model for the exactness check
    checker: object = None  # results.exactness.OnlineChecker with check: true
    scheduler: object = None
    costs: list = field(default_factory=list)  # each worker's Costs answer (a worker that joins adds its own)
    calibration: object = None  # int8: the camera's own calibration (camera_calibration), sent in RunSetup
    calibration_report: Optional[dict] = None  # report.json `int8_calibration`, when the camera calibrated
    graph: object = None  # the model graph the camera calibrated on (the master quantizes stages with it)
    seconds: Dict[str, float] = field(default_factory=dict)  # each setup step's time


class Background:
    """A call run on a thread of its own while setup goes on: result() waits for it and returns its value, or raises
    what it raised. A daemon thread: a setup that failed meanwhile does not wait for it at exit."""

    def __init__(self, call: Callable[[], object], name: str) -> None:
        self._value: object = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], object]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # noqa: BLE001 - handed to result()'s caller
            self._error = exc

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value

    def raise_if_failed(self) -> None:
        """Raise what the call raised, if it is over and failed (a refusal is not held until its result is asked)."""
        if not self._thread.is_alive() and self._error is not None:
            raise self._error


class Setup:
    """The master's setup steps, reading the role `m`'s config, feed and settings; what they make is kept in
    `products` (the role takes them over)."""

    def __init__(self, m, progress: SetupProgress) -> None:
        self.m = m
        self.products = SetupProducts()
        self.progress = progress
        self.push = StagePush(m, progress, lambda: self.links)  # int8 stages quantized here, pushed to the workers
        self.answered: Set[int] = set()  # the workers whose Costs answered

    @property
    def links(self) -> WorkerLinks:
        return self.products.links

    def run(self) -> SetupProducts:
        m, cfg, got = self.m, self.m.cfg, self.products
        OutputStore.remove_stale(m.out, keep=m.outputs.path)
        t0 = time.time()
        got.links = WorkerLinks(m.addresses, cfg.cluster.trainer, m.max_bytes, m.timeout, camera=cfg.events.camera)
        with self.progress.step("waiting for the workers and the trainer to serve"):
            self.links.wait_serving(STARTUP_TIMEOUT_S)
            self.links.fetch_infos(m.wait_s)
        self.check_infos()
        self.push.push_profile()  # int8: the whole model quantized here for the workers' profiles (stage_push)
        request = pb.CostRequest(iters=cfg.profile_iters, rescale=cfg.profile_rescale,
                                 settings=m.settings_pb(settings.WORKER_KEYS))
        costs_call = Background(lambda: self.all_costs(request), "costs")  # the workers profile meanwhile
        self.prepare_locally(costs_call.raise_if_failed)
        with self.progress.step("profiling the workers' stages (Costs)",
                                waiting=[w for w in range(m.W) if w not in self.answered]):
            costs = costs_call.result()
        got.costs = list(costs)
        seg_time = self.segment_times(costs)
        got.overheads = self.overheads_of(costs, seg_time)
        got.seconds["connect_info_costs"] = time.time() - t0
        try:
            if m.live:
                m.feed.warm_up(min(cfg.group_size, 8) + 1)
        except SourceError as exc:
            raise MasterError(str(exc)) from None
        if cfg.check:
            self.start_checker()
        got.scheduler = self.scheduler_for(costs, got.overheads, seg_time)
        got.scheduler.initial_plan()
        log.info("setup done in %.1f s: %s source %s (%s mode), %d cuts, scheduler %s", time.time() - t0,
                 m.feed.source.kind, m.feed.source.stats()["video"], "live" if m.live else "offline",
                 len(self.links.infos[0].cuts), cfg.scheduler)
        return got

    def prepare_locally(self, costs_failed: Callable[[], None]) -> None:
        """The steps that need no worker's costs, taken while the workers profile (their Costs: about 20 s at a 0.1
        cap): the model's outputs, the reference model, the predictors, the source, the camera's int8 calibration
        and the whole model's int8 stage on it (the stage every replica of a full replication runs).
        `costs_failed` raises a worker's refusal of its Costs between the steps (not after all of them)."""
        m, cfg, got = self.m, self.m.cfg, self.products
        if onnx_model_path(cfg.model):
            got.weights_used = check_weights(cfg).describe()  # the file and its hash, not the unused `weights` key
            self.load_onnx_outputs()
        else:  # a torchvision detector (packed [rows, 6] output) gets its decoder; a classifier None
            got.detecting = MasterDetections.for_config(cfg.model, cfg.detect, cfg.frame_size)
        costs_failed()
        if cfg.check:  # the reference model is loaded up front: memory does not jump at the end of the run
            with self.progress.step("loading the unsplit model for the check"):
                self.load_reference()
        training = None
        t1 = time.time()
        if trains_on_master_frames(cfg):  # a live source is opened once (here): the trainer fits on its frames
            try:
                m.feed.open()
                training = m.feed.training_frames(cfg.trainer.frames)
            except SourceError as exc:
                raise MasterError(str(exc)) from None
            got.seconds["open_source"] = time.time() - t1
        t2 = time.time()
        costs_failed()
        with self.progress.step("getting the predictors from the trainer"):
            got.predictors = self.get_predictors(training)
        got.seconds["predictors"] = time.time() - t2
        t1 = time.time()
        try:
            if training is None:
                m.feed.open()  # offline: one pass over the clip for its input change (no frames kept)
        except SourceError as exc:
            raise MasterError(str(exc)) from None
        got.seconds["open_source"] = got.seconds.get("open_source", 0.0) + time.time() - t1
        costs_failed()
        if cfg.precision == "int8" and cfg.int8.calibration == "camera":
            t1 = time.time()
            with self.progress.step("int8 calibration on the camera's own frames"):
                self.calibrate()
            got.seconds["int8_calibration"] = time.time() - t1
        costs_failed()
        self.push.configure(got.graph, got.calibration)  # int8: the master quantizes the workers' stages
        if cfg.scheduler in WHOLE_MODEL:  # (a plan given, or one of a chain's schedulers, splits it)
            self.push.build_whole()

    def overheads_of(self, costs, seg_time: Optional[np.ndarray] = None) -> Overheads:
        """The measured overheads of a pool whose workers' profiles are `costs` (and the stored ones it plans with)."""
        cfg = self.m.cfg
        seg_time = self.segment_times(costs) if seg_time is None else seg_time
        return Overheads(cfg, [c.device for c in costs], seg_time, [c.wall_per_cpu for c in costs],
                         [(c.cfs_quota_s, c.cfs_period_s) for c in costs], codec_times(costs, seg_time.shape[1] + 1))

    def segment_times(self, costs) -> np.ndarray:
        """[W, K] seconds of each worker's segments, alike workers with one profile (cost_model.alike_profiles)."""
        seg_time = np.stack([convert.from_array(c.seconds) for c in costs])
        return self.pool_alike(costs, seg_time) if self.m.cfg.cost_model.alike_profiles else seg_time

    def scheduler_for(self, costs, overheads: Optional[Overheads] = None, seg_time: Optional[np.ndarray] = None,
                      gone: Sequence[int] = ()):
        """The scheduler of a pool whose workers' profiles are `costs`: setup's, and a re-plan after a worker
        joined, left or came back (`overheads`: the run's, else a fresh one that only reads the stored figures;
        `seg_time`: their segment_times when already made; `gone`: workers that left, priced out of the plan:
        costinputs.without_workers)."""
        m, cfg, got = self.m, self.m.cfg, self.products
        seg_time = self.segment_times(costs) if seg_time is None else seg_time
        overheads = overheads or self.overheads_of(costs, seg_time)
        codec_time = codec_times(costs, seg_time.shape[1] + 1)
        seg_time, message_us = overheads.plan_inputs(seg_time)
        seg_time, bandwidth = without_workers(seg_time, cfg.bandwidth_bytes(len(costs)), gone)
        dense = np.array([c.bytes_dense for c in self.links.infos[0].cuts], dtype=np.float64)
        frame_nz = m.feed.ahead  # offline look-ahead; None live (the scheduler gets the recent change)
        delta = cfg.mode == "delta"
        inputs = cost_inputs(seg_time, bandwidth, dense, got.predictors, m.feed.mean_change(),
                             *codec_time, delta_mode=delta, share=payload_share(cfg.local.links),
                             turnaround=cfg.cost_model.master_turnaround_s, master_time=master_time(cfg),
                             input_stride_exponent=input_stride_exponent(cfg),
                             p_unchanged=None if delta and cfg.delta.skip_unchanged else 0.0,
                             **cpu_model(costs, cfg.in_flight, cfg.cost_model.net_cpu_ns_per_byte, message_us))
        return schedulers.create(cfg.scheduler, inputs, cfg.in_flight, delta, cfg.scheduler_options,
                                 cfg.group_size, got.predictors, frame_nz)

    def run_message(self, gen: int, warm: Optional[Plan] = None, worker: int = -1) -> pb.RunSetup:
        """StartRun's message for generation `gen` (the workers build their stage of plan `warm` before
        answering), with the pool's addresses; `worker`: the id of the one worker it is for (one that joined),
        else each keeps the id it was started with."""
        m, d = self.m, self.m.cfg.delta
        return pb.RunSetup(run_id=m.run_id, mode=m.cfg.mode, input_threshold=d.input_threshold,
                           threshold=d.threshold, fp16=d.fp16, n_workers=m.W, generation=gen,
                           settings=m.settings_pb(settings.WORKER_KEYS),
                           warm=None if warm is None else convert.stage_plan_to_pb(warm.cuts, warm.stage_of(m.W)),
                           skip_unchanged=d.skip_unchanged, camera=m.cfg.events.camera,
                           workers=m.addresses, worker_id=worker,
                           calibration=(None if m.calibration is None else convert.calibration_to_pb(m.calibration)))

    def start_workers(self, message: pb.RunSetup, plan: Optional[Plan] = None) -> None:
        """StartRun on every worker, at once: each builds its stage of the message's warm plan `plan` before
        answering; an int8 stage is quantized on the master first and its file pushed (stage_push), else the worker
        quantizes it then, when not in its cache."""
        self.push.push(plan)
        with self.progress.step("starting the run: the workers build their stages", range(self.m.W)):
            self.links.start_run(message, timeout=SETUP_TIMEOUT_S, answered=self.progress.answered)

    def calibrate(self) -> None:
        """int8 calibration on this camera's own first frames (calibrating.camera_calibration), for RunSetup."""
        m, got = self.m, self.products
        graph = got.graph = got.onnx_graph if got.onnx_graph is not None else self.push.graph or load_graph(m.cfg)
        # a file is read apart (its frames stay the run's); a stream or device is opened once: its first frames
        # calibrate and the run takes the frames after them
        from_source = kind_of(m.cfg.video) != "file"
        got.calibration, got.calibration_report = camera_calibration(m.cfg, graph, m.feed, from_source)

    def load_reference(self) -> None:
        """The unsplit model the exactness check runs (torch, fp32)."""
        got = self.products
        if got.onnx_graph is not None:  # the unsplit ONNX model in one ORT session (its weights_used: set up above)
            from cnnvideo.model.onnx_stage import OnnxStage

            got.reference = OnnxStage(got.onnx_graph, 0, len(got.onnx_graph.cuts) - 1)
            return
        from cnnvideo.model.engines.torch_engine import TorchStage
        from cnnvideo.model.graph import LayerGraph
        from cnnvideo.model.zoo import load_model

        cfg = self.m.cfg
        model, info = load_model(cfg.model, cfg.weights, cfg.seed)
        got.weights_used = info.describe()
        log.info("weights: %s", got.weights_used)
        graph = LayerGraph.from_model(model, tuple(cfg.frame_size))
        got.reference = TorchStage(graph, 0, len(graph.cuts) - 1)

    def load_onnx_outputs(self) -> None:
        """An ONNX model's graph (its last cut says how the outputs are packed) and, for a detector, the part that
        decodes each result into boxes."""
        cfg, got = self.m.cfg, self.products
        got.onnx_graph = load_graph(cfg)
        last = got.onnx_graph.cuts[-1]
        got.detecting = MasterDetections.for_config(cfg.model, cfg.detect, cfg.frame_size,
                                                    output_names=list(last.tensors))

    def start_checker(self) -> None:
        m, got = self.m, self.products
        block = not m.feed.source.live  # a file read as fast as asked may wait: every sample is checked
        defer = block and m.cfg.check_defer  # held (up to DEFER_QUEUE frames) until the last result
        compare = error = None
        if got.detecting is not None:
            detecting = got.detecting

            def compare(out, ref):
                return detecting.check(m.model_outputs(out), m.model_outputs(ref))

            def error(out, ref):
                return detecting.raw_error(m.model_outputs(out), m.model_outputs(ref))
        got.checker = OnlineChecker(got.reference.run, m.cfg.check_share,
                                  queue=DEFER_QUEUE if defer else 16 if block else 4, block=block, defer=defer,
                                  compare=compare, error=error)

    @staticmethod
    def pool_alike(costs, seg_time: np.ndarray) -> np.ndarray:
        """Alike workers (same device and CPU cap) planned with one profile (costinputs.pool_alike), said in a log
        line with how far apart their own profiles were."""
        keys = [alike_key(c.device, c.cfs_quota_s, c.cfs_period_s) for c in costs]
        pooled_time, groups = pool_alike(seg_time, keys)
        for ws in groups:
            own = seg_time[ws].sum(axis=1)
            log.info("workers %s alike (%s, cap %s): planned with one profile, %.3f s a frame (theirs %s)",
                     ", ".join("w%d" % w for w in ws), costs[ws[0]].device, "%.2f" % (costs[ws[0]].cfs_quota_s /
                     costs[ws[0]].cfs_period_s) if costs[ws[0]].cfs_period_s else "none",
                     float(pooled_time[ws[0]].sum()), ", ".join("%.3f" % t for t in own))
        return pooled_time

    def all_costs(self, request) -> list:
        """Every worker's Costs answer. A rescale times whole passes on the worker now, so it is timed under the
        concurrency the run will have: with more than one frame in flight all workers compute at once (asked
        all at once: on a shared host each sees the others' load), with one they take turns (asked in turn).
        On this 2-core host at caps 0.4 a worker computed 2-3.5x slower while the other computed too."""
        m = self.m
        def ask(w: int):
            answer = self.setup_call(w, "Costs", request, SETUP_TIMEOUT_S)
            self.answered.add(w)
            self.progress.answered(w)
            return answer

        if m.cfg.in_flight <= 1 or m.W <= 1:
            return [ask(w) for w in range(m.W)]
        with ThreadPoolExecutor(max_workers=m.W) as pool:
            futures = [pool.submit(ask, w) for w in range(m.W)]
            return [f.result() for f in futures]

    def setup_call(self, w: int, method: str, request, timeout: float):
        """A setup call to worker w that waits out a restart of it (reliability.restart)."""
        m = self.m
        if m.wait_s > 0:
            return self.links.call_waiting(w, method, request, timeout, m.wait_s)
        return self.links.call(w, method, request, timeout)

    def check_infos(self) -> None:
        m = self.m
        check_infos(self.links.infos, m.cfg.model, m.cfg.frame_size, m.addresses)

    def get_predictors(self, training: Optional[List[np.ndarray]] = None):
        """The trainer's predictors; `training`: the frames it fits on (sent first, again after a restart of it)."""
        m, cfg = self.m, self.m.cfg
        req = pb.PredictorRequest(settings=m.settings_pb(settings.TRAINER_KEYS))
        backoff = net.Backoff(cfg.reliability.peer_wait_s)
        while True:
            try:
                if training is not None:
                    self.links.trainer.PutFrames(self.training_messages(training), timeout=SETUP_TIMEOUT_S)
                msg = self.links.trainer.GetPredictors(req, timeout=SETUP_TIMEOUT_S)
                break
            except grpc.RpcError as exc:
                retry = cfg.reliability.restart and exc.code() in (grpc.StatusCode.UNAVAILABLE,
                                                                   grpc.StatusCode.CANCELLED)
                retry = retry or (training is not None and exc.code() == grpc.StatusCode.NOT_FOUND)  # lost them
                if not retry or not backoff.wait():
                    raise MasterError("trainer at %s: GetPredictors failed: %s" % (cfg.cluster.trainer,
                                                                                   net.code_name(exc))) from None
                log.warning("trainer at %s unavailable (%s); retrying", cfg.cluster.trainer, net.code_name(exc))
        try:
            return Predictors.from_arrays(convert.from_arrays(msg.arrays))
        except ValueError as exc:
            raise MasterError("trainer sent unusable predictors: %s" % exc) from None

    def training_messages(self, frames: List[np.ndarray]):
        """PutFrames' stream: the master's settings on the first frame."""
        for i, rgb in enumerate(frames):
            yield pb.TrainingFrame(settings=self.m.settings_pb(settings.TRAINER_KEYS) if i == 0 else None,
                                   height=rgb.shape[0], width=rgb.shape[1], rgb=np.ascontiguousarray(rgb).tobytes())
