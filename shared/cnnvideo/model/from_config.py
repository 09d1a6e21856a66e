"""The model part's keys of the typed config: `model`, `weights`, `engine` (resolved when unset), `precision`,
`engine_options`, `int8`, and the `fallback` rule (model_unavailable, resolve_fallback). Without torch: the names come
from the catalog, and the zoo is imported only to look for ImageNet weights. config_validation runs check_config
with the other parts' checks."""
from __future__ import annotations

import logging
import os

from cnnvideo.artifacts import onnx_model_path
from cnnvideo.config_types import (
    CALIBRATIONS,
    ENGINE_CHOICES,
    ON_ERROR,
    PRECISIONS,
    QUANTIZE_ON,
    Config,
    ModelChoice,
)
from cnnvideo.errors import ConfigError
from cnnvideo.model import catalog

# the logger config's warnings always used (log lines read `cnnvideo.config: ...`)
log = logging.getLogger("cnnvideo.config")


def check_config(cfg: Config, check_files: bool = True) -> None:
    """The model's keys; `engine` unset becomes the only engine that runs an ONNX model file, else torch (after
    `fallback`, so it follows the model that runs). ConfigError naming the key."""
    onnx_path = onnx_model_path(cfg.model)
    if cfg.engine is None:
        cfg.engine = "onnxruntime" if onnx_path else "torch"
    if cfg.engine not in ENGINE_CHOICES:
        raise ConfigError("config key 'engine' must be one of %s, got %r" % ("|".join(ENGINE_CHOICES), cfg.engine))
    if onnx_path:  # an ONNX file or a short name of one (cnnvideo.model.onnx_graph); the weights are in the file
        if check_files and not os.path.isfile(onnx_path):
            raise ConfigError("config key 'model': ONNX file not found: %s%s" % (
                onnx_path, "" if onnx_path == cfg.model else " (`make setup` fetches %s)" % cfg.model))
        if cfg.engine != "onnxruntime":
            raise ConfigError("config key 'engine' must be onnxruntime (or unset) for an ONNX model file (%s), got %r"
                              % (cfg.model, cfg.engine))
    elif not catalog.is_known_model(cfg.model):
        known = ", ".join(catalog.MODEL_NAMES + catalog.DETECTOR_NAMES)
        raise ConfigError("config key 'model': unknown model %r (known: %s)" % (cfg.model, known))
    if cfg.weights not in ("imagenet", "random") and check_files and not os.path.isfile(cfg.weights):
        raise ConfigError("config key 'weights' must be imagenet, random or an existing file, got %r" % cfg.weights)
    if cfg.precision not in PRECISIONS:
        raise ConfigError("config key 'precision' must be one of %s, got %r" % ("|".join(PRECISIONS), cfg.precision))
    if cfg.engine_options.on_error not in ON_ERROR:
        raise ConfigError("config key 'engine_options.on_error' must be one of %s, got %r"
                          % ("|".join(ON_ERROR), cfg.engine_options.on_error))
    if cfg.engine_options.threads < 0:
        raise ConfigError("config key 'engine_options.threads' must be >= 0 (0 = the CPU cap), got %r"
                          % cfg.engine_options.threads)
    for key in ("calibration_frames", "calibration_stride"):
        if getattr(cfg.int8, key) <= 0:
            raise ConfigError("config key 'int8.%s' must be positive, got %r" % (key, getattr(cfg.int8, key)))
    if cfg.int8.calibration not in CALIBRATIONS:
        raise ConfigError("config key 'int8.calibration' must be one of %s, got %r" % ("|".join(CALIBRATIONS),
                                                                                     cfg.int8.calibration))
    if cfg.int8.quantize not in QUANTIZE_ON:
        raise ConfigError("config key 'int8.quantize' must be one of %s, got %r" % ("|".join(QUANTIZE_ON),
                                                                                  cfg.int8.quantize))
    if not 0.0 <= cfg.int8.recalibrate_below <= 1.0:
        raise ConfigError("config key 'int8.recalibrate_below' must be an F1 in 0..1 (0 = never), got %r"
                          % cfg.int8.recalibrate_below)
    if not 0.0 <= cfg.int8.fit_below <= 1.0:
        raise ConfigError("config key 'int8.fit_below' must be an F1 in 0..1 (0 = never), got %r"
                          % cfg.int8.fit_below)
    if cfg.int8.recalibrate_window < 4:
        raise ConfigError("config key 'int8.recalibrate_window' must be at least 4 checked frames, got %r"
                          % cfg.int8.recalibrate_window)
    if cfg.int8.calibration_start < -1:
        raise ConfigError("config key 'int8.calibration_start' must be >= 0 (or -1 = after the trainer's frames)")
    if (cfg.precision == "int8" and cfg.calibration_video == cfg.video
            and 0 <= cfg.int8.calibration_start < cfg.frames):
        raise ConfigError("config key 'int8.calibration_start' (%d) must not be below 'frames' (%d): int8 calibrates "
                          "on frames of the video the run does not evaluate" % (cfg.int8.calibration_start, cfg.frames))


def _imagenet_available(model: str) -> bool:
    from cnnvideo.model import zoo  # local import: the zoo pulls in torch (only for `weights: imagenet`)

    return zoo.imagenet_available(model)


def model_unavailable(model: str, weights: str) -> str:
    """Why `model` with `weights` cannot run here, offline ('' = it can): the one rule `fallback` follows.
    Unknown models, `imagenet` weights not in the torch hub cache (scripts/fetch_weights.sh), missing weight files."""
    onnx_path = onnx_model_path(model)
    if onnx_path:
        return "" if os.path.isfile(onnx_path) else "%s is not in the model cache (scripts/fetch_detector.sh)" % (
            onnx_path)
    if not catalog.is_known_model(model):
        return "model %s is unknown to this build" % model
    if weights == "imagenet" and not _imagenet_available(model):
        return "its ImageNet weights are not in the torch hub cache (scripts/fetch_weights.sh fetches mobilenet_v2's)"
    if weights not in ("imagenet", "random") and not os.path.isfile(weights):
        return "weights file %s not found" % weights
    return ""


def resolve_fallback(cfg: Config) -> Config:
    """Apply `fallback`: the first of `model`/`weights`, then each fallback entry in order, that can run here
    (model_unavailable) becomes the config's model and weights; one warning line says why when it is not the first.
    The fallback list is consumed (the config that runs names one model). None can run: the first stays, and
    validation or the weights check says why."""
    if not cfg.fallback:
        return cfg
    for i, choice in enumerate(cfg.fallback):
        if not choice.model:
            raise ConfigError("config key 'fallback[%d].model' must name a model" % i)
    choices = [ModelChoice(cfg.model, cfg.weights)] + list(cfg.fallback)
    cfg.fallback = []
    why = model_unavailable(choices[0].model, choices[0].weights)
    if not why:
        return cfg
    for choice in choices[1:]:
        if not model_unavailable(choice.model, choice.weights):
            log.warning("model %s (weights: %s) cannot run here: %s; running the fallback %s (weights: %s)",
                        choices[0].model, choices[0].weights, why, choice.model, choice.weights)
            cfg.model, cfg.weights = choice.model, choice.weights
            break
    return cfg
