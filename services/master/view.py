"""What the master's live view shows: recent spans, recent latencies and the latest result, kept in bounded
deques as the run goes; `state()` turns them and the master's counters into the page's JSON."""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np

from cnnvideo.config_validation import view_token
from cnnvideo.results import report as rpt
from cnnvideo.results.detections import caption, label_counts
from cnnvideo.results.labels import topk
from cnnvideo.results.liveview import LiveView

from . import reporting

WINDOW_S = 10.0  # the rolling Gantt chart's width
RECENT = 4000  # spans kept for it
LATENCIES = 500  # capture-to-result latencies in the figures shown


def describe_detections(detections) -> str:
    """A detector's one-line result: the count caption, e.g. "3 people"."""
    return caption(detections)


def describe(y: np.ndarray) -> str:
    """A one-line result: the top class of a classifier output with its softmax score (ImageNet names)."""
    best = topk(y, 1)
    return "%s (%.3g)" % (best[0][1], best[0][2]) if best else "-"


class ViewState:
    """Bounded recent history for the live page (call the note_* methods holding the master's lock)."""

    def __init__(self, actors: List[str]) -> None:
        self.actors = actors
        self.spans: Deque[rpt.StageSpan] = collections.deque(maxlen=RECENT)
        self.latencies: Deque[float] = collections.deque(maxlen=LATENCIES)
        self.done_at: Deque[float] = collections.deque(maxlen=LATENCIES)
        self.latest: Optional[Dict[str, Any]] = None
        self.plan: List[int] = []

    def note_span(self, span: rpt.StageSpan) -> None:
        self.spans.append(span)

    def note_result(self, frame: int, latency: float, result: str, at: float,
                    detections: Optional[Dict[str, int]] = None) -> None:
        """A frame finished: `result` is its one-line description; a detector run also gives the frame's
        {label: boxes} (cnnvideo.results.detections.label_counts), shown as counts on the page."""
        self.latencies.append(latency)
        self.done_at.append(at)
        self.latest = {"frame": frame, "result": result}
        if detections is not None:
            self.latest["detections"] = dict(detections)

    def state(self, t0: float, counters: Dict[str, Any], hops: Sequence[rpt.HopStats],
              extra: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
        """The page's JSON: counters (processed, captured, skipped, ...) plus the recent figures."""
        now = time.time()
        recent = [t for t in self.done_at if t >= now - WINDOW_S]
        fps = None
        if len(recent) >= 2 and recent[-1] > recent[0]:
            fps = (len(recent) - 1) / (recent[-1] - recent[0])
        lat = rpt.latency_summary(list(self.latencies)) if self.latencies else {}
        spans = [[s.frame, s.actor, s.stage, round(s.start - t0, 4), round(s.end - t0, 4)]
                 for s in self.spans if s.end >= now - WINDOW_S]
        out = {"fps": fps, "latency_s": {k: lat.get(k) for k in ("p50", "p95", "max")}, "latest": self.latest,
               "plan": self.plan, "window_s": WINDOW_S, "now_s": round(now - t0, 4), "actors": self.actors,
               "spans": spans,
               "hops": [{"name": h.name, "bytes_sent": h.bytes_sent, "messages": h.messages,
                         "MBps": (h.bytes_sent / h.transfer_s / 1e6) if h.transfer_s > 0 else None} for h in hops]}
        out.update(counters)
        out.update(extra())
        return out


def members(m) -> List[Dict[str, Any]]:
    """The pool's workers as the live page, /state.json and /metrics show them (pool.Pool.members), holding
    m.cond."""
    plan = m.sending.sent_plan
    devices = [c.device for c in m.setup.products.costs]
    return m.pool.members(m.addresses, devices, plan.stage_of(m.W) if plan is not None else [], time.time())


class LivePage:
    """The master's live page (`live_view.port`): starts the server and answers its JSON from the role `m`."""

    def __init__(self, m) -> None:
        self.m = m
        self.view: Optional[ViewState] = None  # recent history, with live_view.port set
        self.server = None  # the page's HTTP server (results.liveview.LiveView)

    @property
    def port(self) -> Optional[int]:
        return self.server.port if self.server is not None else None

    def start(self) -> None:
        """Serve the page (live_view.port set): it sees every span and every completed frame."""
        m = self.m
        lv = m.cfg.live_view
        if not lv.port:
            return
        self.view = ViewState(["m"] + ["w%d" % w for w in range(m.W)])
        m.telemetry.span_listeners.append(self.view.note_span)
        m.consumers.register(self.on_result, holding_lock=True)
        ev = m.events
        self.server = LiveView(lv.port, self.state, lv.host, token=view_token(m.cfg),
                               metrics=ev.render if ev.metrics is not None else None,
                               metrics_open=lv.metrics_open, events=ev.recent, snapshot=ev.snapshot)
        self.server.start()

    def show_plan(self, cuts) -> None:
        """The plan the latest frame was sent with."""
        if self.view is not None:
            self.view.plan = list(cuts)

    def on_result(self, done) -> None:
        """A completed frame (delivery.Completed): its latency and one-line result, and the frame with its boxes."""
        if done.detections is None:
            self.view.note_result(done.frame, done.t_result - done.captured, describe(done.output), done.t_result)
        else:
            self.view.note_result(done.frame, done.t_result - done.captured, describe_detections(done.detections),
                                  done.t_result, detections=label_counts(done.detections))
        self.server.set_frame(done.rgb, done.detections)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def state(self):
        """The live page's JSON (from the HTTP thread)."""
        m = self.m
        with m.cond:
            tr = m.tracker
            st = m.feed.source.stats()
            counters = {"mode": "live" if m.live else "offline", "processed": tr.completed,
                        "captured": st["captured"], "skipped": st["skipped"],
                        "skipped_share": round(st["skipped"] / st["captured"], 4) if st["captured"] else None,
                        "in_flight": tr.in_flight(), "dropped": tr.dropped,
                        "plan_layers": " | ".join(str(len(x)) for x in reporting.plan_layers(
                            m.infos[0], self.view.plan, m.W)) if self.view.plan else ""}
            chk = m.checker.summary() if m.checker is not None else {}
            counters["checked"] = chk.get("checked")
            counters["max_abs_err"] = chk.get("max_abs_err")
            counters["setup"] = m.setup_progress.snapshot()  # the step setup is in, or how long it took
            counters["members"] = members(m)
            hops = [m.telemetry.hops[n] for n in sorted(m.telemetry.hops)]
            return self.view.state(m.t_run or time.time(), counters, hops, dict)
