"""`cnnvideo bench int8-scenes`: F1 of the int8 detector's boxes against the unsplit fp32 model, on vtest and on scenes
that calibration never saw (tools/bench/scenes.py: beach, walkers, person), before (the trainer video's calibration,
the stem rule before issue 46) and after (each camera's own first frames, camera_calibration, and the current rule),
side by side in one run, plus the method study: calibration alone, recipe alone, fewer and more frames, one
calibration for the pool (every camera's frames) instead of one per camera, per-tensor weights.

What is scored is what each replica of an int8 pool runs: with the detector, `optimal`/`replicas` put the whole
model on every worker (docs/results/two-cameras: a lossless 4-replica pool gives the boxes of the int8 model run
whole, to the last digit), so the whole int8 model is built through the workers' own code (StageFactory, and
StageFactory.with_calibration for a camera's calibration) and run on every frame of each clip. `--split` adds a
2-stage split at the cut that halves compute (cut parameters from the calibration then matter too).
Frames are read back from MJPG clips the bench writes (what a camera run would decode); F1 is over every frame of
the clip and over the frames after the calibration window (`held_out`)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np

from cnnvideo.artifacts import calibration_path, onnx_dir, onnx_model_path
from cnnvideo.master import calibration_fit
from cnnvideo.model.engines import EngineError, EngineSpec, StageFactory, ort_available
from cnnvideo.model.engines import camera_calibration as cc
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.onnx_graph import load_graph, unpack_outputs
from cnnvideo.results.detections import PERSON_SSDLITE, DetectionAgreement, decode
from cnnvideo.tools.bench import scenes
from cnnvideo.tools.bench.engine import split_cut
from cnnvideo.video.frames import read_frames

log = logging.getLogger(__name__)

MODEL = "person-ssdlite"
VIDEO_CAL = (400, 10, 16)  # today's calibration: frames 400, 410, ... of the trainer's video (vtest)


def _rows(study: bool, only: str = "") -> List[Dict[str, Any]]:
    """The rows named in `only` (a list split at ';' when it has one, else at ','; all rows when empty); ValueError
    naming a row that does not exist (names such as "camera, 8 frames" hold a comma: list them with ';')."""
    rows = _all_rows(study)
    names = [n.strip() for n in only.split(";" if ";" in only else ",") if n.strip()]
    unknown = sorted(set(names) - {r["name"] for r in rows})
    if unknown:
        raise ValueError("no such row: %s (rows: %s)" % (", ".join(unknown), "; ".join(r["name"] for r in rows)))
    return [r for r in rows if r["name"] in names] if names else rows


def _all_rows(study: bool) -> List[Dict[str, Any]]:
    """The bench's rows: name, calibration (video | camera | pool), frames, stride, stem rule, per-channel."""
    rows = [{"name": "before", "calibration": "video", "frames": 16, "stem": "frame", "weight_bits": 8,
             "what": "trainer video frames 400..550 every 10, stem rule of the frame, 8-bit weights (before issue 46)"},
            {"name": "after", "calibration": "camera", "frames": 16, "stride": 5, "stem": "model",
             "what": "each camera's own first frames (16, every 5th), stem rule of the model's input, 7-bit weights "
                     "(issue 46)"},
            {"name": "after + fit check", "calibration": "camera", "frames": 16, "stride": 5, "stem": "model",
             "fit": 0.97, "what": "the after row, then the master's check (master/calibration_fit.py): int8 against "
                                  "fp32 on the calibration's own frames; under F1 0.97 the camera takes the next "
                                  "recipe of camera_calibration.RECIPES (the default)"}]
    if study:
        rows += [
            {"name": "after, 8-bit weights", "calibration": "camera", "frames": 16, "stride": 5, "stem": "model",
             "weight_bits": 8},
            {"name": "camera calibration only", "calibration": "camera", "frames": 16, "stride": 5, "stem": "frame"},
            {"name": "recipe only", "calibration": "video", "frames": 16, "stem": "model"},
            {"name": "camera, 8 frames", "calibration": "camera", "frames": 8, "stride": 5, "stem": "model"},
            {"name": "camera, 32 frames", "calibration": "camera", "frames": 32, "stride": 2, "stem": "model"},
            {"name": "pool (all cameras' frames)", "calibration": "pool", "frames": 16, "stride": 5, "stem": "model"},
            {"name": "camera, per-tensor weights", "calibration": "camera", "frames": 16, "stride": 5,
             "stem": "model", "per_channel": False},
            {"name": "camera + quarter-resolution blocks fp32", "calibration": "camera", "frames": 16,
             "stride": 5, "stem": "quarter"},
            {"name": "camera, percentile ranges", "calibration": "camera", "frames": 16, "stride": 5,
             "stem": "model", "method": "percentile"},
            {"name": "camera, entropy ranges", "calibration": "camera", "frames": 16, "stride": 5, "stem": "model",
             "method": "entropy"},
            {"name": "camera, symmetric activations", "calibration": "camera", "frames": 16, "stride": 5,
             "stem": "model", "symmetric": True},
            {"name": "camera + predictor convolutions fp32", "calibration": "camera", "frames": 16, "stride": 5,
             "stem": "model", "heads": 1},
            {"name": "camera + predictors fp32 (with their depthwise)", "calibration": "camera", "frames": 16,
             "stride": 5, "stem": "model", "heads": 2},
            {"name": "camera + predictors fp32 + the 19x19 blocks (8-13) fp32", "calibration": "camera",
             "frames": 16, "stride": 5, "stem": "model", "heads": 2, "keep": _blocks(8, 13)},
            {"name": "camera + predictors fp32 + the 75x75-38x38 blocks (1-7) fp32", "calibration": "camera",
             "frames": 16, "stride": 5, "stem": "model", "heads": 2, "keep": _blocks(1, 7)},
            {"name": "camera + predictors fp32 + the 38x38 and 19x19 blocks (4-13) fp32", "calibration": "camera",
             "frames": 16, "stride": 5, "stem": "model", "heads": 2, "keep": _blocks(4, 13)},
            {"name": "camera + predictors fp32 + the finest head's two maps fp32", "calibration": "camera",
             "frames": 16, "stride": 5, "stem": "model", "heads": 2, "band": 2},
            {"name": "camera + every block down to the finest head's 19x19 map fp32", "calibration": "camera",
             "frames": 16, "stride": 5, "stem": "head", "heads": 2},
        ]
    return rows


def _blocks(first: int, last: int) -> tuple:
    """Name prefixes of the detector's MobileNetV2 blocks first..last (expanded_conv_<k>), for the study rows."""
    return tuple("FeatureExtractor/MobilenetV2/expanded_conv_%d/" % k for k in range(first, last + 1))


def _clips(scene_names: List[str], frames: int, frame_size, photos: str, video: str, folder: str) -> Dict[str, str]:
    """scene -> clip path (vtest's own file; the others rendered to MJPG)."""
    out = {"vtest": video}
    for name in scene_names:
        out[name] = scenes.write_clip(scenes.render(name, frames, frame_size, photos),
                                      os.path.join(folder, "%s.avi" % name))
    return out


def _read(path: str, frame_size, n: int) -> List[np.ndarray]:
    return list(read_frames(path, tuple(frame_size), limit=n, loop=False))


def _detections(stage, frames, graph, spec, frame_size) -> List[list]:
    h, w = frame_size
    return [decode(unpack_outputs(stage.run(f[np.newaxis]), graph.cuts[-1]), spec, w, h) for f in frames]


def _split_run(first, second, frames, graph, spec, frame_size) -> List[list]:
    h, w = frame_size
    return [decode(unpack_outputs(second.run(first.run(f[np.newaxis])), graph.cuts[-1]), spec, w, h) for f in frames]


def _f1(dets, ref, skip: int = 0) -> Dict[str, Any]:
    agree = DetectionAgreement(0.5)
    for a, b in list(zip(dets, ref))[skip:]:
        agree.add(a, b)
    s = agree.summary()
    return {"f1": s["f1"], "precision": s["precision"], "recall": s["recall"], "frames": s.get("frames")}


def _fit(cal, base, graph, spec, below: float) -> None:
    """The master's recipe choice on `cal` (calibration_fit.choose), scored as the master scores it
    (calibration_fit.scorer): int8's boxes against fp32's on the calibration's own frames."""
    fp32 = StageFactory(graph, EngineSpec("onnxruntime", "fp32", 1, "stop"), base.cache_dir, base.key)
    calibration_fit.choose(cal, calibration_fit.scorer(base, fp32.stage(0, graph.num_segments), graph, spec, cal),
                           below)


def _camera_calibration(graph, key, frames, count, stride, source):
    sample = cc.sample_frames([(f, i / 25.0) for i, f in enumerate(frames)], count, stride, source)
    return cc.measure(graph, key, sample)


def measure(frame_size=(480, 720), frames: int = 100, scene_names=("beach", "walkers", "person"),
            video: str = "media/vtest.avi", photos: str = "media/photos", study: bool = True, split: bool = False,
            cache_dir: str = "", score_threshold: float = 0.5, rows: str = "") -> Dict[str, Any]:
    import onnxruntime

    from cnnvideo.model.zoo import sha256_of

    path = onnx_model_path(MODEL)
    if not path or not os.path.isfile(path):
        raise FileNotFoundError("the person detector is not in the model cache (scripts/fetch_detector.sh)")
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="cnnvideo-bench-int8-scenes-")
    folder = os.path.join(cache_dir, "scenes")
    graph = load_graph(path, frame_size)
    k = graph.num_segments
    spec = dataclasses.replace(PERSON_SSDLITE, score_threshold=float(score_threshold))
    key = "%s %dx%d weights %s" % (MODEL, frame_size[0], frame_size[1], graph.digest)
    clips = _clips(list(scene_names), frames, frame_size, photos, video, folder)
    clip_frames = {name: _read(p, frame_size, frames) for name, p in clips.items()}
    fp32 = StageFactory(graph, EngineSpec("onnxruntime", "fp32", 1, "stop"), onnx_dir(cache_dir), key)
    ref = {name: _detections(fp32.stage(0, k), fr, graph, spec, frame_size) for name, fr in clip_frames.items()}
    cut = split_cut(graph) if split else None
    video_spec = CalibrationSpec(video, VIDEO_CAL[2], VIDEO_CAL[0], VIDEO_CAL[1])

    def video_cal():
        return load_or_measure(graph, video_spec, calibration_path(cache_dir, MODEL, frame_size), key)

    results = []
    for row in _rows(study, rows):
        t0 = time.time()
        base = StageFactory(graph, EngineSpec("onnxruntime", "int8", 1, "stop"), onnx_dir(cache_dir), key, video_cal)
        base.stem, base.per_channel = row["stem"], row.get("per_channel", True)
        base.weight_bits = row.get("weight_bits", base.weight_bits)
        base.heads, base.band, base.method = row.get("heads", 0), row.get("band", 0), row.get("method", "minmax")
        base.symmetric, base.keep = row.get("symmetric", False), tuple(row.get("keep", ()))
        out = dict(row, scenes={}, calibrations={})
        pool_cal = None
        if row["calibration"] == "pool":
            per = max(1, row["frames"] // len(clip_frames))
            mixed = [f for fr in clip_frames.values() for f in fr[:per * row["stride"]:row["stride"]]]
            pool_cal = _camera_calibration(graph, key, mixed, len(mixed), 1, "+".join(clip_frames))
        for name, fr in clip_frames.items():
            if row["calibration"] == "video":
                factory, cal_info = base, {"source": "video", "video": video, "start": VIDEO_CAL[0],
                                           "stride": VIDEO_CAL[1], "count": VIDEO_CAL[2]}
                window = 0
            else:
                cal = pool_cal or _camera_calibration(graph, key, fr, row["frames"], row["stride"], clips[name])
                if row.get("fit"):
                    _fit(cal, base, graph, spec, row["fit"])
                factory, cal_info = base.with_calibration(cal), cal.report()
                window = 0 if pool_cal else cal.indices[-1] + 1
            t1 = time.time()
            stage = factory.stage(0, k)
            build = time.time() - t1
            dets = _detections(stage, fr, graph, spec, frame_size)
            t2 = time.time()
            for f in fr[:10]:
                stage.run(f[np.newaxis])
            scene = {"all": _f1(dets, ref[name]), "held_out": _f1(dets, ref[name], window), "held_out_from": window,
                     "build_s": round(build, 1), "run_ms": round((time.time() - t2) * 100, 1)}
            if split:
                scene["split"] = _f1(_split_run(factory.stage(0, cut), factory.stage(cut, k), fr, graph, spec,
                                                frame_size), ref[name])
            out["scenes"][name] = scene
            out["calibrations"][name] = {kk: v for kk, v in cal_info.items() if kk != "quantized_cuts"}
        out["min_f1"] = min(s["all"]["f1"] for s in out["scenes"].values())
        out["min_held_out_f1"] = min(s["held_out"]["f1"] for s in out["scenes"].values())
        out["seconds"] = round(time.time() - t0, 1)
        log.info("%s: %s", row["name"], ", ".join("%s %.3f" % (n, s["all"]["f1"]) for n, s in out["scenes"].items()))
        results.append(out)
    return {"model": MODEL, "weights": "trained person-ssdlite, file sha256 %s" % sha256_of(path)[:16],
            "frame_size": list(frame_size), "engine": "onnxruntime %s int8 (whole model, as each pool replica runs "
                                                      "it)" % onnxruntime.__version__, "threads": 1,
            "score_threshold": score_threshold, "iou": 0.5, "frames_per_scene": frames,
            "reference": "unsplit ORT fp32", "clips": clips, "split_cut": cut,
            "reference_boxes_per_frame": {n: round(float(np.mean([len(d) for d in r])), 2) for n, r in ref.items()},
            "rows": results}


def table(out: Dict[str, Any]) -> str:
    names = list(out["rows"][0]["scenes"])
    lines = ["| row | %s | min |" % " | ".join(names), "|---|%s---|" % ("---|" * len(names))]
    for row in out["rows"]:
        cells = ["%.3f" % row["scenes"][n]["all"]["f1"] for n in names]
        lines.append("| %s | %s | %.3f |" % (row["name"], " | ".join(cells), row["min_f1"]))
    return "\n".join(lines)


def run(args) -> int:
    """Entry point of `cnnvideo bench int8-scenes`."""
    ok, why = ort_available()
    if not ok:
        print("cnnvideo bench int8-scenes: error: %s" % why, file=sys.stderr)
        return 2
    scenes = [s for s in args.scenes.split(",") if s]
    try:
        out = measure(tuple(args.frame_size), args.frames, scenes, args.video, args.photos, not args.no_study,
                      args.split, args.cache_dir or "", args.score_threshold, args.rows)
    except (EngineError, FileNotFoundError, ValueError) as exc:
        print("cnnvideo bench int8-scenes: error: %s" % exc, file=sys.stderr)
        return 2
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "int8-scenes.json"), "w") as fh:
            json.dump(out, fh, indent=1)
    print(json.dumps(out, indent=1) if args.json else table(out))
    return 0
