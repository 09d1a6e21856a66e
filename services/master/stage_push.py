"""The master quantizes the int8 stages a plan needs, once per stage, and pushes each file to the workers that run
it, before the StartRun or Prepare that builds it: a capped worker then loads its stage instead of quantizing it
(minutes at 0.1 of a core). Why a push and how a worker checks the file: model/engines/stage_files.py.

It acts with `int8.quantize: master` on `engine: onnxruntime` or `auto`, when ONNX Runtime imports here: the whole
model on the trainer's video's calibration before the workers' Costs (the stage each profiles), and the plan's
stages on the run's calibration (the camera's own; with `int8.calibration: video` the trainer video's) before
StartRun, a joining worker's StartRun,
a replica's return and a re-plan's Prepare (in the background). The stages are built by the same code
as a worker's (ort_engine.stage_file -> _model_bytes -> ort_int8.quantize_stage, the same stage key), in a cache
folder of the master's own (artifacts.served_stages_dir). Anything that fails here only costs the speed-up: the
worker quantizes its stage itself, as before, and says so."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import grpc

from cnnvideo.artifacts import served_stages_dir
from cnnvideo.model.engines import EngineError, factory_for, ort_available
from cnnvideo.model.engines.ort_engine import stage_file
from cnnvideo.model.engines.stage_files import StageFile, chunks
from cnnvideo.model.loading import load_graph
from cnnvideo.plan.plan import Plan
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import net

log = logging.getLogger(__name__)

Stage = Tuple[int, int]
PUSH_RATE = 256 * 1024  # bytes a second a push is given time for at least (on top of the rpc timeout)


def plan_stages(plan, n_workers: int, only: Optional[Sequence[int]] = None) -> Dict[Stage, List[int]]:
    """(start, end) of each stage of `plan` that runs layers -> the workers (of `only`, default all) that run it."""
    plan = plan if isinstance(plan, Plan) else Plan(tuple(int(c) for c in plan))  # (a chain's cuts)
    cuts = list(plan.cuts)
    out: Dict[Stage, List[int]] = {}
    for w, s in enumerate(plan.stage_of(n_workers)):
        if s >= 0 and (only is None or w in only) and cuts[s + 1] > cuts[s]:
            out.setdefault((int(cuts[s]), int(cuts[s + 1])), []).append(w)
    return out


def served_factory(cfg, graph):
    """The StageFactory of the stages the master builds for its workers: ONNX Runtime, in the master's own folder
    (artifacts.served_stages_dir), with the workers' stage keys. calibration_fit builds its check's stages with it,
    so the stage it keeps is the file a push then sends."""
    factory = factory_for(dataclasses.replace(cfg, engine="onnxruntime"), graph)
    factory.cache_dir = served_stages_dir(cfg.cache_dir)
    return factory


class StagePush:
    """Builds (once each) and pushes the int8 stage files of the workers' profiles and of the plans the master
    starts or warms."""

    def __init__(self, m, progress, links: Callable[[], object]) -> None:
        self.m = m
        self.progress = progress
        self.links = links  # the master's WorkerLinks (setup's, then the role's: the same object)
        self.graph = None  # the master's model graph (loaded for the profile stage)
        self.video = None  # StageFactory on the trainer's video's calibration: the workers' profile stage
        self.factory = None  # StageFactory of the run's stages (None: the workers quantize them)
        self.tag = "camera"  # the run's calibration: the camera's ("camera <digest>"), or the trainer video's
        self.files: Dict[Tuple[str, int, int], Optional[StageFile]] = {}  # (calibration, cuts) -> file (None: none)
        self.sent: Set[Tuple[str, str, Stage]] = set()  # (worker process, calibration, stage) pushed
        self.lock = threading.Lock()  # the dicts (never held while building)
        self.building = threading.Lock()  # one build at a time
        self.background: Dict[Tuple, threading.Thread] = {}  # a warmed plan's push in progress

    def _wanted(self) -> bool:
        """True when the config has the master quantize (int8 on ONNX Runtime, `int8.quantize: master`) and it can
        (ONNX Runtime imports here; else one line)."""
        cfg = self.m.cfg
        if cfg.precision != "int8" or cfg.engine not in ("onnxruntime", "auto") or cfg.int8.quantize != "master":
            return False
        ok, why = ort_available()
        if not ok:
            log.info("int8 stages are quantized by the workers: %s on the master", why)
        return ok

    def _factory(self, graph):
        return served_factory(self.m.cfg, graph)

    def push_profile(self) -> None:
        """The whole model on the trainer's video's calibration (the stage a worker profiles, engine_scale), built
        here and pushed to every worker before their Costs; nothing when the master cannot read that video (one
        line: the workers quantize it)."""
        if not self._wanted():
            return
        try:
            self.graph = self.graph or load_graph(self.m.cfg)
            self.video = self.video or self._factory(self.graph)
            k = self.graph.num_segments
            self._push(self.video, "video", {(0, k): list(range(self.links().n))}, "profile stage")
        except EngineError as exc:
            log.warning("the workers quantize their profile stage: %s", exc)

    def configure(self, graph, calibration) -> None:
        """Act for this run: `graph` the master's model graph, `calibration` the camera's (None: the run's stages
        are on the trainer's video's calibration, as the workers' own are then)."""
        if not self._wanted():
            return
        try:
            if calibration is None:
                self.factory, self.tag = self.video or self._factory(graph), "video"
            else:
                self.factory, self.tag = self._camera(graph, calibration)
        except EngineError as exc:
            log.warning("int8 stages are quantized by the workers: %s", exc)

    def push_calibration(self, graph, calibration, plan, only: Sequence[int]) -> None:
        """Build and push the stages of `plan` on `calibration` (a recalibration's, before the run switches to it),
        leaving the run's own as they are: a worker that joins meanwhile gets the stages its StartRun's calibration
        names. `configure` makes it the run's at the switch (its files are built by then)."""
        if not self._wanted() or plan is None:
            return
        try:
            factory, tag = self._camera(graph, calibration)
        except EngineError as exc:
            log.warning("int8 stages of calibration %s are quantized by the workers: %s", calibration.digest, exc)
            return
        self._push(factory, tag, plan_stages(plan, self.links().n, only), "stage")

    def _camera(self, graph, calibration) -> Tuple[object, str]:
        """(factory, tag) of a camera calibration's stages: the tag names the calibration, so a recalibration's
        files are kept apart from the first one's. EngineError when the calibration does not fit the model."""
        return self._factory(graph).with_calibration(calibration), "camera %s" % calibration.digest

    def build_whole(self) -> None:
        """Build the whole model's stage on the run's calibration now, and push it, while the workers profile: the
        plan of a pool that replicates the whole model (a detector at a 0.1 cap) then starts at once; another plan
        only cost the master's CPU (3 s for the detector) and an idle link's time during the profiles' wait."""
        if self.factory is None:
            return
        k = self.factory.graph.num_segments
        if (self.tag, 0, k) not in self.files:
            with self._step("quantizing the whole model's int8 stage 0..%d on the master while the workers profile"
                            % k):
                self._build(self.factory, self.tag, (0, k))
        self._send(self.tag, {(0, k): list(range(self.links().n))})

    def push(self, plan, only: Optional[Sequence[int]] = None) -> None:
        """Build the int8 stages of `plan` that the workers of `only` (default all) run, then push each to them;
        a setup step per stage built (setup_progress logs a slow one)."""
        if self.factory is None or plan is None:
            return
        self._push(self.factory, self.tag, plan_stages(plan, self.links().n, only), "stage")

    def _push(self, factory, tag: str, wanted: Dict[Stage, List[int]], what: str) -> None:
        todo = [st for st in wanted if (tag,) + st not in self.files]
        for i, st in enumerate(todo):
            with self._step("quantizing int8 %s %d..%d on the master (%d of %d)" % ((what,) + st + (i + 1,
                                                                                                len(todo)))):
                self._build(factory, tag, st)
        self._send(tag, wanted)

    def _step(self, name: str, waiting: Sequence[int] = ()):
        """A setup step while setup runs (logged when slow, shown on the live page), else one log line."""
        if self.progress.done_at is None:
            return self.progress.step(name, waiting)
        log.info("%s", name)
        return contextlib.nullcontext()

    def prepare(self, plan) -> List[Tuple[bool, str]]:
        """The warmer's question (warming.Prepare): (ready, error) of each live worker's stage of `plan`, asked of
        the workers once the plan's int8 files are pushed (quantized here in the background: not ready meanwhile)."""
        live = self.m.live_workers()
        if not self.ready(plan, live):
            return [(False, "")] * len(live)
        return self.links().prepare(plan, live)

    def ready(self, plan, only: Sequence[int]) -> bool:
        """True once the stages of `plan` for the workers `only` are built and pushed; until then they are, in one
        background thread per plan (a re-plan's warming must not hold up the frames)."""
        if self.factory is None:
            return True
        wanted = plan_stages(plan, self.links().n, only)
        if all((self.tag,) + st in self.files and all((self._who(w), self.tag, st) in self.sent for w in ws)
               for st, ws in wanted.items()):
            return True
        key = (tuple(plan.cuts), tuple(only))
        with self.lock:
            t = self.background.get(key)
            if t is None or not t.is_alive():
                if t is not None:
                    return True  # pushed, or given up (a refused or unbuilt stage: the worker quantizes it)
                t = self.background[key] = threading.Thread(target=self.push, args=(plan, list(only)),
                                                            name="stage-push", daemon=True)
                t.start()
        return False

    def _build(self, factory, tag: str, st: Stage) -> None:
        """Build stage st once (one build at a time, under `building`; `lock` is never held while building: the
        warmer's check runs on the frame path). Any failure only costs the speed-up: its workers build it."""
        start, end = st
        with self.building:
            if (tag,) + st in self.files:
                return
            f = None
            why = factory.graph.torch_only(start, end) if hasattr(factory.graph, "torch_only") else ""
            if not why:  # (else not an ONNX stage: the worker runs it on torch)
                try:
                    key, data = stage_file(factory, start, end)
                    f = StageFile(start, end, factory.precision, key, data)
                except Exception as exc:  # noqa: BLE001 - EngineError, or any other failure of the quantiser
                    log.warning("stage %d..%d: not quantized on the master (%s): its workers build it", start, end,
                                exc)
            with self.lock:
                self.files[(tag,) + st] = f
        if f is not None:
            log.info("stage %d..%d: int8 file ready on the master (%d bytes, %s calibration) for its workers", start,
                     end, len(f.data), tag)

    def _who(self, w: int) -> str:
        """Worker w's process: its address and instance (WorkerInfo: a restarted worker lost what it was sent)."""
        links = self.links()
        return "%s/%s" % (links.addresses[w], links.infos[w].instance if w < len(links.infos) else "")

    def _send(self, tag: str, wanted: Dict[Stage, List[int]]) -> None:
        """Push each built stage to its workers that do not have it yet, all at once."""
        jobs = [(w, tag, self.files[(tag,) + st]) for st, ws in wanted.items()
                if self.files.get((tag,) + st) is not None for w in ws if (self._who(w), tag, st) not in self.sent]
        if not jobs:
            return
        with self._step("pushing the int8 stage files to the workers", sorted({w for w, _, _ in jobs})):
            with ThreadPoolExecutor(max_workers=min(len(jobs), 8)) as pool:
                list(pool.map(lambda job: self._send_one(*job), jobs))

    def _send_one(self, w: int, tag: str, f: StageFile) -> None:
        links = self.links()
        if put(links.stubs[w], links.name(w), f, links.timeout):
            with self.lock:
                self.sent.add((self._who(w), tag, (f.start, f.end)))
        self.progress.answered(w)

    def push_profile_to(self, stub, name: str) -> None:
        """The profile stage's file to a worker that joins and has no profile yet (before the Costs that profiles
        it: it has no id, so it is called by its stub)."""
        if self.video is None:
            return
        k = self.video.graph.num_segments
        self._build(self.video, "video", (0, k))
        f = self.files.get(("video", 0, k))
        if f is not None:
            put(stub, name, f, self.links().timeout)


def put(stub, name: str, f: StageFile, timeout: float) -> bool:
    """Push `f` to the worker behind `stub` (PutStage); False after one line when it cannot take it (an older worker
    without PutStage, a refusal, a worker down): it then quantizes the stage itself."""
    try:
        stub.PutStage(iter([pb.StageChunk(**c) for c in chunks(f)]), timeout=timeout + len(f.data) / PUSH_RATE)
        return True
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            log.warning("%s takes no stage files (an older worker): it quantizes %s itself", name, f.label())
        else:
            log.warning("%s: %s not pushed (%s): it quantizes it itself", name, f.label(), net.code_name(exc))
        return False
