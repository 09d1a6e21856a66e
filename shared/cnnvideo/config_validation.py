"""Option validation: the one module that checks a config's values beyond their types (ranges, choices, rules
across keys, files that must exist, the `cpus` role names, the live view's token, the `events:` and `cameras:`
sections) and applies the model `fallback` rule and a single camera's settings (config_cameras.apply_one_camera).
Every failure is one ConfigError line naming the key.

Unknown keys and wrong types are refused earlier, while config builds the dataclasses from YAML (config._build);
an old and a new key name set at once while config_upgrade renames. Layout: this module imports the dataclasses
from config_types and the `cpus` spellings from config_upgrade; config's loaders import this module. It cannot
import config itself (config imports it: tests/unit/test_layout.py counts lazy imports too), which is why the
dataclasses live in config_types and not in config. Heavy packages (torch via the zoo, the events pipeline) are
imported inside the functions that need them.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Dict, Optional, Tuple

from cnnvideo.config_cameras import apply_one_camera
from cnnvideo.config_types import (
    CALIBRATIONS,
    CAMERA_NAME,
    CAMERA_NAME_RULE,
    CPUS_ROLES,
    ENGINE_CHOICES,
    MODES,
    ON_ERROR,
    PRECISIONS,
    Camera,
    Config,
    CostModel,
    Events,
    ModelChoice,
    Source,
)
from cnnvideo.config_upgrade import cpus_role_name
from cnnvideo.errors import ConfigError

# the logger config's warnings always used (log lines read `cnnvideo.config: ...`): the module split changed no output
log = logging.getLogger("cnnvideo.config")


def _check_fixed_groups(cfg) -> None:
    """ConfigError naming the key when scheduler fixed's pool plan (`cuts` and `groups`) does not fit the cluster:
    a worker named twice or not in it, a stage with no worker, cuts that are not one per stage boundary."""
    groups, cuts = cfg.scheduler_options.get("groups"), cfg.scheduler_options.get("cuts")
    if (not isinstance(groups, (list, tuple)) or not groups
            or not all(isinstance(g, (list, tuple)) for g in groups)
            or not all(isinstance(w, int) and not isinstance(w, bool) for g in groups for w in g)):
        raise ConfigError("config key 'scheduler_options.groups' must list the workers of each stage, e.g. "
                          "[[0, 1], [2]], got %r" % (groups,))
    named = [w for g in groups for w in g]
    for s, g in enumerate(groups):
        if not g:
            raise ConfigError("config key 'scheduler_options.groups' leaves stage %d with no worker" % s)
    bad = [w for w in named if not 0 <= w < cfg.n_workers]
    if bad:
        raise ConfigError("config key 'scheduler_options.groups' names worker %d, not one of the %d workers"
                          % (bad[0], cfg.n_workers))
    twice = [w for w in named if named.count(w) > 1]
    if twice:
        raise ConfigError("config key 'scheduler_options.groups' names worker %d twice" % twice[0])
    if cuts is None and len(groups) == 1:
        return
    if (not isinstance(cuts, (list, tuple)) or len(cuts) != len(groups) + 1
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cuts)
            or cuts[0] != 0 or any(b <= a for a, b in zip(cuts, cuts[1:]))):
        raise ConfigError("config key 'scheduler_options.cuts' must list %d increasing cut indices from 0 to the "
                          "model's last cut (one more than the stages in groups), got %r" % (len(groups) + 1, cuts))


def validate(cfg: Config, check_files: bool = True) -> Config:
    """Check values that types alone cannot; raise ConfigError naming the key. `cameras:` first (each camera's own
    keys named as `cameras.<name>.<key>`); a single camera is then applied to the top level, checked as the rest."""
    from cnnvideo.model import catalog as models  # the names only: the zoo would pull in torch
    from cnnvideo.plan import schedulers

    _validate_cameras(cfg, check_files)

    if not cfg.cluster.workers:
        raise ConfigError("config key 'cluster.workers' must list at least one worker address")
    for i, addr in enumerate(cfg.cluster.workers + [cfg.cluster.trainer]):
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            key = "cluster.trainer" if i == len(cfg.cluster.workers) else "cluster.workers[%d]" % i
            raise ConfigError("config key '%s' must be host:port, got %r" % (key, addr))
    from cnnvideo.artifacts import onnx_model_path

    onnx_path = onnx_model_path(cfg.model)
    if cfg.engine is None:  # unset: the only engine that runs an ONNX model file, else torch; resolved after
        cfg.engine = "onnxruntime" if onnx_path else "torch"  # `fallback`, so it follows the model that runs
    if cfg.engine not in ENGINE_CHOICES:
        raise ConfigError("config key 'engine' must be one of %s, got %r" % ("|".join(ENGINE_CHOICES), cfg.engine))
    if onnx_path:  # an ONNX file or a short name of one (cnnvideo.model.onnx_graph); the weights are in the file
        if check_files and not os.path.isfile(onnx_path):
            raise ConfigError("config key 'model': ONNX file not found: %s%s" % (
                onnx_path, "" if onnx_path == cfg.model else " (`make setup` fetches %s)" % cfg.model))
        if cfg.engine != "onnxruntime":
            raise ConfigError("config key 'engine' must be onnxruntime (or unset) for an ONNX model file (%s), got %r"
                              % (cfg.model, cfg.engine))
    elif not models.is_known_model(cfg.model):
        known = ", ".join(models.MODEL_NAMES + models.DETECTOR_NAMES)
        raise ConfigError("config key 'model': unknown model %r (known: %s)" % (cfg.model, known))
    from cnnvideo.results.detections import check_settings, is_detector

    # an ONNX file holds its weights, so `weights` is a classifier setting there; a torchvision detector takes it
    check_settings(cfg.model, is_detector(cfg.model), cfg.detect,
                   classifier={"weights": cfg.weights} if onnx_path else None)
    if cfg.weights not in ("imagenet", "random") and check_files and not os.path.isfile(cfg.weights):
        raise ConfigError("config key 'weights' must be imagenet, random or an existing file, got %r" % cfg.weights)
    from cnnvideo.video.sources import kind_of

    if check_files and len(cfg.cameras) < 2 and kind_of(cfg.video) == "file" and not os.path.isfile(cfg.video):
        raise ConfigError("config key 'video': file not found: %s" % cfg.video)  # several cameras: theirs, above
    if (cfg.trainer.video is not None and check_files and kind_of(cfg.trainer.video) == "file"
            and not os.path.isfile(cfg.trainer.video)):
        raise ConfigError("config key 'trainer.video': file not found: %s" % cfg.trainer.video)
    if any(v <= 0 for v in cfg.frame_size):
        raise ConfigError("config key 'frame_size' must be two positive integers, got %r" % (cfg.frame_size,))
    if cfg.mode not in MODES:
        raise ConfigError("config key 'mode' must be one of %s, got %r" % ("|".join(MODES), cfg.mode))
    if cfg.scheduler not in schedulers.SCHEDULERS:
        raise ConfigError("config key 'scheduler' must be one of %s, got %r" % ("|".join(schedulers.SCHEDULERS),
                                                                             cfg.scheduler))
    for key in cfg.scheduler_options:
        try:
            schedulers.check_options(cfg.scheduler, {key: None})
        except ValueError:
            raise ConfigError("config key 'scheduler_options.%s' is not an option of scheduler %s (options: %s)"
                              % (key, cfg.scheduler, ", ".join(schedulers.OPTIONS[cfg.scheduler]) or "none")) from None
    if cfg.scheduler == "fixed" and "groups" in cfg.scheduler_options:
        _check_fixed_groups(cfg)
    elif cfg.scheduler == "fixed":
        cuts = cfg.scheduler_options.get("cuts")
        if (not isinstance(cuts, (list, tuple)) or len(cuts) != cfg.n_workers + 1
                or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cuts)
                or cuts[0] != 0 or any(b < a for a, b in zip(cuts, cuts[1:]))):
            raise ConfigError("config key 'scheduler_options.cuts' must list %d non-decreasing cut indices from 0 to "
                              "the model's last cut for scheduler fixed (one more than the workers), got %r"
                              % (cfg.n_workers + 1, cuts))
    if cfg.frames < 0:
        raise ConfigError("config key 'frames' must be >= 0 (0 = until a signal), got %r" % cfg.frames)
    if not 0 < cfg.check_share <= 1:
        raise ConfigError("config key 'check_share' must be in (0, 1], got %r" % cfg.check_share)
    _check_source(cfg.source, "source.")
    _choice(cfg.local.links, ("auto", "tc", "paced", "none"), "local.links")
    _choice(cfg.local.cpus, ("auto", "cgroup", "best-effort", "none"), "local.cpus")
    if not 0 <= cfg.live_view.port < 65536:
        raise ConfigError("config key 'live_view.port' must be 0 (off) or a TCP port, got %r" % cfg.live_view.port)
    offline = cfg.camera_list() if cfg.source.mode == "offline" else []  # the top level's video, or each camera's
    for cam in offline:
        if kind_of(cam.video) != "file" or cam.source.realtime:
            raise ConfigError("config key 'source.mode': offline needs a video file read as fast as asked "
                              "(source.realtime: false), got %r%s"
                              % (cam.video, " (camera %s)" % cam.name if len(cfg.cameras) > 1 else ""))
    if cfg.precision not in PRECISIONS:
        raise ConfigError("config key 'precision' must be one of %s, got %r" % ("|".join(PRECISIONS), cfg.precision))
    if cfg.engine_options.on_error not in ON_ERROR:
        raise ConfigError("config key 'engine_options.on_error' must be one of %s, got %r"
                          % ("|".join(ON_ERROR), cfg.engine_options.on_error))
    if cfg.engine_options.threads < 0:
        raise ConfigError("config key 'engine_options.threads' must be >= 0 (0 = the CPU cap), got %r"
                          % cfg.engine_options.threads)
    _positive(cfg.int8.calibration_frames, "int8.calibration_frames")
    _positive(cfg.int8.calibration_stride, "int8.calibration_stride")
    if cfg.int8.calibration not in CALIBRATIONS:
        raise ConfigError("config key 'int8.calibration' must be one of %s, got %r" % ("|".join(CALIBRATIONS),
                                                                                     cfg.int8.calibration))
    if cfg.int8.calibration_start < -1:
        raise ConfigError("config key 'int8.calibration_start' must be >= 0 (or -1 = after the trainer's frames)")
    if (cfg.precision == "int8" and cfg.calibration_video == cfg.video
            and 0 <= cfg.int8.calibration_start < cfg.frames):
        raise ConfigError("config key 'int8.calibration_start' (%d) must not be below 'frames' (%d): int8 calibrates "
                          "on frames of the video the run does not evaluate" % (cfg.int8.calibration_start, cfg.frames))
    _positive(cfg.group_size, "group_size")
    _positive(cfg.trainer.frames, "trainer.frames")
    _positive(cfg.profile_iters, "profile_iters")
    if cfg.in_flight < 0:
        raise ConfigError("config key 'in_flight' must be >= 0 (0 = unlimited), got %r" % cfg.in_flight)
    if len(cfg.bandwidth) not in (1, cfg.n_workers) or any(b <= 0 for b in cfg.bandwidth):
        raise ConfigError(
            "config key 'bandwidth' must list 1 or %d positive MB/s values (one per hop), got %r"
            % (cfg.n_workers, cfg.bandwidth)
        )
    if not 0 <= cfg.delta.input_threshold <= 255:
        raise ConfigError("config key 'delta.input_threshold' must be 0..255, got %r" % cfg.delta.input_threshold)
    for f in dataclasses.fields(CostModel):
        value = getattr(cfg.cost_model, f.name)
        if not value >= 0:
            raise ConfigError("config key 'cost_model.%s' must be >= 0, got %r" % (f.name, value))
    if cfg.delta.threshold < 0:
        raise ConfigError("config key 'delta.threshold' must be >= 0, got %r" % cfg.delta.threshold)
    if not 0 < cfg.trainer.fit_fraction <= 1:
        raise ConfigError("config key 'trainer.fit_fraction' must be in (0, 1], got %r" % cfg.trainer.fit_fraction)
    if cfg.limits.max_message_mib <= 0:
        raise ConfigError("config key 'limits.max_message_mib' must be > 0, got %r" % cfg.limits.max_message_mib)
    if cfg.tls.enabled and not cfg.tls.dir and not (cfg.tls.ca and cfg.tls.cert and cfg.tls.key):
        raise ConfigError("config key 'tls' is enabled but names neither 'tls.dir' nor all of 'tls.ca', "
                          "'tls.cert', 'tls.key'")
    if cfg.reliability.max_restarts < 0 or cfg.reliability.retries < 0:
        key = "max_restarts" if cfg.reliability.max_restarts < 0 else "retries"
        raise ConfigError("config key 'reliability.%s' must be >= 0" % key)
    if cfg.reliability.peer_wait_s <= 0:
        raise ConfigError("config key 'reliability.peer_wait_s' must be > 0, got %r" % cfg.reliability.peer_wait_s)
    cfg.cpus = _canonical_cpus(cfg.cpus, cfg.n_workers)
    for role, share in cfg.cpus.items():
        if share <= 0:
            raise ConfigError("config key 'cpus.%s' must be > 0, got %r" % (role, share))
    _validate_live_view(cfg)
    _validate_events(cfg, check_files)
    return cfg


def _check_source(src: Source, prefix: str) -> None:
    """The values of a `source:` section (the top level's, or a camera's keys over the defaults)."""
    _choice(src.drop, ("newest", "oldest", "none"), prefix + "drop")
    _choice(src.mode, ("offline", "live"), prefix + "mode")
    _positive(src.queue, prefix + "queue")
    if src.fps < 0 or src.reopen_s <= 0:
        key = prefix + ("fps" if src.fps < 0 else "reopen_s")
        raise ConfigError("config key '%s' must be %s" % (key, ">= 0" if key.endswith("fps") else "> 0"))


def _default(name: str):
    """The default of a top-level key."""
    return {f.name: f for f in dataclasses.fields(Config)}[name].default


def _validate_cameras(cfg: Config, check_files: bool) -> None:
    """The `cameras:` section: safe names, each camera's own keys (a `video`, a weight > 0, its overrides checked as
    the top-level keys they override, its zones inside its frame), no clash with a top-level `video` or
    `events.camera`; then a single camera is applied to the top level (apply_one_camera). No section: nothing."""
    if not cfg.cameras:
        return
    from cnnvideo.video.sources import kind_of

    lowered: Dict[str, str] = {}
    for name, cam in cfg.cameras.items():
        key = "cameras.%s" % name
        if not CAMERA_NAME.match(name):
            raise ConfigError("config key '%s': not a safe camera name (%s; it goes into MQTT topics, file names "
                              "and URLs)" % (key, CAMERA_NAME_RULE))
        if name.lower() in lowered:
            raise ConfigError("config key '%s': the same name as 'cameras.%s' but for case (their files would "
                              "clash)" % (key, lowered[name.lower()]))
        lowered[name.lower()] = name
        _check_camera(cam, key, check_files, kind_of)
    names = list(cfg.cameras)
    only = cfg.cameras[names[0]] if len(names) == 1 else None
    if cfg.video != _default("video") and (only is None or cfg.video != only.video):
        raise ConfigError("config keys 'video' and 'cameras' are both set: with cameras each camera names its own "
                          "video; leave out the top-level video (or list it as a camera)")
    if cfg.events.camera != Events().camera and (only is None or cfg.events.camera != names[0]):
        raise ConfigError("config keys 'events.camera' and 'cameras' are both set: with cameras each camera's name "
                          "is its name in events and MQTT topics; leave out events.camera")
    for name, cam in cfg.cameras.items():
        if only is None and cam.frame_size is not None and tuple(cam.frame_size) != tuple(cfg.frame_size):
            raise ConfigError("config key 'cameras.%s.frame_size': %s differs from frame_size %s; with several cameras "
                              "every camera runs at the cluster's frame_size (the workers build their stages for "
                              "one size, and each camera's frames are resized to it): leave it out"
                              % (name, list(cam.frame_size), list(cfg.frame_size)))
    for cam in cfg.camera_list():  # zones inherited from events.zones must fit a camera's own frame size too
        own = cfg.cameras[cam.name]
        if any(v <= 0 for v in cam.frame_size):
            continue  # a bad top-level frame_size: its own check names it
        if cam.zones and (own.zones is not None or own.frame_size is not None):
            _check_zones(cam.zones, cam.frame_size, "cameras.%s.zones" % cam.name if own.zones is not None
                         else "events.zones", "" if own.zones is not None else " (camera %s)" % cam.name)
    if only is not None:
        apply_one_camera(cfg)


def _check_camera(cam: Camera, key: str, check_files: bool, kind_of) -> None:
    """One camera's own keys, each error naming `cameras.<name>.<key>`."""
    if not cam.video:
        raise ConfigError("config key '%s.video': required (the camera's source: a file, stream URL, device or "
                          "GStreamer pipeline)" % key)
    if check_files and kind_of(cam.video) == "file" and not os.path.isfile(cam.video):
        raise ConfigError("config key '%s.video': file not found: %s" % (key, cam.video))
    if not cam.weight > 0:
        raise ConfigError("config key '%s.weight' must be > 0 (the camera's share of the pool, relative to the "
                          "other cameras' weights), got %r" % (key, cam.weight))
    if cam.frame_size is not None and any(v <= 0 for v in cam.frame_size):
        raise ConfigError("config key '%s.frame_size' must be two positive integers, got %r"
                          % (key, list(cam.frame_size)))
    if cam.check_share is not None and not 0 < cam.check_share <= 1:
        raise ConfigError("config key '%s.check_share' must be in (0, 1], got %r" % (key, cam.check_share))
    _check_source(Source(**cam.source), key + ".source.")  # its keys over the defaults: an error is one of its own


def _check_zones(zones: Dict, frame_size: Tuple[int, int], key: str, where: str) -> None:
    """Zones (events.zones' shape) inside a camera's frame; the events library's parser names the zone."""
    from cnnvideo.events import EventsConfigError
    from cnnvideo.events.zones import parse_zones

    try:
        parse_zones(zones, frame_size, key)
    except EventsConfigError as exc:
        zkey, _, why = str(exc).partition(": ")
        raise ConfigError("config key '%s': %s%s" % (zkey, why, where)) from None


def _canonical_cpus(cpus: Dict[str, float], n_workers: int) -> Dict[str, float]:
    """`cpus` with canonical role names (master, trainer, worker<i>, workers); old spellings (w<i>, worker:
    config_upgrade.cpus_role_name) are renamed with a warning; an unknown role, a worker index outside the chain
    or one role named twice is an error naming the key."""
    out: Dict[str, float] = {}
    for key, share in cpus.items():
        new = cpus_role_name(key)
        m = re.match(r"^worker(\d+)$", new)
        if m and int(m.group(1)) >= n_workers:
            raise ConfigError("config key 'cpus.%s': no such worker (the chain has %d: worker0..worker%d)"
                              % (key, n_workers, n_workers - 1))
        if not m and new not in CPUS_ROLES:
            raise ConfigError("config key 'cpus.%s' is not a role (known: master, trainer, worker0..worker%d, "
                              "workers = every worker without its own key)" % (key, n_workers - 1))
        if new in out:
            raise ConfigError("config key 'cpus.%s' names the same role as 'cpus.%s'" % (key, new))
        if new != key:
            log.warning("config key 'cpus.%s' is an old spelling: use 'cpus.%s'", key, new)
        out[new] = share
    return out


def _imagenet_available(model: str) -> bool:
    from cnnvideo.model import zoo  # local import: the zoo pulls in torch (only for `weights: imagenet`)

    return zoo.imagenet_available(model)


def model_unavailable(model: str, weights: str) -> str:
    """Why `model` with `weights` cannot run here, offline ('' = it can): the one rule `fallback` follows.
    Unknown models, `imagenet` weights not in the torch hub cache (scripts/fetch_weights.sh), missing weight files."""
    from cnnvideo.artifacts import onnx_model_path
    from cnnvideo.model.catalog import is_known_model

    onnx_path = onnx_model_path(model)
    if onnx_path:
        return "" if os.path.isfile(onnx_path) else "%s is not in the model cache (scripts/fetch_detector.sh)" % (
            onnx_path)
    if not is_known_model(model):
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


VIEW_TOKEN_ENV = "CNNVIDEO_VIEW_TOKEN"


def view_token(cfg: Config) -> Optional[str]:
    """The live view's bearer token: `live_view.token`, else $CNNVIDEO_VIEW_TOKEN, else None."""
    return cfg.live_view.token or os.environ.get(VIEW_TOKEN_ENV) or None


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _validate_live_view(cfg: Config) -> None:
    lv = cfg.live_view
    token = view_token(cfg)
    if token is not None and (lv.port or lv.token):
        key = "live_view.token" if lv.token else "environment variable %s" % VIEW_TOKEN_ENV
        if not re.fullmatch(r"[A-Za-z0-9._~+/=-]{16,}", token):
            raise ConfigError("config key '%s' must be at least 16 characters of A-Z a-z 0-9 . _ ~ + / = - "
                              "(e.g. `openssl rand -hex 16`)" % key)
    if lv.port and not is_loopback(lv.host) and token is None:
        raise ConfigError("config key 'live_view.token' is required when live_view.host is %r (not loopback): set "
                          "it or the environment variable %s, or bind 127.0.0.1" % (lv.host, VIEW_TOKEN_ENV))


def _validate_events(cfg: Config, check_files: bool = True) -> None:
    """Build the events pipeline without connecting (and the label-change tracker), so a bad key stops here.
    A missing package (paho-mqtt, prometheus_client) is an error only where files are checked: a worker
    (check_files false) neither runs events nor needs their packages."""
    ev = cfg.events
    # with `cameras:`, events.camera is a camera's name (apply_one_camera), not a wish for events
    set_keys = tuple(k for k in events_keys_set(ev) if not (k == "camera" and cfg.cameras))
    if ev.enabled is None:  # unset: events run when any other events key is set
        ev.enabled = bool(set_keys)
        if set_keys and check_files:
            log.info("events on: %s set (config key 'events.enabled' unset; `false` turns them off)",
                     ", ".join("events." + k for k in set_keys))
    elif not ev.enabled and set_keys and check_files:
        log.warning("config key 'events.enabled' is false: %s checked but unused (set events.enabled: true, or "
                    "leave it out, to run events)", ", ".join("events." + k for k in set_keys))
    if not set_keys and not ev.enabled:
        return  # nothing set: nothing to check (and no import of the events modules)
    from cnnvideo.events import EventsConfigError, pipeline_from_config
    from cnnvideo.events.labelchange import label_change_from_config

    try:
        label_change_from_config(ev.label_change, "events.label_change")
        pipeline_from_config(ev.pipeline_config(cfg.out), cfg.frame_size, start_mqtt=False)
    except EventsConfigError as exc:
        key, _, why = str(exc).partition(": ")
        raise ConfigError("config key '%s': %s" % (key, why) if why else "config key 'events': %s" % exc) from None
    except ImportError as exc:
        if check_files:
            raise ConfigError("config key 'events' needs a package that is not installed: %s" % exc) from None


def events_keys_set(ev: Events) -> Tuple[str, ...]:
    """The `events` keys other than `enabled` that differ from their defaults, in field order; a key set to null
    (`snapshots: null`, `mqtt: null`: none) is not asked for events, so it does not count."""
    default = Events()
    return tuple(f.name for f in dataclasses.fields(Events) if f.name != "enabled"
                 and getattr(ev, f.name) is not None and getattr(ev, f.name) != getattr(default, f.name))


def _choice(value: str, allowed: Tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise ConfigError("config key '%s' must be one of %s, got %r" % (key, "|".join(allowed), value))


def _positive(value: int, key: str) -> None:
    if value <= 0:
        raise ConfigError("config key '%s' must be positive, got %r" % (key, value))

