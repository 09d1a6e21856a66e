"""The per-frame parts of the master's report.json: each frame's record, its times, the kept spans, the layers
of each worker's stage and the top-1 label counts."""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List

from cnnvideo.plan.plan import Plan


def plan_layers(info, cuts: List[int], n_workers: int) -> List[List[str]]:
    """Names of the layers each stage runs under `cuts` (a chain: each worker), from a worker's Info (segment layer
    counts and ids)."""
    starts = [0]
    for c in info.segment_layers:
        starts.append(starts[-1] + c)
    ids = list(info.segment_layer_ids)
    names = list(info.layer_names)
    return [[names[i] if 0 <= i < len(names) else str(i) for i in ids[starts[cuts[w]]:starts[cuts[w + 1]]]]
            for w in range(min(n_workers, len(cuts) - 1))]


def per_frame(records) -> List[Dict[str, Any]]:
    """report.json `per_frame`: status, sends, latency, worker, cuts, error, top-5 and whether its result was reused
    (unchanged) of a completed frame; the reason of one that was not."""
    out = []
    for r in records:
        if r.reason:
            out.append({"frame": r.frame, "status": r.status, "sends": r.attempts, "reason": r.reason,
                        "cuts": r.cuts})
        else:
            out.append({"frame": r.frame, "status": r.status, "sends": r.attempts,
                        "latency_s": None if r.latency is None else round(r.latency, 6), "worker": r.worker,
                        "cuts": r.cuts, "abs_err": None if r.error != r.error else r.error, "top5": r.top5,
                        "reused": r.reused})
    return out


def frame_times(records, t_run: float) -> List[Dict[str, Any]]:
    """report.json `times`: when each frame was sent and finished, in seconds from the run's start."""
    return [{"frame": r.frame, "sent_s": round(r.sent_at - t_run, 6),
             "done_s": None if r.done_at is None else round(r.done_at - t_run, 6)} for r in records]


def span_rows(spans, t_run: float) -> List[list]:
    """report.json `spans`: [frame, actor, stage, start, end, bytes] with times from the run's start."""
    return [[s.frame, s.actor, s.stage, round(s.start - t_run, 6), round(s.end - t_run, 6), s.nbytes] for s in spans]


def label_counts(records) -> Dict[str, int]:
    """How many frames had each top-1 label, most frequent first."""
    counts: Dict[str, int] = {}
    for r in records:
        if r.top5:
            counts[r.top5[0][1]] = counts.get(r.top5[0][1], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def detector_lines(report: Dict[str, Any]) -> List[str]:
    """A detector run's summary, as the master logs it at the end and `cnnvideo local` prints it: people in each
    frame, boxes per label, agreement with the unsplit model."""
    people = [n for _, n in report.get("people_per_frame") or []]
    shown = " ".join(str(n) for n in people[:30]) + (" ..." if len(people) > 30 else "")
    labels = ", ".join("%s %d boxes in %d frames" % (k, v["boxes"], v["frames_with"])
                       for k, v in (report.get("detections") or {}).items()) or "none"
    agree = report.get("detection_agreement") or {}
    return ["%-22s %s" % ("people per frame", shown or "-"),
            "%-22s %s" % ("detections", labels),
            "%-22s %s" % ("F1 vs unsplit", "%s (precision %s, recall %s, IoU >= %s)" % (
                agree.get("f1"), agree.get("precision"), agree.get("recall"), agree.get("iou_threshold"))
                if agree else "-")]


def main_plan(records, cuts: List[int]):
    """The plan most frames used (`cuts`: the tracker's most used cuts), with the groups most of those frames
    ran."""
    counts: Dict[tuple, int] = {}
    for r in records:
        if list(r.cuts) == list(cuts) and r.groups:
            key = tuple(tuple(g) for g in r.groups)
            counts[key] = counts.get(key, 0) + 1
    groups = max(counts.items(), key=lambda kv: kv[1])[0] if counts else None
    return Plan(tuple(cuts), groups)


def pool_report(m, plan) -> Dict[str, object]:
    """report.json `pool`: the plan's shape and groups, the frames each worker got, the workers left out and taken
    back after faults, and how results waited for frame order."""
    done = [r for r in m.tracker.ordered() if r.status == "completed"]
    reporters = Counter(r.worker for r in done)
    return {
        "shape": plan.shape(),
        "groups": [list(g) for g in plan.groups],
        "results_per_worker": {"w%d" % w: reporters.get(w, 0) for w in range(m.W)},
        **m.pool.report(),
    }
