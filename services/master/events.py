"""The master's events and metrics (issue 23): the EventPipeline fed once per completed frame, and the Prometheus
`Metrics` fed from the result path, the stage reports, the input hop and (when scraped) the feed and tracker.

A classifier's frames (the hook gets `detections=None`) become "label changed" events: the frame record's top-1
(filled by the role's `_label` sink) as one whole-frame detection into a LabelChangeTracker. A detector's
decoded boxes (`detections`: a list, possibly empty) go through the IoU tracker of `events.tracker`.
Everything here is safe to call from the result threads and the HTTP thread; none of it raises into the run
(a failing step logs once and events stop, the run goes on)."""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Dict, List, Optional, Sequence

from cnnvideo import hostnet
from cnnvideo.events import pipeline_from_config
from cnnvideo.events.labelchange import label_change_from_config
from cnnvideo.events.types import Detection

from .view import members

log = logging.getLogger(__name__)


def top1_detection(top5, width: int, height: int):
    """The frame's top-1 class as a whole-frame Detection, or None (no top-5, or an unnamed class)."""
    if not top5:
        return None
    _, name, score = top5[0]
    if not name:
        return None
    return Detection(str(name), min(max(float(score), 0.0), 1.0), (0.0, 0.0, float(width), float(height)))


class MasterEvents:
    """Events and metrics of the role `m`. `metrics` (a cnnvideo.events.metrics.Metrics) exists when the live
    view is on or events are enabled and prometheus_client is installed; `pipeline` when `events.enabled`."""

    def __init__(self, m) -> None:
        self.m = m
        self.metrics = None
        self.pipeline = None
        self.kind: Optional[str] = None  # "classifier" | "detector", from the first frame the hook sees
        self.by_type: Dict[str, int] = collections.Counter()
        self.snapshots_written = 0
        self.last_capture: Optional[float] = None
        self.last_frame = -1
        self.closed: Optional[Dict[str, Any]] = None
        self._engines: Dict[int, str] = {}
        self._seen = {"captured": 0, "skipped": 0, "dropped": 0}
        self._lock = threading.Lock()
        self._failed = False

    # --- setup and the end

    def start_metrics(self) -> None:
        """Make the Metrics (with the live view or events on), so /metrics answers from the master's start; nothing
        is published anywhere yet."""
        cfg = self.m.cfg
        if self.metrics is None and (cfg.live_view.port or cfg.events.enabled):
            try:
                from cnnvideo.events.metrics import Metrics

                self.metrics = Metrics(cfg.events.camera)
            except ImportError as exc:
                log.warning("no /metrics: prometheus_client is not installed (%s)", exc)

    def start(self) -> None:
        """(events.enabled, once setup is done) the pipeline; the MQTT publisher connects in the background, from
        the host's network when the master runs in a namespace of its own (`cnnvideo local` with tc links, see
        cnnvideo.hostnet). A master whose setup failed never connects: its camera publishes nothing."""
        m, cfg = self.m, self.m.cfg
        self.start_metrics()
        if not cfg.events.enabled:
            return
        self.pipeline = pipeline_from_config(cfg.events.pipeline_config(m.out), cfg.frame_size, metrics=self.metrics,
                                             start_mqtt=False)
        if self.pipeline.publisher is not None:  # the broker is in the user's network: dialled from the host's
            self.pipeline.publisher.start(run_in=lambda fn: hostnet.in_netns(fn, name="mqtt-start"))
        log.info("events: camera %s, snapshots in %s, MQTT %s", cfg.events.camera,
                 self.pipeline.snapshots.out_dir if self.pipeline.snapshots is not None else "(off)",
                 "%s:%d" % (self.pipeline.publisher.settings.host, self.pipeline.publisher.settings.port)
                 if self.pipeline.publisher is not None else "(off)")

    def close(self) -> Optional[Dict[str, Any]]:
        """End the live tracks (their `end` events and snapshots), publish `offline`, disconnect; report.json's
        `events` block (None without events). A second call returns the same block."""
        with self._lock:
            if self.closed is not None or self.pipeline is None:
                return self.closed
            pipe = self.pipeline
            try:
                if self.last_capture is not None:
                    self._count(pipe.finish(self.last_capture, self.last_frame))
            except Exception:  # the report still gets written
                log.exception("events: finishing the tracks failed")
            stats, connected = None, None
            if pipe.publisher is not None:
                connected = pipe.publisher.stats().connected  # at the end of the run, before the disconnect
                pipe.close(timeout=3.0)
                stats = pipe.publisher.stats()
            tracker = pipe.tracker
            tracks = getattr(tracker, "announced", None)
            if tracks is None:
                tracks = getattr(tracker, "_next_id", 1) - 1
            self.closed = {
                "kind": self.kind,
                "tracks": int(tracks),
                "by_type": dict(sorted(self.by_type.items())),
                "snapshots_written": self.snapshots_written,
                "snapshots_dir": pipe.snapshots.out_dir if pipe.snapshots is not None else None,
                "mqtt": None if stats is None else {
                    "host": pipe.publisher.settings.host, "port": pipe.publisher.settings.port,
                    "published": stats.published, "queued": stats.queued, "dropped": stats.dropped,
                    "connected": connected},
            }
            return self.closed

    # --- the result path

    def hook(self, frame: int, capture_time: float, detections: Optional[Sequence] = None, rgb=None) -> List:
        """One completed frame (capture time in epoch seconds, RGB pixels or None): its events, [] without
        events. `detections=None`: a classifier (its top-1 from the frame record); a list: a detector's."""
        pipe = self.pipeline
        if pipe is None or self._failed:
            return []
        try:
            with self._lock:
                if self.closed is not None:
                    return []
                if self.kind is None:
                    self.kind = "classifier" if detections is None else "detector"
                    if self.kind == "classifier":
                        pipe.tracker = label_change_from_config(self.m.cfg.events.label_change)
                if detections is None:
                    rec = self.m.tracker.records.get(frame)
                    h, w = (rgb.shape[:2] if rgb is not None else self.m.cfg.frame_size)
                    top = top1_detection(rec.top5 if rec is not None else None, w, h)
                    detections = [top] if top is not None else []
                if self.last_capture is None or capture_time >= self.last_capture:
                    self.last_capture, self.last_frame = capture_time, frame
                events = pipe.process(frame, capture_time, detections, rgb)
                self._count(events)
                return events
        except Exception:
            self._failed = True
            log.exception("events: processing frame %d failed; no more events this run", frame)
            return []

    def _count(self, events) -> None:
        for e in events:
            self.by_type[e.type] += 1
            if e.type == "end" and e.snapshot:
                self.snapshots_written += 1

    # --- metrics (each a no-op without Metrics)

    def processed(self, capture_time: float, result_time: float) -> None:
        if self.metrics is not None:
            self.metrics.frame_processed(capture_time, result_time)

    def hop_sent(self, hop: str, nbytes: int) -> None:
        if self.metrics is not None:
            self.metrics.hop_sent(hop, nbytes)

    def stage_report(self, w: int, rep) -> None:
        """A worker's StageReport: compute seconds under its engine (the last one it named, else `engine`)."""
        if self.metrics is None:
            return
        if rep.engine:
            self._engines[w] = rep.engine
        engine = self._engines.get(w, self.m.cfg.engine)
        for st in rep.stages:
            if st.stage == "compute":
                self.metrics.stage_computed("w%d" % w, engine, st.end - st.start)

    def sync(self) -> None:
        """Bring the counters kept elsewhere up to date: captured and skipped (the source), dropped (the
        tracker), the MQTT publisher's state. Called before each scrape and at the end."""
        mx, m = self.metrics, self.m
        if mx is None:
            return
        with m.cond:
            st = m.feed.source.stats() if m.feed.source is not None else {"captured": 0, "skipped": 0}
            now = {"captured": st["captured"], "skipped": st["skipped"], "dropped": m.tracker.dropped}
            pool = members(m) if m.links is not None else []
        mx.observe_members(pool)
        with self._lock:
            for key, inc in (("captured", mx.frame_captured), ("skipped", mx.frame_skipped),
                             ("dropped", mx.frame_dropped)):
                if now[key] > self._seen[key]:
                    inc(now[key] - self._seen[key])
                    self._seen[key] = now[key]
        pub = self.pipeline.publisher if self.pipeline is not None else None
        if pub is not None and self.closed is None:
            s = pub.stats()
            mx.observe_publisher(s.published, s.dropped, s.queued, s.connected)

    def render(self):
        """(body, content type) for /metrics."""
        from cnnvideo.events.metrics import content_type

        self.sync()
        return self.metrics.render(), content_type()

    # --- the live view's API

    def recent(self, limit: int = 50) -> Dict[str, Any]:
        """/api/events: the newest `limit` events (oldest first) with the snapshot as this server's URL, and
        the live counts per label."""
        pipe = self.pipeline
        if pipe is None:
            return {"enabled": False, "events": [], "counts": {}}
        events = pipe.recent(limit)
        for e in events:
            e["snapshot"] = "api/events/%d/snapshot.jpg" % e["track_id"] if e.get("snapshot") else None
        return {"enabled": True, "kind": self.kind, "events": events, "counts": pipe.counts()}

    def snapshot(self, track_id: int) -> Optional[bytes]:
        """The JPEG written for track `track_id` (an int: the path is the keeper's own), or None."""
        pipe = self.pipeline
        if pipe is None or pipe.snapshots is None:
            return None
        path = pipe.snapshots.path_for(int(track_id))
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError:
            return None
