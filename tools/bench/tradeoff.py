"""`cnnvideo bench tradeoff`: what lossy hops cost in accuracy. Sweeps the input threshold (m->w0), later-hop
thresholds and fp16 at candidate cuts over a real video; for each point the bytes a closed-loop delta hop sends
(against dense float32) and the top-1 agreement with the unsplit full-precision model. Draws the curve (SVG).

Every hop is a real HopSender -> bytes -> HopReceiver pair; each later-hop point is a two-stage split at that
cut (input hop lossless), each input-hop point the whole model on what worker 0 reconstructs. The answers
(smallest bytes that keep agreement >= 99% / 95%) are then checked together in one more split run.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import load_model
from cnnvideo.results.labels import top1
from cnnvideo.video.frames import default_video, read_frames
from cnnvideo.wire.hop import HopReceiver, HopSender

INPUT_THRESHOLDS = (0, 1, 2, 3, 4, 6, 8)
LATER_SETTINGS = ((0.0, False), (0.0, True), (0.03, False), (0.1, False), (0.3, False), (1.0, False))  # (t, fp16)
TARGETS = (0.99, 0.95)
_BLOCK = re.compile(r"^features\.(\d+\.add|\d+\.conv\.3|1\.conv\.2|0\.2|18\.2)$")
MAX_BYTES = 1 << 30


def candidate_cuts(graph: LayerGraph, spec: str) -> List[int]:
    """Later-hop cuts to sweep: 'blocks' (every block output of a features.N chain plus the pooled vector, or
    every 4th cut for other models), 'all', or comma-separated cut names/indices."""
    k = len(graph.cuts) - 1
    if spec == "all":
        return list(range(1, k))
    if spec == "blocks":
        picked = [c.index for c in graph.cuts[1:k] if _BLOCK.match(c.name) or c.name == "adaptive_avg_pool2d"]
        return picked or list(range(1, k, 4))
    return sorted({graph.cut_index(int(s) if s.strip().isdigit() else s.strip()) for s in spec.split(",") if s})


class _Hop:
    """One closed-loop hop (sender -> bytes -> receiver) with its byte counts, keyframe apart."""

    def __init__(self, threshold: float, fp16: bool) -> None:
        self.sender = HopSender(threshold=threshold, fp16=fp16)
        self.receiver = HopReceiver(MAX_BYTES)
        self.first = 0
        self.steady = 0
        self.frames = 0

    def send(self, x: np.ndarray) -> np.ndarray:
        buf = self.sender.encode(x)
        if self.frames == 0:
            self.first = len(buf)
        else:
            self.steady += len(buf)
        self.frames += 1
        return np.array(self.receiver.decode(buf))


def _point(hop: _Hop, dense: int, agree: int, n: int) -> Dict[str, Any]:
    steady = hop.steady / max(n - 1, 1)
    return {"bytes_per_frame": round(steady, 1), "bytes_dense": int(dense), "ratio": round(steady / dense, 5),
            "ratio_all": round((hop.first + hop.steady) / float(dense * n), 5), "top1_agreement": agree / float(n)}


def sweep(graph: LayerGraph, frames: Sequence[np.ndarray], cuts: Sequence[int],
          input_thresholds: Sequence[int] = INPUT_THRESHOLDS,
          settings: Sequence[Tuple[float, bool]] = LATER_SETTINGS) -> Dict[str, Any]:
    """Bytes and top-1 agreement of every input threshold (m->w0) and of every later setting at every cut."""
    k = len(graph.cuts) - 1
    cuts = sorted(set(cuts))
    bounds = [0] + cuts + [k]
    prefix = [TorchStage(graph, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    suffix = {c: TorchStage(graph, c, k) for c in cuts}
    whole = TorchStage(graph, 0, k)
    in_hops = {t: _Hop(t, False) for t in input_thresholds}
    in_agree = {t: 0 for t in input_thresholds}
    later = {(c, s): _Hop(*s) for c in cuts for s in settings}
    later_agree = {key: 0 for key in later}
    for frame in frames:
        x = frame[None] if frame.ndim == 3 else frame
        acts, y = [], x
        for stage in prefix:  # one unsplit pass, keeping the tensor at every candidate cut
            y = stage.run(y)
            acts.append(y)
        ref = top1(acts[-1])
        for t, hop in in_hops.items():
            rec = hop.send(x)
            in_agree[t] += int(t == 0 or top1(whole.run(rec)) == ref)
        for (c, s), hop in later.items():
            rec = hop.send(acts[cuts.index(c)])
            lossless = s == (0.0, False)  # bitwise the same tensor: the suffix gives the reference's output
            later_agree[(c, s)] += int(lossless or top1(suffix[c].run(rec)) == ref)
    n = len(frames)
    dense_in = graph.cuts[0].numel * 4
    inputs = [dict(input_threshold=t, **_point(h, dense_in, in_agree[t], n)) for t, h in in_hops.items()]
    hops = []
    for (c, (t, fp16)), h in later.items():
        hops.append(dict(cut=c, name=graph.cuts[c].name, threshold=t, fp16=fp16,
                         **_point(h, graph.cuts[c].numel * 4, later_agree[(c, (t, fp16))], n)))
    return {"input": inputs, "later": hops}


def _lossless(p: Dict[str, Any]) -> bool:
    return p.get("input_threshold", p.get("threshold")) == 0 and not p.get("fp16")


def _smallest(points: List[Dict[str, Any]], target: Optional[float]) -> Optional[Dict[str, Any]]:
    """The point with the smallest ratio whose agreement is >= target (the lossless points when None)."""
    ok = [p for p in points if (_lossless(p) if target is None else p["top1_agreement"] >= target)]
    return min(ok, key=lambda p: (p["ratio"], p["bytes_per_frame"])) if ok else None


def answers(result: Dict[str, Any]) -> Dict[str, Any]:
    """m->w0 and the best later hop (smallest ratio over the swept cuts), lossless and at each target."""
    out = {"lossless": {"m->w0": _smallest(result["input"], None), "best_later": _smallest(result["later"], None)}}
    for target in TARGETS:
        out["agreement>=%g" % target] = {"m->w0": _smallest(result["input"], target),
                                         "best_later": _smallest(result["later"], target)}
    return out


def combined(graph: LayerGraph, frames: Sequence[np.ndarray], in_point: Dict[str, Any],
             later_point: Dict[str, Any]) -> Dict[str, Any]:
    """Both chosen settings at once: a two-stage split (m->w0 at the input threshold, w0->w1 at the later cut
    with its threshold/fp16); the top-1 agreement of that whole split with the unsplit model."""
    k = len(graph.cuts) - 1
    c = later_point["cut"]
    first, second, whole = TorchStage(graph, 0, c), TorchStage(graph, c, k), TorchStage(graph, 0, k)
    hop0, hop1 = _Hop(in_point["input_threshold"], False), _Hop(later_point["threshold"], later_point["fp16"])
    agree = 0
    for frame in frames:
        x = frame[None] if frame.ndim == 3 else frame
        agree += int(top1(second.run(hop1.send(first.run(hop0.send(x))))) == top1(whole.run(x)))
    return {"input_threshold": in_point["input_threshold"], "cut": later_point["name"],
            "threshold": later_point["threshold"], "fp16": later_point["fp16"],
            "top1_agreement": agree / float(len(frames))}


# ---------------------------------------------------------------------------------------------- picture
def _svg_panel(points: List[Dict[str, Any]], x0: int, title: str, label_key: str, colour_of,
               tag=None) -> List[str]:
    """One scatter panel: x = bytes ratio vs dense float32 (log), y = top-1 agreement."""
    w, h, pad = 440, 300, 48
    ratios = [max(p["ratio"], 1e-5) for p in points]
    lo, hi = math.log10(min(ratios)) - 0.1, math.log10(max(ratios)) + 0.1
    ymin = min(0.5, min(p["top1_agreement"] for p in points))
    sx = lambda r: x0 + pad + (math.log10(max(r, 1e-5)) - lo) / max(hi - lo, 1e-9) * (w - 2 * pad)  # noqa: E731
    sy = lambda a: 30 + (1 - (a - ymin) / max(1 - ymin, 1e-9)) * (h - 30 - pad)  # noqa: E731
    out = ['<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>' % (x0 + pad, html.escape(title)),
           '<rect x="%d" y="30" width="%d" height="%d" fill="none" stroke="#999"/>' % (x0 + pad, w - 2 * pad,
                                                                                       h - 30 - pad)]
    for target in TARGETS:
        y = sy(target)
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="4 3"/>'
                   '<text x="%d" y="%.1f" font-size="10" fill="#c00">%g%%</text>'
                   % (x0 + pad, x0 + w - pad, y, y, x0 + w - pad + 2, y + 3, target * 100))
    for e in range(int(math.ceil(lo)), int(math.floor(hi)) + 1):
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">1e%d</text>' % (sx(10 ** e), h - pad + 14,
                                                                                           e))
    for a in (ymin, (1 + ymin) / 2, 1.0):
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%.2f</text>' % (x0 + pad - 4, sy(a) + 3, a))
    out.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">bytes per frame / dense float32 (log)</text>'
               % (x0 + w // 2, h - 12))
    for p in points:
        out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" fill-opacity="0.75"><title>%s</title></circle>'
                   % (sx(p["ratio"]), sy(p["top1_agreement"]), colour_of(p), html.escape(str(p[label_key]))))
        if tag is not None:
            out.append('<text x="%.1f" y="%.1f" font-size="10">%s</text>' % (sx(p["ratio"]) + 5,
                                                                              sy(p["top1_agreement"]) - 4, tag(p)))
    return out


def _setting(p: Dict[str, Any]) -> str:
    return "t=%g%s" % (p["threshold"], " fp16" if p["fp16"] else "")


def picture(result: Dict[str, Any]) -> str:
    """SVG: input-hop curve (left), every later-hop point coloured by setting (right), targets dashed."""
    palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
    settings = sorted({_setting(p) for p in result["later"]})
    colour = {s: palette[i % len(palette)] for i, s in enumerate(settings)}
    for p in result["input"]:
        p["label"] = "input threshold %d: ratio %.4f, agreement %.3f" % (p["input_threshold"], p["ratio"],
                                                                         p["top1_agreement"])
    for p in result["later"]:
        p["label"] = "%s %s: ratio %.4f, agreement %.3f" % (p["name"], _setting(p), p["ratio"], p["top1_agreement"])
    body = _svg_panel(result["input"], 0, "m->w0 (input threshold, pixel levels)", "label", lambda p: "#4e79a7",
                      tag=lambda p: str(p["input_threshold"]))
    body += _svg_panel(result["later"], 440, "later hops (each swept cut x setting)", "label",
                       lambda p: colour[_setting(p)])
    for i, s in enumerate(settings):
        body.append('<rect x="%d" y="%d" width="9" height="9" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>'
                    % (890, 40 + 14 * i, colour[s], 903, 48 + 14 * i, html.escape(s)))
    for p in result["input"] + result["later"]:
        p.pop("label", None)
    sub = "weights %s; %s, %d frames at %dx%d" % (result["weights"], os.path.basename(result["video"]),
                                              result["frames"], result["frame_size"][0], result["frame_size"][1])
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="980" height="330" font-family="sans-serif">'
            '<text x="490" y="326" font-size="10" text-anchor="middle">%s</text>%s</svg>\n'
            % (html.escape(sub), "".join(body)))


def summary_table(result: Dict[str, Any]) -> str:
    """Markdown lines of the answers (for docs/results)."""
    lines = ["| setting | m->w0 input threshold | m->w0 ratio | m->w0 agreement | best later hop | threshold / fp16 "
             "| later ratio | later agreement |", "|---|---|---|---|---|---|---|---|"]
    for key, pair in result["answers"].items():
        a, b = pair["m->w0"], pair["best_later"]
        if a is None or b is None:
            lines.append("| %s | none | | | none | | | |" % key)
            continue
        lines.append("| %s | %d | %.4f | %.3f | %s | %g / %s | %.4f | %.3f |" % (
            key, a["input_threshold"], a["ratio"], a["top1_agreement"], b["name"], b["threshold"],
            "fp16" if b["fp16"] else "fp32", b["ratio"], b["top1_agreement"]))
    return "\n".join(lines)


def markdown(result: Dict[str, Any], command: str) -> str:
    """results.md: the command, conditions, the answers, the combined check and every cut x setting."""
    settings = []
    for p in result["later"]:
        if (p["threshold"], p["fp16"]) not in settings:
            settings.append((p["threshold"], p["fp16"]))
    head = ["t=%g%s" % (t, " fp16" if f else "") for t, f in settings]
    lines = ["# bench tradeoff: %s" % result["model"], "", "Reproduce:", "", "```sh", command, "```", "",
             "- weights: %s" % result["weights"], "- video: %s, %d frames at %dx%d" % (
                 result["video"], result["frames"], result["frame_size"][0], result["frame_size"][1]),
             "- each later point: a two-stage split at that cut, input hop lossless; agreement = share of frames "
             "whose top-1 equals the unsplit full-precision model's; ratio = mean bytes per frame over frames 1.. "
             "(frame 0 is a keyframe) / dense float32 bytes of the tensor", "- wall: %s s" % result.get("wall_s"),
             "", "## Answers", "", summary_table(result), "", "Both settings of an answer together (one split):", ""]
    for key, c in (result.get("combined") or {}).items():
        lines.append("- %s: input threshold %d + %s at t=%g%s: top-1 agreement %.3f" % (
            key, c["input_threshold"], c["cut"], c["threshold"], " fp16" if c["fp16"] else "", c["top1_agreement"]))
    lines += ["", "![tradeoff](tradeoff.svg)", "", "## m->w0 (input threshold)", "",
              "| input threshold | bytes/frame | ratio | top-1 agreement |", "|---|---|---|---|"]
    for p in result["input"]:
        lines.append("| %d | %.0f | %.4f | %.3f |" % (p["input_threshold"], p["bytes_per_frame"], p["ratio"],
                                                     p["top1_agreement"]))
    lines += ["", "## Later hops: ratio / top-1 agreement per cut and setting", "",
              "| cut | dense bytes | %s |" % " | ".join(head), "|---|---|%s" % ("---|" * len(head))]
    by: Dict[str, Dict[Tuple[float, bool], Dict[str, Any]]] = {}
    for p in result["later"]:
        by.setdefault(p["name"], {})[(p["threshold"], p["fp16"])] = p
    for name, pts in by.items():
        any_p = next(iter(pts.values()))
        dense = any_p.get("bytes_dense") or (any_p["bytes_per_frame"] / any_p["ratio"] if any_p["ratio"] else 0)
        lines.append("| %s | %.0f | %s |" % (name, dense, " | ".join(
            "%.4f / %.3f" % (pts[s]["ratio"], pts[s]["top1_agreement"]) if s in pts else "" for s in settings)))
    return "\n".join(lines) + "\n"


def run(args) -> int:
    size = tuple(args.frame_size)
    model, info = load_model(args.model, args.weights, 0)
    graph = LayerGraph.from_model(model, size)
    video = args.video or default_video()
    frames = list(read_frames(video, size, limit=args.frames))
    cuts = candidate_cuts(graph, args.cuts)
    t0 = time.time()
    result: Dict[str, Any] = {"model": args.model, "weights": info.describe(), "video": video, "frames": len(frames),
                              "frame_size": list(size), "cuts": [graph.cuts[c].name for c in cuts]}
    ins = tuple(int(t) for t in args.input_thresholds.split(",")) if args.input_thresholds else INPUT_THRESHOLDS
    later = LATER_SETTINGS
    if args.thresholds:
        later = tuple((float(t.rstrip("h")), t.endswith("h")) for t in args.thresholds.split(","))
        later = ((0.0, False),) + tuple(s for s in later if s != (0.0, False))
    result.update(sweep(graph, frames, cuts, ins, later))
    result["answers"] = answers(result)
    result["combined"] = {}
    for target in TARGETS:
        pair = result["answers"]["agreement>=%g" % target]
        if pair["m->w0"] is not None and pair["best_later"] is not None:
            result["combined"]["agreement>=%g" % target] = combined(graph, frames, pair["m->w0"], pair["best_later"])
    result["wall_s"] = round(time.time() - t0, 1)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "tradeoff.json"), "w") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
        with open(os.path.join(args.out, "tradeoff.svg"), "w") as fh:
            fh.write(picture(result))
        command = " ".join(["cnnvideo bench tradeoff"] + sys.argv[3:])
        with open(os.path.join(args.out, "results.md"), "w") as fh:
            fh.write(markdown(result, command))
        result["picture"] = os.path.join(args.out, "tradeoff.svg")
    print(json.dumps(result) if args.json else summary_table(result))
    return 0
