"""`cnnvideo bench predict`: predicted vs actual delta bytes per cut on held-out frames (MAPE)."""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Dict, List

import numpy as np

from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.plan.predict import FEATURES, cut_meta, estimate_bytes, fit, record_video
from cnnvideo.video.frames import default_video, read_frames, synthetic_frames

log = logging.getLogger(__name__)

FIT_FRACTION = 0.6
TARGET_MAPE = 0.20


def _frames(video: str, frame_size, n: int):
    """Frames of the video, or a synthetic clip when there is no video file."""
    if video and os.path.isfile(video):
        return list(read_frames(video, tuple(frame_size), n)), video
    return list(synthetic_frames(n, tuple(frame_size), seed=1)), "synthetic"


def _mape(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Absolute percentage error per element."""
    return np.abs(pred - actual) / np.maximum(actual, 1.0)


def measure(model: str, video: str, frames: int, frame_size, fit_fraction: float = FIT_FRACTION) -> Dict[str, Any]:
    """Record, fit on the first part, and score every predictor form on the rest."""
    import torch

    torch.set_num_threads(1)
    graph = LayerGraph.from_model(build_model(model, "random", 0), tuple(frame_size))
    clip, source = _frames(video, frame_size, frames)
    t0 = time.perf_counter()
    rec = record_video(graph, clip, threshold=0.0, input_threshold=0, compress="none", measure_bytes=True)
    record_s = time.perf_counter() - t0
    rates = rec.arrays()
    sizes = rec.sizes()
    n = rates[0].shape[0]
    n_fit = max(2, int(round(n * fit_fraction)))
    if n - n_fit < 1:
        raise ValueError("need more frames: %d delta frames, %d for fitting" % (n, n_fit))
    fit_rates = {k: v[:n_fit] for k, v in rates.items()}
    header = 8  # hop header on top of the codec buffer
    actual = np.stack([sizes[k][n_fit:] for k in sorted(sizes)], axis=1) - header  # [T, K+1]
    numel, items = cut_meta(graph)
    # size model alone: estimate from the true nnz of each held-out frame
    true_mean = np.stack([rates[k][n_fit:].mean(axis=1) for k in sorted(rates)], axis=1)
    model_only = estimate_bytes(np.round(true_mean * numel), numel, items)
    constant = np.broadcast_to((np.stack([sizes[k][:n_fit] for k in sorted(sizes)], axis=1) - header).mean(axis=0),
                               actual.shape)
    forms: Dict[str, Any] = {}
    for kind in FEATURES:
        pred = fit(fit_rates, numel, items, rec.raw_means(), kind=kind).predict_bytes(rates[0][n_fit:])
        err = _mape(pred, actual)
        forms[kind] = {"per_cut": err.mean(axis=0), "overall": float(err.mean()),
                       "total": float(_mape(pred.sum(axis=1), actual.sum(axis=1)).mean()), "pred": pred}
    best = min(forms, key=lambda k: forms[k]["overall"])
    pred = forms[best]["pred"]
    cuts: List[Dict[str, Any]] = []
    for k, cut in enumerate(graph.cuts):
        cuts.append({
            "cut": k,
            "name": cut.name,
            "dense_bytes": int(cut.bytes_dense),
            "actual_mean_bytes": float(actual[:, k].mean()),
            "predicted_mean_bytes": float(pred[:, k].mean()),
            "mean_nz": float(true_mean[:, k].mean()),
            "mape": float(forms[best]["per_cut"][k]),
        })
    return {
        "model": model,
        "weights": "random (seed 0)",
        "video": source,
        "frame_size": list(frame_size),
        "frames": len(clip),
        "fit_frames": n_fit,
        "test_frames": n - n_fit,
        "threshold": 0.0,
        "features": best,
        "mape_overall": forms[best]["overall"],
        "mape_total_bytes": forms[best]["total"],
        "mape_by_features": {k: v["overall"] for k, v in forms.items()},
        "mape_size_model_only": float(_mape(model_only, actual).mean()),
        "mape_constant_baseline": float(_mape(constant, actual).mean()),
        "target_mape": TARGET_MAPE,
        "within_target": bool(forms[best]["overall"] <= TARGET_MAPE),
        "record_s": round(record_s, 3),
        "cuts": cuts,
        "note": "actual = uncompressed codec bytes of the closed-loop delta hop (compress=none); "
                "mape = mean |pred - actual| / actual over held-out frames",
    }


def run(args) -> int:
    """CLI entry: print JSON (--json) or a table."""
    result = measure(args.model, args.video or default_video(), args.frames, args.frame_size)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("%s (%s) on %s, fit %d / test %d frames, features=%s" % (
        result["model"], result["weights"], result["video"], result["fit_frames"], result["test_frames"],
        result["features"]))
    print("%4s %-16s %12s %12s %12s %7s" % ("cut", "name", "dense", "actual", "predicted", "MAPE"))
    for c in result["cuts"]:
        print("%4d %-16s %12d %12.0f %12.0f %6.1f%%" % (
            c["cut"], c["name"], c["dense_bytes"], c["actual_mean_bytes"], c["predicted_mean_bytes"], 100 * c["mape"]))
    print("overall MAPE %.1f%% (target %.0f%%); size model alone %.1f%%; constant baseline %.1f%%" % (
        100 * result["mape_overall"], 100 * TARGET_MAPE, 100 * result["mape_size_model_only"],
        100 * result["mape_constant_baseline"]))
    return 0
