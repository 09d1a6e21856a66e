"""Typed cluster/run configuration loaded from YAML; every bad key or value is a ConfigError naming it.

This module owns option validation: key names, types, ranges, renamed keys (RENAMED: the old name still loads,
with a warning naming the new one), the `cpus` role names and the model `fallback` rule. Every key is listed with
type, default and unit in docs/configuration.md (tests/unit/test_config_doc.py keeps the two in step).
The demo config (`cnnvideo local` without -c, and configs/local.yml) is the package file DEMO_PATH.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

from cnnvideo.errors import ConfigError  # noqa: F401 - re-exported: `from cnnvideo.config import ConfigError`

MODES = ("full", "delta")
ENGINES = ("torch", "onnxruntime")  # kept equal to cnnvideo.model.engines (which imports numpy; config stays light)
ENGINE_CHOICES = ENGINES + ("auto",)  # auto: each worker profiles every engine it has, each stage runs the fastest
PRECISIONS = ("fp32", "int8")
ON_ERROR = ("fallback", "stop")
# The demo: `cnnvideo local` and `cnnvideo plan` without -c load this file; configs/local.yml is a symlink to it.
DEMO_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.yml")

log = logging.getLogger(__name__)

# Renamed keys: old dotted key -> new dotted key. A file with the old key loads as if it named the new one, and a
# warning names the new key; both at once is an error. (Units: MB = 10^6 bytes, MiB = 2^20 bytes.)
RENAMED = {
    "limits.max_message_mb": "limits.max_message_mib",  # it always was MiB
    "source.reconnect_s": "source.reopen_s",  # how long a dropped stream is reopened
    "reliability.reconnect_s": "reliability.peer_wait_s",  # how long a role waits for a restarting peer
    "net_cpu_ns_per_byte": "cost_model.net_cpu_ns_per_byte",
    "net_cpu_us_per_message": "cost_model.net_cpu_us_per_message",
    "master_turnaround_s": "cost_model.master_turnaround_s",
}
# `cpus` role names: master, trainer, worker<i> (0 <= i < number of workers) and `workers` (every worker not named
# on its own). Old spellings still load, with a warning naming the canonical one.
CPUS_ROLES = ("master", "trainer", "workers")
CPUS_OLD = {"worker": "workers"}  # plus w<i> -> worker<i>


@dataclass
class Cluster:
    """Addresses (host:port). The master only dials out; workers are the chain in order."""

    trainer: str = "127.0.0.1:50051"
    workers: List[str] = field(default_factory=lambda: ["127.0.0.1:50060", "127.0.0.1:50061"])


@dataclass
class Delta:
    """Delta-mode options: thresholds (|new - held| <= t is not sent) and keyframe period."""

    input_threshold: int = 0  # pixel levels on the uint8 input hop
    threshold: float = 0.0  # on every later hop
    keyframe_every: int = 0  # 0 = only when needed (first frame, new cut, resync)
    fp16: bool = False  # lossy: send later-hop values as float16
    skip_unchanged: bool = True  # a worker whose input is unchanged (empty delta) reuses its output, no compute


@dataclass
class TrainerOptions:
    """What the trainer plays to fit the predictors."""

    video: Optional[str] = None  # None = the run's video
    frames: int = 100
    fit_fraction: float = 0.8  # fitted on this share of the frames, validated on the rest (1 = no hold-out)


@dataclass
class Limits:
    """Message size limit (MiB = 2^20 bytes) and RPC deadlines (s)."""

    max_message_mib: float = 64.0  # largest gRPC message and decoded tensor
    rpc_timeout_s: float = 30.0
    worker_down_s: float = 10.0  # master gives up on a silent worker after this long


@dataclass
class Tls:
    """Mutual TLS between all roles. Plaintext only when `enabled: false` (the explicit default for local demos).

    Either `dir` (from scripts/make_certs.sh: ca.crt plus <role>.crt/<role>.key per role: trainer, worker0..N,
    master) or explicit `ca`/`cert`/`key` paths (the same identity for every role); explicit paths win.
    When enabled every server requires a client certificate signed by the CA and every client checks the
    server's certificate against the CA.
    """

    enabled: bool = False
    dir: str = ""
    ca: str = ""
    cert: str = ""
    key: str = ""


@dataclass
class Reliability:
    """Frame retries and role restarts: every frame ends completed or dropped (with a reason), never twice."""

    restart: bool = True  # roles come back after a crash (`cnnvideo local` restarts them; compose: on-failure)
    max_restarts: int = 5  # per role, by `cnnvideo local` (then the run fails as without restarts)
    retries: int = 3  # re-sends of a frame hit by a fault before it is dropped
    peer_wait_s: float = 60.0  # how long the master (or a forwarding worker) waits for a failed peer to serve again


@dataclass
class Detect:
    """What a detector keeps (cnnvideo.results.detections): boxes scoring at least `score_threshold` (0..1), of
    `labels` (empty = every label the model has). Refused on a classifier."""

    score_threshold: float = 0.5
    labels: List[str] = field(default_factory=list)


@dataclass
class Source:
    """How `video` is read (video.sources): a file as fast as the chain allows, or frames on their own clock."""

    realtime: bool = False  # play a file at its own fps, as if it were a camera
    drop: str = "oldest"  # newest | oldest | none: which captured frames are skipped when the chain is slower
    queue: int = 4  # captured frames held at most besides those in flight
    loop: bool = True  # a file starts again at its end (frames: 0 with a looping file runs until a signal)
    fps: float = 0.0  # pace of a realtime file (0 = the file's own)
    reopen_s: float = 10.0  # a dropped stream is reopened with backoff for this long
    # live: schedulers and the cost model see only frames already captured; offline (a file read as fast as
    # asked): they may look ahead at the clip's input change, as before sources existed (e.g. experiments)
    mode: str = "live"


@dataclass
class LiveView:
    """The master's live web page (cnnvideo.results.liveview); off unless `port` is set (0 = off).

    On a loopback `host` (the default) no token is needed; on any other address a bearer `token` (or the
    environment variable CNNVIDEO_VIEW_TOKEN) is required, else every role refuses the config. With a token
    every request needs `Authorization: Bearer <token>` (or the cookie the page sets after `/?token=...`),
    except `/metrics` when `metrics_open` is true (for a scraper on a trusted network)."""

    port: int = 0
    host: str = "127.0.0.1"
    token: str = ""
    metrics_open: bool = False


@dataclass
class Local:
    """What `cnnvideo local` emulates of the cluster: per-hop `bandwidth` and per-role `cpus` caps."""

    links: str = "auto"  # auto | tc | paced | none (auto: tc in a network namespace when root, else paced)
    cpus: str = "auto"  # auto | cgroup | none (auto: cgroup CPU caps where writable, else none, said in the report)


@dataclass
class EngineOptions:
    """How a worker's stage backend runs: intra-op threads (0 = the container's CPU cap, or its cores), and what a
    stage that the engine cannot run does: `fallback` (torch, with the reason logged and reported) or `stop`."""

    threads: int = 0
    on_error: str = "fallback"


@dataclass
class Int8Options:
    """Calibration of `precision: int8`: `calibration_frames` frames of the trainer's video, every
    `calibration_stride`-th from `calibration_start` (-1 = the first frame after those the run evaluates)."""

    calibration_frames: int = 16
    calibration_start: int = -1
    calibration_stride: int = 10


@dataclass
class CostModel:
    """Calibration constants of the cost model (cnnvideo.plan.costinputs); measured, rarely changed."""

    # CPU ns a worker spends per byte it receives or sends (TCP path, gRPC); the cost model charges it to the
    # worker's work stage, times the wall/CPU ratio of its profile. Calibrated in docs/results/README.md.
    net_cpu_ns_per_byte: float = 25.0
    # CPU us a worker spends per gRPC message it handles apart from the bytes (3 a frame: the Process call in, the
    # call out or the result, the stage report); charged like net_cpu_ns_per_byte, and with 1 frame in flight
    # inside the CFS burst. scripts/msg_cpu_probe.py measured 210 us a message on a forwarding worker and 163 on
    # the reporting one (grpcio 1.85, loopback, 2 shared cores); replay: scripts/replay_msg_cpu.py.
    net_cpu_us_per_message: float = 200.0
    # seconds the master takes from a result to sending the frame it makes room for (reading the source, Python
    # bookkeeping); the cost model delays each frame that waits for the in-flight window by it. Measured in the
    # costmodel480-r3 runs at 1 in flight: 13-44 ms, median 20 ms on both engines (docs/results/README.md).
    master_turnaround_s: float = 0.02


@dataclass
class ModelChoice:
    """One entry of `fallback`: a model and its weights."""

    model: str = ""  # required
    weights: str = "random"


@dataclass
class Events:
    """Events from the master's results (cnnvideo.events, issue 23): off unless `enabled: true`; the other
    keys are checked either way. A classifier (no boxes) makes one event track per run of the same top-1 label
    (`label_change`); a detector's boxes go through the IoU `tracker`. `tracker`, `zones`, `snapshots` and
    `mqtt` are the mappings `cnnvideo.events.pipeline_from_config` reads (it names a bad key); snapshots go to
    `<out>/snapshots` unless `snapshots.dir` says otherwise (`snapshots: null` = none); no `mqtt`: no MQTT."""

    enabled: bool = False
    camera: str = "cam"
    recent_max: int = 200
    label_change: Dict[str, Any] = field(default_factory=dict)  # LabelChangeSettings fields
    tracker: Dict[str, Any] = field(default_factory=dict)  # TrackerSettings fields
    zones: Dict[str, Any] = field(default_factory=dict)  # name -> [[x, y], ...] in frame pixels
    snapshots: Optional[Dict[str, Any]] = field(default_factory=dict)  # max_tracks, jpeg_quality, dir
    mqtt: Optional[Dict[str, Any]] = None  # MqttSettings fields (host, port, topic_prefix, ...)

    def pipeline_config(self, out_dir: str) -> Dict[str, Any]:
        """The mapping for `cnnvideo.events.pipeline_from_config` (snapshots under `out_dir` by default)."""
        data: Dict[str, Any] = {"camera": self.camera, "recent_max": self.recent_max, "tracker": dict(self.tracker),
                                "zones": dict(self.zones)}
        if self.snapshots is not None:
            data["snapshots"] = dict(self.snapshots)
            data["snapshots"].setdefault("dir", os.path.join(out_dir, "snapshots"))
        if self.mqtt is not None:
            data["mqtt"] = dict(self.mqtt)
        return data


@dataclass
class Config:
    """One run of the cluster. Field names are the YAML keys."""

    cluster: Cluster = field(default_factory=Cluster)
    model: str = "alexnet"
    weights: str = "random"  # imagenet | random | path to a state-dict file
    # tried in order when `model` with `weights` cannot load here (model_unavailable); consumed at load
    fallback: List[ModelChoice] = field(default_factory=list)
    seed: int = 0
    video: str = "media/vtest.avi"
    frame_size: Tuple[int, int] = (480, 720)  # height, width
    mode: str = "delta"
    engine: str = "torch"  # torch | onnxruntime | auto: what runs each worker's stage (auto: the fastest profiled)
    precision: str = "fp32"  # fp32 | int8 (static per-channel quantisation; inner-cut tensors travel as uint8)
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    int8: Int8Options = field(default_factory=Int8Options)
    delta: Delta = field(default_factory=Delta)
    check: bool = True
    check_share: float = 1.0  # share of completed frames compared with the unsplit model (online, background)
    check_defer: bool = False  # a file read as fast as asked: sampled frames are checked after the run's last result
    frames: int = 60  # 0 = until SIGINT/SIGTERM (a live source, or a looping file)
    in_flight: int = 3  # frames in flight cap, 0 = unlimited (the original's pd_num)
    group_size: int = 5
    scheduler: str = "optimal"
    scheduler_options: Dict[str, Any] = field(default_factory=dict)
    bandwidth: List[float] = field(default_factory=lambda: [3.0, 3.0])  # MB/s (10^6 bytes/s), [0] = master->w0
    cpus: Dict[str, float] = field(default_factory=dict)  # role (CPUS_ROLES, worker<i>) -> CPU share
    trainer: TrainerOptions = field(default_factory=TrainerOptions)
    limits: Limits = field(default_factory=Limits)
    reliability: Reliability = field(default_factory=Reliability)
    tls: Tls = field(default_factory=Tls)
    source: Source = field(default_factory=Source)
    live_view: LiveView = field(default_factory=LiveView)
    detect: Detect = field(default_factory=Detect)
    local: Local = field(default_factory=Local)
    cache_dir: str = "~/.cache/cnnvideo"
    out: str = "out"
    profile_iters: int = 3
    profile_rescale: bool = False  # at run start each worker times whole passes and rescales its cached profile
    cost_model: CostModel = field(default_factory=CostModel)
    events: Events = field(default_factory=Events)

    @property
    def n_workers(self) -> int:
        return len(self.cluster.workers)

    @property
    def max_message_bytes(self) -> int:
        return int(self.limits.max_message_mib * 1024 * 1024)

    def bandwidth_bytes(self) -> List[float]:
        """Per-hop bandwidth in bytes/s (`bandwidth` is MB/s, 10^6 bytes/s), one per worker (hop into worker i)."""
        bw = list(self.bandwidth)
        if len(bw) == 1:
            bw = bw * self.n_workers
        return [b * 1e6 for b in bw]

    @property
    def calibration_video(self) -> str:
        """The video int8 calibration reads (the trainer's)."""
        return self.trainer.video or self.video

    @property
    def calibration_start(self) -> int:
        """First calibration frame: after the frames a run evaluates unless set."""
        return self.frames if self.int8.calibration_start < 0 else self.int8.calibration_start

    def cpu_share(self, role: str) -> Optional[float]:
        """The `cpus` share of a role ('master', 'trainer', 'worker<i>' or 'w<i>'), None when not capped; a worker
        without its own key takes `workers`."""
        m = re.match(r"^w(?:orker)?(\d+)$", role)
        if m:
            own = "worker%d" % int(m.group(1))
            return self.cpus.get(own, self.cpus.get("workers"))
        return self.cpus.get(role)

    def cache_path(self, *parts: str) -> str:
        path = os.path.join(os.path.expanduser(self.cache_dir), *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one YAML value to the annotated type; raise ConfigError naming the key."""
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ()) or ()
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError("config key '%s' must be a mapping, got %r" % (key, value))
        return _build(tp, value, key + ".")
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _convert(value, inner, key)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError("config key '%s' must be a list, got %r" % (key, value))
        return [_convert(v, args[0], "%s[%d]" % (key, i)) for i, v in enumerate(value)]
    if origin in (tuple, Tuple):
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError("config key '%s' must be a list of %d values, got %r" % (key, len(args), value))
        return tuple(_convert(v, a, "%s[%d]" % (key, i)) for i, (v, a) in enumerate(zip(value, args)))
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ConfigError("config key '%s' must be a mapping, got %r" % (key, value))
        return {str(k): _convert(v, args[1], "%s.%s" % (key, k)) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError("config key '%s' must be true or false, got %r" % (key, value))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("config key '%s' must be an integer, got %r" % (key, value))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError("config key '%s' must be a number, got %r" % (key, value))
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError("config key '%s' must be a string, got %r" % (key, value))
        return value
    raise ConfigError("config key '%s' has unsupported type %s" % (key, _type_name(tp)))


def _build(cls: Any, data: Dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError("unknown config key '%s%s' (known: %s)" % (prefix, key, ", ".join(sorted(names))))
    kwargs = {k: _convert(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def validate(cfg: Config, check_files: bool = True) -> Config:
    """Check values that types alone cannot; raise ConfigError naming the key."""
    from cnnvideo.model import zoo as models  # local import: models pulls in torch
    from cnnvideo.plan import schedulers

    if not cfg.cluster.workers:
        raise ConfigError("config key 'cluster.workers' must list at least one worker address")
    for i, addr in enumerate(cfg.cluster.workers + [cfg.cluster.trainer]):
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            key = "cluster.trainer" if i == len(cfg.cluster.workers) else "cluster.workers[%d]" % i
            raise ConfigError("config key '%s' must be host:port, got %r" % (key, addr))
    from cnnvideo.artifacts import onnx_model_path

    onnx_path = onnx_model_path(cfg.model)
    if onnx_path:  # an ONNX file or a short name of one (cnnvideo.model.onnx_graph); the weights are in the file
        if check_files and not os.path.isfile(onnx_path):
            raise ConfigError("config key 'model': ONNX file not found: %s%s" % (
                onnx_path, "" if onnx_path == cfg.model else " (`make setup` fetches %s)" % cfg.model))
        if cfg.engine != "onnxruntime":
            raise ConfigError("config key 'engine' must be onnxruntime for an ONNX model file (%s), got %r"
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

    if check_files and kind_of(cfg.video) == "file" and not os.path.isfile(cfg.video):
        raise ConfigError("config key 'video': file not found: %s" % cfg.video)
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
    if cfg.frames < 0:
        raise ConfigError("config key 'frames' must be >= 0 (0 = until a signal), got %r" % cfg.frames)
    if not 0 < cfg.check_share <= 1:
        raise ConfigError("config key 'check_share' must be in (0, 1], got %r" % cfg.check_share)
    _choice(cfg.source.drop, ("newest", "oldest", "none"), "source.drop")
    _choice(cfg.source.mode, ("offline", "live"), "source.mode")
    _choice(cfg.local.links, ("auto", "tc", "paced", "none"), "local.links")
    _choice(cfg.local.cpus, ("auto", "cgroup", "none"), "local.cpus")
    _positive(cfg.source.queue, "source.queue")
    if cfg.source.fps < 0 or cfg.source.reopen_s <= 0:
        key = "source.fps" if cfg.source.fps < 0 else "source.reopen_s"
        raise ConfigError("config key '%s' must be %s" % (key, ">= 0" if key == "source.fps" else "> 0"))
    if not 0 <= cfg.live_view.port < 65536:
        raise ConfigError("config key 'live_view.port' must be 0 (off) or a TCP port, got %r" % cfg.live_view.port)
    if cfg.source.mode == "offline" and (kind_of(cfg.video) != "file" or cfg.source.realtime):
        raise ConfigError("config key 'source.mode': offline needs a video file read as fast as asked "
                          "(source.realtime: false), got %r" % cfg.video)
    if cfg.engine not in ENGINE_CHOICES:
        raise ConfigError("config key 'engine' must be one of %s, got %r" % ("|".join(ENGINE_CHOICES), cfg.engine))
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
    if cfg.int8.calibration_start < -1:
        raise ConfigError("config key 'int8.calibration_start' must be >= 0 (or -1 = after the run's frames)")
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


def _canonical_cpus(cpus: Dict[str, float], n_workers: int) -> Dict[str, float]:
    """`cpus` with canonical role names (master, trainer, worker<i>, workers); old spellings (w<i>, worker) are
    renamed with a warning; an unknown role, a worker index outside the chain or one role named twice is an
    error naming the key."""
    out: Dict[str, float] = {}
    for key, share in cpus.items():
        new = CPUS_OLD.get(key, key)
        m = re.match(r"^w(\d+)$", key)
        if m:
            new = "worker%d" % int(m.group(1))
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


def upgrade(data: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a config mapping with renamed keys (RENAMED) under their new names, a warning naming the new key
    for each old one found; an old and a new key set at once is an error."""
    data = copy.deepcopy(data)
    for old, new in RENAMED.items():
        *old_parents, old_leaf = old.split(".")
        parent = data
        for part in old_parents:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or old_leaf not in parent:
            continue
        *new_parents, new_leaf = new.split(".")
        target = data
        for part in new_parents:
            if not isinstance(target.get(part, {}), dict):
                break  # a section that is not a mapping: _build names it
            target = target.setdefault(part, {})
        else:
            if new_leaf in target:
                raise ConfigError("config keys '%s' and '%s' are both set: '%s' is the old name of '%s', keep only "
                                  "'%s'" % (old, new, old, new, new))
            target[new_leaf] = parent.pop(old_leaf)
            log.warning("config key '%s' is renamed: use '%s' (same value and unit)", old, new)
    return data


def model_unavailable(model: str, weights: str) -> str:
    """Why `model` with `weights` cannot run here, offline ('' = it can): the one rule `fallback` follows.
    Unknown models, `imagenet` weights not in the torch hub cache (scripts/fetch_weights.sh), missing weight files."""
    from cnnvideo.artifacts import onnx_model_path
    from cnnvideo.model import zoo  # local import: the zoo pulls in torch

    onnx_path = onnx_model_path(model)
    if onnx_path:
        return "" if os.path.isfile(onnx_path) else "%s is not in the model cache (scripts/fetch_detector.sh)" % (
            onnx_path)
    if not zoo.is_known_model(model):
        return "model %s is unknown to this build" % model
    if weights == "imagenet" and not zoo.imagenet_available(model):
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
    if ev == Events():
        return  # nothing set: nothing to check (and no import of the events modules)
    from cnnvideo.events import EventsConfigError, pipeline_from_config
    from cnnvideo.events.labelchange import label_change_from_config

    try:
        label_change_from_config(ev.label_change, "events.label_change")
        pipeline_from_config(ev.pipeline_config(cfg.out), (cfg.frame_size[1], cfg.frame_size[0]), start_mqtt=False)
    except EventsConfigError as exc:
        key, _, why = str(exc).partition(": ")
        raise ConfigError("config key '%s': %s" % (key, why) if why else "config key 'events': %s" % exc) from None
    except ImportError as exc:
        if check_files:
            raise ConfigError("config key 'events' needs a package that is not installed: %s" % exc) from None


def _choice(value: str, allowed: Tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise ConfigError("config key '%s' must be one of %s, got %r" % (key, "|".join(allowed), value))


def _positive(value: int, key: str) -> None:
    if value <= 0:
        raise ConfigError("config key '%s' must be positive, got %r" % (key, value))


def from_dict(data: Optional[Dict[str, Any]], check_files: bool = True) -> Config:
    """Build and validate a Config from a plain mapping (e.g. parsed YAML): renamed keys upgraded (with a warning),
    the model `fallback` resolved, every value checked."""
    return validate(resolve_fallback(_build(Config, upgrade(data or {}))), check_files=check_files)


def load(path: str, overrides: Optional[Dict[str, Any]] = None, check_files: bool = True) -> Config:
    """Read a YAML config file; relative video/weights paths resolve against the current directory."""
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError("cannot read config file %s: %s" % (path, exc.strerror)) from None
    except yaml.YAMLError as exc:
        raise ConfigError("config file %s is not valid YAML: %s" % (path, str(exc).splitlines()[0])) from None
    if not isinstance(data, dict):
        raise ConfigError("config file %s must hold a mapping of keys" % path)
    data.update(overrides or {})
    return from_dict(data, check_files=check_files)


def load_demo(overrides: Optional[Dict[str, Any]] = None, check_files: bool = True) -> Config:
    """The demo config (DEMO_PATH): what `cnnvideo local` and `cnnvideo plan` run without -c."""
    return load(DEMO_PATH, overrides, check_files=check_files)


def type_name(tp: Any) -> str:
    """A YAML-facing name of a field type, as docs/configuration.md writes it ('list of float', '[int, int]')."""
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ()) or ()
    if dataclasses.is_dataclass(tp):
        return "{%s}" % ", ".join(f.name for f in dataclasses.fields(tp))
    if origin is typing.Union:
        return "%s or null" % type_name([a for a in args if a is not type(None)][0])
    if origin in (list, List):
        return "list of %s" % type_name(args[0])
    if origin in (tuple, Tuple):
        return "[%s]" % ", ".join(type_name(a) for a in args)
    if origin in (dict, Dict):
        return "mapping" if args[1] is Any else "mapping of %s" % type_name(args[1])
    return _type_name(tp)


def key_table(cls: Any = Config, prefix: str = "") -> List[Tuple[str, str, Any]]:
    """(dotted key, type name, default as YAML would load it) of every config key: sections expanded, list entries
    that are sections as `key[].field` after the list itself. docs/configuration.md lists the same."""
    hints = typing.get_type_hints(cls)
    rows: List[Tuple[str, str, Any]] = []
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            rows += key_table(tp, key + ".")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore
        rows.append((key, type_name(tp), list(default) if isinstance(default, tuple) else default))
        args = getattr(tp, "__args__", ()) or ()
        if getattr(tp, "__origin__", None) in (list, List) and dataclasses.is_dataclass(args[0]):
            rows += key_table(args[0], key + "[].")
    return rows


def to_dict(cfg: Config) -> Dict[str, Any]:
    """Plain mapping of a Config (for YAML dumps and reports)."""
    out = dataclasses.asdict(cfg)
    out["frame_size"] = list(cfg.frame_size)
    return out


def dump(cfg: Config, path: str) -> None:
    """Write the config as YAML; only the owner may read it when it holds the live view's token."""
    if cfg.live_view.token:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            os.chmod(path, 0o600)
            yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
        return
    with open(path, "w") as fh:
        yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
