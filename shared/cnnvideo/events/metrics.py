"""Prometheus metrics for a run, on a registry of their own so several runs (or tests) in one process never
collide in prometheus_client's global registry; `render()` is the text the master's HTTP server returns
for `/metrics` (with `content_type()` as its Content-Type). Every series carries the label `camera` (issue 35:
one master per camera, so a Prometheus scraping several tells them apart without relabelling).
"""
from __future__ import annotations

import collections
import copy
import threading
import time
from typing import TYPE_CHECKING, Deque, Dict, Iterable, Iterator, Optional, Tuple

from .types import Detection, Event

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RateWindow:
    """Amount per second over the last `window_s` seconds (bounded: old samples are dropped)."""

    def __init__(self, window_s: float = 5.0, max_samples: int = 10000):
        self.window_s = window_s
        self._samples: Deque[Tuple[float, float]] = collections.deque(maxlen=max_samples)

    def add(self, now: float, amount: float = 1.0) -> float:
        """Record `amount` at time `now`; returns the current rate."""
        self._samples.append((now, amount))
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        if len(self._samples) < 2:
            return 0.0
        span = self._samples[-1][0] - self._samples[0][0]
        if span <= 0:
            return 0.0
        # samples after the first cover `span` seconds
        return sum(a for _, a in list(self._samples)[1:]) / span


class CameraLabel:
    """A collector yielding every metric of the registry `inner` with the constant label `camera` added to each of
    its samples: the camera is a property of the whole master (like a scrape target's `instance`), not of any one
    measurement, so it is added once here rather than declared on every metric and passed at every call site."""

    def __init__(self, inner: CollectorRegistry, camera: str):
        self.inner = inner
        self.camera = camera

    def collect(self) -> Iterator[Metric]:
        for metric in self.inner.collect():
            out = copy.copy(metric)
            out.samples = [s._replace(labels=self._labelled(metric.name, s.labels)) for s in metric.samples]
            yield out

    def _labelled(self, name: str, labels: Dict[str, str]) -> Dict[str, str]:
        if "camera" in labels:
            raise ValueError("metric %s has a label of its own named camera; CameraLabel adds that one" % name)
        return dict(labels, camera=self.camera)


class Metrics:
    """The run's counters, gauges and histograms (names prefixed `cnnvideo_` by default), every series labelled
    `camera="<camera>"` (the master passes `events.camera`).

    The metrics are declared without the camera on a private registry; the public `registry` (what `render()`
    exposes and what `registry.get_sample_value` reads) holds one CameraLabel collector over it, which adds the
    label to every sample when collected. So the call sites stay as they are (`.inc()`, `.labels(hop=...)`), a
    metric added later carries the camera without anyone remembering it, and the registry reads exactly what a
    scrape sees: `get_sample_value("cnnvideo_hop_bytes_total", {"hop": "m->w0", "camera": "door"})`.
    """

    def __init__(self, camera: str, namespace: str = "cnnvideo", rate_window_s: float = 5.0):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        if not isinstance(camera, str) or not camera:
            raise ValueError("Metrics: camera must be a non-empty string, got %r" % (camera,))
        self.camera = camera
        self._unlabelled = CollectorRegistry(auto_describe=True)
        ns, r = namespace, self._unlabelled
        self.frames_captured = Counter("frames_captured", "Frames read from the camera", namespace=ns, registry=r)
        self.frames_processed = Counter("frames_processed", "Frames with a CNN result", namespace=ns, registry=r)
        self.frames_skipped = Counter("frames_skipped", "Frames not sent by the frame policy", namespace=ns,
                                      registry=r)
        self.frames_dropped = Counter("frames_dropped", "Frames lost or abandoned in the chain", namespace=ns,
                                      registry=r)
        self.processed_fps = Gauge("processed_fps", "Processed frames per second (recent window)", namespace=ns,
                                   registry=r)
        self.latency = Histogram("capture_to_result_seconds", "Capture time to result time", namespace=ns,
                                 registry=r, buckets=LATENCY_BUCKETS)
        self.hop_bytes = Counter("hop_bytes", "Bytes sent over a hop", ["hop"], namespace=ns, registry=r)
        self.hop_rate = Gauge("hop_effective_bytes_per_second", "Bytes per second over a hop (recent window)",
                              ["hop"], namespace=ns, registry=r)
        self.stage_compute = Counter("stage_compute_seconds", "CNN stage compute time on a worker",
                                     ["worker", "engine"], namespace=ns, registry=r)
        self.detections = Counter("detections", "Detections by label", ["label"], namespace=ns, registry=r)
        self.events = Counter("events", "Events made by the tracker and zones, by type", ["type"], namespace=ns,
                              registry=r)
        self.events_published = Counter("events_published", "Events the MQTT broker acknowledged", namespace=ns,
                                        registry=r)
        self.events_dropped = Counter("events_dropped", "Events dropped from the full MQTT queue", namespace=ns,
                                      registry=r)
        self.events_queued = Gauge("events_queued", "Events waiting for the MQTT broker", namespace=ns, registry=r)
        self.mqtt_connected = Gauge("mqtt_connected", "1 while connected to the MQTT broker", namespace=ns,
                                    registry=r)
        self.pool_workers = Gauge("pool_workers", "Workers of the pool by state (serving, leaving, out)", ["state"],
                                  namespace=ns, registry=r)
        self.worker_fps = Gauge("worker_fps", "Frames a second through a worker of the pool (last 10 s)",
                                ["worker", "address"], namespace=ns, registry=r)
        self.registry = CollectorRegistry(auto_describe=True)  # after the metrics: it learns their names now
        self.registry.register(CameraLabel(self._unlabelled, camera))
        self._lock = threading.Lock()
        self._rate_window_s = rate_window_s
        self._fps = RateWindow(rate_window_s)
        self._hops: Dict[str, RateWindow] = {}
        self._pub_seen = (0, 0)

    def frame_captured(self, n: int = 1) -> None:
        self.frames_captured.inc(n)

    def frame_skipped(self, n: int = 1) -> None:
        self.frames_skipped.inc(n)

    def frame_dropped(self, n: int = 1) -> None:
        self.frames_dropped.inc(n)

    def frame_processed(self, capture_time: float, result_time: Optional[float] = None) -> None:
        """One result: counts it, observes capture-to-result latency (epoch seconds) and updates the fps."""
        done = time.time() if result_time is None else result_time
        self.frames_processed.inc()
        self.latency.observe(max(0.0, done - capture_time))
        with self._lock:
            self.processed_fps.set(self._fps.add(done))

    def hop_sent(self, hop: str, nbytes: int, now: Optional[float] = None) -> None:
        """`nbytes` went over `hop` (e.g. `master->w1`): bytes counter and the recent bytes/s gauge."""
        now = time.monotonic() if now is None else now
        self.hop_bytes.labels(hop=hop).inc(nbytes)
        with self._lock:
            win = self._hops.setdefault(hop, RateWindow(self._rate_window_s))
            self.hop_rate.labels(hop=hop).set(win.add(now, nbytes))

    def stage_computed(self, worker: str, engine: str, seconds: float) -> None:
        self.stage_compute.labels(worker=worker, engine=engine).inc(max(0.0, seconds))

    def observe_detections(self, detections: Iterable[Detection]) -> None:
        for d in detections:
            self.detections.labels(label=d.label).inc()

    def observe_events(self, events: Iterable[Event]) -> None:
        for e in events:
            self.events.labels(type=e.type).inc()

    def observe_publisher(self, published: int, dropped: int, queued: int, connected: bool) -> None:
        """Take a publisher's cumulative stats (counters advance by the difference since the last call)."""
        with self._lock:
            p0, d0 = self._pub_seen
            if published > p0:
                self.events_published.inc(published - p0)
            if dropped > d0:
                self.events_dropped.inc(dropped - d0)
            self._pub_seen = (max(p0, published), max(d0, dropped))
        self.events_queued.set(queued)
        self.mqtt_connected.set(1 if connected else 0)

    def observe_members(self, members: Iterable[Dict[str, object]]) -> None:
        """The pool's workers now (the master's pool.members): how many in each state, and each one's frames a
        second."""
        counts = {"serving": 0, "leaving": 0, "out": 0}
        for m in members:
            counts[str(m["state"])] = counts.get(str(m["state"]), 0) + 1
            self.worker_fps.labels(worker=str(m["worker"]), address=str(m["address"])).set(float(m["fps"]))
        for state, n in counts.items():
            self.pool_workers.labels(state=state).set(n)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry (every series with this camera's label)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def content_type() -> str:
    """The Content-Type header for `render()` output."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return CONTENT_TYPE_LATEST
