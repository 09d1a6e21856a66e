"""`cnnvideo bench track`: the event trackers on public MOT ground truth turned into a noisy detector's output.

The sequences are the two that motmetrics ships (TUD-Campus, TUD-Stadtmitte: MOT15 `gt.txt`, 640x480, 25 fps).
Each ground-truth box becomes a detection unless it is missed (`miss`), with every corner moved by a normal
jitter of `jitter` times the box's width or height; about `false_per_frame` false boxes a frame (Poisson) of a
real box's size land anywhere. A drop policy is played by keeping every `keep_every`-th frame only: the
trackers see those frames, at their capture times, and are scored on them. One seed gives the same noise with
and without drops. A tracker's output on a frame is its `new` and `update` events (ids and boxes), as a camera
user gets them; motmetrics scores it (IoU >= 0.5 is a match): MOTA, IDF1, ID switches.

`norfair`, `sort` and `bytetrack` (the `trackers` package) are measured too when they are installed and asked
for (`--trackers`); the project does not depend on them.
"""
from __future__ import annotations

import json
import logging
import os
import zlib
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

log = logging.getLogger(__name__)

SEQUENCES = ("TUD-Campus", "TUD-Stadtmitte")
FPS = 25.0  # both TUD sequences
FRAME_SIZE = (480, 640)  # height, width, as every size in this project
T0 = 1700000000.0
TARGET_IDF1 = 0.90  # mean over sequences and seeds
TARGET_SWITCHES = 3  # at most, in every sequence and seed
DEFAULT_TRACKERS = ("iou", "kalman")
OPTIONAL_TRACKERS = ("norfair", "sort", "bytetrack")

Frames = Dict[int, Tuple[np.ndarray, np.ndarray]]  # frame -> (ids (N,), boxes (N, 4) x1,y1,x2,y2)


def motmetrics():
    """motmetrics, with `np.asfarray` restored for it on numpy 2 (motmetrics 1.4 still calls it)."""
    if not hasattr(np, "asfarray"):
        np.asfarray = lambda a, dtype=np.float64: np.asarray(a, dtype=dtype)  # type: ignore[attr-defined]
    import motmetrics as mm

    return mm


def load_gt(sequence: str) -> Frames:
    """The sequence's ground truth from motmetrics' data folder: frame -> (ids, x1,y1,x2,y2 boxes)."""
    path = os.path.join(os.path.dirname(motmetrics().__file__), "data", sequence, "gt.txt")
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    rows = rows[rows[:, 6] != 0]  # conf 0 marks boxes MOT ignores
    out: Frames = {}
    for f in np.unique(rows[:, 0]).astype(int).tolist():
        r = rows[rows[:, 0] == f]
        boxes = np.stack([r[:, 2], r[:, 3], r[:, 2] + r[:, 4], r[:, 3] + r[:, 5]], 1)
        out[f] = (r[:, 1].astype(int), boxes)
    return out


def noisy_detections(gt: Frames, seed: int, miss: float, jitter: float, false_per_frame: float,
                     frame_size: Tuple[int, int] = FRAME_SIZE) -> Dict[int, np.ndarray]:
    """A detector's boxes per frame, (N, 5) x1,y1,x2,y2,score: the truth missed, jittered, plus false boxes
    placed inside a `frame_size` (height, width) frame."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([b[:, 2:] - b[:, :2] for _, b in gt.values()])
    out: Dict[int, np.ndarray] = {}
    for f in range(min(gt), max(gt) + 1):
        boxes = gt[f][1] if f in gt else np.zeros((0, 4))
        keep = rng.random(len(boxes)) >= miss
        wh = boxes[:, 2:] - boxes[:, :2]
        noisy = boxes + rng.normal(0.0, jitter, (len(boxes), 4)) * np.concatenate([wh, wh], 1)
        noisy[:, 2:] = np.maximum(noisy[:, 2:], noisy[:, :2] + 1.0)
        noisy = noisy[keep]
        n_false = rng.poisson(false_per_frame)
        fwh = sizes[rng.integers(0, len(sizes), n_false)]
        fxy = rng.random((n_false, 2)) * np.maximum(np.array(frame_size[::-1], dtype=np.float64) - fwh, 1.0)
        allb = np.concatenate([noisy, np.concatenate([fxy, fxy + fwh], 1)])
        scores = rng.uniform(0.5, 1.0, (len(allb), 1))
        out[f] = np.concatenate([allb, scores], 1)
    return out


def rng_seed(sequence: str, seed: int) -> int:
    """The noise generator's seed for `seed` on `sequence` (each sequence its own draws)."""
    return zlib.crc32(sequence.encode()) + seed


# ---------------------------------------------------------------------- trackers under test
def _ours(kind: str) -> Callable[[], Callable[[int, float, np.ndarray], List[Tuple[int, Sequence[float]]]]]:
    """A factory of a step function for one of our trackers: its `new`/`update` events' (id, box)."""
    from cnnvideo.events.tracker import TrackerSettings
    from cnnvideo.events.trackers import make_tracker
    from cnnvideo.events.types import Detection

    # `iou` as it was before the Kalman tracker: its defaults then (greedy matcher, no coasting)
    settings = TrackerSettings(kind="iou", matcher="greedy") if kind == "iou" else TrackerSettings(kind=kind)

    def make():
        tracker = make_tracker(settings)

        def step(frame: int, t: float, dets: np.ndarray):
            ds = [Detection("person", float(d[4]), tuple(d[:4].tolist())) for d in dets]
            return [(e.track_id, e.box) for e in tracker.update(frame, t, ds) if e.type in ("new", "update")]
        return step
    return make


def _norfair(keep_every: int):
    """norfair's Tracker with its IoU distance (frame-based: `period` is the frames between two updates)."""
    import norfair

    def make():
        tracker = norfair.Tracker(distance_function="iou", distance_threshold=0.7)

        def step(frame: int, t: float, dets: np.ndarray):
            ds = [norfair.Detection(points=d[:4].reshape(2, 2), scores=np.array([d[4], d[4]])) for d in dets]
            objs = tracker.update(detections=ds, period=keep_every)
            return [(o.id, o.estimate.reshape(-1).tolist()) for o in objs if o.id is not None]
        return step
    return make


def _roboflow(name: str, keep_every: int):
    """SORT or ByteTrack of the `trackers` package, on supervision Detections (frame rate after the drops)."""
    import supervision as sv
    import trackers

    cls = trackers.SORTTracker if name == "sort" else trackers.ByteTrackTracker

    def make():
        tracker = cls(frame_rate=FPS / keep_every)

        def step(frame: int, t: float, dets: np.ndarray):
            d = sv.Detections(xyxy=dets[:, :4].reshape(-1, 4), confidence=dets[:, 4],
                              class_id=np.zeros(len(dets), dtype=int))
            out = tracker.update(d)
            return [(int(i), b.tolist()) for i, b in zip(out.tracker_id, out.xyxy) if i >= 0]
        return step
    return make


def factory(name: str, keep_every: int):
    """A function that makes a fresh step function for tracker `name`."""
    if name in ("iou", "kalman"):
        return _ours(name)
    if name == "norfair":
        return _norfair(keep_every)
    if name in ("sort", "bytetrack"):
        return _roboflow(name, keep_every)
    raise ValueError("unknown tracker %r (known: %s)" % (name, ", ".join(DEFAULT_TRACKERS + OPTIONAL_TRACKERS)))


# ---------------------------------------------------------------------- scoring
def _xywh(boxes) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1)


def run_one(make_step, gt: Frames, dets: Dict[int, np.ndarray], keep_every: int) -> Dict[str, Any]:
    """Play the kept frames through a fresh tracker and score its output with motmetrics."""
    mm = motmetrics()
    step = make_step()
    acc = mm.MOTAccumulator(auto_id=True)
    ids = set()
    first = min(dets)
    for f in sorted(dets):
        if (f - first) % keep_every:
            continue
        out = step(f, T0 + (f - first) / FPS, dets[f])
        ids.update(i for i, _ in out)
        g_ids, g_boxes = gt.get(f, (np.zeros(0, dtype=int), np.zeros((0, 4))))
        h_ids = [i for i, _ in out]
        dist = mm.distances.iou_matrix(_xywh(g_boxes), _xywh([b for _, b in out]), max_iou=0.5)
        acc.update(g_ids.tolist(), h_ids, dist)
    summary = mm.metrics.create().compute(acc, metrics=["idf1", "mota", "num_switches", "num_unique_objects"])
    row = summary.iloc[0]
    return {"idf1": float(row["idf1"]), "mota": float(row["mota"]), "switches": int(row["num_switches"]),
            "tracks": len(ids), "people": int(row["num_unique_objects"])}


def measure(trackers: Sequence[str] = DEFAULT_TRACKERS, sequences: Sequence[str] = SEQUENCES,
            seeds: Sequence[int] = (0, 1, 2), keep_every: Sequence[int] = (1, 2), miss: float = 0.15,
            jitter: float = 0.06, false_per_frame: float = 0.3) -> Dict[str, Any]:
    """Every tracker on every sequence, seed and frame-keeping condition; per-cell means and the targets."""
    gts = {s: load_gt(s) for s in sequences}
    noise = {(s, seed): noisy_detections(gts[s], rng_seed(s, seed), miss, jitter, false_per_frame)
             for s in sequences for seed in seeds}
    cells: List[Dict[str, Any]] = []
    for name in trackers:
        for k in keep_every:
            make = factory(name, k)
            runs = []
            for s in sequences:
                for seed in seeds:
                    r = run_one(make, gts[s], noise[(s, seed)], k)
                    r.update(sequence=s, seed=seed)
                    runs.append(r)
            idf1 = float(np.mean([r["idf1"] for r in runs]))
            worst = max(r["switches"] for r in runs)
            cells.append({
                "tracker": name, "keep_every": k, "runs": runs, "idf1_mean": idf1,
                "idf1_min": min(r["idf1"] for r in runs), "mota_mean": float(np.mean([r["mota"] for r in runs])),
                "switches_mean": float(np.mean([r["switches"] for r in runs])), "switches_max": worst,
                "tracks_mean": float(np.mean([r["tracks"] for r in runs])),
                "people_mean": float(np.mean([r["people"] for r in runs])),
                "meets_targets": bool(idf1 >= TARGET_IDF1 and worst <= TARGET_SWITCHES),
            })
    return {
        "sequences": list(sequences), "seeds": list(seeds), "fps": FPS, "frame_size": list(FRAME_SIZE),
        "noise": {"miss": miss, "jitter": jitter, "false_per_frame": false_per_frame},
        "targets": {"idf1_mean": TARGET_IDF1, "switches_max": TARGET_SWITCHES},
        "cells": cells,
        "note": "keep_every k: only every k-th frame reaches the tracker (k=2: every other frame dropped), and "
                "only those frames are scored; output = the frame's new/update events; IoU >= 0.5 is a match",
    }


def _list(text: str, kind=str) -> List[Any]:
    return [kind(v) for v in text.split(",") if v.strip()]


def run(args) -> int:
    """CLI entry: print JSON (--json) or a table; exit 1 when the default tracker misses a target."""
    result = measure(_list(args.trackers), _list(args.sequences), _list(args.seeds, int), _list(args.keep_every, int),
                     args.miss, args.jitter, args.false_per_frame)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        n = result["noise"]
        print("%s, seeds %s: %.0f%% missed, jitter %.0f%% of the size, %.2f false boxes a frame" % (
            " + ".join(result["sequences"]), ",".join(map(str, result["seeds"])), 100 * n["miss"], 100 * n["jitter"],
            n["false_per_frame"]))
        print("%-10s %-14s %10s %9s %9s %16s %14s %6s" % ("tracker", "frames", "IDF1 mean", "IDF1 min", "MOTA",
                                                          "switches mean/max", "tracks/people", "target"))
        for c in result["cells"]:
            frames = "all" if c["keep_every"] == 1 else "1 in %d" % c["keep_every"]
            print("%-10s %-14s %10.3f %9.3f %9.3f %10.1f / %-4d %8.1f / %-4.1f %6s" % (
                c["tracker"], frames, c["idf1_mean"], c["idf1_min"], c["mota_mean"], c["switches_mean"],
                c["switches_max"], c["tracks_mean"], c["people_mean"], "yes" if c["meets_targets"] else "no"))
    ours = [c for c in result["cells"] if c["tracker"] == "kalman"]
    return 0 if all(c["meets_targets"] for c in ours) else 1

