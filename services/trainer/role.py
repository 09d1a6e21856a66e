"""The trainer: plays the training video through the whole model, fits the non-zero-rate predictors, serves them.

A live run's source (a stream, device or pipeline, and no `trainer.video`) is opened once, by the master: the
trainer then fits on the first `trainer.frames` frames the master captured and sends it (PutFrames), not on a
second connection to the camera (which may serve one client, or be unreachable from the trainer's network)."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Dict, Optional

from cnnvideo import artifacts
from cnnvideo.config import Config
from cnnvideo.model.engines import EngineError, factory_for
from cnnvideo.model.loading import load_graph
from cnnvideo.plan import predict
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert, net
from cnnvideo.video.sources import source_frames
from cnnvideo.wire import settings

from .servicer import TrainerServicer

log = logging.getLogger(__name__)


def fit_holding_out(rec, graph, fit_fraction: float, fp16: bool = False, int8=False):
    """(predictors fitted on the first `fit_fraction` of the recorded frames, their validation on the rest: {} when
    nothing is held out, i.e. fit_fraction 1 or too few frames to spare two); `int8`: the cuts that travel uint8
    (predict.cut_meta)."""
    n_fit = max(int(round((rec.frames + 1) * fit_fraction)) - 1, 1)  # delta frames to fit on (frame 0 is the key)
    if rec.frames - n_fit < 2:
        return predict.fit_recorder(rec, graph, fp16=fp16, int8=int8), {}
    head, held = rec.split(n_fit)
    preds = predict.fit_recorder(head, graph, fp16=fp16, int8=int8)
    return preds, predict.validate(preds, held)


class TrainerRole:
    """Owns the fitted predictors and the Trainer server."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.video = artifacts.training_video(cfg)
        self.from_master = artifacts.trains_on_master_frames(cfg)  # fit on the master's frames (PutFrames)
        self.master_frames: Optional[list] = None
        self.frames_in = threading.Event()
        self.server: Optional[net.Server] = None
        self.predictors = None
        self.cached = False
        self.fit_s = 0.0
        self.validation: Dict[str, float] = {}  # held-out check of a fresh fit (trainer.fit_fraction)
        self.error = ""
        self.frames_done = 0
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self.server = net.Server(self.cfg.cluster.trainer, self.cfg.max_message_bytes, threads=8,
                                 service_name="cnnvideo.Trainer")
        pb_grpc.add_TrainerServicer_to_server(TrainerServicer(self), self.server.grpc)
        self.server.start()
        self.thread = threading.Thread(target=self._fit_guarded, name="fit", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        net.on_signals(lambda signum: self.stopping.set())
        while not self.stopping.wait(0.5):
            pass
        log.info("trainer: shutting down")

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.stop(grace=1.0)

    # ------------------------------------------------------------------ fitting
    def _fit_guarded(self) -> None:
        try:
            self.predictors = self.fit()
        except Exception as exc:  # noqa: BLE001 - surfaced to the master through GetPredictors/Status
            log.exception("fitting failed")
            self.error = "%s: %s" % (type(exc).__name__, exc)
        finally:
            self.ready.set()

    def fit(self):
        """Predictors from the on-disk cache, else recorded over the training video and fitted (with progress)."""
        path = artifacts.predictor_path(self.cfg)
        if not self.from_master and os.path.isfile(path):  # a live scene is fitted afresh for each run
            try:
                p = predict.Predictors.load(path)
                self.cached = True
                self.frames_done = self.cfg.trainer.frames
                log.info("predictors loaded from cache %s", path)
                return p
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable predictor cache %s: %s", path, exc)

        t0 = time.time()
        graph = load_graph(self.cfg)
        n = self.cfg.trainer.frames
        if self.from_master:
            frames = self._frames_from_master(n)
        else:
            frames = source_frames(self.video, tuple(self.cfg.frame_size), limit=n)
        quant = None
        if self.cfg.precision == "int8":
            try:
                quant = factory_for(self.cfg, graph).calibration.qparams
            except EngineError as exc:
                log.warning("int8 sizes not modelled (%s): predictors fitted on fp32 tensors", exc)
        rec = predict.record_video(graph, self._progress(frames, n), threshold=self.cfg.delta.threshold,
                                   input_threshold=self.cfg.delta.input_threshold, fp16=self.cfg.delta.fp16,
                                   quant=quant)
        p, self.validation = fit_holding_out(rec, graph, self.cfg.trainer.fit_fraction, self.cfg.delta.fp16,
                                             int8=sorted(quant) if quant is not None else False)
        if self.validation:
            log.info("predictors fitted on %d frames, validated on %d held-out frames: bytes MAPE %.1f%% per cut, "
                     "%.1f%% per frame", rec.frames + 1 - self.validation["frames"], self.validation["frames"],
                     100 * self.validation["mape"], 100 * self.validation["mape_total"])
        self.fit_s = time.time() - t0
        if self.from_master:
            log.info("fitted predictors for %d cuts on the master's %d frames (%d held out) in %.1f s", p.n_cuts, n,
                     int(self.validation.get("frames", 0)), self.fit_s)
            return p
        tmp = artifacts.atomic_tmp(path)
        p.save(tmp)
        os.replace(tmp, path)
        log.info("fitted predictors for %d cuts on %d frames (%d held out) in %.1f s (cached in %s)", p.n_cuts, n,
                 int(self.validation.get("frames", 0)), self.fit_s, path)
        return p

    def _frames_from_master(self, n: int):
        """The master's first n captured frames, once PutFrames has brought them."""
        log.info("waiting for the master's first %d frames (a live source is opened once, by the master)", n)
        while not self.frames_in.wait(0.5):
            if self.stopping.is_set():
                raise RuntimeError("stopped")
        yield from self.master_frames[:n]

    def put_frames(self, frames: list) -> str:
        """PutFrames: '' if taken (or not needed: fitted already or fitting on its own video), else why not."""
        if not self.from_master:
            return ""
        want = (int(self.cfg.frame_size[0]), int(self.cfg.frame_size[1]), 3)
        if len(frames) < self.cfg.trainer.frames:
            return "%d frames sent, trainer.frames is %d" % (len(frames), self.cfg.trainer.frames)
        bad = next((f.shape for f in frames if f.shape != want), None)
        if bad is not None:
            return "frame of shape %s sent, the run's frames are %s" % (bad, want)
        if not self.frames_in.is_set():
            self.master_frames = frames
            self.frames_in.set()
        return ""

    def _progress(self, frames, total: int):
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm is optional on the devices
            tqdm = None
        it = tqdm(frames, total=total, desc="trainer: frames", unit="frame", file=sys.stderr, mininterval=1.0,
                  ascii=True) if tqdm is not None else frames
        for frame in it:
            if self.stopping.is_set():
                raise RuntimeError("stopped")
            yield frame
            self.frames_done += 1

    # ------------------------------------------------------------------ service operations
    def status(self) -> pb.TrainerStatus:
        return pb.TrainerStatus(ready=self.ready.is_set() and not self.error, frames_done=self.frames_done,
                                frames_total=self.cfg.trainer.frames, error=self.error)

    def matches(self, req: pb.PredictorRequest) -> str:
        """'' if the request's settings (cnnvideo.wire.settings.TRAINER_KEYS) are this trainer's, else the first key
        that differs, with both values."""
        return convert.refusal(self.cfg, settings.TRAINER_KEYS, "trainer", req.settings)
