"""The typed config: one dataclass per section of a config file (field names are the YAML keys, comments give
units), and the allowed values of its choice keys.

A leaf: it imports no other cnnvideo module, so config_validation (which checks these types) and config (which builds
them from YAML and calls the checks) both import it without an import cycle. Callers import the types from
cnnvideo.config, the public entry, which re-exports them.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

MODES = ("full", "delta")
ENGINES = ("torch", "onnxruntime")  # kept equal to cnnvideo.model.engines (which imports numpy; config stays light)
ENGINE_CHOICES = ENGINES + ("auto",)  # auto: each worker profiles every engine it has, each stage runs the fastest
PRECISIONS = ("fp32", "int8")
ON_ERROR = ("fallback", "stop")
# `cpus` role names: master, trainer, worker<i> (0 <= i < number of workers) and `workers` (every worker not named
# on its own). Old spellings (config_upgrade.CPUS_OLD) still load, with a warning naming the canonical one.
CPUS_ROLES = ("master", "trainer", "workers")
# A camera's name (the keys of `cameras:`) goes into MQTT topics, file names and URLs: 1-32 ASCII letters, digits,
# '_' or '-', starting with a letter or a digit (config_validation also refuses two names that differ only in case).
CAMERA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
CAMERA_NAME_RULE = "1-32 letters, digits, '_' or '-', starting with a letter or digit"


@dataclass
class Cluster:
    """Addresses (host:port). The master dials the workers (in id order) and the trainer; with `join` set it also
    takes workers that join the running pool, and `workers` may be empty: the pool is the workers that join."""

    trainer: str = "127.0.0.1:50051"
    workers: List[str] = field(default_factory=lambda: ["127.0.0.1:50060", "127.0.0.1:50061"])
    # host:port the master takes joining workers on (`cnnvideo worker --join`; docs/pool.md); "" = the pool is the
    # workers listed above (one camera: with several, each master would need its own; not built yet)
    join: str = ""
    # the secret a joining worker must present (else $CNNVIDEO_JOIN_TOKEN): required off loopback without TLS
    join_token: str = ""
    # with `join` and no `workers` listed: the run starts once this many workers have joined (the master waits, and
    # says so); more join the running pool
    min_workers: int = 1


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
    every request needs `Authorization: Bearer <token>` or a session cookie from the page's login form
    (cnnvideo.results.liveauth), except `/metrics` when `metrics_open` is true (for a scraper on a trusted
    network)."""

    port: int = 0
    host: str = "127.0.0.1"
    token: str = ""
    metrics_open: bool = False


@dataclass
class Local:
    """What `cnnvideo local` emulates of the cluster: per-hop `bandwidth` and per-role `cpus` caps."""

    links: str = "auto"  # auto | tc | paced | none (auto: tc in a network namespace when root, else paced)
    # auto | cgroup | best-effort | none: how `cpus` caps are applied (auto, cgroup: a cgroup per capped role, and a
    # one-line error where none is writable; best-effort: uncapped then, warned and said in the report)
    cpus: str = "auto"


@dataclass
class EngineOptions:
    """How a worker's stage backend runs: intra-op threads (0 = the container's CPU cap, or its cores), and what a
    stage that the engine cannot run does: `fallback` (torch, with the reason logged and reported) or `stop`."""

    threads: int = 0
    on_error: str = "fallback"


CALIBRATIONS = ("camera", "video")  # int8.calibration: the camera's own first frames, or the trainer's video
QUANTIZE_ON = ("master", "worker")  # int8.quantize: who quantizes the camera-calibrated stages


@dataclass
class Int8Options:
    """Calibration of `precision: int8`. `calibration: camera`: the master samples `calibration_frames` of the
    camera's own first frames, every `calibration_stride`-th, skipping black, flat and frozen ones, keeps that
    calibration per camera and sends it to the workers. `calibration: video`: `calibration_frames` frames of the
    trainer's video, every `calibration_stride`-th from `calibration_start` (-1 = the first frame after those the
    trainer fits on). Workers always profile on the video's calibration; neither depends on `frames:`."""

    calibration: str = "camera"
    calibration_frames: int = 16
    calibration_start: int = -1
    calibration_stride: int = 5
    # who quantizes the int8 stages (the profile's and the run's): `master` (once per stage, uncapped; the files are
    # pushed to the workers before Costs and StartRun: master/stage_push.py) or `worker` (each its own, capped)
    quantize: str = "master"
    # `calibration: camera`: the camera's calibration is stale when the online check's F1 (boxes against the unsplit
    # fp32 model) over the last `recalibrate_window` checked frames falls under `recalibrate_below`; the master then
    # calibrates again on the camera's next frames and the run switches to it (master/recalibration.py). 0 = never
    recalibrate_below: float = 0.8
    recalibrate_window: int = 24
    # `calibration: camera` on a detector with ONNX Runtime on the master: once the camera's calibration is measured,
    # the master runs int8 and fp32 on its frames; when the F1 of int8's boxes falls under `fit_below`, it keeps more
    # of the model fp32 for that camera (camera_calibration.RECIPES, master/calibration_fit.py). 0 = never
    fit_below: float = 0.97


@dataclass
class CostModel:
    """Calibration constants of the cost model (cnnvideo.plan.costinputs); measured, rarely changed."""

    # CPU ns a worker spends per byte it receives or sends (TCP path, gRPC); the cost model charges it to the
    # worker's work stage, times the wall/CPU ratio of its profile. Calibrated in docs/results/README.md.
    net_cpu_ns_per_byte: float = 25.0
    # CPU us a worker spends per gRPC message it handles apart from the bytes (3 a frame: the Process call in, the
    # call out or the result, the stage report); charged like net_cpu_ns_per_byte, and with 1 frame in flight
    # inside the CFS burst. tools/probes/msg_cpu_probe.py measured 210 us a message on a forwarding worker and 163 on
    # the reporting one (grpcio 1.85, loopback, 2 shared cores); replay: tools/probes/replay_msg_cpu.py.
    net_cpu_us_per_message: float = 200.0
    # seconds the master takes from a result to sending the frame it makes room for (reading the source, Python
    # bookkeeping); the cost model delays each frame that waits for the in-flight window by it. Measured in the
    # costmodel480-r3 runs at 1 in flight: 13-44 ms, median 20 ms on both engines (docs/results/README.md).
    master_turnaround_s: float = 0.02
    # CPU ns the master spends a frame per pixel of the frame size (capture and resize, the input hop's delta encode,
    # sends, the result): the cost model counts the master as a stage of master_ns_per_pixel x H x W seconds a frame
    # (cnnvideo.plan.pool). The person detector at 480x720 measured 8.7-9.2 ms a frame without the check, vtest's
    # 768x576 frames resized with INTER_LINEAR (docs/results/master-cpu): 26 ns a pixel.
    master_ns_per_pixel: float = 26.0
    # workers of the same device (profiling.device_tag) and CPU cap are planned with one profile, each segment's
    # median over theirs (costinputs.pool_alike): the workers profile at once when they start, and four alike ones
    # measured 0.090-0.180 s a frame side by side on a 2-core host, which sent the planner to a plan built on noise
    alike_profiles: bool = True
    # plan with the overhead a run measured (cnnvideo.plan.overhead): a run of 30 frames or more stores, per device and
    # engine, its workers' compute CPU over their profile and their CPU a message beyond it; the next setup scales
    # the profile by the first and charges the second instead of net_cpu_us_per_message
    measured_overhead: bool = True


@dataclass
class ModelChoice:
    """One entry of `fallback`: a model and its weights."""

    model: str = ""  # required
    weights: str = "random"


@dataclass
class Events:
    """Events from the master's results (cnnvideo.events, issue 23): `enabled` null (unset) = on when any other key
    is set (config_validation resolves it when loaded); `false` = off, the other keys checked either way. A classifier
    (no boxes) makes one event track per run of the same top-1 label (`label_change`); a detector's boxes go through
    the `tracker`. `tracker`, `zones`, `snapshots` and
    `mqtt` are the mappings `cnnvideo.events.pipeline_from_config` reads (it names a bad key); snapshots go to
    `<out>/snapshots` unless `snapshots.dir` says otherwise (`snapshots: null` = none); no `mqtt`: no MQTT."""

    enabled: Optional[bool] = None  # null = on when another events key is set (config_validation.events_keys_set)
    camera: str = "cam"
    recent_max: int = 200
    label_change: Dict[str, Any] = field(default_factory=dict)  # LabelChangeSettings fields
    tracker: Dict[str, Any] = field(default_factory=dict)  # TrackerSettings fields
    zones: Dict[str, Any] = field(default_factory=dict)  # name -> [[x, y], ...]: points (x right, y down), pixels
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
class CameraEntry:
    """One entry of `cameras:` as written (keyed by the camera's name): its source, and what it sets differently
    from the top level. A key left out (null, or absent from `source`) takes the top-level value. The loader turns
    each entry into a Camera (config_cameras.resolve); the YAML keys of `cameras.<name>` are this type's fields."""

    video: str = ""  # required: a file, stream URL, device or GStreamer pipeline (as the top-level `video`)
    frame_size: Optional[Tuple[int, int]] = None  # height, width; null = the top-level frame_size
    # keys of the top-level `source:` (Source: realtime, drop, queue, loop, fps, reopen_s; not `mode`, which is the
    # run's), each over the top-level value; checked and converted to Source's types when loaded
    source: Dict[str, Any] = field(default_factory=dict)
    zones: Optional[Dict[str, Any]] = None  # as events.zones, in this camera's frame pixels; null = events.zones
    check_share: Optional[float] = None  # null = the top-level check_share
    weight: float = 1.0  # > 0: this camera's share of the pool, relative to the other cameras' weights


@dataclass
class Camera:
    """One camera of the cluster with every setting it runs with: its own where its entry sets one, else the top
    level's. `own` names the keys its entry set itself ("video", "frame_size", "source.fps", "zones",
    "check_share", "weight"): a check names `cameras.<name>.<key>` for those, and a dump writes only those."""

    name: str
    video: str
    frame_size: Tuple[int, int]  # height, width
    source: Source
    zones: Dict[str, Any]
    check_share: float
    weight: float = 1.0
    own: Tuple[str, ...] = ()

    def key(self, key: str, top: str) -> str:
        """The config key a check of this camera's `key` names: its own entry's, else the top level's `top`."""
        return "cameras.%s.%s" % (self.name, key) if key in self.own else top


ResolvedCamera = Camera  # the name before the camera list was the config's model


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
    # torch | onnxruntime | auto: what runs each worker's stage (auto: the fastest profiled); null (unset) = by model:
    # onnxruntime for an ONNX model file, torch otherwise (resolved by config_validation.validate when loaded)
    engine: Optional[str] = None
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
    # The cluster's cameras, in file order: never empty once loaded. Written as `cameras:` (a mapping of name ->
    # CameraEntry, resolved over the top level by config_cameras), or as a top-level `video:` (and frame_size,
    # source, check_share, events.zones), the shorthand for one camera named events.camera. The top-level keys are
    # then the values a camera does not set; a config of one camera (what a master runs: config_cameras.
    # camera_configs) holds that camera's values there too, so the roles read `video` etc. as before.
    cameras: List[Camera] = field(default_factory=list, metadata={"yaml": Dict[str, CameraEntry], "yaml_default": {}})

    def __post_init__(self) -> None:
        if not self.cameras:  # a Config built in code: the top level is its one camera, as `video:` in a file
            self.cameras = [self.shorthand_camera()]

    def shorthand_camera(self) -> Camera:
        """The one camera a top-level `video:` stands for: the top-level settings, named events.camera."""
        return Camera(self.events.camera, self.video, (self.frame_size[0], self.frame_size[1]),
                      dataclasses.replace(self.source), dict(self.events.zones), self.check_share, 1.0)

    def camera_list(self) -> List[Camera]:
        """Every camera with its effective settings, in file order (the list itself)."""
        return list(self.cameras)

    def camera_names(self) -> List[str]:
        return [c.name for c in self.cameras]

    def camera(self, name: str) -> Optional[Camera]:
        """The camera called `name`, None when the config has none of that name."""
        return next((c for c in self.cameras if c.name == name), None)

    @property
    def n_workers(self) -> int:
        return len(self.cluster.workers)

    @property
    def max_message_bytes(self) -> int:
        return int(self.limits.max_message_mib * 1024 * 1024)

    def bandwidth_bytes(self, n_workers: Optional[int] = None) -> List[float]:
        """Per-hop bandwidth in bytes/s (`bandwidth` is MB/s, 10^6 bytes/s), one per worker (hop into worker i) of
        `n_workers` (default the config's): a worker past the list (one that joined) has the last one's."""
        n = self.n_workers if n_workers is None else n_workers
        bw = list(self.bandwidth)
        bw = bw + [bw[-1]] * (n - len(bw)) if len(bw) < n else bw
        return [b * 1e6 for b in bw]

    @property
    def calibration_video(self) -> str:
        """The video int8 calibration reads (the trainer's)."""
        return self.trainer.video or self.video

    @property
    def calibration_start(self) -> int:
        """First calibration frame of the video: after the frames the trainer fits on unless set (never the run's
        `frames:`, which would calibrate, and so build every int8 stage, again for each new value)."""
        return self.trainer.frames if self.int8.calibration_start < 0 else self.int8.calibration_start

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

