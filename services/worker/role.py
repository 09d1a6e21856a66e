"""Worker i: loads the model, profiles its segments (cached), runs per-frame plans and forwards to worker i+1."""
from __future__ import annotations

import itertools
import logging
import os
import socket
import sys
import threading
import time
import uuid
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from cnnvideo import artifacts
from cnnvideo.config import Config
from cnnvideo.cpucap import cfs_quota
from cnnvideo.model.engines import EngineError, cpu_threads, factory_for, ort_available
from cnnvideo.model.engines.auto import AutoStages, auto_factories
from cnnvideo.model.engines.stage_files import StageFileError, StageInbox, assemble, header
from cnnvideo.model.loading import load_graph
from cnnvideo.plan.profiling import (
    WorkerProfile,
    device_tag,
    fastest_profile,
    profile_worker,
    senders_for,
)
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net
from cnnvideo.rpc.link import LinkError, send_with_retry
from cnnvideo.wire.protocol import check_stage_of

from . import messages
from .peers import Peers
from .runloop import EmitError, Run, RunSettings, StagePlan, StaleError, Task
from .servicer import WorkerServicer

log = logging.getLogger(__name__)

LEAVE_DRAIN_S = 60.0  # a leaving worker waits this long at most for its masters to end its runs


def costs_cache_path(cfg: Config, host: str, engine: str = "torch-fp32", worker: int = 0,
                     cap: Tuple[float, float] = (0.0, 0.0)) -> str:
    """Cache file of worker `worker`'s profile on `engine` (engine-precision, the one that really runs) under CPU
    cap `cap` (CFS quota, period), named by cnnvideo.artifacts with this process's torch and engine threads."""
    return artifacts.profile_path(cfg, host, torch_threads(), engine, worker, cap,
                                  cpu_threads(cfg.engine_options.threads))


def torch_threads() -> int:
    """torch's intra-op threads in this process, without importing torch when OMP_NUM_THREADS says it (as in the
    images and `cnnvideo local`): an ONNX Runtime worker never needs torch, and its import is 1.4 s of CPU, 14 s of a
    joining worker's start under a 0.1 cap."""
    if "torch" not in sys.modules:
        try:
            threads = int(os.environ.get("OMP_NUM_THREADS", ""))
        except ValueError:
            threads = 0
        if threads > 0:
            return threads
    import torch

    return torch.get_num_threads()


def engine_label(stages=None) -> str:
    """engine-precision a profile is kept under: the stages' (engines.StageFactory), torch where ORT is missing."""
    if stages is None:
        return "torch-fp32"
    ok = stages.spec.engine == "torch" or ort_available()[0]
    return "%s-%s" % (stages.spec.engine if ok else "torch", stages.precision)


def profile_cached(cfg: Config, graph, host: str, refresh: bool = False, stages=None, worker: int = 0,
                   cap: Optional[Tuple[float, float]] = None) -> Tuple[WorkerProfile, bool]:
    """This worker's profile (segment compute, hop codec) from the on-disk cache, else measured and stored; with
    `stages` (engines.StageFactory) on its engine and precision. The file is this worker's own (its id and the CPU
    cap it sees, `cap` or read now, are in the name), so a neighbour on the same host never hands it a profile
    measured under another cap; either way one log line says what was used."""
    path = costs_cache_path(cfg, host, engine_label(stages), worker, cfs_quota() if cap is None else cap)
    k = len(graph.cuts) - 1
    if not refresh and os.path.isfile(path):
        try:
            with np.load(path, allow_pickle=False) as data:
                prof = WorkerProfile.from_arrays({n: data[n] for n in data.files}, k)
            log.info("profile of %d segments loaded from %s: %.3f s compute per frame, wall/CPU %.2f", k, path,
                     float(prof.seconds.sum()), prof.wall_per_cpu)
            return prof, True
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:  # truncated, bad CRC, ...
            log.warning("cached profile %s is damaged (%s: %s); profiling again", path, type(exc).__name__, exc)

    t0 = time.time()
    prof = profile_worker(graph, cfg.profile_iters, senders_for(cfg.delta), cfg.max_message_bytes, stages=stages)
    log.info("profiled %d segments in %.1f s: %.3f s compute per frame, codec %.3f s encode / %.3f s decode over "
             "all cuts, wall/CPU %.2f", k, time.time() - t0, float(prof.seconds.sum()), float(prof.encode.sum()),
             float(prof.decode.sum()), prof.wall_per_cpu)
    tmp = artifacts.atomic_tmp(path)
    with open(tmp, "wb") as fh:
        np.savez(fh, **prof.to_arrays())
    os.replace(tmp, path)
    return prof, False


class WorkerRole:
    """Owns one worker's model, server, and the current run."""

    def __init__(self, cfg: Config, worker_id: int, listen: str = "", address: str = "") -> None:
        """Worker `worker_id` of the config's `cluster.workers`; or, with `listen` (and the `address` it is reached
        at), one that joins a running pool (`worker_id` -1 until the master assigns one: `joined`)."""
        if not listen and not 0 <= worker_id < cfg.n_workers:
            raise ValueError("worker id %d is not in the chain of %d workers" % (worker_id, cfg.n_workers))
        self.cfg = cfg
        self.worker_id = worker_id
        self.listen = listen or cfg.cluster.workers[worker_id]
        self.address = address or self.listen
        self.next_address = cfg.cluster.workers[worker_id + 1] if 0 <= worker_id < cfg.n_workers - 1 else ""
        self.peers = Peers(cfg)  # the workers this one sends to (its route's next stage)
        self.host = os.environ.get("CNNVIDEO_HOST") or socket.gethostname()
        self.device = device_tag()  # with the CPU cap: which workers the cost model takes as alike
        self.graph = None
        self.costs: Optional[WorkerProfile] = None
        self.costs_cached = False
        self.cfs: Tuple[float, float] = (0.0, 0.0)  # CFS (quota, period) seconds of this container's CPU cap
        self.stages = None  # engines.StageFactory: this worker's stages on its engine (the video's calibration)
        self.calibrated: Dict[str, object] = {}  # calibration digest -> the factory of its int8 stages
        self.camera_stages: Dict[str, object] = {}  # camera -> the factory its run uses
        self.engine_available = True
        self.inbox = StageInbox()  # stage files the master built (int8: quantized there), until a build takes one
        self.runs: Dict[str, Run] = {}  # camera -> its run (a single-camera master's camera is "")
        self.preparing: Dict[Tuple[int, int, int], str] = {}  # (cuts, factory) building in the background -> error
        self.lock = threading.Lock()
        self.profiling = threading.Lock()  # one profile at a time (a joining worker's, on its first Costs)
        self.stopping = threading.Event()
        self.server: Optional[net.Server] = None
        self.instance = uuid.uuid4().hex[:12]  # tells the master this process is not the one it saw before

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        # bind the port first: it was picked free moments ago (`cnnvideo local`), and another run on the host could
        # take it while the model loads (13 s under load); it answers once the servicer is in and it is started
        self.server = net.Server(self.listen, self.cfg.max_message_bytes, threads=16, service_name="cnnvideo.Worker")
        t0 = time.time()
        self.graph = load_graph(self.cfg)
        log.info("worker %d: %s loaded, %d cuts, frame %dx%d (%.1f s)", self.worker_id, self.cfg.model,
                 len(self.graph.cuts), self.cfg.frame_size[0], self.cfg.frame_size[1], time.time() - t0)
        if self.cfg.engine == "auto":
            self.stages = AutoStages(auto_factories(self.cfg, self.graph))
        else:
            self.stages = factory_for(self.cfg, self.graph)
        for factory in (self.stages.factories.values() if isinstance(self.stages, AutoStages) else [self.stages]):
            factory.inbox = self.inbox
        self.engine_available = self.cfg.engine in ("torch", "auto") or ort_available()[0]
        if not self.engine_available:
            if self.cfg.engine_options.on_error == "stop":
                raise EngineError("worker %d: engine %s asked for: %s" % (self.worker_id, self.cfg.engine,
                                                                           ort_available()[1]))
            log.warning("worker %d: %s; stages run on torch", self.worker_id, ort_available()[1])
        self.cfs = cfs_quota()
        cached = os.path.isfile(self._costs_path())
        # int8 on ONNX Runtime, not profiled yet: the profile's whole-model int8 stage may come from the master
        # (stage_files; it pushes it before its first Costs), so profile then, not before serving
        wait_for_file = (self.cfg.precision == "int8" and self.cfg.engine != "torch"
                         and self.cfg.int8.quantize == "master")
        if cached or (self.worker_id >= 0 and not wait_for_file):
            self.costs, self.costs_cached = self._profile()
        elif self.worker_id >= 0:
            log.info("worker %d: not profiled yet: profiling on the master's first Costs (its int8 file first)",
                     self.worker_id)
        # else (joining, not profiled here before): the master plans it with an alike member's profile, or asks
        # Costs, which profiles then (minutes on a capped device: not before the join)
        pb_grpc.add_WorkerServicer_to_server(WorkerServicer(self), self.server.grpc)
        self.server.start()
        if self.worker_id >= 0:
            log.info("worker %d ready on %s (%d workers in the cluster)", self.worker_id, self.address,
                     self.cfg.n_workers)
        else:
            log.info("worker ready on %s, reached at %s: joining the pool", self.listen, self.address)

    def joined(self, worker_id: int) -> None:
        """The master took this worker into its pool as `worker_id`."""
        self.worker_id = worker_id

    def serve(self) -> None:
        """Serve until a signal. The first one drains: each master is told that this worker leaves, routes it no new
        frame, and ends its run once the frames routed here are done (up to LEAVE_DRAIN_S); a second signal stops
        at once."""
        signals: List[int] = []
        net.on_signals(signals.append)
        while not signals and not self.stopping.wait(0.5):
            pass
        with self.lock:
            runs = [r for r in self.runs.values() if r.streams > 0]  # runs a master still reads
        if runs and len(signals) == 1:
            t0 = time.time()
            log.info("worker %d: leaving the pool: draining the frames of %d run(s)", self.worker_id, len(runs))
            for run in runs:
                run.announce_leaving()
            while len(signals) == 1 and time.time() - t0 < LEAVE_DRAIN_S:
                with self.lock:
                    if not any(r.streams > 0 for r in self.runs.values()):
                        break  # every run ended by its master (or its master is gone)
                time.sleep(0.1)
            with self.lock:
                left = sum(r.streams > 0 for r in self.runs.values())
            log.info("worker %d: left the pool after %.1f s%s", self.worker_id, time.time() - t0,
                     " (%d run(s) not ended by their master)" % left if left else ", every run ended by its master")
        self.stopping.set()
        log.info("worker %d: shutting down", self.worker_id)

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            runs, self.runs = list(self.runs.values()), {}
        for run in runs:
            run.close()
        if self.server is not None:
            self.server.stop(grace=1.0)
        self.peers.close()

    # ------------------------------------------------------------------ plain operations behind the servicer
    def _costs_path(self) -> str:
        """Where profile_cached keeps this worker's profile (engine auto: the first engine's)."""
        factory = next(iter(self.stages.factories.values())) if isinstance(self.stages, AutoStages) else self.stages
        return costs_cache_path(self.cfg, self.host, engine_label(factory), self.worker_id, self.cfs)

    def profiled(self) -> WorkerProfile:
        """This worker's profile, measured now if it was not at start (a joining worker's first Costs)."""
        with self.profiling:
            if self.costs is None:
                self.costs, self.costs_cached = self._profile()
            return self.costs

    def refresh_costs(self) -> None:
        """Profile again, ignoring the cache (Costs(refresh=true)), under the CPU cap seen now."""
        self.cfs = cfs_quota()
        self.costs, self.costs_cached = self._profile(refresh=True)

    def _profile(self, refresh: bool = False) -> Tuple[WorkerProfile, bool]:
        """(this worker's profile, from the cache?) on its engine; with `engine: auto` one profile per engine it has
        (each cached as its own), handed to the stages' choice, and the planner's profile is each segment's
        fastest (`fastest_profile`)."""
        if not isinstance(self.stages, AutoStages):
            return profile_cached(self.cfg, self.graph, self.host, refresh, self.stages, self.worker_id, self.cfs)
        profiles, cached = {}, True
        for label, factory in self.stages.factories.items():
            profiles[label], hit = profile_cached(self.cfg, self.graph, self.host, refresh, factory, self.worker_id,
                                                  self.cfs)
            cached = cached and hit
        self.stages.set_costs({label: p.seconds for label, p in profiles.items()})
        log.info("worker %d: engine auto, whole model per engine: %s", self.worker_id,
                 ", ".join("%s %.4f s" % (label, float(p.seconds.sum())) for label, p in profiles.items()))
        return fastest_profile(profiles), cached

    def forward(self, start: int, end: int, x: np.ndarray, stages=None) -> np.ndarray:
        """The stage's compute: segments start..end-1 on x, on this worker's engine (one stage per range); `stages`:
        the factory of the run's calibration (default the worker's own)."""
        return (stages or self.stages).stage(start, end).run(x)

    def describe(self, start: int, end: int, stages=None) -> Tuple[str, str]:
        """(engine-precision, why not the one asked for; with `engine: auto`, why this one: the times compared) of
        the stage start..end."""
        stages = stages or self.stages
        st = stages.stage(start, end)
        why = stages.choose(start, end)[1] if isinstance(stages, AutoStages) else ""
        reason = st.reason or stages.int8_failed
        return "%s-%s" % (st.engine, st.precision), "; ".join(x for x in (why, reason) if x)

    def stages_for(self, calibration) -> object:
        """The factory whose int8 stages use `calibration` (one per digest, kept); the worker's own without one or
        on fp32. ValueError (one line) when the calibration is of another model or frame size."""
        if calibration is None or self.cfg.precision != "int8":
            return self.stages
        with self.lock:
            stages = self.calibrated.get(calibration.digest)
        if stages is None:
            try:
                stages = self.stages.with_calibration(calibration)
            except EngineError as exc:
                log.warning("worker %d: %s", self.worker_id, exc)
                raise ValueError(str(exc)) from None
            log.info("worker %d: int8 calibration %s of %s (%d frames) for this run's stages", self.worker_id,
                     calibration.digest, calibration.source, len(calibration.jpegs))
            with self.lock:
                stages = self.calibrated.setdefault(calibration.digest, stages)
        return stages

    def put_stage(self, messages) -> str:
        """Take a stage file the master pushed (PutStage's chunks): checked (stage_files.header, then assemble) and
        kept for the build of that stage and key; one line saying what was taken. A stage of that key already in the
        cache is answered on the header alone, and the rest of the stream is not read (its bytes are not sent: a
        join of a worker that has its stage costs no push). StageFileError (one line) when refused."""
        messages = iter(messages)
        first = next(messages, None)
        try:
            if first is None:
                raise StageFileError("empty stage file stream")
            head = header(first)
            if head.end > self.graph.num_segments:
                raise StageFileError("stage %d..%d is not a stage of this model (%d segments)"
                                     % (head.start, head.end, self.graph.num_segments))
            path = artifacts.onnx_stage_path(artifacts.onnx_dir(self.cfg.cache_dir), head.start, head.end,
                                             head.precision, head.key)
            if os.path.isfile(path):  # built or taken before (its key is in the name): the data is not needed
                label = "%s: already in the cache" % head.label(int(first.size))
                log.info("worker %d: %s; its data not taken from the master", self.worker_id, label)
                return label
            f = assemble(itertools.chain([first], messages))
        except StageFileError as exc:
            log.warning("worker %d: stage file from the master refused: %s", self.worker_id, exc)
            raise
        self.inbox.put(f)
        log.info("worker %d: %s received from the master", self.worker_id, f.label())
        return f.label()

    def _emit(self, task: Task) -> None:
        """Hand a task to the worker its route names for the next stage (the engine's `emit`). While it is
        unreachable (down, restarting, or the hop cut off) try again with backoff on a fresh channel, up to
        reliability.peer_wait_s, as long as the task's run is still the current one and the master has not left the
        receiver out (Run.peer); EmitError if it stays unreachable or refuses."""
        backoff = net.Backoff(self.cfg.reliability.peer_wait_s if self.cfg.reliability.restart else 0.0)
        dest = task.receiver()
        msg = messages.task_to_pb(task)
        run = self.find(task.run_id)
        address = run.address_of(dest, self.cfg.cluster.workers) if run is not None else ""
        if not address:
            raise EmitError("cannot forward frame %d to worker w%d: no address for it in run %s"
                            % (task.frame_id, dest, task.run_id))
        pacer = self.peers.pacer(dest)
        if pacer is not None:  # `local.links: paced`: the hop out waits bytes / rate, like a shaped link
            pacer.wait(msg.ByteSize())

        def current() -> bool:
            run = self.find(task.run_id)
            return (run is not None and run.generation == task.generation and not run.link_dropped(task)
                    and not self.stopping.is_set())

        try:
            ack = send_with_retry(lambda: self.peers.stub(address), msg, self.cfg.limits.rpc_timeout_s, backoff,
                                  current, lambda stub: self.peers.renew(address, stub),
                                  lambda problem: "cannot forward frame %d to worker w%d at %s: %s" % (
                                      task.frame_id, dest, address, problem))
        except LinkError as exc:
            raise EmitError(str(exc)) from None
        if not ack.ok:
            raise EmitError("worker w%d refused frame %d: %s" % (dest, task.frame_id, ack.message))

    def start_run(self, setup: RunSettings) -> None:
        """Start (or restart at a new generation) a run: fresh hop state on both sides, a fresh channel on."""
        if not setup.workers and setup.n_workers != self.cfg.n_workers:
            raise ValueError("master has %d workers, this worker's config has %d" % (setup.n_workers,
                                                                                     self.cfg.n_workers))
        if setup.workers and len(setup.workers) != setup.n_workers:
            raise ValueError("master has %d workers but lists %d" % (setup.n_workers, len(setup.workers)))
        with self.lock:
            old = self.runs.get(setup.camera)
        # a resync names no id: this worker keeps the one its camera's master gave it (joined), else its own
        wid = setup.worker_id if setup.worker_id >= 0 else old.worker_id if old is not None else self.worker_id
        if not 0 <= wid < setup.n_workers:
            raise ValueError("worker id %d is not in the master's pool of %d" % (wid, setup.n_workers))
        if setup.warm is not None:
            try:
                stage = self.stage_of(setup.warm, wid, setup.n_workers)
            except ValueError as exc:
                raise ValueError("warm: %s" % exc) from None
        stages = self.stages_for(setup.calibration)

        def forward(start: int, end: int, x: np.ndarray) -> np.ndarray:
            return self.forward(start, end, x, stages)

        def describe(start: int, end: int) -> Tuple[str, str]:
            return self.describe(start, end, stages)

        with self.lock:
            self.camera_stages[setup.camera] = stages
            old = self.runs.pop(setup.camera, None)
            if old is not None:
                old.close()
            if not self.runs:  # (another camera's run may have calls on the channels)
                self.peers.renew_all()  # fresh channels: no reconnect backoff left over from a restarted neighbour
            emit = self._emit
            self.runs[setup.camera] = Run(setup, wid, [c.shape for c in self.graph.cuts], forward,
                                          emit, self.cfg.max_message_bytes, quant=stages.qparams,
                                          describe=describe)
        log.info("worker %d: run %s generation %d started (%s mode)", wid, setup.run_id, setup.generation,
                 setup.hops.mode)
        if setup.warm is not None:
            self._warm(stage, stages, wid)

    def stage_of(self, plan: StagePlan, wid: int, n_workers: int) -> Tuple[int, int]:
        """(start, end) cuts of the stage of worker `wid` (this worker's id in the run) in `plan` of a pool of
        `n_workers`; (0, 0) when the plan leaves this worker out. ValueError when the plan does not fit the pool."""
        cuts = list(plan.cuts)
        s = check_stage_of(cuts, list(plan.stage_of), n_workers, len(self.graph.cuts) - 1)[wid]
        return (int(cuts[s]), int(cuts[s + 1])) if s >= 0 else (0, 0)

    def _warm(self, stage: Tuple[int, int], stages, wid: int) -> None:
        """Build this worker's stage (start, end) now (engines cache it), not when its first frame arrives; a
        stage that cannot be built is left to fail (or fall back) there, as without warming."""
        start, end = stage
        if end <= start:
            return
        t0 = time.time()
        try:
            st = stages.stage(start, end)
        except EngineError as exc:
            log.warning("worker %d: stage %d..%d not built before the run: %s", wid, start, end, exc)
            return
        log.info("worker %d: stage %d..%d ready on %s-%s before the run (%.2f s)", wid, start, end,
                 st.engine, st.precision, time.time() - t0)

    def prepare(self, plan: StagePlan, camera: str = "", calibration=None) -> Tuple[bool, str]:
        """(ready, error) of this worker's stage of `plan`; a stage not built yet starts building in a background
        thread (once), and frames of the current plan run meanwhile. `error` says why the stage cannot be built
        (engine_options.on_error: stop). `calibration`: build it on that int8 calibration (a camera's new one,
        before its run switches to it) instead of the run's. ValueError when the plan does not fit the cluster or
        the calibration is of another model or frame size."""
        with self.lock:
            stages = self.camera_stages.get(camera, self.stages)  # `camera`: whose run (its calibration's stages)
            run = self.runs.get(camera)
        if calibration is not None:
            stages = self.stages_for(calibration)
        wid, n = (run.worker_id, run.n_workers) if run is not None else (self.worker_id, self.cfg.n_workers)
        try:
            key = self.stage_of(plan, wid, n)
        except ValueError as exc:
            raise ValueError("prepare: %s" % exc) from None
        if key[1] <= key[0] or stages.built(*key):
            return True, ""
        building = key + (id(stages),)  # (the same cuts on another calibration are another stage)
        with self.lock:
            error = self.preparing.get(building)
            if error is None:
                self.preparing[building] = ""
                threading.Thread(target=self._prepare, args=key + (stages,), name="prepare-%d-%d" % key,
                                 daemon=True).start()
        return False, error or ""

    def _prepare(self, start: int, end: int, stages) -> None:
        """Build stage start..end (the body of prepare's thread); a failure is kept for the next prepare."""
        t0 = time.time()
        building = (start, end, id(stages))
        try:
            st = stages.stage(start, end)
        except Exception as exc:  # EngineError, or a bug: either way the master must hear why, not wait forever
            with self.lock:
                self.preparing[building] = "stage %d..%d: %s" % (start, end, exc)
            log.warning("worker %d: stage %d..%d cannot be built: %s", self.worker_id, start, end, exc)
            return
        with self.lock:
            self.preparing.pop(building, None)
        log.info("worker %d: stage %d..%d built in the background on %s-%s (%.2f s)", self.worker_id, start, end,
                 st.engine, st.precision, time.time() - t0)

    def find(self, run_id: str) -> Optional[Run]:
        """The run `run_id` if this worker holds it (one run per camera), else None."""
        for run in list(self.runs.values()):
            if run.run_id == run_id:
                return run
        return None

    def current(self, run_id: str) -> Run:
        run = self.find(run_id)
        if run is None:
            raise LookupError("no run %r on worker %d (current: %s)" % (
                run_id, self.worker_id, ", ".join(r.run_id for r in list(self.runs.values())) or "none"))
        return run

    def peer(self, run_id: str, generation: int, worker: int, out: bool, address: str = "") -> None:
        """The master left replica `worker` of run `run_id` out (`out`) or took it back (or, with `address`, it
        joined): the links with it start over (Run.peer), on a fresh channel. LookupError without that run,
        StaleError at another generation, ValueError for a worker the run does not have (or a joined one's id that
        is not the run's next)."""
        run = self.current(run_id)
        if generation != run.generation:
            raise StaleError("peer change of generation %d, run %s on worker %d is at generation %d"
                             % (generation, run_id, self.worker_id, run.generation))
        run.peer(worker, out, address)
        self.peers.renew(run.address_of(worker, self.cfg.cluster.workers))

    def end_run(self, run_id: str) -> None:
        with self.lock:
            for camera, run in list(self.runs.items()):
                if run.run_id == run_id:
                    run.close()
                    del self.runs[camera]
