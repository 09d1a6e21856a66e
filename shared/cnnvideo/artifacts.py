"""Where cached artifacts live: the trainer's fitted predictors, each worker's profile, the ONNX stage files and
int8 calibrations, and the trained models that are not torchvision's (the person detector).

One owner for every name: the trainer writes `predictor_path(cfg)` and `cnnvideo plan` reads it; a worker
writes and reads `profile_path(cfg, host)`; the ONNX engine keeps each stage in `onnx_stage_path(onnx_dir(...),
...)` and its calibration in `calibration_path(...)`. Names are under `cache_dir`; writes are atomic (tmp +
rename).
`models_dir()` is the user's model cache (not under `cache_dir`: scripts/fetch_detector.sh fills it with no config).
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any, Dict, Optional

# bump when what a predictor file holds (or how it is fitted) changes (3: p_unchanged; the detector's backbone cuts)
PREDICTOR_FORMAT = 3
PROFILE_FORMAT = 10  # 3: profiles keep their torch pass (`reference`, for rescale); 4: engine stages timed >= 1 s;
#   5: an engine profile's reference is its own stages (`reference_bounds`); 6: keyed by worker and CPU cap;
#   7: an engine profile splits its whole-model stage by ORT's per-node profile; 8: each node at its fastest run
#   (a CFS throttle's stall no longer lands in one segment); 9: an ONNX-file model's stage split by its node names
#   too (the detector's int8 profile was four chunks, 1.6x its whole stage); 10: the profiler's per-event cost is
#   taken out before the split


def file_id(path: str) -> str:
    """Identity of a file for cache keys: absolute path, size and mtime (a stream, device or pipeline: its name)."""
    from cnnvideo.video.sources import kind_of

    if kind_of(path) != "file":
        return path
    st = os.stat(path)
    return "%s:%d:%d" % (os.path.abspath(path), st.st_size, int(st.st_mtime))


def onnx_model_path(model: str) -> Optional[str]:
    """The ONNX file a config's `model:` names (a path ending in .onnx, or a short name of a model in the model
    cache such as `person-ssdlite`), or None for a zoo (torchvision) model. The one rule for "is it an ONNX model"."""
    if not isinstance(model, str):
        return None
    if model.lower().endswith(".onnx"):
        return model
    named = NAMED_ONNX_MODELS.get(model)
    return os.path.join(models_dir(), named) if named else None


def model_tag(model: str) -> str:
    """The model's name in cache file names: the zoo name or short name, or for an ONNX file
    `<stem>-onnx-<sha8 of its path>`."""
    if not model.lower().endswith(".onnx"):
        return model
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(model)[:-5])
    return "%s-onnx-%s" % (stem, hashlib.sha1(os.path.abspath(model).encode()).hexdigest()[:8])


def training_video(cfg: Any) -> str:
    """The video the trainer plays: `trainer.video`, else the run's video."""
    return cfg.trainer.video or cfg.video


def trains_on_master_frames(cfg: Any) -> bool:
    """True if the trainer fits on the first `trainer.frames` frames the master captured (sent with PutFrames)
    instead of opening a video itself: the run's video is live (a stream, device or pipeline: opened once, by the
    master) and no `trainer.video` is given."""
    from cnnvideo.video.sources import kind_of

    return not cfg.trainer.video and kind_of(cfg.video) != "file"


def predictor_key(cfg: Any) -> Dict[str, Any]:
    """Everything the fitted predictors depend on."""
    weights = cfg.weights if cfg.weights in ("imagenet", "random") else file_id(cfg.weights)
    path = onnx_model_path(cfg.model)
    model = file_id(path) if path else cfg.model  # an ONNX file: its identity
    key = {
        "model": model, "weights": weights, "seed": cfg.seed, "video": file_id(training_video(cfg)),
        "frame_size": list(cfg.frame_size), "frames": cfg.trainer.frames, "fit_fraction": cfg.trainer.fit_fraction,
        "input_threshold": cfg.delta.input_threshold, "threshold": cfg.delta.threshold, "fp16": cfg.delta.fp16,
        "format": PREDICTOR_FORMAT,
    }
    if getattr(cfg, "precision", "fp32") == "int8":  # inner cuts travel as uint8 values of the calibrated model
        key.update(precision="int8", calibration=[cfg.calibration_video and file_id(cfg.calibration_video),
                                                  cfg.calibration_start, cfg.int8.calibration_stride,
                                                  cfg.int8.calibration_frames])
    return key


def predictor_path(cfg: Any) -> str:
    """predictors/<model>-<sha16 of predictor_key>.npz under the cache folder."""
    digest = hashlib.sha1(json.dumps(predictor_key(cfg), sort_keys=True).encode()).hexdigest()[:16]
    return cfg.cache_path("predictors", "%s-%s.npz" % (model_tag(cfg.model), digest))


def cap_tag(quota: float, period: float) -> str:
    """The CPU cap in a profile's key: `c<cores>` from the CFS (quota, period) the worker sees (`c0.4` for 40 ms
    per 100 ms), `cmax` when uncapped."""
    return "c%.3g" % (quota / period) if quota > 0 and period > 0 else "cmax"


def safe_name(name: str) -> str:
    """`name` as a file name: every character but letters, digits and -_. becomes _."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def profile_path(cfg: Any, host: str, threads: int, engine: str = "torch-fp32", worker: int = 0,
                 cap: Any = (0.0, 0.0), engine_threads: int = 0) -> str:
    """costs/<...>.npz: one worker profile per model, frame size, host, worker id (two workers on one host each
    measure their own), CPU cap (the CFS (quota, period) the worker sees: a profile made at another cap is
    another file), torch threads, engine threads, iterations, hop codec options and engine-precision (the one
    that really runs)."""
    key = "%s-%dx%d-%s-w%d-%s-t%d-e%d-i%d-d%g-%g%s" % (
        model_tag(cfg.model), cfg.frame_size[0], cfg.frame_size[1], host, worker, cap_tag(*cap), threads,
        engine_threads, cfg.profile_iters, cfg.delta.threshold, cfg.delta.input_threshold,
        "-fp16" if cfg.delta.fp16 else "")
    key += "-p%d-%s" % (PROFILE_FORMAT, engine)
    return cfg.cache_path("costs", safe_name(key) + ".npz")


def overhead_path(cfg: Any, device: str) -> str:
    """overhead/<model>-<H>x<W>-<engine>-<precision>-<sha16 of the device tag>.json: the per-frame overhead runs of
    this model measured on workers of that device (cnnvideo.plan.overhead)."""
    digest = hashlib.sha1(device.encode()).hexdigest()[:16]
    name = "%s-%dx%d-%s-%s-%s.json" % (model_tag(cfg.model), cfg.frame_size[0], cfg.frame_size[1],
                                       cfg.engine or "default", cfg.precision, digest)
    return cfg.cache_path("overhead", safe_name(name))


def onnx_dir(cache_root: str) -> str:
    """Folder of the ONNX engine's stage files under a cache root (`cfg.cache_dir` or a bench's scratch folder)."""
    return os.path.join(os.path.expanduser(cache_root), "onnx")


def served_stages_dir(cache_root: str) -> str:
    """Folder of the stage files a master builds for its workers (master.stage_push), apart from onnx_dir: a worker
    sharing the cache folder (`cnnvideo local`, a compose volume) still takes its stage from the master's push, and
    the master's builds never stand in for a worker's own."""
    return os.path.join(os.path.expanduser(cache_root), "onnx-served")


def onnx_stage_path(folder: str, start: int, end: int, precision: str, key: str) -> str:
    """<start>-<end>-<precision>-<sha16 of the stage key>.onnx in `folder` (see ort_engine.stage_key)."""
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return os.path.join(folder, "%d-%d-%s-%s.onnx" % (start, end, precision, digest))


def onnx_work_dir(folder: str) -> str:
    """Scratch folder for the intermediate files of int8 quantisation, next to the stage files."""
    return os.path.join(folder, "tmp")


def calibration_path(cache_root: str, model: str, frame_size) -> str:
    """calibration/<model>-<H>x<W>: the int8 calibration statistics of a model at a frame size (the file holds
    the full key and is checked on load)."""
    return os.path.join(os.path.expanduser(cache_root), "calibration",
                        "%s-%dx%d" % (model_tag(model), frame_size[0], frame_size[1]))


def calibration_file(calibration_base: str, digest: str) -> str:
    """<calibration_path(...)>-<digest>.npz: one calibration (model key and frames, hashed) of that model and size."""
    return "%s-%s.npz" % (calibration_base, digest)


def camera_calibration_file(cache_root: str, model: str, frame_size, camera: str, source: str) -> str:
    """<calibration_path(...)>-camera-<sha16 of camera name and source>.npz: the int8 calibration a master made on
    that camera's own frames (camera_calibration), kept and reused by its later runs."""
    digest = hashlib.sha1(("%s|%s" % (camera, source)).encode()).hexdigest()[:16]
    return "%s-camera-%s.npz" % (calibration_path(cache_root, model, frame_size), digest)


def models_dir() -> str:
    """The user's model cache: $CNNVIDEO_MODELS, else ~/.cache/cnnvideo/models (scripts/fetch_detector.sh places
    the person detector there; the images set CNNVIDEO_MODELS to their copy)."""
    return os.path.expanduser(os.environ.get("CNNVIDEO_MODELS") or "~/.cache/cnnvideo/models")


PERSON_DETECTOR = "person-ssdlite.onnx"  # SSDLite MobileNetV2, one class (1 = person), ONNX: scripts/fetch_detector.sh
NAMED_ONNX_MODELS = {"person-ssdlite": PERSON_DETECTOR}  # short config names of models in models_dir()


def person_detector_path() -> str:
    """models_dir()/person-ssdlite.onnx: the trained person detector (input image_tensor:0, uint8 NHWC RGB)."""
    return os.path.join(models_dir(), PERSON_DETECTOR)


def atomic_tmp(path: str) -> str:
    """A temporary name next to `path` (same folder, same extension) to write before os.replace, unique to the call:
    containers sharing a cache volume often have the same PIDs, and two workers storing the same stage at once with
    one PID-named file had one's replace find the file gone (a worker crashed at start)."""
    root, ext = os.path.splitext(path)
    return "%s.%d-%s.tmp%s" % (root, os.getpid(), uuid.uuid4().hex[:12], ext)
