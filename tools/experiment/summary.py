"""One results row per run from its report.json, and the tables (CSV, Markdown) of an experiment."""
from __future__ import annotations

import csv
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.plan.costmodel import simulate

SCHEDULERS = ("lbs", "edge", "cloud", "fixed", "nsc", "das", "optimal", "adaptive")  # table order


def hop_names(n: int) -> List[str]:
    """The hops of an n-worker chain in order: m->w0, w0->w1, ..., w<n-1>->m."""
    return ["m->w0"] + ["w%d->w%d" % (w, w + 1) for w in range(n - 1)] + ["w%d->m" % (n - 1)]


def stage_labels(n: int) -> List[str]:
    """The cost model's stages of an n-worker chain: t0, c0, t1, c1, ... (transfer into / work on worker i)."""
    return [x for w in range(n) for x in ("t%d" % w, "c%d" % w)]


def n_of(report: Dict[str, Any]) -> int:
    """Workers of a run, from its report (2 when it does not say)."""
    return len(report.get("workers") or []) or 2


def hop(report: Dict[str, Any], name: str) -> Dict[str, Any]:
    for h in report.get("hops") or []:
        if h.get("name") == name:
            return h
    return {}


def measured_stages(report: Dict[str, Any]) -> List[Optional[float]]:
    """Mean seconds per frame of the cost model's stages: [transfer into w0, work on w0, transfer into w1, ...,
    work on the last worker (+ result transfer)], from hop totals and the workers' decode + compute + encode
    spans."""
    st = report.get("stages") or {}
    frames = max(int(report.get("completed") or 0), 1)

    def comp(actor: str) -> float:
        spans = st.get(actor) or {}
        return sum(float((spans.get(name) or {}).get("total_s", 0.0)) for name in ("decode", "compute", "encode")) \
            / frames

    n = n_of(report)
    names = hop_names(n)
    res = sum(float(hop(report, "w%d->m" % w).get("transfer_s", 0.0)) for w in range(n)) / frames
    out: List[Optional[float]] = []
    for w in range(n):
        out += [float(hop(report, names[w]).get("transfer_s", 0.0)) / frames, comp("w%d" % w)]
    out[-1] += res
    return out


def steady_stages(report: Dict[str, Any]) -> List[Optional[float]]:
    """measured_stages over frames 1.. only, from the report's spans: frame 0 is a keyframe on every hop and the
    cost model's stage costs (`predicted_stage_s`) are the steady state's, so a mean over all frames made every
    transfer look 30-50% slower than predicted at 8 frames. measured_stages when the spans do not cover every
    completed frame (SPAN_LIMIT) or there are fewer than 2."""
    spans = report.get("spans") or []
    done = int(report.get("completed") or 0)
    later = {int(sp[0]) for sp in spans if int(sp[0]) >= 1}
    if done < 2 or len(later) < done - 1:
        return measured_stages(report)
    tot: Dict[tuple, float] = {}
    for sp in spans:
        if int(sp[0]) >= 1:
            tot[(sp[1], sp[2])] = tot.get((sp[1], sp[2]), 0.0) + float(sp[4]) - float(sp[3])
    k = float(len(later))
    n = n_of(report)
    out: List[Optional[float]] = []
    for w in range(n):
        actor = "w%d" % w
        out.append(tot.get(("m" if w == 0 else "w%d" % (w - 1), "send"), 0.0) / k)
        out.append(sum(tot.get((actor, name), 0.0) for name in ("decode", "compute", "encode")) / k)
    out[-1] = (out[-1] or 0.0) + tot.get(("m", "receive"), 0.0) / k
    return out


def measured_turnaround(report: Dict[str, Any], in_flight: int) -> Optional[float]:
    """At 1 in flight, the median seconds from frame f's last span (its result decoded on the master) to frame
    f + 1's first span (its encode): what `cost_model.master_turnaround_s` stands for. None at any other
    in-flight cap, where a frame can also wait for the master's blocking send of the one before (at 6 in flight
    this gap was 0.58 s, the m->w0 queue, not turnaround), or without spans."""
    if in_flight != 1:
        return None
    first: Dict[int, float] = {}
    last: Dict[int, float] = {}
    for sp in report.get("spans") or []:
        f = int(sp[0])
        first[f] = min(first.get(f, float("inf")), float(sp[3]))
        last[f] = max(last.get(f, float("-inf")), float(sp[4]))
    gaps = [first[f + 1] - last[f] for f in last if f + 1 in first]
    gaps = [g for g in gaps if g >= 0]
    return round(_median(gaps), 5) if gaps else None


def recurrence_fps(stage_s: Sequence[Optional[float]], frames: int, in_flight: int,
                   turnaround: float = 0.0) -> Optional[float]:
    """The cost model's pipeline recurrence fed with the run's own measured mean stage costs and turnaround (so it
    checks the timing model, not the profile): frames / simulated makespan."""
    if frames <= 0 or any(c is None for c in stage_s):
        return None
    costs = [[float(c) for c in stage_s]] * frames
    done = simulate(costs, in_flight, turnaround=float(turnaround))
    span = float(done[-1, -1])
    return round(frames / span, 4) if span > 0 else None


def steady_ratio(report: Dict[str, Any], name: str, actor: str) -> Optional[float]:
    """Bytes sent / dense float32 on a hop over frames 1.. (frame 0 is always a keyframe), from the send spans."""
    h = hop(report, name)
    if not h.get("messages") or not h.get("bytes_dense"):
        return None
    dense = float(h["bytes_dense"]) / float(h["messages"])
    sent = [int(b) for f, a, st, _, _, b in report.get("spans") or [] if a == actor and st == "send" and int(f) > 0]
    if not sent or dense <= 0:
        return None
    return round(sum(sent) / (dense * len(sent)), 4)


def after_change_fps(report: Dict[str, Any], frame: int) -> Optional[float]:
    """Frames per second over the frames sent at or after `frame` (finish of frame-1 to the last finish)."""
    times = sorted((t["frame"], t["done_s"]) for t in report.get("times") or [] if t.get("done_s") is not None)
    before = [d for f, d in times if f < frame]
    after = [d for f, d in times if f >= frame]
    if not before or len(after) < 2:
        return None
    t0 = max(before)
    span = max(after) - t0
    return len(after) / span if span > 0 else None


def percentiles(values: Sequence[float]) -> Tuple[Optional[float], Optional[float]]:
    """p50 and p95 (linear interpolation, as report.json's latency_s) of the values; (None, None) without any."""
    if not len(values):
        return None, None
    p50, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95])
    return round(float(p50), 5), round(float(p95), 5)


def latency_percentiles(report: Dict[str, Any], key: str = "latency_s") -> Tuple[Optional[float], Optional[float]]:
    """p50 and p95 seconds of the report's `latency_s` (send to result) or `capture_latency_s` (capture to
    result); for send-to-result, from per_frame's latency_s when the mapping lacks them (older reports)."""
    m = report.get(key) or {}
    if m.get("p50") is not None and m.get("p95") is not None:
        return float(m["p50"]), float(m["p95"])
    if key != "latency_s":
        return None, None
    return percentiles([float(f["latency_s"]) for f in report.get("per_frame") or []
                        if f.get("status", "completed") == "completed" and f.get("latency_s") is not None])


def link_kB(report: Dict[str, Any]) -> Optional[str]:
    """kB per message on every link that carried one, e.g. "m->w0 31, m->w1 30, w0->m 0.5": a pool's replicas
    see a share of the frames each, so per message (per frame that crossed the link) is the figure to compare."""
    parts = ["%s %.3g" % (h["name"], float(h["bytes_sent"]) / int(h["messages"]) / 1e3)
             for h in report.get("hops") or [] if h.get("messages") and h.get("bytes_sent") is not None]
    return ", ".join(parts) or None


def hop_kB(report: Dict[str, Any]) -> Optional[str]:
    """kB per completed frame on every hop in chain order, e.g. "m->w0 120, w0->w1 31, w1->m 0.4"."""
    frames = int(report.get("completed") or 0)
    hops = [h for h in report.get("hops") or [] if h.get("bytes_sent") is not None
            and (h["bytes_sent"] or not h.get("name", "").endswith("->m"))]  # a return hop the plan left unused
    if not frames or not hops:
        return None
    return ", ".join("%s %.3g" % (h["name"], float(h["bytes_sent"]) / frames / 1e3) for h in hops)


START_KEYS = ("first_result_s", "fps_first_80", "fps_after_80", "fps_after_60")  # report.json `start`


def summarise(r: Dict[str, Any], report: Optional[Dict[str, Any]], rc: int, seconds: float) -> Dict[str, Any]:
    """One results row from a run's settings and its report.json (None if the run failed)."""
    row: Dict[str, Any] = {"id": r["id"], "scheduler": r["scheduler"], "variant": r["variant"],
                           "in_flight": int(r["in_flight"]), "bandwidth": r["bandwidth"], "frames": int(r["frames"]),
                           "caps": r.get("caps"), "repeat": r.get("repeat"), "exit": rc, "run_s": round(seconds, 1)}
    if r.get("workers") is not None:
        row["workers"] = int(r["workers"])
    if not report:
        row["error"] = "no report"
        return row
    fps = report.get("throughput_fps")
    pred = report.get("predicted_fps")
    det = report.get("detection_agreement") or {}
    row.setdefault("workers", n_of(report))
    row["latency_p50_s"], row["latency_p95_s"] = latency_percentiles(report)
    row["capture_p50_s"], row["capture_p95_s"] = latency_percentiles(report, "capture_latency_s")
    row.update({
        "model": report.get("model"),
        "f1": det.get("f1"),
        "precision": det.get("precision"),
        "recall": det.get("recall"),
        "agreement": det.get("f1") if det.get("f1") is not None else report.get("top1_agreement"),
        "hop_kB": hop_kB(report),
        "mode": report.get("mode"),
        "completed": report.get("completed"),
        "fps": fps,
        "s_per_frame": round(1.0 / fps, 4) if fps else None,
        "latency_mean_s": (report.get("latency_s") or {}).get("mean"),
        "pred_fps": pred,
        "model_err": round(fps / pred - 1.0, 4) if fps and pred else None,
        "pred_err": round(pred / fps - 1.0, 4) if fps and pred else None,
        "cuts": "-".join(str(c) for c in report.get("cuts") or []),
        "cut_names": "|".join(report.get("cut_names") or []),
        "plans": len(report.get("plan_decisions") or []),
        "max_abs_err": report.get("max_abs_err"),
        "top1_agreement": report.get("top1_agreement"),
        "top5_overlap": report.get("top5_overlap"),
        "engines_ran": "|".join(sorted({e for w in report.get("engines") or [] for e in w.get("ran") or []})),
        "error": report.get("error"),
    })
    start = report.get("start") or {}
    for k in START_KEYS:
        row[k] = start.get(k)
    row["master_cpu_ms"] = (report.get("master") or {}).get("cpu_per_frame_ms")
    pool = report.get("pool") or {}
    row["pool_shape"] = pool.get("shape")
    row["link_kB"] = link_kB(report)
    n = n_of(report)
    for name in hop_names(n):
        h = hop(report, name)
        key = name.replace("->", "_")
        row["bytes_" + key] = h.get("bytes_sent")
        row["ratio_" + key] = None if h.get("ratio") is None else round(h["ratio"], 4)
        row["MBps_" + key] = h.get("effective_MBps")
        done = int(report.get("completed") or 0)
        row["kB_" + key] = round(float(h["bytes_sent"]) / done / 1e3, 2) if done and h.get("bytes_sent") is not None \
            else None
    for w in range(n - 1):  # results come back from the last worker the plan uses (w0 under edge)
        h = hop(report, "w%d->m" % w)
        if h.get("bytes_sent") and int(report.get("completed") or 0):
            row["kB_w%d_m" % w] = round(float(h["bytes_sent"]) / int(report["completed"]) / 1e3, 2)
    for w, name in enumerate(hop_names(n)[:-1]):
        row["steady_" + name.replace("->", "_")] = steady_ratio(report, name, "m" if w == 0 else "w%d" % (w - 1))
        h = hop(report, name)
        if h.get("messages") and h.get("bytes_dense"):
            row["dense_" + name.replace("->", "_")] = int(h["bytes_dense"]) // int(h["messages"])
    pst = report.get("predicted_stage_s") or []
    mst = measured_stages(report)
    row["turnaround_s"] = measured_turnaround(report, int(r["in_flight"]))
    row["recur_fps"] = recurrence_fps(mst, int(report.get("completed") or 0), int(r["in_flight"]),
                                      row["turnaround_s"] or 0.0)
    row["recur_err"] = round(fps / row["recur_fps"] - 1.0, 4) if fps and row["recur_fps"] else None
    sst = steady_stages(report)  # what the predicted stage costs are compared with
    for i, label in enumerate(stage_labels(n)):
        p = pst[i] if i < len(pst) else None
        m = sst[i]
        row["pred_" + label] = p
        row["meas_" + label] = None if m is None else round(m, 5)
    if r.get("change"):
        at = int(r["change"].get("after_frame", 0))
        row["fps_after_change"] = after_change_fps(report, at + 1)
        row["fps_before_change"] = _fps_window(report, 1, at)
        dec = [d for d in report.get("plan_decisions") or [] if d["from_frame"] > at]
        row["replanned_at_frame"] = dec[0]["from_frame"] if dec else None
    return row


def _fps_window(report: Dict[str, Any], lo: int, hi: int) -> Optional[float]:
    times = {t["frame"]: t["done_s"] for t in report.get("times") or [] if t.get("done_s") is not None}
    if lo - 1 not in times or hi not in times or hi <= lo - 1:
        return None
    span = times[hi] - times[lo - 1]
    return (hi - lo + 1) / span if span > 0 else None


COLUMNS = ["id", "scheduler", "variant", "mode", "model", "workers", "caps", "repeat", "in_flight", "bandwidth",
           "frames", "completed", "fps", "s_per_frame", "latency_mean_s", "latency_p50_s", "latency_p95_s",
           "capture_p50_s", "capture_p95_s", "pred_fps", "model_err", "pred_err", "recur_fps", "recur_err",
           "turnaround_s", "cuts", "cut_names",
           "plans", "max_abs_err", "top1_agreement", "top5_overlap", "f1", "precision", "recall", "agreement",
           "engines_ran", "hop_kB",
           "bytes_m_w0", "ratio_m_w0", "steady_m_w0", "bytes_w0_w1", "ratio_w0_w1", "steady_w0_w1", "bytes_w1_m",
           "ratio_w1_m",
           "MBps_m_w0", "MBps_w0_w1", "pred_t0", "meas_t0", "pred_c0", "meas_c0", "pred_t1", "meas_t1", "pred_c1",
           "meas_c1", "fps_before_change", "fps_after_change", "replanned_at_frame", "first_result_s", "fps_first_80",
           "fps_after_80", "fps_after_60", "master_cpu_ms", "exit", "run_s", "error"]


def columns(n: int = 2) -> List[str]:
    """CSV columns of an n-worker experiment (COLUMNS for 2, then kB per frame on every hop)."""
    kB = ["kB_" + h.replace("->", "_") for h in hop_names(n)[:-1]] + ["kB_w%d_m" % w for w in range(n)]
    if n == 2:
        return list(COLUMNS) + kB
    hops = [h.replace("->", "_") for h in hop_names(n)]
    per_hop = [p + h for h in hops for p in ("bytes_", "ratio_")] + ["steady_" + h for h in hops[:-1]] + \
        ["MBps_" + h for h in hops[:-1]]
    stages = [p + x for x in stage_labels(n) for p in ("pred_", "meas_")]
    head = COLUMNS[:COLUMNS.index("bytes_m_w0")]
    tail = COLUMNS[COLUMNS.index("fps_before_change"):]
    return head + per_hop + stages + tail + kB


def write_csv(rows: Sequence[Dict[str, Any]], path: str, n: int = 2) -> None:
    cols = columns(n)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(row.get(k)) for k in cols})


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return "%.4g" % v
    if isinstance(v, (list, tuple)):
        return "-".join("%g" % x for x in v)
    return "" if v is None else v


def _fmt(v: Any, spec: str = "%.3g") -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return spec % v
    if isinstance(v, (list, tuple)):
        return "-".join("%g" % x for x in v)
    return str(v)


def md_table(rows: Sequence[Dict[str, Any]], cols: Sequence[Tuple[str, str]]) -> str:
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(row.get(k)) for k, _ in cols) + " |")
    return "\n".join(out)


def _median(values: Sequence[float]) -> float:
    data = sorted(values)
    n = len(data)
    return data[n // 2] if n % 2 else 0.5 * (data[n // 2 - 1] + data[n // 2])


def _caps(v: Any) -> str:
    return "-" if v is None else "%g" % float(v)


def group_key(row: Dict[str, Any]) -> tuple:
    """(variant, MB/s, in flight, caps, workers): the runs one table line compares (caps '-' = the spec's)."""
    return (row["variant"], _fmt(row["bandwidth"]), row["in_flight"], _caps(row.get("caps")), row.get("workers") or 2)


def _key_fields(key: tuple) -> Dict[str, Any]:
    return dict(zip(("variant", "bandwidth", "in_flight", "caps", "workers"), key))


def _sort(key: tuple) -> tuple:
    return (key[0], float(key[1].split("-")[0]), key[2], key[3], key[4])


def ratios_vs(rows: Sequence[Dict[str, Any]], base: str = "lbs") -> List[Dict[str, Any]]:
    """Per (variant, bandwidth, in_flight, caps, workers): every scheduler's fps, the best one and its ratio to
    `base`."""
    lists: Dict[tuple, Dict[str, List[float]]] = {}
    for row in rows:
        if row.get("fps") and not row.get("id", "").count("_chg"):
            lists.setdefault(group_key(row), {}).setdefault(row["scheduler"], []).append(float(row["fps"]))
    # repeats of a run: the median fps
    groups: Dict[tuple, Dict[str, Dict[str, Any]]] = {
        key: {name: {"scheduler": name, "fps": _median(v), "n": len(v)} for name, v in g.items()}
        for key, g in lists.items()}
    out = []
    for key in sorted(groups, key=_sort):
        g = groups[key]
        best = max(g.values(), key=lambda r: r["fps"])
        entry: Dict[str, Any] = dict(_key_fields(key), best=best["scheduler"], best_fps=best["fps"])
        entry.update({
                      "repeats": max(r["n"] for r in g.values())})
        for name, r in g.items():
            entry["fps_" + name] = r["fps"]
        if base in g:
            entry["best_vs_" + base] = round(best["fps"] / g[base]["fps"], 3)
            if "optimal" in g:
                entry["optimal_vs_" + base] = round(g["optimal"]["fps"] / g[base]["fps"], 3)
            for name in ("das", "adaptive"):
                if name in g:
                    entry[name + "_vs_" + base] = round(g[name]["fps"] / g[base]["fps"], 3)
        out.append(entry)
    return out


def bytes_summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for variant in sorted({r["variant"] for r in rows}):
        rs = [r for r in rows if r["variant"] == variant]
        entry: Dict[str, Any] = {"variant": variant, "n": len(rs)}
        for k in ("ratio_m_w0", "steady_m_w0", "ratio_w0_w1", "steady_w0_w1", "ratio_w1_m"):
            entry[k] = _mean(_present(rs, k))
        entry.update(_worst(rs))
        out.append(entry)
    return out


def _present(rows: Sequence[Dict[str, Any]], key: str) -> List[Any]:
    """The values of `key` in the rows that have one."""
    return [r[key] for r in rows if r.get(key) is not None]


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _worst(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The largest max_abs_err, the lowest top-1 agreement and the lowest F1 among the rows (None where no row has
    one)."""
    errs, agree, f1 = _present(rows, "max_abs_err"), _present(rows, "top1_agreement"), _present(rows, "f1")
    return {"max_abs_err": max(errs) if errs else None, "top1_min": min(agree) if agree else None,
            "f1_min": min(f1) if f1 else None}


IDLE_W1 = "none (w0 runs every layer)"


def cut_summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (variant, the tensor w0->w1 carries): which runs chose that cut, its dense float32 bytes per frame,
    the steady-state ratio and bytes per frame of m->w0 and w0->w1 (mean over those runs), the w1->m ratio and
    the lowest top-1 agreement among them. For 2-worker runs (the w0->w1 hop); runs without cut names are left
    out, and a main plan with worker 1 idle is listed as IDLE_W1 without w0->w1 figures."""
    groups: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in rows:
        names = (r.get("cut_names") or "").split("|")
        if len(names) >= 3 and r.get("fps"):
            # a main plan that leaves worker 1 idle sends its results from w0: w0->w1 only carried other plans
            cut = names[1] if names[1] != names[2] else IDLE_W1
            groups.setdefault((r["variant"], cut), []).append(r)

    def mean(rs: Sequence[Dict[str, Any]], k: str) -> Optional[float]:
        return _mean([float(v) for v in _present(rs, k)])

    out = []
    for (variant, cut), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], -(mean(kv[1], "dense_w0_w1") or 0))):
        entry: Dict[str, Any] = {"variant": variant, "cut": cut, "n": len(rs),
                                 "runs": ", ".join("%s m%d" % (r["scheduler"], r["in_flight"]) for r in rs)}
        for hop_key in ("m_w0", "w0_w1"):
            if hop_key == "w0_w1" and cut == IDLE_W1:
                continue
            dense = mean(rs, "dense_" + hop_key)
            steady = mean(rs, "steady_" + hop_key)
            entry["dense_" + hop_key] = None if dense is None else int(round(dense))
            entry["steady_" + hop_key] = steady
            entry["bytes_frame_" + hop_key] = round(dense * steady) if dense and steady is not None else None
        entry["ratio_w1_m"] = mean(rs, "ratio_w1_m")
        entry.update(_worst(rs))
        out.append(entry)
    return out


def model_summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    def stats(name: str, rs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        errs = [abs(r["model_err"]) for r in rs if r.get("model_err") is not None]
        entry: Dict[str, Any] = {"group": name, "n": len(errs)}
        entry["mean_abs_err"] = sum(errs) / len(errs) if errs else None
        entry["within_15"] = sum(e <= 0.15 for e in errs) / len(errs) if errs else None
        rec = [abs(r["recur_err"]) for r in rs if r.get("recur_err") is not None]
        entry["recur_mean_abs_err"] = sum(rec) / len(rec) if rec else None
        entry["recur_within_15"] = sum(e <= 0.15 for e in rec) / len(rec) if rec else None
        for label in ("t0", "c0", "t1", "c1"):
            pairs = [(r.get("pred_" + label), r.get("meas_" + label)) for r in rs]
            pairs = [(p, m) for p, m in pairs if p and m is not None and p > 1e-4]
            entry[label] = (sum(m / p - 1 for p, m in pairs) / len(pairs)) if pairs else None
        return entry

    out = [stats("all", rows)]
    for s in [s for s in SCHEDULERS if any(r["scheduler"] == s for r in rows)]:
        out.append(stats(s, [r for r in rows if r["scheduler"] == s]))
    for v in sorted({r["variant"] for r in rows}):
        out.append(stats(v, [r for r in rows if r["variant"] == v]))
    return out


def _groups(rows: Sequence[Dict[str, Any]]) -> Dict[tuple, List[Dict[str, Any]]]:
    """Runs with an fps (no mid-run change) by group_key (variant, MB/s, in flight, caps, workers), in first-seen
    order."""
    out: Dict[tuple, List[Dict[str, Any]]] = {}
    for row in rows:
        if row.get("fps") and "_chg" not in row.get("id", ""):
            out.setdefault(group_key(row), []).append(row)
    return out


def pred_err(row: Dict[str, Any]) -> Optional[float]:
    """Predicted fps / measured fps - 1 (how far the cost model's prediction is from the run)."""
    fps, pred = row.get("fps"), row.get("pred_fps")
    return float(pred) / float(fps) - 1.0 if fps and pred else None


def by_plan(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The optimal check with runs pooled by plan: the median fps of every run (whichever scheduler) of the plan
    `optimal` chose most often, over the best plan's median fps (plans run at least twice). When two schedulers
    chose one plan their fps differ by the host's noise only (in costmodel480-r3 and -smooth one plan's median
    differed by 7-10% between the schedulers that chose it), so this tells a worse choice from a plan measured
    apart. {} without such plans."""
    fps: Dict[str, List[float]] = {}
    chosen: Dict[str, int] = {}
    for r in rows:
        if r.get("cuts"):
            fps.setdefault(r["cuts"], []).append(float(r["fps"]))
            if r["scheduler"] == "optimal":
                chosen[r["cuts"]] = chosen.get(r["cuts"], 0) + 1
    plans = {k: _median(v) for k, v in fps.items() if len(v) >= 2}
    if not chosen or not plans:
        return {}
    mine = max(chosen, key=lambda k: chosen[k])
    if mine not in plans:
        return {}
    best = max(plans, key=lambda k: plans[k])
    return {"optimal_plan": mine, "best_plan": best, "plan_runs": len(fps[mine]),
            "optimal_plan_vs_best": round(plans[mine] / plans[best], 3)}


def criteria(rows: Sequence[Dict[str, Any]], tol: float = 0.10, gap: float = 0.05) -> List[Dict[str, Any]]:
    """Issue 12's two checks per (variant, MB/s, in flight): for how many schedulers the median predicted fps over
    their repeats is within `tol` of the median measured fps (and the worst), and whether `optimal` is at most
    `gap` below the best scheduler's fps (medians over repeats); `ok` when both hold for the whole group. With one
    run per scheduler the medians are that run's figures. Medians, because one 8-frame run's fps moved by up to
    30% between repeats of the same plan on this host."""
    out = []
    for key, rs in _groups(rows).items():
        fps: Dict[str, List[float]] = {}
        pred: Dict[str, List[float]] = {}
        for r in rs:
            fps.setdefault(r["scheduler"], []).append(float(r["fps"]))
            if r.get("pred_fps"):
                pred.setdefault(r["scheduler"], []).append(float(r["pred_fps"]))
        med = {k: _median(v) for k, v in fps.items()}
        errs = [abs(_median(pred[k]) / med[k] - 1.0) for k in med if k in pred]
        best = max(med, key=lambda k: med[k])
        entry: Dict[str, Any] = dict(_key_fields(key), runs=len(rs))
        entry.update({"schedulers": len(med), "within": sum(e <= tol for e in errs),
                      "worst_err": max(errs) if errs else None, "best": best, "best_fps": med[best]})
        if "optimal" in med:
            entry["optimal_vs_best"] = round(med["optimal"] / med[best], 3)
            entry.update(by_plan(rs))
        entry["model_ok"] = bool(errs) and entry["within"] == len(med)
        entry["optimal_ok"] = entry.get("optimal_vs_best") is not None and entry["optimal_vs_best"] >= 1.0 - gap
        out.append(entry)
    return out


def engine_table(rows: Sequence[Dict[str, Any]], base: str = "torch") -> List[Dict[str, Any]]:
    """Per (MB/s, in flight) and variant (an engine): its best scheduler's run, that fps over the `base` variant's
    best, bytes per frame on each hop of that run, and over all the variant's runs of the group the largest
    max_abs_err and the mean top-1 agreement with the unsplit torch model."""
    groups = _groups(rows)
    out = []
    for key, rs in groups.items():
        best = max(rs, key=lambda r: float(r["fps"]))
        ref = groups.get((base,) + key[1:])
        entry: Dict[str, Any] = dict(_key_fields(key), best=best["scheduler"], best_fps=best["fps"],
                                     cuts=best.get("cuts"), engines=best.get("engines_ran"))
        if ref:
            entry["vs_" + base] = round(float(best["fps"]) / max(float(r["fps"]) for r in ref), 3)
        frames = float(best.get("completed") or best.get("frames") or 1)
        for key in ("m_w0", "w0_w1", "w1_m"):
            b = best.get("bytes_" + key)
            entry["kB_" + key] = None if b is None else round(float(b) / frames / 1e3, 1)
            entry["ratio_" + key] = best.get("ratio_" + key)
        errs = [float(v) for v in _present(rs, "max_abs_err")]
        entry["max_abs_err"] = max(errs) if errs else None
        entry["top1_agreement"] = _mean([float(v) for v in _present(rs, "top1_agreement")])
        out.append(entry)
    return sorted(out, key=lambda e: (float(e["bandwidth"].split("-")[0]), e["in_flight"], e["caps"], e["workers"]))


def _med(rows: Sequence[Dict[str, Any]], key: str) -> Optional[float]:
    """Median of `key` over the rows that have one (None without any)."""
    vals = [float(v) for v in _present(rows, key)]
    return _median(vals) if vals else None


MEDIAN_KEYS = ("fps", "latency_p50_s", "latency_p95_s", "capture_p50_s", "capture_p95_s", "f1", "top1_agreement",
               "agreement", "max_abs_err")


def _hop_keys(rows: Sequence[Dict[str, Any]]) -> List[str]:
    """The kB_<hop> keys the rows carry, in chain order (m->w0 first, the return hop last)."""
    n = max([int(r.get("workers") or 2) for r in rows] or [2])
    return ["kB_" + h.replace("->", "_") for h in hop_names(n)[:-1]] + \
        ["kB_w%d_m" % w for w in range(n) if any(r.get("kB_w%d_m" % w) for r in rows)]


def _hop_text(rows: Sequence[Dict[str, Any]]) -> Optional[str]:
    """Median kB per frame on each hop the rows used, as "m->w0 120, w0->w1 31, w1->m 0.4"."""
    parts = []
    for k in _hop_keys(rows):
        v = _med(rows, k)
        if v is not None and (v > 0 or not k.endswith("_m")):
            parts.append("%s %.3g" % (k[3:].replace("_", "->"), v))
    return ", ".join(parts) or None


def medians(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per group_key and scheduler: the runs (repeats) and the median over them of fps, send- and
    capture-to-result latency p50 / p95, F1, top-1 agreement, max abs error and kB per frame per hop."""
    cells: Dict[tuple, List[Dict[str, Any]]] = {}
    for key, rs in _groups(rows).items():
        for r in rs:
            cells.setdefault(key + (r["scheduler"],), []).append(r)
    order = {s: i for i, s in enumerate(SCHEDULERS)}
    out = []
    for key in sorted(cells, key=lambda k: _sort(k[:5]) + (order.get(k[5], len(order)), k[5])):
        rs = cells[key]
        entry: Dict[str, Any] = dict(_key_fields(key[:5]), scheduler=key[5], runs=len(rs))
        entry["model"] = rs[0].get("model")
        for k in MEDIAN_KEYS:
            entry[k] = _med(rs, k)
        entry["hop_kB"] = _hop_text(rs)
        if rs[0].get("pool_shape") in ("replicas", "hybrid") and rs[0].get("link_kB"):
            entry["hop_kB"] = "per message: " + rs[0]["link_kB"]  # a pool's links each carry a share of the frames
        out.append(entry)
    return out


def _one_device(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Runs where one device computes every layer: scheduler `edge`, or a 1-worker chain."""
    return [r for r in rows if r["scheduler"] == "edge" or int(r.get("workers") or 2) == 1]


def _setting_groups(rows: Sequence[Dict[str, Any]]) -> List[Tuple[tuple, List[Dict[str, Any]]]]:
    """The runs per (variant, MB/s, in flight, caps), every scheduler and worker count together, in table order."""
    by: Dict[tuple, List[Dict[str, Any]]] = {}
    for key, rs in _groups(rows).items():
        by.setdefault(key[:4], []).extend(rs)
    return [(key, by[key]) for key in sorted(by, key=lambda k: _sort(k + (0,)))]


def _by_workers_and_scheduler(rows: Sequence[Dict[str, Any]]) -> Dict[int, Dict[str, List[Dict[str, Any]]]]:
    """{N: {scheduler: its runs with N workers}}."""
    per_n: Dict[int, Dict[str, List[Dict[str, Any]]]] = {}
    for r in rows:
        per_n.setdefault(int(r.get("workers") or 2), {}).setdefault(r["scheduler"], []).append(r)
    return per_n


def _fastest(scheds: Dict[str, List[Dict[str, Any]]]) -> str:
    """The scheduler whose runs have the highest median fps."""
    return max(scheds, key=lambda s: _med(scheds[s], "fps") or 0.0)


def edge_table(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Chain against one device, per (variant, MB/s, in flight, caps) and number of workers N >= 2: the best
    scheduler other than `edge` (median fps over repeats) over `edge`'s median fps at the same N (else over the
    one-device runs of the group at any N: `edge` or 1 worker), with both runs' agreement and latency."""
    out = []
    for key, rs in _setting_groups(rows):
        for n in sorted({int(r.get("workers") or 2) for r in rs if int(r.get("workers") or 2) >= 2}):
            at_n = [r for r in rs if int(r.get("workers") or 2) == n]
            ref = [r for r in at_n if r["scheduler"] == "edge"]
            ref_from = "edge, %d workers" % n
            if not ref:
                ref = _one_device(rs)
                ref_from = "one device (edge or 1 worker)"
            chain: Dict[str, List[Dict[str, Any]]] = {}
            for r in at_n:
                if r["scheduler"] != "edge":
                    chain.setdefault(r["scheduler"], []).append(r)
            if not ref or not chain:
                continue
            best = _fastest(chain)
            entry: Dict[str, Any] = dict(_key_fields(key + (n,)))
            edge_fps, best_fps = _med(ref, "fps"), _med(chain[best], "fps")
            entry.update({"edge_fps": edge_fps, "edge_runs": len(ref), "edge_from": ref_from,
                          "edge_agreement": _med(ref, "agreement"), "best": best, "best_fps": best_fps,
                          "best_runs": len(chain[best]), "best_agreement": _med(chain[best], "agreement"),
                          "best_capture_p50_s": _med(chain[best], "capture_p50_s"),
                          "best_hop_kB": _hop_text(chain[best]),
                          "best_vs_edge": round(best_fps / edge_fps, 3) if edge_fps and best_fps else None})
            out.append(entry)
    return out


def scaling(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Scaling efficiency fps_N / (N x fps_1) per (variant, MB/s, in flight, caps) and number of workers N:
    fps_N = the best scheduler's median fps at N (`edge` included: a chain that loses to one device shows it);
    fps_1 = the best median fps of the 1-worker runs, else `edge`'s median over its runs at every N (one device
    either way: `base` says which). With the best run's median latency (send and capture to result, p50 / p95),
    agreement and kB per frame per hop, and `edge`'s median fps at N beside it."""
    out = []
    for key, rs in _setting_groups(rows):
        per_n = _by_workers_and_scheduler(rs)
        if 1 in per_n:
            fps1, base = max(_med(v, "fps") or 0.0 for v in per_n[1].values()), "1 worker"
        else:
            edge = [r for r in rs if r["scheduler"] == "edge"]
            fps1, base = (_med(edge, "fps"), "edge") if edge else (None, "-")
        for n in sorted(per_n):
            scheds = per_n[n]
            best = _fastest(scheds)
            b = scheds[best]
            fps_n = _med(b, "fps")
            entry: Dict[str, Any] = dict(_key_fields(key + (n,)))
            entry.update({"best": best, "runs": len(b), "fps": fps_n, "fps_1": fps1, "base": base,
                          "edge_fps": _med(scheds["edge"], "fps") if "edge" in scheds else None,
                          "efficiency": round(fps_n / (n * fps1), 3) if fps_n and fps1 else None,
                          "latency_p50_s": _med(b, "latency_p50_s"), "latency_p95_s": _med(b, "latency_p95_s"),
                          "capture_p50_s": _med(b, "capture_p50_s"), "capture_p95_s": _med(b, "capture_p95_s"),
                          "agreement": _med(b, "agreement"), "hop_kB": _hop_text(b)})
            out.append(entry)
    return out


def start_table(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """How fast each setting's runs got going and how fast they ran after it, per (variant, MB/s, in flight, caps)
    and number of workers N, for the best scheduler at N (by median fps, as in `scaling`): the medians over its
    runs of the time from the first frame read to the first result, the fps over the first 80 results against
    the rest, the steady fps from the 60th result on and the master's CPU a frame; and against one device
    (`edge`'s runs of the group, any N, else the 1-worker runs): the first result's time over one device's, and
    the steady fps over one device's (report.json `start`; issue 46's start and steady near-N figures)."""
    out = []
    for key, rs in _setting_groups(rows):
        one = [r for r in rs if r["scheduler"] == "edge"] or _one_device(rs)
        one_first, one_steady = _med(one, "first_result_s"), _med(one, "fps_after_60")
        per_n = _by_workers_and_scheduler(rs)
        for n in sorted(per_n):
            scheds = per_n[n]
            best = _fastest(scheds)
            b = scheds[best]
            first, steady = _med(b, "first_result_s"), _med(b, "fps_after_60")
            early = [float(r["fps_first_80"]) / float(r["fps_after_80"]) for r in b
                     if r.get("fps_first_80") and r.get("fps_after_80")]
            entry: Dict[str, Any] = dict(_key_fields(key + (n,)))
            entry.update({"best": best, "runs": len(b), "fps": _med(b, "fps"), "first_result_s": first,
                          "first_vs_one": round(first / one_first, 3) if first and one_first else None,
                          "first_80_over_rest": round(_median(early), 3) if early else None,
                          "fps_after_60": steady,
                          "steady_vs_one": round(steady / one_steady, 3) if steady and one_steady else None,
                          "master_cpu_ms": _med(b, "master_cpu_ms")})
            out.append(entry)
    return out
