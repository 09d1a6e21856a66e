"""`cnnvideo bench engine`: each engine and precision against eager torch fp32 on one core, whole model and each
stage of a 2-worker split: time (same-run ratio), max abs error, top-1 agreement on frames of the video."""
from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

log = logging.getLogger(__name__)

VARIANTS = ("torch-fp32", "onnxruntime-fp32", "onnxruntime-int8")
REFERENCE = "torch-fp32"


class HeldoutError(ValueError):
    """A bad bench flag: --heldout names frames the video lacks or that evaluation or calibration already use, or
    --split-cut is no inner cut."""


def _frames(video: str, frame_size, n: int, start: int = 0) -> List[np.ndarray]:
    from cnnvideo.video.frames import read_frames, synthetic_frames

    if video and os.path.isfile(video):
        clip = list(read_frames(video, tuple(frame_size), start + n, loop=False))[start:]
        if clip:
            return [f[np.newaxis] for f in clip]
    return [f[np.newaxis] for f in synthetic_frames(n, tuple(frame_size), seed=1)]


def split_cut(graph) -> int:
    """The cut that halves torch fp32 compute (the lbs split of 2 equal workers)."""
    from cnnvideo.plan.profiling import profile_compute

    seconds = profile_compute(graph, 1)[0]
    cum = np.cumsum(seconds)
    return int(np.clip(np.searchsorted(cum, cum[-1] / 2.0) + 1, 1, graph.num_segments - 1))


def _time_once(fn, x) -> float:
    t = time.perf_counter()
    fn(x)
    return time.perf_counter() - t


def parse_heldout(text: str) -> Tuple[int, int, int]:
    """'START:STRIDE:COUNT' -> (start, stride, count); ValueError naming the flag."""
    try:
        start, stride, count = (int(v) for v in text.split(":"))
    except ValueError:
        raise HeldoutError("--heldout must be START:STRIDE:COUNT (e.g. 560:5:47), got %r" % text) from None
    if start < 0 or stride < 1 or count < 1:
        raise HeldoutError("--heldout %s: start must be >= 0, stride and count >= 1" % text)
    return start, stride, count


def _heldout_frames(video: str, frame_size, heldout: Tuple[int, int, int], frames: int,
                    calibration: Tuple[int, int, int]) -> List[np.ndarray]:
    """The held-out frames; ValueError if the video lacks them or they overlap the evaluation or calibration."""
    from cnnvideo.video.frames import read_frames

    start, stride, count = heldout
    wanted = [start + i * stride for i in range(count)]
    c0, cs, cn = calibration
    clash = sorted(set(wanted) & (set(range(frames)) | {c0 + i * cs for i in range(cn)}))
    if clash:
        raise HeldoutError("--heldout frames %s are evaluation or calibration frames" % clash[:5])
    clip = list(read_frames(video, tuple(frame_size), wanted[-1] + 1, loop=False)) if os.path.isfile(video) else []
    if len(clip) <= wanted[-1]:
        raise HeldoutError("--heldout: %s has %d frames, frame %d is wanted" % (video, len(clip), wanted[-1]))
    return [clip[i][np.newaxis] for i in wanted]


def _agreement(outputs: np.ndarray, ref: np.ndarray) -> Dict[str, Any]:
    from cnnvideo.results.labels import top1_agreement, top1_in_top5, top5_overlap

    return {"top1_agreement": top1_agreement(list(outputs), list(ref)),
            "top5_overlap": top5_overlap(list(outputs), list(ref)),
            "top1_in_top5": top1_in_top5(list(outputs), list(ref))}


def _margins(ref: np.ndarray) -> Dict[str, Any]:
    """How close the reference's top-2 logits are: a frame whose margin is below an engine's error can flip."""
    from cnnvideo.results.labels import top2_margin

    m = np.array([top2_margin(r) for r in ref])
    return {"min": float(m.min()), "median": float(np.median(m)), "share_below_0.05": float(np.mean(m < 0.05)),
            "share_below_0.1": float(np.mean(m < 0.1))}


def measure(model: str, weights: str, frame_size, video: str, frames: int, repeat: int, calibration_start: int,
            calibration_frames: int, variants=VARIANTS, cache_dir: str = "",
            heldout: Optional[Tuple[int, int, int]] = None, split_at: int = 0) -> Dict[str, Any]:
    """Build every variant's whole-model and split stages, then time them interleaved and compare outputs."""
    import torch

    from cnnvideo.artifacts import calibration_path, onnx_dir
    from cnnvideo.model.engines import EngineSpec, StageFactory, weights_digest
    from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.model.zoo import build_model
    from cnnvideo.results.labels import top1_agreement

    torch.set_num_threads(1)
    graph = LayerGraph.from_model(build_model(model, weights, 0), tuple(frame_size))
    k = graph.num_segments
    if split_at and not 0 < split_at < k:
        raise HeldoutError("--split-cut must be 1..%d for %s, got %d" % (k - 1, model, split_at))
    cut = split_at or split_cut(graph)
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="cnnvideo-bench-engine-")
    key = "%s %dx%d weights %s" % (model, frame_size[0], frame_size[1], weights_digest(graph))
    cal_spec = CalibrationSpec(video, calibration_frames, calibration_start, 10)
    cal_path = calibration_path(cache_dir, model, frame_size)

    def calibration():
        return load_or_measure(graph, cal_spec, cal_path, key)

    stages, build_s, notes = {}, {}, {}
    for label in variants:
        engine, precision = label.split("-")
        factory = StageFactory(graph, EngineSpec(engine, precision, threads=1, on_error="stop"),
                               onnx_dir(cache_dir), key, calibration)
        t0 = time.perf_counter()
        stages[label] = [factory.stage(0, k), factory.stage(0, cut), factory.stage(cut, k)]
        build_s[label] = time.perf_counter() - t0
        notes[label] = factory.notes
    clip = _frames(video, frame_size, frames)
    outputs = {label: np.concatenate([st[0].run(f) for f in clip]) for label, st in stages.items()}
    split = {label: np.concatenate([st[2].run(st[1].run(f)) for f in clip]) for label, st in stages.items()}
    ref = outputs[REFERENCE] if REFERENCE in outputs else None
    held = held_ref = None
    if heldout is not None and ref is not None:
        held = _heldout_frames(video, frame_size, heldout, frames, (calibration_start, 10, calibration_frames))
        held_ref = np.concatenate([stages[REFERENCE][0].run(f) for f in held])
    # timing: rounds over the variants in turn, so each ratio compares runs made under the same load
    times = {label: [[], [], []] for label in stages}
    x = clip[0]
    mids = {label: st[1].run(x) for label, st in stages.items()}
    for _ in range(repeat + 1):
        for label, st in stages.items():
            times[label][0].append(_time_once(st[0].run, x))
            times[label][1].append(_time_once(st[1].run, x))
            times[label][2].append(_time_once(st[2].run, mids[label]))
    med = {label: [float(np.median(t[1:])) for t in ts] for label, ts in times.items()}
    base = med.get(REFERENCE)
    results, summary = {}, {}
    for label in stages:
        whole, s0, s1 = med[label]
        row = {"whole_s": whole, "stage_s": [s0, s1], "build_s": round(build_s[label], 2),
               "engines_run": sorted({"%s-%s" % (s.engine, s.precision) for s in stages[label]}),
               "split_vs_unsplit_max_abs_err": float(np.abs(split[label] - outputs[label]).max()),
               "notes": notes[label]}
        if base is not None:
            row["speedup_vs_torch_fp32"] = base[0] / whole
            row["stage_speedup_vs_torch_fp32"] = [base[1] / s0, base[2] / s1]
            row["max_abs_err"] = float(np.abs(outputs[label] - ref).max())
            row["split_max_abs_err"] = float(np.abs(split[label] - ref).max())
            row["top1_agreement"] = top1_agreement(list(outputs[label]), list(ref))
            row["split_top1_agreement"] = top1_agreement(list(split[label]), list(ref))
            row.update({k2: v for k2, v in _agreement(outputs[label], ref).items() if k2 != "top1_agreement"})
            if held is not None:
                whole_st, first, second = stages[label]
                row["heldout"] = _agreement(np.concatenate([whole_st.run(f) for f in held]), held_ref)
                split_held = np.concatenate([second.run(first.run(f)) for f in held])
                row["heldout"]["split_top1_agreement"] = top1_agreement(list(split_held), list(held_ref))
            summary[label] = {k2: row[k2] for k2 in ("speedup_vs_torch_fp32", "max_abs_err", "top1_agreement")}
            if label.endswith("fp32"):
                summary[label].pop("top1_agreement")
        results[label] = row
    return {"model": model, "weights": weights, "frame_size": list(frame_size), "threads": 1,
            "video": video if os.path.isfile(video or "") else "synthetic", "eval_frames": len(clip),
            "calibration": {"video": video, "start": calibration_start, "stride": 10, "frames": calibration_frames},
            "reference_top2_margin": _margins(ref) if ref is not None else None,
            "heldout": ({"start": heldout[0], "stride": heldout[1], "frames": len(held),
                         "reference_top2_margin": _margins(held_ref)} if held is not None else None),
            "split_cut": cut, "split_cut_name": graph.cuts[cut].name, "num_cuts": k + 1, "repeat": repeat,
            "results": results, "summary": summary}


def run(args) -> int:
    """Entry point of `cnnvideo bench engine`."""
    import sys

    from cnnvideo.model.engines import EngineError, ort_available

    ok, why = ort_available()
    variants = [v for v in (args.engines or ",".join(VARIANTS)).split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise SystemExit("cnnvideo bench engine: unknown engine %s (known: %s)" % (", ".join(bad), ", ".join(VARIANTS)))
    if not ok:
        log.warning("%s: only torch is measured", why)
        variants = [v for v in variants if v.startswith("torch")]
    video = args.video or "media/vtest.avi"
    try:
        heldout = parse_heldout(args.heldout) if args.heldout else None
    except ValueError as exc:
        print("cnnvideo bench engine: error: %s" % exc, file=sys.stderr)
        return 2
    try:
        out = measure(args.model, args.weights, tuple(args.frame_size), video, args.frames, args.repeat,
                      args.calibration_start, args.calibration_frames, variants, args.cache_dir or "", heldout,
                      args.split_cut)
    except (EngineError, HeldoutError) as exc:
        print("cnnvideo bench engine: error: %s" % exc, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for label, row in out["results"].items():
            print("%-18s whole %.4f s  stages %s  x%.2f  err %.3g  top1 %.3f" % (
                label, row["whole_s"], ["%.4f" % s for s in row["stage_s"]], row.get("speedup_vs_torch_fp32", 0),
                row.get("max_abs_err", 0), row.get("top1_agreement", 0)))
    return 0
