"""Run report: RunReport (report.json: the contract fields, a schema version) and a self-contained report.html
(latency plot, stage Gantt). The master builds and writes it; the launcher, the experiment runner and the soak
bench read it back with read()."""
from __future__ import annotations

import html
import importlib.util
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

log = logging.getLogger(__name__)

STAGES = ("receive", "decode", "compute", "encode", "send")
STAGE_COLOURS = {
    "read": "#999999",
    "receive": "#4e79a7",
    "decode": "#76b7b2",
    "compute": "#e15759",
    "encode": "#f28e2b",
    "send": "#59a14f",
    "check": "#b07aa1",
}


@dataclass
class StageSpan:
    """One timed stage of one frame on one actor ('m', 'w0', ...)."""

    frame: int
    actor: str
    stage: str
    start: float
    end: float
    nbytes: int = 0
    cpu: float = 0.0  # CPU seconds of the thread that ran it, where the actor measured it (workers' decode,
    # compute and encode)


@dataclass
class HopStats:
    """Totals of what crossed one hop."""

    name: str
    bytes_sent: int = 0
    bytes_dense: int = 0
    transfer_s: float = 0.0
    messages: int = 0
    keyframes: int = 0

    def add(self, sent: int, dense: int, seconds: float, keyframe: bool) -> None:
        self.bytes_sent += int(sent)
        self.bytes_dense += int(dense)
        self.transfer_s += max(float(seconds), 0.0)
        self.messages += 1
        self.keyframes += int(bool(keyframe))

    def to_dict(self) -> Dict[str, Any]:
        ratio = self.bytes_sent / self.bytes_dense if self.bytes_dense else None
        bw = self.bytes_sent / self.transfer_s if self.transfer_s > 0 else None
        return {
            "name": self.name,
            "bytes_sent": self.bytes_sent,
            "bytes_dense": self.bytes_dense,
            "ratio": ratio,
            "transfer_s": round(self.transfer_s, 6),
            "effective_MBps": None if bw is None else round(bw / 1e6, 3),
            "messages": self.messages,
            "keyframes": self.keyframes,
        }


@dataclass
class FrameRecord:
    """One frame as the master saw it."""

    frame: int
    cuts: List[int]
    sent_at: float = 0.0
    done_at: Optional[float] = None
    worker: int = -1
    error: float = float("nan")
    status: str = "pending"  # pending | completed | dropped (each frame ends exactly once)
    attempts: int = 0  # times the master sent it (1 + re-sends after faults)
    reason: str = ""  # why it was dropped
    top5: Optional[List[list]] = None  # [[class index, name, softmax score], ...] of the result, best first
    reused: bool = False  # the result was unchanged (an empty update): the previous result stands
    route: List[int] = field(default_factory=list)  # the worker of each stage for this frame
    groups: List[List[int]] = field(default_factory=list)  # its plan's workers of each stage

    @property
    def latency(self) -> Optional[float]:
        return None if self.done_at is None else self.done_at - self.sent_at


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) without numpy."""
    if not values:
        return float("nan")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


START_FRAMES = 80  # report.json start: the rate over the first results against the rest
STEADY_AFTER = 60  # ... and the steady rate after these


def _rate(done: Sequence[float], i: int) -> Optional[float]:
    """Results a second from the i-th result (sorted times) to the last."""
    return (len(done) - 1 - i) / (done[-1] - done[i]) if done[-1] > done[i] else None


def start_figures(records: Sequence[FrameRecord], first_read_at: Optional[float]) -> Dict[str, Optional[float]]:
    """report.json `start`: how fast a run gets going. Seconds from the master reading its first frame to the first
    result, and the fps over the first and the second half of the results (in the order they came: the first half
    from the first send to the middle result, the second from there to the last); the same split after the first
    START_FRAMES results (`fps_first_80`, `fps_after_80`, `after_80_over_first`: issue 46's start figure), and the
    steady rate after the first STEADY_AFTER results (`fps_after_60`)."""
    done = sorted(r.done_at for r in records if r.done_at is not None)
    out: Dict[str, Optional[float]] = {"first_result_s": None, "fps_first_half": None, "fps_second_half": None,
                                       "second_over_first": None, "fps_first_80": None, "fps_after_80": None,
                                       "after_80_over_first": None, "fps_after_60": None}
    if not done:
        return out
    t_send = min(r.sent_at for r in records)
    if len(done) > START_FRAMES:
        first80 = START_FRAMES / (done[START_FRAMES - 1] - t_send) if done[START_FRAMES - 1] > t_send else None
        rest = _rate(done, START_FRAMES - 1)
        out["fps_first_80"] = None if first80 is None else round(first80, 4)
        out["fps_after_80"] = None if rest is None else round(rest, 4)
        if first80 and rest:
            out["after_80_over_first"] = round(rest / first80, 4)
    if len(done) > STEADY_AFTER:
        steady = _rate(done, STEADY_AFTER - 1)
        out["fps_after_60"] = None if steady is None else round(steady, 4)
    if first_read_at is not None:
        out["first_result_s"] = round(done[0] - first_read_at, 4)
    half = (len(done) + 1) // 2
    start = min(r.sent_at for r in records)
    first = half / (done[half - 1] - start) if done[half - 1] > start else None
    second = (len(done) - half) / (done[-1] - done[half - 1]) if done[-1] > done[half - 1] else None
    out["fps_first_half"] = None if first is None else round(first, 4)
    out["fps_second_half"] = None if second is None else round(second, 4)
    if first and second:
        out["second_over_first"] = round(second / first, 4)
    return out


def latency_summary(values: Sequence[float]) -> Dict[str, Optional[float]]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    return {
        "mean": round(sum(values) / len(values), 6),
        "p50": round(percentile(values, 50), 6),
        "p95": round(percentile(values, 95), 6),
        "max": round(max(values), 6),
    }


def master_cpu(cpu_s: Optional[float], frames: int, check_on_master: bool,
               setup_cpu_s: Optional[float] = None) -> Dict[str, Any]:
    """report.json's `master`: the master process's CPU seconds over the run (every thread: capture, input-hop
    encode, sends, results, and the online check when `check_on_master`), per completed frame in ms, and the CPU
    seconds its setup took before the run (None when not measured)."""
    per = None
    if cpu_s is not None and frames > 0:
        per = round(1e3 * cpu_s / frames, 3)
    return {"cpu_s": None if cpu_s is None else round(cpu_s, 3), "cpu_per_frame_ms": per, "frames": int(frames),
            "check_on_master": bool(check_on_master),
            "setup_cpu_s": None if setup_cpu_s is None else round(setup_cpu_s, 3)}


def stage_summary(spans: Sequence[StageSpan]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Per actor, per stage: count, mean and total seconds, total bytes (StageTotals over `spans`)."""
    totals = StageTotals()
    for s in spans:
        totals.add(s)
    return totals.summary()


class StageTotals:
    """Per actor, per stage, counted span by span (memory does not grow with the number of spans): count, total
    and mean wall seconds, total bytes, and where the actor measured it, total and mean CPU seconds (`cpu_s`,
    `cpu_mean_s`: a capped worker's compute without its throttled wait)."""

    def __init__(self) -> None:
        self._d: Dict[str, Dict[str, Dict[str, float]]] = {}

    def add(self, s: StageSpan) -> None:
        d = self._d.setdefault(s.actor, {}).setdefault(s.stage, {"count": 0, "total_s": 0.0, "bytes": 0,
                                                                  "cpu_s": 0.0})
        d["count"] += 1
        d["total_s"] += max(s.end - s.start, 0.0)
        d["bytes"] += s.nbytes
        d["cpu_s"] += max(s.cpu, 0.0)

    def summary(self) -> Dict[str, Dict[str, Dict[str, float]]]:
        out: Dict[str, Dict[str, Dict[str, float]]] = {}
        for actor, stages in self._d.items():
            for stage, d in stages.items():
                n = d["count"]
                row = {"count": n, "total_s": round(d["total_s"], 6), "bytes": d["bytes"],
                       "mean_s": round(d["total_s"] / n, 6) if n else 0.0}
                if d["cpu_s"] > 0:
                    row.update(cpu_s=round(d["cpu_s"], 6), cpu_mean_s=round(d["cpu_s"] / n, 6) if n else 0.0)
                out.setdefault(actor, {})[stage] = row
        return out


SCHEMA_VERSION = 1  # bump when a field changes meaning; add fields freely (readers keep what they do not know)


class ReportError(ValueError):
    """A report.json that is missing, unreadable, of a newer schema or lacks a contract field."""


@dataclass
class RunReport:
    """report.json. The fields are contracts (README "Reading the report"); `extra` holds every other field the
    master adds (cut_names, plan_decisions, per_frame, predicted_*, outputs_frames, ...), in the order added.
    Reads like the JSON mapping: report["completed"], report.get("retried")."""

    frames: int
    completed: int
    lost: int
    model: str
    mode: str
    scheduler: str
    workers: List[str]
    throughput_fps: Optional[float]
    latency_s: Dict[str, Optional[float]]
    hops: List[Dict[str, Any]]
    plan: List[List[str]]
    max_abs_err: Optional[float]
    wall_s: float
    stages: Dict[str, Any]
    plans_used: List[Dict[str, Any]] = field(default_factory=list)
    # completed frames whose result was reused: the reporter's output was unchanged (an empty update), the previous
    # result stands
    reused_frames: int = 0
    # per worker ("w0"): stages computed and skipped (unchanged input), compute_mean_s of a computed one, skipped_s
    # (what the skips took) and saved_s (estimate: skipped x the stage's mean compute time on computed frames)
    stages_skipped: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> Dict[str, Any]:
        """The report.json mapping: schema_version, the contract fields in order, then the extra fields."""
        out: Dict[str, Any] = {"schema_version": self.schema_version}
        for f in _FIELDS:
            out[f] = getattr(self, f)
        for k, v in self.extra.items():
            if k not in out:
                out[k] = v
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RunReport":
        """The report of a report.json mapping (one without schema_version is version 1, from before it existed)."""
        if not isinstance(data, dict):
            raise ReportError("a report must be a JSON object")
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportError("report schema_version %r is newer than this reader's %d" % (version, SCHEMA_VERSION))
        missing = [f for f in _REQUIRED if f not in data]
        if missing:
            raise ReportError("report lacks field %s" % ", ".join(missing))
        known = {f: data[f] for f in _FIELDS if f in data}
        extra = {k: v for k, v in data.items() if k not in known and k != "schema_version"}
        return cls(schema_version=version, extra=extra, **known)

    def __getitem__(self, key: str) -> Any:
        if key in _FIELDS or key == "schema_version":
            return getattr(self, key)
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _FIELDS or key == "schema_version":
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def __contains__(self, key: str) -> bool:
        return key in _FIELDS or key == "schema_version" or key in self.extra

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


_FIELDS = [f for f in RunReport.__dataclass_fields__ if f not in ("extra", "schema_version")]
_OPTIONAL = ("plans_used", "reused_frames", "stages_skipped")  # added later: reports from before lack them
_REQUIRED = [f for f in _FIELDS if f not in _OPTIONAL]


def read(path: str) -> RunReport:
    """RunReport of a report.json file; ReportError naming the file if it is unreadable or not a report."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReportError("cannot read report %s: %s" % (path, exc)) from None
    try:
        return RunReport.from_dict(data)
    except ReportError as exc:
        raise ReportError("%s: %s" % (path, exc)) from None


def build(
    *,
    frames_total: int,
    records: Sequence[FrameRecord],
    hops: Sequence[HopStats],
    spans: Sequence[StageSpan],
    model: str,
    mode: str,
    scheduler: str,
    workers: Sequence[str],
    plan_layers: List[List[str]],
    wall_s: float,
    max_abs_err: Optional[float] = None,
    extra: Optional[Dict[str, Any]] = None,
    stages: Optional[Dict[str, Any]] = None,
    stages_skipped: Optional[Dict[str, Dict[str, Any]]] = None,
) -> RunReport:
    """The RunReport of a run (contract fields, then the `extra` details)."""
    done = [r for r in records if r.done_at is not None]
    lat = [r.latency for r in done]
    if done:
        first = min(r.sent_at for r in records)
        span = max(r.done_at for r in done) - first
        throughput = len(done) / span if span > 0 else None
    else:
        throughput = 0.0
    plans: Dict[str, int] = {}
    for r in records:
        key = ",".join(str(c) for c in r.cuts)
        plans[key] = plans.get(key, 0) + 1
    return RunReport(
        frames=int(frames_total),
        completed=len(done),
        lost=int(frames_total) - len(done),
        model=model,
        mode=mode,
        scheduler=scheduler,
        workers=list(workers),
        throughput_fps=None if throughput is None else round(throughput, 4),
        latency_s=latency_summary(lat),
        hops=[h.to_dict() for h in hops],
        plan=plan_layers,
        max_abs_err=max_abs_err,
        wall_s=round(wall_s, 3),
        stages=stages if stages is not None else stage_summary(spans),
        plans_used=[{"cuts": [int(c) for c in k.split(",")], "frames": n} for k, n in plans.items()],
        reused_frames=sum(1 for r in done if r.reused),
        stages_skipped=dict(stages_skipped or {}),
        extra=dict(extra or {}),
    )


def write_json(report: Any, path: str) -> str:
    """Write a RunReport (or a report mapping) to `path` atomically (tmp file + rename)."""
    data = report.to_dict() if isinstance(report, RunReport) else report
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=_json_default)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError("not JSON serialisable: %r" % type(obj))


# ---------------------------------------------------------------------------------------------- SVG / HTML


def _latency_svg(records: Sequence[FrameRecord], width: int = 900, height: int = 260) -> str:
    pts = [(r.frame, r.latency) for r in records if r.latency is not None]
    pad_l, pad_r, pad_t, pad_b = 60, 20, 20, 40
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="11">' % (width, height)]
    if not pts:
        parts.append('<text x="20" y="30">no completed frames</text></svg>')
        return "".join(parts)
    fmax = max(max(p[0] for p in pts), 1)
    lmax = max(p[1] for p in pts) * 1.1 or 1.0
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(f: float) -> float:
        return pad_l + pw * f / fmax

    def sy(v: float) -> float:
        return pad_t + ph * (1 - v / lmax)

    parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>' % (pad_l, pad_t, pw, ph))
    for i in range(5):
        v = lmax * i / 4
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (pad_l, pad_l + pw, sy(v), sy(v)))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.3g s</text>' % (pad_l - 4, sy(v) + 4, v))
    parts.append('<text x="%d" y="%d" text-anchor="middle">frame</text>' % (pad_l + pw / 2, height - 8))
    for i in range(6):
        f = fmax * i / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (sx(f), pad_t + ph + 14, round(f)))
    line = " ".join("%.1f,%.1f" % (sx(f), sy(v)) for f, v in pts)
    parts.append('<polyline points="%s" fill="none" stroke="#4e79a7" stroke-width="1.5"/>' % line)
    for f, v in pts:
        parts.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="#4e79a7"><title>frame %d: %.4f s</title></circle>'
                     % (sx(f), sy(v), f, v))
    parts.append("</svg>")
    return "".join(parts)


def gantt_svg(spans: Sequence[StageSpan], actors: Sequence[str], max_frames: int = 60, width: int = 1100) -> str:
    shown = [s for s in spans if s.frame < max_frames and s.actor in actors]
    if not shown:
        return "<p>no stage timings</p>"
    rows: List[str] = []
    for a in actors:
        for st in ("read", "check") + STAGES:
            if any(s.actor == a and s.stage == st for s in shown):
                rows.append("%s %s" % (a, st))
    row_h, pad_l, pad_t, pad_b = 16, 110, 10, 30
    height = pad_t + row_h * len(rows) + pad_b
    t0 = min(s.start for s in shown)
    t1 = max(s.end for s in shown)
    span = max(t1 - t0, 1e-9)
    pw = width - pad_l - 20

    def sx(t: float) -> float:
        return pad_l + pw * (t - t0) / span

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height)]
    index = {r: i for i, r in enumerate(rows)}
    for r, i in index.items():
        y = pad_t + i * row_h
        parts.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (pad_l - 4, y + 11, html.escape(r)))
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#f0f0f0"/>' % (pad_l, pad_l + pw, y + row_h,
                                                                                   y + row_h))
    for s in shown:
        i = index["%s %s" % (s.actor, s.stage)]
        x = sx(s.start)
        w = max(sx(s.end) - x, 0.6)
        colour = STAGE_COLOURS.get(s.stage, "#888")
        opacity = 0.95 if s.frame % 2 == 0 else 0.6
        parts.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" fill-opacity="%.2f">'
                     '<title>frame %d %s %s: %.4f s, %d bytes</title></rect>'
                     % (x, pad_t + i * row_h + 2, w, row_h - 4, colour, opacity, s.frame, s.actor, s.stage,
                        s.end - s.start, s.nbytes))
    for k in range(6):
        t = span * k / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.2f s</text>' % (sx(t0 + t), height - 10, t))
    parts.append("</svg>")
    return "".join(parts)


def thumbnail_uri(frame, width: int = 128, detections: Optional[Sequence[Any]] = None) -> str:
    """An RGB uint8 frame as a small inline JPEG (data: URI), with a detector's boxes (frame pixels) drawn on it
    after the resize (so they stay visible); '' without OpenCV."""
    small = thumbnail(frame, width, detections)
    return jpeg_uri(small) if small is not None else ""


def thumbnail(frame, width: int = 128, detections: Optional[Sequence[Any]] = None):
    """The small RGB uint8 image thumbnail_uri shows: `frame` resized to `width` (240 at least for a detector's,
    big enough to see who is boxed) with the detections' boxes drawn; None without OpenCV. A holder of many
    thumbnails keeps these and encodes only those it shows (jpeg_uri)."""
    if importlib.util.find_spec("cv2") is None:
        return None
    # not at the top, since it loads numpy: read() serves the `cnnvideo local` launcher, camera_report and
    # local_cameras, which load none; only the master makes thumbnails
    from cnnvideo.results.detections import draw_boxes

    h, w = frame.shape[:2]
    if detections is not None:
        width = max(width, 240)
    small = shrink(frame, width, max(int(round(h * width / float(w))), 1))
    if detections:
        small = draw_boxes(small, detections, scale=width / float(w), text=False, thickness=2)
    return small


def shrink(frame, width: int, height: int):
    """`frame` resized down to (width, height) as a mipmap does: halved by area averaging (OpenCV's fast 2x path)
    while both sides stay at least twice the target, then bilinear for the last step. A third of INTER_AREA's
    time straight from 720x480 to 240x160 (0.4 against 1.1 ms on one core; 1.2 grey levels apart on a vtest
    frame), since INTER_AREA at a ratio other than 2 takes its slow general path."""
    import cv2

    while frame.shape[1] >= 2 * width and frame.shape[0] >= 2 * height:
        frame = cv2.resize(frame, (frame.shape[1] // 2, frame.shape[0] // 2), interpolation=cv2.INTER_AREA)
    return cv2.resize(frame, (width, height), interpolation=cv2.INTER_LINEAR)


def jpeg_uri(small) -> str:
    """A small RGB uint8 image as an inline JPEG (quality 80) data: URI; '' if it cannot be encoded."""
    import base64

    import cv2

    from cnnvideo.video.frames import swap_rb

    ok, buf = cv2.imencode(".jpg", swap_rb(small), [int(cv2.IMWRITE_JPEG_QUALITY), 80])
    return "data:image/jpeg;base64," + base64.b64encode(buf.tobytes()).decode("ascii") if ok else ""


def thumbs_html(thumbs: Sequence[tuple]) -> str:
    """A strip of (frame id, data URI, caption[, score]) thumbnails: a classifier's caption is the top-1 label
    with its score, a detector's a count such as "3 people" (score None or left out). Captions are escaped."""
    if not thumbs:
        return "<p>no labelled frames</p>"
    cells = []
    for t in thumbs:
        frame, uri, label = t[:3]
        score = t[3] if len(t) > 3 else None
        cells.append('<figure class="thumb"><img src="%s" alt="frame %d"><figcaption>#%d %s%s</figcaption>'
                     '</figure>' % (html.escape(uri), frame, frame, html.escape(str(label)),
                                    "" if score is None else "<br>%.2f" % score))
    return '<div class="strip">%s</div>' % "".join(cells)


def write_html(report: Dict[str, Any], records: Sequence[FrameRecord], spans: Sequence[StageSpan], path: str,
               actors: Sequence[str], thumbs: Optional[Sequence[tuple]] = None) -> str:
    """A self-contained page: summary table, what the CNN saw (thumbnails with their top-1 label), hop table,
    per-frame latency plot, per-stage Gantt chart."""
    esc = html.escape
    lat = report.get("latency_s") or {}
    rows = [
        ("model", report.get("model")), ("mode", report.get("mode")), ("scheduler", report.get("scheduler")),
        ("frames / completed / lost", "%s / %s / %s" % (report.get("frames"), report.get("completed"),
                                                        report.get("lost"))),
        ("throughput (fps)", report.get("throughput_fps")),
        ("latency mean / p50 / p95 / max (s)", " / ".join(str(lat.get(k)) for k in ("mean", "p50", "p95", "max"))),
        ("max abs error", report.get("max_abs_err")),
        ("results reused (unchanged) / stages skipped per worker (saved s)", "%s / %s" % (
            report.get("reused_frames", 0), ", ".join("%s: %s (%s)" % (w, d.get("skipped"), d.get("saved_s"))
                                                      for w, d in (report.get("stages_skipped") or {}).items()))),
        ("top-1 agreement / top-5 overlap with the unsplit model", "%s / %s" % (report.get("top1_agreement"),
                                                                                 report.get("top5_overlap"))),
        ("weights", report.get("weights_used") or report.get("weights")), ("wall (s)", report.get("wall_s")),
        ("plan (layers per worker)", "; ".join("w%d: %d layers" % (i, len(p)) for i, p in
                                               enumerate(report.get("plan") or []))),
    ]
    if report.get("detections") is not None:  # a detector run (cnnvideo.results.detections)
        rows.append(("detections (label: boxes / frames with one / most in a frame)",
                     "; ".join("%s: %s / %s / %s" % (k, d.get("boxes"), d.get("frames_with"), d.get("max_per_frame"))
                               for k, d in (report.get("detections") or {}).items()) or "none"))
        agree = report.get("detection_agreement") or {}
        rows.append(("detection precision / recall / F1 against the unsplit model",
                     "%s / %s / %s" % (agree.get("precision"), agree.get("recall"), agree.get("f1"))))
    hop_rows = "".join(
        "<tr><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%.3f</td><td>%s</td><td>%d</td></tr>"
        % (esc(h["name"]), h["bytes_sent"], h["bytes_dense"],
           "-" if h.get("ratio") is None else "%.3f" % h["ratio"], h["transfer_s"],
           "-" if h.get("effective_MBps") is None else h["effective_MBps"], h.get("keyframes", 0))
        for h in report.get("hops", [])
    )
    legend = " ".join('<span style="background:%s;color:#fff;padding:1px 6px;margin-right:4px">%s</span>'
                      % (c, s) for s, c in STAGE_COLOURS.items())
    page = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>cnn-video run report</title>
<style>body{font-family:sans-serif;margin:20px;color:#222} table{border-collapse:collapse;margin-bottom:16px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;font-size:13px} h2{margin-top:24px}
.strip{display:flex;flex-wrap:wrap;gap:6px} .thumb{margin:0;font-size:11px;width:128px}
.thumb img{display:block;width:128px}</style></head>
<body><h1>cnn-video run report</h1>
<table>%s</table>
<h2>What the CNN saw (%s)</h2>%s
<h2>Hops</h2>
<table><tr><th>hop</th><th>bytes sent</th><th>bytes dense (float32)</th><th>sent/dense</th><th>transfer s</th>
<th>effective MB/s</th><th>keyframes</th></tr>%s</table>
<h2>Per-frame latency</h2>%s
<h2>Per-stage Gantt chart (first 60 frames)</h2><p>%s</p>%s
</body></html>
""" % (
        "".join("<tr><th>%s</th><td>%s</td></tr>" % (esc(k), esc(str(v))) for k, v in rows),
        "boxes and count per frame" if report.get("detections") is not None else "top-1 ImageNet label per frame",
        thumbs_html(thumbs or []),
        hop_rows,
        _latency_svg(records),
        legend,
        gantt_svg(spans, actors),
    )
    with open(path, "w") as fh:
        fh.write(page)
    return path
