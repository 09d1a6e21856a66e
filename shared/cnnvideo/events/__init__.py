"""From per-frame detections to events (issue 23): track objects, notice zone entries and exits, keep a
snapshot per object, publish to MQTT and count everything for Prometheus.

A pure library the master calls; it imports nothing else from cnnvideo. Modules, one job each:
  types      Detection, Event (plain JSON), EventsConfigError
  tracker    new/update/end with stable ids, expiry by capture time; IouTracker (light) and
  kalman     KalmanTracker (predicted boxes, the default), chosen by `tracker.kind`
  zones      named polygons, entered/left, live counts per zone and label
  snapshots  best frame per track, written as a JPEG with the box on `end`
  mqtt       MqttPublisher: non-blocking, bounded queue, reconnects, retained counts, last will
  metrics    Metrics: prometheus_client on its own registry, `render()` for `/metrics`

`EventPipeline` glues them in that order for one camera and keeps recent events for `/api/events`.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Any, Deque, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import numpy as np

# each module loads its heavy package (cv2, paho, prometheus_client) only when used
from .metrics import Metrics
from .mqtt import MqttPublisher, MqttSettings
from .snapshots import SnapshotKeeper
from .tracker import BoxTracker, TrackerSettings
from .trackers import make_tracker
from .types import EVENT_TYPES, Box, Detection, Event, EventsConfigError
from .zones import ZoneMonitor, parse_zones

LOG = logging.getLogger("cnnvideo.events")

__all__ = ["Box", "Detection", "Event", "EventsConfigError", "EVENT_TYPES", "EventPipeline", "pipeline_from_config"]


class EventPipeline:
    """tracker -> zones -> snapshots -> MQTT -> metrics for one camera, plus a bounded list of recent events.

    Only the tracker is required; pass a ZoneMonitor, SnapshotKeeper, MqttPublisher (already started) and
    Metrics to enable each step. Calls are serialised by a lock, so the master may call `process()` from its
    result thread and `recent()` from its HTTP thread.
    """

    def __init__(self, tracker: BoxTracker, zones: Optional[ZoneMonitor] = None,
                 snapshots: Optional[SnapshotKeeper] = None, publisher: Optional[MqttPublisher] = None,
                 metrics: Optional[Metrics] = None, camera: str = "cam", recent_max: int = 200,
                 snapshot_url_prefix: Optional[str] = None, publish_types: Optional[Sequence[str]] = None):
        self.tracker = tracker
        self.zones = zones
        self.snapshots = snapshots
        self.publisher = publisher
        self.metrics = metrics
        self.camera = camera
        self.snapshot_url_prefix = snapshot_url_prefix
        self.publish_types: FrozenSet[str] = frozenset(EVENT_TYPES if publish_types is None else publish_types)
        self._recent: Deque[Dict[str, Any]] = collections.deque(maxlen=recent_max)
        self._lock = threading.Lock()

    def process(self, frame_index: int, capture_time: float, detections: Sequence[Detection],
                image: Optional[np.ndarray] = None) -> List[Event]:
        """Run one processed frame's detections (and its RGB uint8 image, for snapshots); returns its events."""
        with self._lock:
            if self.metrics is not None:
                self.metrics.observe_detections(detections)
            events = self.tracker.update(frame_index, capture_time, detections)
            return self._after(events, image)

    def finish(self, capture_time: float, frame_index: int = -1) -> List[Event]:
        """End every live track (the stream is over) and pass the `end`/`left` events on."""
        with self._lock:
            return self._after(self.tracker.finish(capture_time, frame_index), None)

    def _after(self, events: List[Event], image: Optional[np.ndarray]) -> List[Event]:
        if self.zones is not None:
            events = self.zones.update(events)
        out = []
        for e in events:
            e = dataclasses.replace(e, camera=self.camera)
            if self.snapshots is not None:
                if e.type == "end":
                    box = self.snapshots.best_box(e.track_id)
                    path = self.snapshots.finish(e)
                    if path is not None:
                        url = path if self.snapshot_url_prefix is None else (
                            self.snapshot_url_prefix.rstrip("/") + "/%d.jpg" % e.track_id)
                        e = dataclasses.replace(e, snapshot=url, snapshot_box=box)
                else:
                    self.snapshots.offer(e, image)
            out.append(e)
            self._recent.append(e.to_dict())
        if self.publisher is not None:
            for e in out:
                if e.type in self.publish_types:
                    self.publisher.publish_event(e)
            if out:
                self.publisher.publish_counts(self.tracker.counts())
        if self.metrics is not None:
            self.metrics.observe_events(out)
            if self.publisher is not None:
                s = self.publisher.stats()
                self.metrics.observe_publisher(s.published, s.dropped, s.queued, s.connected)
        return out

    def recent(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The most recent events, oldest first, as plain dicts (for `/api/events`)."""
        with self._lock:
            items = list(self._recent)
        return items if limit is None else items[-limit:] if limit > 0 else []

    def counts(self) -> Dict[str, int]:
        """Live announced tracks per label."""
        with self._lock:
            return self.tracker.counts()

    def zone_counts(self) -> Dict[str, Dict[str, int]]:
        """Live tracks per zone and label ({} without zones)."""
        with self._lock:
            return {} if self.zones is None else self.zones.counts()

    def close(self, capture_time: Optional[float] = None, timeout: float = 3.0) -> None:
        """Finish the tracks (when `capture_time` is given), then close the publisher (offline, disconnect)."""
        if capture_time is not None:
            self.finish(capture_time)
        if self.publisher is not None:
            s = self.publisher.close(timeout=timeout)
            if self.metrics is not None:
                self.metrics.observe_publisher(s.published, s.dropped, s.queued, False)


def _settings(cls, config: Optional[Mapping[str, Any]], key: str, **fixed):
    """`cls(**config)` with unknown keys and bad values reported as one-line EventsConfigError naming `key`."""
    config = dict(config or {})
    names = {f.name for f in dataclasses.fields(cls)}
    for k in config:
        if k not in names:
            raise EventsConfigError("%s.%s: unknown setting (known: %s)" % (key, k, ", ".join(sorted(names))))
    config.update(fixed)
    try:
        obj = cls(**config)
    except EventsConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise EventsConfigError("%s: %s" % (key, e)) from None
    obj.validate(key)
    return obj


def pipeline_from_config(config: Mapping[str, Any], frame_size: Tuple[int, int], metrics: Optional[Metrics] = None,
                         key: str = "events", start_mqtt: bool = True) -> EventPipeline:
    """An EventPipeline from an `events:` config mapping; sections (each optional):

      camera: cam                      name used in topics and events
      recent_max: 200                  events kept for /api/events
      tracker: {...}                   TrackerSettings fields (`kind`: kalman or iou)
      zones: {door: [[x, y], ...]}     polygons of (x, y) points in frame pixels (frame_size is (height, width))
      snapshots: {dir: out/snapshots, max_tracks: 32, url_prefix: /snapshots}
      mqtt: {...}                      MqttSettings fields (no section: no MQTT)

    Raises EventsConfigError (one line, naming the key) for anything wrong; the MQTT publisher is started
    (background connect) unless `start_mqtt` is false.
    """
    known = {"camera", "recent_max", "tracker", "zones", "snapshots", "mqtt"}
    for k in config:
        if k not in known:
            raise EventsConfigError("%s.%s: unknown setting (known: %s)" % (key, k, ", ".join(sorted(known))))
    camera = config.get("camera", "cam")
    if not isinstance(camera, str) or not camera:
        raise EventsConfigError("%s.camera: must be a non-empty string" % key)
    recent_max = config.get("recent_max", 200)
    if not isinstance(recent_max, int) or recent_max < 1:
        raise EventsConfigError("%s.recent_max: must be an integer >= 1, got %r" % (key, recent_max))
    tcfg = dict(config.get("tracker") or {})
    if tcfg.get("labels") is not None:
        tcfg["labels"] = frozenset(tcfg["labels"])
    tracker = make_tracker(_settings(TrackerSettings, tcfg, key + ".tracker"), frame_size)
    zone_list = parse_zones(config.get("zones"), frame_size, key + ".zones")
    zones = ZoneMonitor(zone_list) if zone_list else None
    snapshots, url_prefix = None, None
    if config.get("snapshots") is not None:
        scfg = dict(config["snapshots"])
        url_prefix = scfg.pop("url_prefix", None)
        unknown = set(scfg) - {"dir", "max_tracks", "jpeg_quality"}
        if unknown:
            raise EventsConfigError("%s.snapshots.%s: unknown setting" % (key, sorted(unknown)[0]))
        try:
            snapshots = SnapshotKeeper(scfg.get("dir", "out/snapshots"), max_tracks=scfg.get("max_tracks", 32),
                                       jpeg_quality=scfg.get("jpeg_quality", 90))
        except (TypeError, ValueError) as e:
            raise EventsConfigError("%s.snapshots: %s" % (key, e)) from None
    publisher = None
    if config.get("mqtt") is not None:
        publisher = MqttPublisher(_settings(MqttSettings, config["mqtt"], key + ".mqtt"), camera=camera)
        if start_mqtt:
            publisher.start()
    return EventPipeline(tracker, zones=zones, snapshots=snapshots, publisher=publisher, metrics=metrics,
                         camera=camera, recent_max=recent_max, snapshot_url_prefix=url_prefix)
