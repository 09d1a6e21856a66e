"""`cnnvideo bench engine`: each engine and precision against eager torch fp32 on one core, whole model and each
stage of a 2-worker split: time (same-run ratio), max abs error, top-1 agreement on frames of the video.

An ONNX model (`--model person-ssdlite` or a path ending in .onnx) has no torch model: ORT fp32 is the reference
and int8 is compared with it; a registered detector's outputs are decoded and matched (precision, recall, F1 at
IoU >= 0.5, same label, cnnvideo.results.detections), whole model and split."""
from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from cnnvideo.artifacts import calibration_path, onnx_dir, onnx_model_path
from cnnvideo.errors import ConfigError
from cnnvideo.model.catalog import sha256_of
from cnnvideo.model.engines import EngineError, EngineSpec, StageFactory, cpu_threads, ort_available, weights_digest
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.onnx_graph import load_graph, unpack_outputs
from cnnvideo.plan.profiling import profile_compute
from cnnvideo.results.detections import DetectionAgreement, decode, detector_for_outputs
from cnnvideo.results.labels import top1_agreement, top1_in_top5, top2_margin, top5_overlap
from cnnvideo.video.frames import read_frames, synthetic_frames

log = logging.getLogger(__name__)

VARIANTS = ("torch-fp32", "onnxruntime-fp32", "onnxruntime-int8")
REFERENCE = "torch-fp32"
ONNX_VARIANTS = ("onnxruntime-fp32", "onnxruntime-int8")  # an ONNX file runs on ORT only
ONNX_REFERENCE = "onnxruntime-fp32"


class HeldoutError(ValueError):
    """A bad bench flag: --heldout names frames the video lacks or that evaluation or calibration already use,
    --split-cut is no inner cut, or an engine or flag does not apply to an ONNX model."""


def _frames(video: str, frame_size, n: int, start: int = 0) -> List[np.ndarray]:
    if video and os.path.isfile(video):
        clip = list(read_frames(video, tuple(frame_size), start + n, loop=False))[start:]
        if clip:
            return [f[np.newaxis] for f in clip]
    return [f[np.newaxis] for f in synthetic_frames(n, tuple(frame_size), seed=1)]


def split_cut(graph) -> int:
    """The cut that halves torch fp32 compute (the lbs split of 2 equal workers)."""
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
    return {"top1_agreement": top1_agreement(list(outputs), list(ref)),
            "top5_overlap": top5_overlap(list(outputs), list(ref)),
            "top1_in_top5": top1_in_top5(list(outputs), list(ref))}


def _margins(ref: np.ndarray) -> Dict[str, Any]:
    """How close the reference's top-2 logits are: a frame whose margin is below an engine's error can flip."""
    m = np.array([top2_margin(r) for r in ref])
    return {"min": float(m.min()), "median": float(np.median(m)), "share_below_0.05": float(np.mean(m < 0.05)),
            "share_below_0.1": float(np.mean(m < 0.1))}


def _build_stages(graph, model: str, frame_size, key: str, variants, cut: int, video: str, calibration_frames: int,
                  calibration_start: int, cache_dir: Optional[str]):
    """Per engine label ("onnxruntime-int8"): its [whole, first, second] stages split at `cut`, their build time
    in seconds, and the StageFactory that built them (notes, qparams); int8 calibrated on `calibration_frames`
    frames of `video` from `calibration_start`, every 10th."""
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="cnnvideo-bench-engine-")
    cal_spec = CalibrationSpec(video, calibration_frames, calibration_start, 10)
    cal_path = calibration_path(cache_dir, model, frame_size)

    def calibration():
        return load_or_measure(graph, cal_spec, cal_path, key)

    k = graph.num_segments
    stages, build_s, factories = {}, {}, {}
    for label in variants:
        engine, precision = label.split("-")
        factory = StageFactory(graph, EngineSpec(engine, precision, threads=1, on_error="stop"),
                               onnx_dir(cache_dir), key, calibration)
        t0 = time.perf_counter()
        stages[label] = [factory.stage(0, k), factory.stage(0, cut), factory.stage(cut, k)]
        build_s[label] = time.perf_counter() - t0
        factories[label] = factory
    return stages, build_s, factories


def measure(model: str, weights: str, frame_size, video: str, frames: int, repeat: int, calibration_start: int,
            calibration_frames: int, variants=VARIANTS, cache_dir: str = "",
            heldout: Optional[Tuple[int, int, int]] = None, split_at: int = 0) -> Dict[str, Any]:
    """Build every variant's whole-model and split stages, then time them interleaved and compare outputs."""
    import torch  # torch here, not at the top: an ONNX-file model is measured (measure_onnx) without torch

    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.model.zoo import build_model

    torch.set_num_threads(1)
    graph = LayerGraph.from_model(build_model(model, weights, 0), tuple(frame_size))
    k = graph.num_segments
    if split_at and not 0 < split_at < k:
        raise HeldoutError("--split-cut must be 1..%d for %s, got %d" % (k - 1, model, split_at))
    cut = split_at or split_cut(graph)
    key = "%s %dx%d weights %s" % (model, frame_size[0], frame_size[1], weights_digest(graph))
    stages, build_s, factories = _build_stages(graph, model, frame_size, key, variants, cut, video,
                                               calibration_frames, calibration_start, cache_dir)
    notes = {label: f.notes for label, f in factories.items()}
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


def _detections(rows: List[np.ndarray], graph, spec, frame_size) -> List[list]:
    """Each frame's decoded detections from the packed model outputs (the last cut's row)."""
    h, w = frame_size
    return [decode(unpack_outputs(r, graph.cuts[-1]), spec, w, h) for r in rows]


def _detection_agreement(dets: List[list], ref: List[list]) -> Dict[str, Any]:
    """detections.DetectionAgreement summary of `dets` against `ref`, frame by frame."""
    agree = DetectionAgreement(0.5)
    for a, b in zip(dets, ref):
        agree.add(a, b)
    return agree.summary()


def measure_onnx(model: str, frame_size, video: str, frames: int, repeat: int, calibration_start: int,
                 calibration_frames: int, variants=ONNX_VARIANTS, cache_dir: str = "", split_at: int = 0,
                 score_threshold: float = 0.5) -> Dict[str, Any]:
    """`measure` for an ONNX model: ORT fp32 (the reference) and int8, whole model and both stages of a 2-worker
    split; a registered detector's boxes matched against fp32 (F1), any other model's top-1 agreement."""
    import dataclasses

    import onnxruntime

    bad = [v for v in variants if v not in ONNX_VARIANTS]
    if bad:
        raise HeldoutError("%s is an ONNX model: engines %s only, not %s" % (model, ", ".join(ONNX_VARIANTS),
                                                                           ", ".join(bad)))
    path = onnx_model_path(model)
    graph = load_graph(path, frame_size)
    k = graph.num_segments
    if split_at and not 0 < split_at < k:
        raise HeldoutError("--split-cut must be 1..%d for %s, got %d" % (k - 1, model, split_at))
    cut = split_at or split_cut(graph)
    spec = detector_for_outputs(graph.cuts[-1].tensors)
    if spec is not None:
        spec = dataclasses.replace(spec, score_threshold=float(score_threshold))
    key = "%s %dx%d weights %s" % (model, frame_size[0], frame_size[1], graph.digest)
    stages, build_s, factories = _build_stages(graph, model, frame_size, key, variants, cut, video,
                                               calibration_frames, calibration_start, cache_dir)
    clip = _frames(video, frame_size, frames)
    whole = {label: [st[0].run(f) for f in clip] for label, st in stages.items()}
    mids = {label: [st[1].run(f) for f in clip] for label, st in stages.items()}
    split = {label: [st[2].run(m) for m in mids[label]] for label, st in stages.items()}

    def real(label: str, m: np.ndarray) -> np.ndarray:  # the cut tensor as float (int8 hops carry uint8)
        qp = factories[label].qparams(cut)
        return qp.dequantize(m) if qp is not None else m

    ref_label = ONNX_REFERENCE if ONNX_REFERENCE in stages else None
    ref = np.concatenate(whole[ref_label]) if ref_label else None
    ref_dets = _detections(whole[ref_label], graph, spec, frame_size) if ref_label and spec else None
    times = {label: [[], [], []] for label in stages}
    x = clip[0]
    for _ in range(repeat + 1):
        for label, st in stages.items():
            times[label][0].append(_time_once(st[0].run, x))
            times[label][1].append(_time_once(st[1].run, x))
            times[label][2].append(_time_once(st[2].run, mids[label][0]))
    med = {label: [float(np.median(t[1:])) for t in ts] for label, ts in times.items()}
    results, summary = {}, {}
    for label in stages:
        w_s, s0, s1 = med[label]
        out, out_split = np.concatenate(whole[label]), np.concatenate(split[label])
        row = {"whole_s": w_s, "stage_s": [s0, s1], "build_s": round(build_s[label], 2),
               "engines_run": sorted({"%s-%s" % (s.engine, s.precision) for s in stages[label]}),
               "split_vs_unsplit_max_abs_err": float(np.abs(out_split - out).max()),
               "notes": factories[label].notes}
        if ref_label:
            base = med[ref_label]
            row["speedup_vs_onnxruntime_fp32"] = base[0] / w_s
            row["stage_speedup_vs_onnxruntime_fp32"] = [base[1] / s0, base[2] / s1]
            row["max_abs_err"] = float(np.abs(out - ref).max())
            row["split_max_abs_err"] = float(np.abs(out_split - ref).max())
            row["cut_max_abs_err"] = float(max(np.abs(real(label, m).astype(np.float64) - r).max()
                                               for m, r in zip(mids[label], mids[ref_label])))
            if spec is not None:
                row["detections"] = _detection_agreement(_detections(whole[label], graph, spec, frame_size),
                                                         ref_dets)
                row["split_detections"] = _detection_agreement(_detections(split[label], graph, spec, frame_size),
                                                               ref_dets)
                row["f1"], row["split_f1"] = row["detections"]["f1"], row["split_detections"]["f1"]
            else:
                row.update(_agreement(out, ref))
            summary[label] = {k2: row[k2] for k2 in ("speedup_vs_onnxruntime_fp32", "max_abs_err", "f1", "split_f1",
                                                     "top1_agreement") if k2 in row}
        results[label] = row
    caps = cpu_threads(0)
    return {"model": model, "model_file": path, "weights": "file sha256 %s" % sha256_of(path)[:16],
            "frame_size": list(frame_size), "engine": "onnxruntime %s" % onnxruntime.__version__, "threads": 1,
            "cpu_cap_cores": caps, "machine_cores": os.cpu_count(), "reference": ref_label,
            "video": video if os.path.isfile(video or "") else "synthetic", "eval_frames": len(clip),
            "calibration": {"video": video, "start": calibration_start, "stride": 10, "frames": calibration_frames},
            "detector": ({"name": spec.name, "score_threshold": spec.score_threshold, "iou_threshold": 0.5}
                         if spec is not None else None),
            "reference_boxes_per_frame": (float(np.mean([len(d) for d in ref_dets])) if ref_dets else None),
            "split_cut": cut, "split_cut_name": graph.cuts[cut].name, "num_cuts": k + 1, "repeat": repeat,
            "results": results, "summary": summary}


def run(args) -> int:
    """Entry point of `cnnvideo bench engine`."""
    import sys

    ok, why = ort_available()
    onnx_model = onnx_model_path(args.model) is not None
    known = ONNX_VARIANTS if onnx_model else VARIANTS
    variants = [v for v in (args.engines or ",".join(known)).split(",") if v]
    bad = [v for v in variants if v not in known]
    if bad:
        raise SystemExit("cnnvideo bench engine: unknown engine %s for %s (known: %s)"
                         % (", ".join(bad), args.model, ", ".join(known)))
    if onnx_model and not ok:
        print("cnnvideo bench engine: error: %s" % why, file=sys.stderr)
        return 2
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
        if not 0.0 <= args.score_threshold <= 1.0:
            raise HeldoutError("--score-threshold must be in 0..1, got %g" % args.score_threshold)
        if onnx_model:
            if heldout is not None:
                raise HeldoutError("--heldout is not supported for ONNX models")
            out = measure_onnx(args.model, tuple(args.frame_size), video, args.frames, args.repeat,
                               args.calibration_start, args.calibration_frames, variants, args.cache_dir or "",
                               args.split_cut, args.score_threshold)
        else:
            out = measure(args.model, args.weights, tuple(args.frame_size), video, args.frames, args.repeat,
                      args.calibration_start, args.calibration_frames, variants, args.cache_dir or "", heldout,
                      args.split_cut)
    except (EngineError, HeldoutError, ConfigError) as exc:
        print("cnnvideo bench engine: error: %s" % exc, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for label, row in out["results"].items():
            speedup = row.get("speedup_vs_torch_fp32", row.get("speedup_vs_onnxruntime_fp32", 0))
            agree = ("F1 %.3f split %.3f" % (row["f1"], row["split_f1"]) if "f1" in row
                     else "top1 %.3f" % row.get("top1_agreement", 0))
            print("%-18s whole %.4f s  stages %s  x%.2f  err %.3g  %s" % (
                label, row["whole_s"], ["%.4f" % s for s in row["stage_s"]], speedup, row.get("max_abs_err", 0),
                agree))
    return 0
