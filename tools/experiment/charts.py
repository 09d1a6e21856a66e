"""SVG charts of an experiment (bars, predicted-vs-measured scatter, timelines, a Gantt chart) and the set of
plots results.html shows."""
from __future__ import annotations

import html
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cnnvideo.results.report import StageSpan, gantt_svg

from .summary import bytes_summary, hop_names, medians, n_of, scaling

SCHEDULER_COLOURS = {"lbs": "#4e79a7", "edge": "#f28e2b", "cloud": "#e15759", "nsc": "#76b7b2", "das": "#59a14f",
                     "optimal": "#edc948", "adaptive": "#b07aa1"}


def bar_chart(groups: Sequence[Tuple[str, Dict[str, Optional[float]]]], series: Sequence[str], title: str,
              unit: str, width: int = 1000, height: int = 300) -> str:
    """Grouped bars: groups = [(label, {series: value})]."""
    pad_l, pad_r, pad_t, pad_b = 60, 130, 30, 60
    vals = [v for _, d in groups for v in d.values() if v is not None]
    vmax = (max(vals) if vals else 1.0) * 1.1 or 1.0
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="16" font-size="13">%s</text>' % (pad_l, html.escape(title))]
    for i in range(5):
        v = vmax * i / 4
        y = pad_t + ph * (1 - v / vmax)
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (pad_l, pad_l + pw, y, y))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.3g %s</text>' % (pad_l - 4, y + 3, v, unit))
    n = max(len(groups), 1)
    gw = pw / n
    bw = gw * 0.8 / max(len(series), 1)
    for gi, (label, d) in enumerate(groups):
        x0 = pad_l + gi * gw + gw * 0.1
        for si, s in enumerate(series):
            v = d.get(s)
            if v is None:
                continue
            h = ph * v / vmax
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.4g %s'
                         '</title></rect>' % (x0 + si * bw, pad_t + ph - h, max(bw - 1, 1), h,
                                              SCHEDULER_COLOURS.get(s, _colour(si)), html.escape(label), s, v, unit))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (pad_l + gi * gw + gw / 2,
                                                                               pad_t + ph + 14, html.escape(label)))
    for si, s in enumerate(series):
        y = pad_t + 12 * si
        parts.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                     % (width - pad_r + 10, y, SCHEDULER_COLOURS.get(s, _colour(si)), width - pad_r + 24, y + 9,
                        html.escape(s)))
    parts.append("</svg>")
    return "".join(parts)


def _colour(i: int) -> str:
    palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]
    return palette[i % len(palette)]


def scatter(points: Sequence[Tuple[float, float, str]], title: str, xlabel: str, ylabel: str, width: int = 520,
            height: int = 420) -> str:
    """Predicted (x) vs measured (y) with the y = x line."""
    pad = 60
    vals = [v for p in points for v in p[:2]] or [1.0]
    vmax = max(vals) * 1.1
    pw, ph = width - 2 * pad, height - 2 * pad
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="18" font-size="13">%s</text>' % (pad, html.escape(title)),
             '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>' % (pad, pad, pw, ph),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#aaa" stroke-dasharray="4"/>' % (pad, pad + ph, pad + pw,
                                                                                            pad)]
    for i in range(5):
        v = vmax * i / 4
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>' % (pad + pw * v / vmax, pad + ph + 14,
                                                                                 v))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.3g</text>' % (pad - 4, pad + ph * (1 - v / vmax) + 3,
                                                                              v))
    parts.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (pad + pw / 2, height - 12, xlabel))
    parts.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>'
                 % (pad + ph / 2, pad + ph / 2, ylabel))
    for x, y, s in points:
        parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.8"><title>%s: predicted %.3g, '
                     'measured %.3g</title></circle>' % (pad + pw * x / vmax, pad + ph * (1 - y / vmax),
                                                          SCHEDULER_COLOURS.get(s.split(" ")[0], "#888"),
                                                          html.escape(s), x, y))
    parts.append("</svg>")
    return "".join(parts)


def timeline(series: Sequence[Tuple[str, Sequence[Tuple[int, float]]]], title: str, mark: Optional[float] = None,
             width: int = 900, height: int = 320) -> str:
    """Cumulative frames finished over time per run (done_s), with an optional vertical mark."""
    pad_l, pad_r, pad_t, pad_b = 50, 140, 30, 40
    xs = [t for _, pts in series for _, t in pts] or [1.0]
    ys = [len(pts) for _, pts in series] or [1]
    xmax, ymax = max(xs) * 1.05, max(ys) * 1.05
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="16" font-size="13">%s</text>' % (pad_l, html.escape(title)),
             '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>' % (pad_l, pad_t, pw, ph)]
    for i in range(6):
        t = xmax * i / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f s</text>' % (pad_l + pw * t / xmax,
                                                                                   pad_t + ph + 14, t))
    for i in range(5):
        v = ymax * i / 4
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (pad_l - 4, pad_t + ph * (1 - v / ymax) + 3,
                                                                            round(v)))
    for si, (name, pts) in enumerate(series):
        ordered = sorted(t for _, t in pts)
        line = " ".join("%.1f,%.1f" % (pad_l + pw * t / xmax, pad_t + ph * (1 - (i + 1) / ymax))
                        for i, t in enumerate(ordered))
        colour = SCHEDULER_COLOURS.get(name.split(" ")[0], _colour(si))
        parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"/>' % (line, colour))
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>' % (width - pad_r + 8, pad_t + 12 * si + 9, colour,
                                                                  html.escape(name)))
    if mark is not None:
        x = pad_l + pw * mark / xmax
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c00" stroke-dasharray="3"/>' % (
            x, x, pad_t, pad_t + ph))
    parts.append('<text x="%d" y="%d" text-anchor="middle">time since the run started</text>' % (
        pad_l + pw / 2, height - 6))
    parts.append("</svg>")
    return "".join(parts)


def gantt(report: Dict[str, Any]) -> str:
    spans = [StageSpan(int(f), a, s, float(t0), float(t1), int(b)) for f, a, s, t0, t1, b in report.get("spans") or []]
    return gantt_svg(spans, ["m"] + ["w%d" % w for w in range(n_of(report))], max_frames=60)


def plots(spec: Dict[str, Any], rows: Sequence[Dict[str, Any]], reports: Dict[str, Dict[str, Any]]
          ) -> List[Tuple[str, str]]:
    ok = [r for r in rows if r.get("fps") and "_chg" not in r["id"]]
    scheds = [s for s in SCHEDULER_COLOURS if any(r["scheduler"] == s for r in ok)]
    out: List[Tuple[str, str]] = []
    med = medians(ok)  # one bar per scheduler and group: the median over its repeats
    for variant in sorted({e["variant"] for e in med}):
        es = [e for e in med if e["variant"] == variant]
        def where(e: Dict[str, Any]) -> tuple:
            return float(e["bandwidth"].split("-")[0]), e["in_flight"], e["caps"], e["workers"]

        keys = sorted({where(e) for e in es})
        for metric, unit, title in (("fps", "fps", "throughput"), ("latency_p50_s", "s", "median latency")):
            groups = []
            for bw, m, caps, n in keys:
                d = {e["scheduler"]: e.get(metric) for e in es if where(e) == (bw, m, caps, n)}
                label = "%g MB/s, %d in flight" % (bw, m)
                if len({k[2:] for k in keys}) > 1:
                    label += ", caps %s, %d w" % (caps, n)
                groups.append((label, d))
            out.append(("%s per scheduler (%s)" % (title.capitalize(), variant),
                        bar_chart(groups, scheds, "%s, %s" % (title, variant), unit)))
    eff = [e for e in scaling(ok) if e.get("efficiency") is not None]
    if len({e["workers"] for e in eff}) > 1:
        groups = [("%s caps %s m%d" % (e["variant"], e["caps"], e["in_flight"]), {}) for e in eff]
        groups = list(dict(groups).items())
        for label, d in groups:
            for e in eff:
                if "%s caps %s m%d" % (e["variant"], e["caps"], e["in_flight"]) == label:
                    d["%d workers" % e["workers"]] = e["efficiency"]
        series = ["%d workers" % n for n in sorted({e["workers"] for e in eff})]
        out.append(("Scaling efficiency fps_N / (N x fps_1)", bar_chart(groups, series, "scaling efficiency", "")))
    n = n_of(next(iter(reports.values()))) if reports else 2
    hop_groups = []
    for e in bytes_summary([r for r in rows if r.get("fps")]):
        hop_groups.append((e["variant"], {"m->w0": e["ratio_m_w0"], "w0->w1": e["ratio_w0_w1"],
                                          "w1->m": e["ratio_w1_m"]}))
    if hop_groups:
        out.append(("Bytes per hop / dense float32", bar_chart(hop_groups, hop_names(n)[:2] + hop_names(n)[-1:],
                                                                "bytes sent / dense float32",
                                                                "x")))
    pts = [(r["pred_fps"], r["fps"], "%s %s m%d" % (r["scheduler"], r["variant"], r["in_flight"]))
           for r in ok if r.get("pred_fps")]
    if pts:
        out.append(("Cost model: predicted vs measured throughput", scatter(pts, "fps: predicted (x) vs measured (y)",
                                                                          "predicted fps", "measured fps")))
    chg = [r for r in rows if "_chg" in r["id"] and r["id"] in reports]
    if chg:
        series = [("%s (%s)" % (r["scheduler"], r["variant"]), [(t["frame"], t["done_s"])
                                                                 for t in reports[r["id"]].get("times") or []
                                                                 if t.get("done_s") is not None]) for r in chg]
        out.append(("Mid-run rate change: frames finished over time", timeline(series, "frames finished")))
    gid = spec.get("gantt")
    pick = reports.get(gid) if gid else None
    if pick is None:
        cands = [r for r in ok if r["scheduler"] == "optimal" and r["variant"] == "delta" and r["id"] in reports]
        pick = reports[cands[0]["id"]] if cands else None
        gid = cands[0]["id"] if cands else None
    if pick is not None and pick.get("spans"):
        out.append(("Gantt chart of run %s" % gid, gantt(pick)))
    return out
