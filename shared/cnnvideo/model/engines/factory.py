"""StageFactory: build (once, in memory) the stage a worker runs on the configured engine, with fallback."""
from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from cnnvideo.artifacts import calibration_path, onnx_dir
from cnnvideo.model.engines.base import (
    ENGINES,
    PRECISIONS,
    EngineError,
    EngineSpec,
    QParams,
    Stage,
    ort_available,
)
from cnnvideo.model.engines.camera_calibration import RECIPES
from cnnvideo.model.engines.ort_engine import build_ort_stage
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.engines.torch_engine import TorchStage

log = logging.getLogger(__name__)


class StageFactory:
    """Builds the stages one worker runs on its engine, each once; thread-safe.

    `key` names the model identity (model, weights digest, frame size) in cache keys; `calibration` returns the
    int8 calibration (`quant.Calibration`) and is called only when int8 is asked for."""

    def __init__(self, graph, spec: EngineSpec, cache_dir: str, key: str,
                 calibration: Optional[Callable[[], object]] = None) -> None:
        if spec.engine not in ENGINES:
            raise EngineError("engine must be one of %s, got %r" % ("|".join(ENGINES), spec.engine))
        if spec.precision not in PRECISIONS:
            raise EngineError("precision must be one of %s, got %r" % ("|".join(PRECISIONS), spec.precision))
        self.graph = graph
        self.spec = spec
        self.cache_dir = cache_dir
        self.key = key
        self._calibration_fn = calibration
        self._calibration = None
        self.int8_failed = ""  # why int8 was given up for fp32 (fallback), '' otherwise
        self._stages: Dict[Tuple[int, int], Stage] = {}
        self._lock = threading.Lock()  # guards the two dicts only, never held while a stage builds
        self._building: Dict[Tuple[int, int], threading.Lock] = {}  # one lock per stage being built
        self._calibration_lock = threading.Lock()
        self.notes: List[str] = []  # one line per fallback, for the report
        self.stem = "model"  # which int8 blocks stay fp32: half the model input's resolution (ort_engine.stem_area)
        self.per_channel = True  # int8 weights: one scale per output channel (False: per tensor, for studies)
        self.weight_bits = 7  # int8 weights in 7 bits (ort_int8.WEIGHT_BITS: no saturation on AVX2); 8 for studies
        self.heads = 0  # a stage ending at a detector's outputs: its last `heads` convolutions stay fp32
        self.band = 0  # the nodes on the maps feeding a detector's finest head, `band` maps of it, stay fp32
        self.method = "minmax"  # the quantiser's range calibration inside a stage (entropy, percentile: studies)
        self.symmetric = False  # activation ranges symmetric around the zero point (studies)
        self.keep: Tuple[str, ...] = ()  # names of nodes that stay fp32 start so (studies)
        self.inbox = None  # a worker's stage_files.StageInbox: int8 files the master built, taken before quantizing

    def with_calibration(self, calibration) -> "StageFactory":
        """A factory of the same engine whose int8 stages use `calibration` (camera_calibration.CameraCalibration,
        checked against this model and frame size: CalibrationRefused otherwise); its stages are built apart
        (the calibration digest is in their cache key). The calibration's recipe (camera_calibration.RECIPES) sets
        its knobs over this factory's."""
        calibration.check(self.key, self.graph.frame_size, self.graph.num_segments)
        cal = calibration.to_calibration(self.graph)
        other = StageFactory(self.graph, self.spec, self.cache_dir, self.key, lambda: cal)
        for knob in ("stem", "per_channel", "weight_bits", "heads", "band", "method", "symmetric", "keep", "inbox"):
            setattr(other, knob, getattr(self, knob))
        for knob, value in RECIPES.get(getattr(calibration, "recipe", ""), {}).items():
            setattr(other, knob, value)
        return other

    @property
    def calibration(self):
        """The int8 calibration (computed once, on first use); EngineError if there is none to be had."""
        if self._calibration is None:
            with self._calibration_lock:
                if self._calibration is None:
                    if self._calibration_fn is None:
                        raise EngineError("int8 needs a calibration, and none was configured")
                    self._calibration = self._calibration_fn()
        return self._calibration

    def qparams(self, cut: int) -> Optional[QParams]:
        """Quantisation of the tensor at `cut` (None where it travels unquantised: the frame, the output, fp32, a cut
        the calibration keeps float)."""
        if self.spec.precision != "int8" or self.int8_failed or cut <= 0 or cut >= self.graph.num_segments:
            return None
        try:
            return self.calibration.qparams.get(cut)
        except EngineError as exc:
            if self.spec.on_error == "stop":
                raise
            self.int8_failed = str(exc)
            note = "int8 given up, stages run fp32: %s" % exc
            log.warning("%s", note)
            self.notes.append(note)
            return None

    @property
    def precision(self) -> str:
        """The precision stages really run at ('fp32' after an int8 fallback)."""
        return "fp32" if self.int8_failed else self.spec.precision

    def stage(self, start: int, end: int) -> Stage:
        """The stage from cut `start` to cut `end` (built on first use, once). A stage being built (a re-plan's
        stage warming in the background) does not hold up callers of stages that are built already."""
        key = (start, end)
        with self._lock:
            st = self._stages.get(key)
            if st is not None:
                return st
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                st = self._stages.get(key)
            if st is None:
                st = self._build(start, end)
                with self._lock:
                    self._stages[key] = st
                    self._building.pop(key, None)
        return st

    def built(self, start: int, end: int) -> bool:
        """True when stage(start, end) would return at once (it is built, or it runs no layers)."""
        with self._lock:
            return start == end or (start, end) in self._stages

    def engines_used(self) -> List[str]:
        """Labels of the engines the stages built so far really run on (e.g. ['onnxruntime-int8'])."""
        with self._lock:
            return sorted({"%s-%s" % (s.engine, s.precision) for s in self._stages.values() if not s.empty})

    def _build(self, start: int, end: int) -> Stage:
        q_in, q_out = self.qparams(start), self.qparams(end)
        if start == end or self.spec.engine == "torch":
            return TorchStage(self.graph, start, end, q_in, q_out)
        why = self.graph.torch_only(start, end) if hasattr(self.graph, "torch_only") else ""
        if why:  # not a failure: such a stage (a detector's heads) runs on torch whatever on_error says
            note = "stage %d..%d runs on torch instead of %s: %s" % (start, end, self.spec.label, why)
            log.info("%s", note)
            self.notes.append(note)
            st = TorchStage(self.graph, start, end, q_in, q_out)
            st.reason = why
            return st
        ok, why = ort_available()
        try:
            if not ok:
                raise EngineError(why)

            return build_ort_stage(self, start, end, q_in, q_out)
        except EngineError as exc:
            if self.spec.on_error == "stop":
                raise
            note = "stage %d..%d runs on torch instead of %s: %s" % (start, end, self.spec.label, exc)
            log.warning("%s", note)
            self.notes.append(note)
            st = TorchStage(self.graph, start, end, q_in, q_out)
            st.reason = str(exc)
            return st


def weights_digest(graph) -> str:
    """sha1 (16 hex) of every parameter and buffer of the whole model: a cached stage of other weights never loads."""
    if hasattr(graph, "digest"):  # an ONNX-file model (cnnvideo.model.onnx_graph): the weights are in the file
        return graph.digest
    import hashlib

    h = hashlib.sha1()
    for name, t in sorted(graph.stage_module(0, graph.num_segments).state_dict().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(t.detach().cpu().numpy()))  # the buffer itself: no copy of the weights
    return h.hexdigest()[:16]


def model_key(cfg, graph) -> str:
    """The model identity in stage and calibration keys: model, frame size, weights digest."""
    return "%s %dx%d weights %s" % (cfg.model, graph.frame_size[0], graph.frame_size[1], weights_digest(graph))


def factory_for(cfg, graph) -> StageFactory:
    """The StageFactory of a Config (`engine: auto`: onnxruntime where installed; a worker builds one factory per
    engine instead, `auto.AutoStages`): its engine keys, the cache folder (cache_dir/onnx) and int8 calibration on
    frames of the trainer's video that the run does not evaluate (cached in cache_dir/calibration)."""
    engine = cfg.engine
    if engine == "auto":  # one factory (a trainer's calibration, `cnnvideo plan`): the engine auto would try first
        engine = "onnxruntime" if ort_available()[0] else "torch"
    spec = EngineSpec(engine, cfg.precision, cfg.engine_options.threads, cfg.engine_options.on_error)
    key = model_key(cfg, graph)
    cal = CalibrationSpec(cfg.calibration_video, cfg.int8.calibration_frames, cfg.calibration_start,
                          cfg.int8.calibration_stride)
    cal_path = calibration_path(cfg.cache_dir, cfg.model, graph.frame_size)

    def calibration():
        return load_or_measure(graph, cal, cal_path, key)

    return StageFactory(graph, spec, onnx_dir(cfg.cache_dir), key, calibration)
