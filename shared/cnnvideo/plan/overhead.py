"""The measured per-frame overhead: what a run's stage reports say of each worker's CPU beyond its profile, kept per
device, CPU cap and engine, and handed to the next plan.

A worker's profile times its segments alone; in a run the same worker also runs gRPC threads, decodes and encodes the
hops and reports every stage, and its compute runs beside them (caches shared, CFS throttling mid-segment). Measured
on the person detector (ORT int8, 480x720, caps 0.1, docs/results/pool): a worker spent 14-15 ms of CPU per frame,
11.5 ms in its decode, compute and encode threads, against a profile and a configured overhead of 12.4 ms, so the cost
model predicted 14-27% more fps than ran. Each worker reports its process CPU with every stage (StageReport
process_cpu); the master differences consecutive reports (OverheadMeter), and the figures of a long enough run are
stored (save) and read back by the next setup (apply): each segment time times the run's compute ratio, and
cost_model.net_cpu_us_per_message replaced by the rest of the CPU it measured, beyond what the cost model charges
(the compute, the profile's codec and the per-byte CPU), so the cost model of the run's own plan charges exactly the
CPU a frame the run measured.

What is stored is guarded (issue 46: a run stopped by SIGTERM after its worker had spent 7 minutes quantizing under
its cap measured compute x2.000 and 5000 us a message, both clamps, and every later plan used them): a store key's
file keeps the last HISTORY accepted runs' figures beside the current ones (its top-level fields, as files were
written before, so they still load), and `store` refuses a run that did not finish normally, whose figures sit at a
clamp bound, or that is far off the history's median (`disagreement`); a refused run's figures go to the file's
`rejected` list, kept apart, never planned with."""
from __future__ import annotations

import json
import logging
import os
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.artifacts import atomic_tmp, overhead_path
from cnnvideo.plan.costmodel import MESSAGES_PER_FRAME

log = logging.getLogger(__name__)

MIN_FRAMES = 30  # a run measures a worker's overhead from this many frames on, else it stores nothing
RATIO_BOUNDS = (0.5, 2.0)  # compute ratios outside are taken as a measuring fault and clipped
MESSAGE_US_MAX = 5000.0
FORMAT = 2  # 2: message_us is what the cost model does not charge (1 counted the measured codec as charged)
HISTORY = 5  # accepted runs kept per store key: their median is what a new run is checked against
REJECTED = 10  # refused runs kept apart per store key (for a look at what was refused, never planned with)
# A new run's compute ratio is refused beyond RATIO_TOLERANCE x or / the history's median. Normal runs of one setting
# read 1.14-1.20 (issue 46, the N = 4 pool run's four workers; docs/results/pool: 14-15 ms against 12.4), a spread of
# 5%; the sick run read 2.0 against them, 1.7x. 1.3 leaves six times the normal spread for a host whose speed moves
# between runs (2 shared cores) and still refuses a run 1.3x slower in its model than every accepted run before it.
RATIO_TOLERANCE = 1.3
# The message CPU is refused beyond MESSAGE_TOLERANCE x or / the median, and only when it is also MESSAGE_SLACK_US or
# more away from it. It depends on the plan more than the compute does (a store key is a device and cap, not a plan):
# in issue 46 a replica of a 4-way pool spent 4.4-5.4 ms a frame outside the model against 2.5 on `edge`, about 2x,
# with its larger input messages, so a factor of 2 or less would refuse a normal change of plan. The slack keeps small
# figures (the clip at 0 when the model charges all that was measured) from being refused for tens of us.
MESSAGE_TOLERANCE = 2.5
MESSAGE_SLACK_US = 500.0
# A store key whose history no longer fits its device (a new runtime, a faster host) would refuse every run for good:
# RECOVER consecutive runs refused as off the history that agree among themselves become the new history.
RECOVER = 3


@dataclass
class WorkerOverhead:
    """One worker's CPU a frame in one run, from its stage reports (CPU seconds, not wall)."""

    frames: int  # reports with a previous one to difference against
    cpu_s: float  # the worker process's CPU a frame (every thread)
    stage_cpu_s: float  # its decode, compute and encode threads' CPU a frame
    compute_cpu_s: float  # compute CPU a computed frame
    profiled_cpu_s: float  # the profile's CPU for the same computed frames' segments
    bytes: float  # bytes in and out a frame
    computed_share: float = 1.0  # share of its frames that computed (the rest skipped an unchanged input)
    codec_cpu_s: float = 0.0  # the profile's decode and encode CPU a frame for its stages (what the model charges)

    def compute_ratio(self) -> Optional[float]:
        """In-run compute CPU over the profile's, clipped to RATIO_BOUNDS (None: no computed frame)."""
        if self.profiled_cpu_s <= 0 or self.compute_cpu_s <= 0:
            return None
        return float(np.clip(self.compute_cpu_s / self.profiled_cpu_s, *RATIO_BOUNDS))

    def message_us(self, net_ns_per_byte: float) -> float:
        """CPU us a message (MESSAGES_PER_FRAME a frame) beyond what the cost model charges a frame: the measured
        compute, the profile's codec and the per-byte charge. The measured decode and encode beyond the profile's
        codec, the gRPC threads and the reports end up here, so the model of the same plan charges the CPU a frame
        that was measured."""
        charged = self.computed_share * self.compute_cpu_s + self.codec_cpu_s + self.bytes * net_ns_per_byte * 1e-9
        other = self.cpu_s - charged
        return float(np.clip(other / MESSAGES_PER_FRAME * 1e6, 0.0, MESSAGE_US_MAX))

    def summary(self, net_ns_per_byte: float) -> Dict[str, object]:
        """report.json's row of this worker."""
        ratio = self.compute_ratio()
        return {"frames": self.frames, "cpu_per_frame_ms": round(1e3 * self.cpu_s, 3),
                "stage_cpu_ms": round(1e3 * self.stage_cpu_s, 3),
                "other_cpu_ms": round(1e3 * (self.cpu_s - self.stage_cpu_s), 3),
                "compute_ratio": None if ratio is None else round(ratio, 4),
                "profiled_codec_ms": round(1e3 * self.codec_cpu_s, 3),
                "message_cpu_us": round(self.message_us(net_ns_per_byte), 1)}


class OverheadMeter:
    """Per worker, over its last WINDOW stage reports: the process CPU between one report and the next (a report
    whose CPU is lower, after the worker restarted, starts again), the stage threads' CPU, and for computed stages
    their CPU against the profile's (`profiled(w, start, end)`: CPU seconds of segments start..end-1 on worker w).
    A frame whose CPU is over OUTLIER x the median (a stage built for a re-plan, a profile asked again) is left out.
    `codec(w, start, end)`: the profile's decode and encode CPU seconds of that stage (None: the model charges none)."""

    WINDOW = 4096
    OUTLIER = 4.0
    COLUMNS = 7  # per frame: cpu, stage cpu, computed (0/1), compute cpu, profiled cpu, bytes, profiled codec cpu

    def __init__(self, profiled, codec=None) -> None:
        self.profiled = profiled
        self.codec = codec
        self.last: Dict[int, float] = {}
        self.rows: Dict[int, Deque[Tuple[float, ...]]] = {}

    def add(self, worker: int, process_cpu: float, stage_cpu: float, compute_cpu: float, start: int, end: int,
            computed: bool, nbytes: float) -> None:
        """One stage report of `worker` (process_cpu 0: a worker that does not report it)."""
        if process_cpu <= 0:
            return
        before = self.last.get(worker)
        self.last[worker] = process_cpu
        if before is None or process_cpu < before:
            return
        counted = computed and end > start
        codec = self.codec(worker, start, end) if self.codec is not None and end > start else 0.0
        self.rows.setdefault(worker, deque(maxlen=self.WINDOW)).append(
            (process_cpu - before, stage_cpu, float(counted), compute_cpu if counted else 0.0,
             self.profiled(worker, start, end) if counted else 0.0, float(nbytes), codec))

    def measured(self, min_frames: int = 1) -> Dict[int, WorkerOverhead]:
        """Each worker's WorkerOverhead, over at least `min_frames` frames."""
        out = {}
        for w, rows in self.rows.items():
            a = np.array(rows, dtype=np.float64).reshape(-1, self.COLUMNS)
            a = a[a[:, 0] <= self.OUTLIER * max(float(np.median(a[:, 0])), 1e-6)] if len(a) else a
            n = len(a)
            if n >= max(min_frames, 1):
                computed = max(float(a[:, 2].sum()), 1.0)
                cpu, stage, share, compute, profiled, nbytes, codec = a.mean(axis=0) * (
                    1, 1, 1, n / computed, n / computed, 1, 1)
                out[w] = WorkerOverhead(n, float(cpu), float(stage), float(compute), float(profiled), float(nbytes),
                                        float(share), float(codec))
        return out


def profiled_cpu(seg_time: np.ndarray, wall_per_cpu: Sequence[float]):
    """profiled(w, start, end) for OverheadMeter: segment times (the profile's seconds, CPU x wall_per_cpu) back to
    CPU seconds, summed by prefix."""
    ratio = np.array([r if r > 0 else 1.0 for r in wall_per_cpu], dtype=np.float64)
    prefix = np.zeros((seg_time.shape[0], seg_time.shape[1] + 1))
    np.cumsum(np.asarray(seg_time, dtype=np.float64) / ratio[:, None], axis=1, out=prefix[:, 1:])
    return lambda w, start, end: float(prefix[w, end] - prefix[w, start])


def profiled_codec_cpu(encode: Optional[np.ndarray], decode: Optional[np.ndarray], wall_per_cpu: Sequence[float]):
    """codec(w, start, end) for OverheadMeter: the profile's decode at `start` and encode at `end` ([W, K+1] seconds,
    CPU x wall_per_cpu) in CPU seconds, as the cost model charges a stage; None without a codec profile."""
    if encode is None or decode is None:
        return None
    ratio = np.array([r if r > 0 else 1.0 for r in wall_per_cpu], dtype=np.float64)[:, None]
    enc, dec = np.asarray(encode, dtype=np.float64) / ratio, np.asarray(decode, dtype=np.float64) / ratio
    return lambda w, start, end: float(dec[w, start] + enc[w, end])


def store_key(device: str, quota_s: float = 0.0, period_s: float = 0.0) -> str:
    """What the figures are stored under: the device tag and the CPU cap (a capped worker's compute ratio and
    threads differ with its quota); "" for an unknown device."""
    if not device:
        return ""
    if quota_s > 0 and period_s > 0:
        return "%s/cap %.4g" % (device, quota_s / period_s)
    return device + "/uncapped"


@dataclass
class Stored:
    """What one run measured for the workers of one device and engine (medians over them)."""

    compute_ratio: float
    message_us: float
    frames: int
    workers: int
    run_id: str = ""
    format: int = FORMAT


def grouped(measured: Dict[int, WorkerOverhead], devices: Sequence[str], net_ns_per_byte: float,
            run_id: str = "") -> Dict[str, Stored]:
    """key -> Stored: the medians over the measured workers of each device (or store_key) in `devices`; a worker of
    unknown device ("") is left out."""
    by_device: Dict[str, List[WorkerOverhead]] = {}
    for w, o in measured.items():
        if w < len(devices) and devices[w] and o.compute_ratio() is not None:
            by_device.setdefault(devices[w], []).append(o)
    return {d: Stored(float(np.median([o.compute_ratio() for o in os_])),
                      float(np.median([o.message_us(net_ns_per_byte) for o in os_])),
                      int(sum(o.frames for o in os_)), len(os_), run_id) for d, os_ in by_device.items()}


STORED_FIELDS = tuple(Stored.__dataclass_fields__)


def _valid(stored: Stored) -> bool:
    return stored.format == FORMAT and RATIO_BOUNDS[0] <= stored.compute_ratio <= RATIO_BOUNDS[1] \
        and 0 <= stored.message_us <= MESSAGE_US_MAX


def _entry(d) -> Optional[Stored]:
    """A Stored from one history entry (a dict of its fields), None when it does not read as this format."""
    try:
        stored = Stored(**{k: v for k, v in d.items() if k in STORED_FIELDS})
    except (AttributeError, TypeError):
        return None
    return stored if _valid(stored) else None


@dataclass
class History:
    """One store key's file: the figures planned with (`current`, the last accepted run), the last HISTORY accepted
    runs' (oldest first, `current` last) and the runs refused, kept apart (dicts: the figures, `why`, `reason`:
    unfinished | clamped | off_history, and `after`: the run_id of `current` when it was refused)."""

    current: Optional[Stored] = None
    accepted: List[Stored] = field(default_factory=list)
    rejected: List[Dict[str, object]] = field(default_factory=list)

    def as_json(self) -> Dict[str, object]:
        """The file: `current`'s fields at the top level (as files were written before the history), then the lists."""
        out: Dict[str, object] = asdict(self.current) if self.current is not None else {"format": FORMAT}
        out["history"] = [asdict(s) for s in self.accepted[-HISTORY:]]
        out["rejected"] = self.rejected[-REJECTED:]
        return out


def read(path: str) -> History:
    """The History stored at `path`: empty when there is none or it does not read; a file written before the history
    (its figures only) reads as a history of its one run."""
    try:
        with open(path) as f:
            d = json.load(f)
        if not isinstance(d, dict):
            raise ValueError("not an object")
    except FileNotFoundError:
        return History()
    except (OSError, ValueError) as exc:
        log.warning("measured overhead %s unreadable (%s): using the configured one", path, exc)
        return History()
    current = None
    if "compute_ratio" in d or "history" not in d:
        current = _entry(d)
        if current is None:
            log.warning("measured overhead %s out of bounds or of another format: using the configured one", path)
    accepted = [s for s in (_entry(e) for e in d.get("history") or []) if s is not None]
    if current is not None and (not accepted or accepted[-1] != current):
        accepted.append(current)  # a file of the figures alone
    rejected = [e for e in d.get("rejected") or [] if isinstance(e, dict)]
    return History(current, accepted[-HISTORY:], rejected[-REJECTED:])


def write(path: str, history: History) -> None:
    """Write one store key's History (atomically: a reader never sees half a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = atomic_tmp(path)
    with open(tmp, "w") as f:
        json.dump(history.as_json(), f)
    os.replace(tmp, path)


def save(path: str, stored: Stored) -> None:
    """Make `stored` the figures planned with at `path`, unchecked, and add it to the key's history."""
    history = read(path)
    history.current = stored
    history.accepted = (history.accepted + [stored])[-HISTORY:]
    write(path, history)


def load(path: str) -> Optional[Stored]:
    """The figures planned with at `path` (the last accepted run's), None when there are none or they do not read as
    this format."""
    return read(path).current


def clamped(stored: Stored) -> Optional[str]:
    """Why figures at a clamp bound are no measurement (None: they are not): a compute ratio at RATIO_BOUNDS, or a
    message CPU at MESSAGE_US_MAX. A message CPU of 0 is kept: the model charged all that was measured (the per-byte
    charge of large messages does), and planning with no more is right."""
    if stored.compute_ratio <= RATIO_BOUNDS[0] or stored.compute_ratio >= RATIO_BOUNDS[1]:
        return "compute x%.3f is at the clamp bound %s" % (stored.compute_ratio, RATIO_BOUNDS)
    if stored.message_us >= MESSAGE_US_MAX:
        return "%.0f us a message is at the clamp bound %.0f" % (stored.message_us, MESSAGE_US_MAX)
    return None


def disagreement(stored: Stored, accepted: Sequence[Stored]) -> Optional[str]:
    """Why `stored` is far off the median of the `accepted` runs' figures (None: it agrees, or there are none)."""
    if not accepted:
        return None
    ratio = float(np.median([s.compute_ratio for s in accepted]))
    message = float(np.median([s.message_us for s in accepted]))
    runs = "the median of %d stored run%s" % (len(accepted), "" if len(accepted) == 1 else "s")
    if not ratio / RATIO_TOLERANCE <= stored.compute_ratio <= ratio * RATIO_TOLERANCE:
        return "compute x%.3f is more than %gx off x%.3f, %s" % (stored.compute_ratio, RATIO_TOLERANCE, ratio, runs)
    if abs(stored.message_us - message) >= MESSAGE_SLACK_US and not \
            message / MESSAGE_TOLERANCE <= stored.message_us <= message * MESSAGE_TOLERANCE:
        return "%.0f us a message is more than %gx off %.0f, %s" % (stored.message_us, MESSAGE_TOLERANCE, message,
                                                                   runs)
    return None


def store(path: str, stored: Stored, unfinished: Optional[str] = None, check: bool = True) -> Optional[str]:
    """Add one run's figures to the History at `path`: None when they are stored (the next plan uses them), else why
    they were refused (kept in the file's `rejected` list, never planned with). Refused: a run that did not finish
    normally (`unfinished`: why), figures at a clamp bound, and (`check`) figures off the median of the key's
    history, unless they make RECOVER consecutive such runs that agree among themselves: those become the history."""
    history = read(path)
    why, reason = None, ""
    if unfinished is not None:
        why, reason = "the run did not finish normally (%s)" % unfinished, "unfinished"
    elif clamped(stored) is not None:
        why, reason = clamped(stored), "clamped"
    elif check:
        why, reason = disagreement(stored, history.accepted), "off_history"
    after = history.current.run_id if history.current is not None else ""
    if why is not None and reason == "off_history":
        streak = [s for s in (_entry(e) for e in history.rejected if e.get("reason") == "off_history"
                              and e.get("after") == after) if s is not None][-(RECOVER - 1):] + [stored]
        if len(streak) >= RECOVER and all(disagreement(s, streak) is None for s in streak):
            log.warning("measured overhead %s: %d runs in a row off the stored history agree among themselves: "
                        "they are the history now", path, len(streak))
            history.accepted, why = streak[:-1], None
    if why is None:
        history.current = stored
        history.accepted = (history.accepted + [stored])[-HISTORY:]
    else:
        history.rejected = (history.rejected + [dict(asdict(stored), why=why, reason=reason, after=after)])[-REJECTED:]
    write(path, history)
    return why


def load_for(cfg, device: str, quota_s: float = 0.0, period_s: float = 0.0) -> Optional[Stored]:
    """The figures runs stored for `device` at this CPU cap, else the device's last at any cap (None: neither, or an
    unknown device)."""
    key = store_key(device, quota_s, period_s)
    if not key:
        return None
    return load(overhead_path(cfg, key)) or load(overhead_path(cfg, device))


def apply(seg_time: np.ndarray, message_us: float, found: Sequence[Optional[Stored]]) -> Tuple[np.ndarray, np.ndarray]:
    """([W, K] segment times, [W] CPU us a message): each worker with stored figures gets its segment times times
    their compute ratio and their message CPU; one without keeps its profile and the configured `message_us`."""
    seg_time = np.array(seg_time, dtype=np.float64)
    per_message = np.full(seg_time.shape[0], float(message_us))
    for w, s in enumerate(found):
        if s is not None:
            seg_time[w] *= s.compute_ratio
            per_message[w] = s.message_us
    return seg_time, per_message
