"""A camera's int8 calibration redone while its run goes on (issue 46 item 1), when the online check says it is
stale (cnnvideo.results.calibration_watch: F1 against the unsplit fp32 model under `int8.recalibrate_below` over
the last `int8.recalibrate_window` checked frames). A calibration made at dusk and used in daylight found almost no
box (docs/results/int8-scenes).

In a thread of its own, while frames keep flowing on the old calibration:
1. sample the camera's next frames (the frames the run reads, every `calibration_stride`-th, skipping black, flat
   and frozen ones, as at the start) and measure the calibration here; store it as the camera's (the next run
   starts with it);
2. quantize the current plan's stages on it here and push them (stage_push), then ask every live worker to build
   its stage on it (Prepare with the calibration) until all have;
3. switch: the role takes the calibration, and a resync starts a new generation whose StartRun carries it; every
   hop starts with a keyframe and the frames in flight are sent again, so no frame mixes two calibrations.

One at a time. A camera that shows no scene in the frames looked at keeps its calibration (one line). After a
switch the watch starts over; if the first full window after it is stale again, the new calibration did not help
(a scene whose fp32 scores crowd the threshold): nothing more is tried until a window agrees again."""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

import grpc
import numpy as np

from cnnvideo import artifacts
from cnnvideo.model.engines import EngineError, model_key
from cnnvideo.model.engines import camera_calibration as cc
from cnnvideo.results.calibration_watch import CalibrationWatch

from . import calibration_fit

log = logging.getLogger(__name__)

FRAME_WAIT_S = 30.0  # a source that gives no frame this long ends the sampling (the run ended, or the camera stalled)
PREPARE_POLL_S = 0.5
PREPARE_LIMIT_S = 900.0  # workers that have not built the new stages by then: the run keeps its calibration


class Recalibration:
    """Watches one camera run's checks and redoes its int8 calibration when stale (see the module doc)."""

    def __init__(self, m, graph) -> None:
        self.m = m
        self.graph = graph
        i8 = m.cfg.int8
        self.watch = CalibrationWatch(i8.recalibrate_below, i8.recalibrate_window)
        self.lock = threading.Lock()
        self.busy = False
        self.armed = True  # False after a recalibration whose first window stayed stale, until a window agrees
        self.after_switch = False  # the window being filled is the first after a switch
        self.entries: List[Dict[str, object]] = []  # report.json int8_calibration.refreshed

    @classmethod
    def for_run(cls, m, graph) -> Optional["Recalibration"]:
        """One for an int8 detector run calibrated on its camera with checks on and a floor set, else None."""
        cfg = m.cfg
        if (cfg.precision != "int8" or cfg.int8.calibration != "camera" or cfg.int8.recalibrate_below <= 0
                or m.detecting is None or m.checker is None or m.calibration is None or graph is None):
            return None
        part = cls(m, graph)
        m.detecting.watchers.append(part.on_check)
        return part

    def on_check(self, matched: int, found: int, expected: int) -> None:
        """One checked frame's boxes (the checker's thread): start a recalibration when the window is stale."""
        with self.lock:
            self.watch.add(matched, found, expected)
            f1, full = self.watch.stale(), self.watch.full()
            if full and self.after_switch:
                self.after_switch = False
                if self.entries:
                    after = self.watch.f1()
                    self.entries[-1]["f1_after"] = None if after is None else round(after, 4)
                    log.info("int8 calibration %s: F1 %s against the unsplit model over the checked frames after "
                             "the switch", self.entries[-1].get("digest"), "-" if after is None else "%.3f" % after)
                if f1 is not None:
                    self.armed = False
                    log.warning("int8 calibration: F1 still %.3f after calibrating again: the scene, not the "
                                "calibration; not trying again until the boxes agree", f1)
            elif full and f1 is None:
                self.armed = True
            if f1 is None or self.busy or not self.armed:
                return
            self.busy = True
        threading.Thread(target=self._redo, args=(f1,), name="recalibrate", daemon=True).start()

    def _frames(self, look: int) -> Iterator[Tuple[np.ndarray, float]]:
        """The run's next `look` frames (pixels, capture time), as the feed takes them."""
        got: "queue.Queue[Tuple[np.ndarray, float]]" = queue.Queue()

        def tap(rgb: np.ndarray, t: float) -> None:
            if got.qsize() < look:
                got.put((rgb, t))

        feed = self.m.feed
        feed.taps.append(tap)
        try:
            for _ in range(look):
                try:
                    yield got.get(timeout=FRAME_WAIT_S)
                except queue.Empty:
                    return
        finally:
            feed.taps.remove(tap)

    def _redo(self, f1: float) -> None:
        m = self.m
        old = m.calibration
        entry: Dict[str, object] = {"stale_f1": round(f1, 4), "window": self.watch.window,
                                    "floor": self.watch.floor, "detected_s": round(time.time() - m.t_run, 2),
                                    "replaced": old.digest, "switched": False}
        log.warning("int8 calibration %s is stale: F1 %.3f against the unsplit model over the last %d checked "
                    "frames (floor %.2f): calibrating again on the camera's next frames", old.digest, f1,
                    self.watch.window, self.watch.floor)
        try:
            cal = self._measure(entry)
            if cal is not None and self._build(cal, entry):
                self._switch(cal, "int8 calibration %s replaces stale %s" % (cal.digest, old.digest))
                entry["switched"], entry["switched_s"] = True, round(time.time() - m.t_run, 2)
                with self.lock:
                    self.watch.restart(skip=self._backlog())
                    self.after_switch = True
        except Exception as exc:  # noqa: BLE001 - a failed recalibration keeps the run on its calibration
            log.warning("int8 calibration not redone (%s): the run keeps %s", exc, old.digest)
            entry["kept"] = str(exc)
        finally:
            with self.lock:
                self.entries.append(entry)
                self.busy = False

    def _measure(self, entry: Dict[str, object]):
        """The camera's new calibration, stored as the camera's; None (one line) when its frames show no scene."""
        m, cfg = self.m, self.m.cfg
        i8 = cfg.int8
        look = i8.calibration_frames * i8.calibration_stride * 4
        t0 = time.time()
        try:
            sample = cc.sample_frames(self._frames(look), i8.calibration_frames, i8.calibration_stride, cfg.video,
                                      look)
            cal = cc.measure(self.graph, model_key(cfg, self.graph), sample)
            calibration_fit.check(cfg, self.graph, cal)
        except EngineError as exc:
            log.warning("%s; the run keeps int8 calibration %s", exc, m.calibration.digest)
            entry["kept"] = str(exc)
            return None
        path = artifacts.camera_calibration_file(cfg.cache_dir, cfg.model, cfg.frame_size, cfg.events.camera,
                                                 cfg.video)
        cc.store(cal, path)
        entry.update({"digest": cal.digest, "frames": len(sample.frames), "skipped": dict(sample.skipped),
                      "recipe": cal.recipe or "default", "fit": list(cal.fit), "measure_s": round(time.time() - t0, 2)})
        log.info("int8 calibration %s measured on %d of the camera's frames in %.1f s (stored in %s)", cal.digest,
                 len(sample.frames), time.time() - t0, path)
        return cal

    def _build(self, cal, entry: Dict[str, object]) -> bool:
        """Quantize the current plan's stages on `cal` here, push them, and wait until every live worker has built
        its stage on it; False (one line) when one cannot."""
        m = self.m
        t0 = time.time()
        plan = m.sending.sent_plan
        if plan is None:
            entry["kept"] = "no plan sent yet"
            return False
        m.setup.push.push_calibration(self.graph, cal, plan, m.live_workers())
        deadline = time.time() + PREPARE_LIMIT_S
        while m.failure is None and not m.closing:
            try:
                answers = m.links.prepare(plan, m.live_workers(), cal)
            except grpc.RpcError as exc:
                answers = [(False, "")]
                log.debug("prepare of the new calibration's stages: %s", exc)
            errors = [e for _, e in answers if e]
            if errors:
                entry["kept"] = errors[0]
                log.warning("int8 calibration %s not taken: %s", cal.digest, errors[0])
                return False
            if all(ok for ok, _ in answers):
                entry["build_s"] = round(time.time() - t0, 2)
                return True
            if time.time() > deadline:
                entry["kept"] = "the workers did not build its stages within %.0f s" % PREPARE_LIMIT_S
                log.warning("int8 calibration %s not taken: %s", cal.digest, entry["kept"])
                return False
            time.sleep(PREPARE_POLL_S)
        return False

    def _switch(self, cal, why: str, timeout: float = 60.0) -> None:
        """The role takes `cal` and resyncs; returns once the resync started (a new generation), or after
        `timeout`: the checks queued by then are of frames computed on the old calibration."""
        m = self.m
        gen = m.tracker.generation
        log.info("%s: resynchronising so that every worker runs it", why)
        m.setup.push.configure(self.graph, cal)  # (a worker joining from now on gets its stages)
        m.use_calibration(cal, why)
        deadline = time.time() + timeout
        with m.cond:
            while m.tracker.generation == gen and m.failure is None and time.time() < deadline:
                m.cond.wait(0.2)

    def report(self, first: Optional[dict]) -> Optional[dict]:
        """report.json `int8_calibration`: the run's first calibration's, with `refreshed` (each recalibration)."""
        with self.lock:
            return dict(first or {}, refreshed=list(self.entries)) if self.entries else first

    def _backlog(self) -> int:
        """Checks still to come of frames computed on the old calibration: the watch skips them. Samples the
        checker missed (a live run's full queue) never come, so they are not among them: counted in, a loaded
        master skipped more checks than the run had left, and never scored the new calibration."""
        c = self.m.checker
        return c.pending() if c is not None else 0
