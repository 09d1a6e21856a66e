"""`cnnvideo bench codec`: our closed-loop hop codec vs the original's pickled per-channel CSR, at every cut.

For each frame the whole model runs once (segment by segment) and the tensor at every cut goes
through a HopSender -> bytes -> HopReceiver pair (ours) and through the original method (per
channel: pickled SciPy CSR of the float32 difference if `2*nnz + rows + 1 < rows*cols`, else the
pickled dense channel). Pickle is used here only, to reproduce the baseline. Byte figures are means
over the delta frames (frame 0 is the keyframe, reported separately as `bytes_keyframe`); MB/s are
MB (1e6 bytes) of dense float32 tensor data over the median per-frame time (robust to the CPU
being shared). `speedup_vs_baseline_total` compares the summed median times of all hops.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import time
from typing import Dict, Iterator, List, Tuple

import numpy as np

from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.video.frames import default_video, read_frames, synthetic_frames
from cnnvideo.wire.hop import HopReceiver, HopSender

log = logging.getLogger(__name__)

SEED = 0


# ------------------------------------------------------------------------------------------ baseline


def _channels(x: np.ndarray) -> np.ndarray:
    """View a cut tensor as (channels, rows, cols) the way the original split it."""
    if x.dtype == np.uint8 and x.ndim == 4:  # (1,H,W,3) frame -> 3 colour planes
        return np.ascontiguousarray(x[0].transpose(2, 0, 1)).astype(np.float32)
    if x.ndim == 4:
        return x.reshape(x.shape[1], x.shape[2], x.shape[3]).astype(np.float32, copy=False)
    if x.ndim == 3:
        return x.astype(np.float32, copy=False)
    return x.reshape(1, 1, -1).astype(np.float32, copy=False)


def baseline_encode(cur: np.ndarray, prev: np.ndarray) -> bytes:
    """The original codec: per channel, pickled CSR of (cur - prev) when sparse enough, else pickled dense."""
    from scipy import sparse

    diff = cur - prev
    rows, cols = diff.shape[1], diff.shape[2]
    out = []
    for ch in diff:
        nnz = int(np.count_nonzero(ch))
        out.append(sparse.csr_matrix(ch) if 2 * nnz + rows + 1 < rows * cols else ch)
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


def baseline_decode(buf: bytes, prev: np.ndarray) -> np.ndarray:
    """Inverse of baseline_encode: unpickle, densify each channel, add to the previous tensor."""
    chans = pickle.loads(buf)  # noqa: S301 - the baseline being measured; never used on our data path
    diff = np.stack([c.toarray() if hasattr(c, "toarray") else c for c in chans])
    return prev + diff


# ------------------------------------------------------------------------------------------ inputs


def _default_video() -> str:
    """media/vtest.avi (cwd or repo root) if present, else '' (synthetic clip)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (default_video(), os.path.join(here, "..", "..", "media", "vtest.avi")):
        if path and os.path.isfile(path):
            return os.path.normpath(path)
    return ""


def _frames(video: str, frame_size: Tuple[int, int], n: int) -> Iterator[np.ndarray]:
    """Frames from the video, or the synthetic static-camera clip when video is ''."""
    if video:
        return read_frames(video, frame_size, limit=n)
    return synthetic_frames(n, frame_size, seed=SEED)


def _activations(stages: list, frame: np.ndarray) -> List[np.ndarray]:
    """The tensor at every cut for one frame (segment by segment)."""
    x = frame[np.newaxis] if frame.ndim == 3 else frame
    outs = [x]
    for stage in stages:
        x = stage.run(x)
        outs.append(x)
    return outs


# ------------------------------------------------------------------------------------------ measuring


class _HopStats:
    """Accumulates ours-vs-baseline bytes and times for one cut."""

    def __init__(self, cut, threshold: float) -> None:
        self.cut = cut
        self.sender = HopSender(threshold=threshold)
        self.receiver = HopReceiver(max_bytes=max(4 * int(np.prod(cut.shape)), 1 << 20))
        self.prev = None  # baseline receiver's and sender's previous float32 tensor
        self.keyframe_bytes = 0
        self.sums = dict(bytes=0.0, base=0.0, nz=0.0, err=0.0)
        self.times = dict(enc=[], dec=[], benc=[], bdec=[])  # per delta frame, seconds
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        """Run one frame's tensor through both codecs."""
        t0 = time.perf_counter()
        buf = self.sender.encode(x)
        t1 = time.perf_counter()
        y = self.receiver.decode(buf)
        t2 = time.perf_counter()
        err = float(np.max(np.abs(y.astype(np.float64) - x))) if x.size else 0.0
        cur = _channels(x)
        if self.prev is None:
            self.keyframe_bytes = len(buf)
            self.prev = cur
            return
        t3 = time.perf_counter()
        bbuf = baseline_encode(cur, self.prev)
        t4 = time.perf_counter()
        rec = baseline_decode(bbuf, self.prev)
        t5 = time.perf_counter()
        self.prev = rec
        s = self.sums
        s["bytes"] += len(buf)
        s["base"] += len(bbuf)
        for key, dt in (("enc", t1 - t0), ("dec", t2 - t1), ("benc", t4 - t3), ("bdec", t5 - t4)):
            self.times[key].append(dt)
        s["nz"] += self.sender.last_nnz / float(max(self.sender.last_numel, 1))
        s["err"] = max(s["err"], err)
        self.n += 1

    def median_times(self) -> Dict[str, float]:
        """Median seconds per delta frame for each timed step (robust to scheduler hiccups)."""
        return {k: float(np.median(v)) if v else 0.0 for k, v in self.times.items()}

    def result(self) -> Dict[str, object]:
        """Per-hop JSON entry."""
        n, s, c = max(self.n, 1), self.sums, self.cut
        dense = 4 * int(np.prod(c.shape))
        mb = dense / 1e6
        t = self.median_times()

        def rate(sec):
            return round(mb / sec, 2) if sec > 0 else None

        return {
            "cut": c.index,
            "name": c.name,
            "shape": list(c.shape),
            "dtype": c.dtype,
            "bytes_dense_fp32": dense,
            "bytes": round(s["bytes"] / n, 1),
            "bytes_keyframe": self.keyframe_bytes,
            "bytes_baseline": round(s["base"] / n, 1),
            "ratio_vs_baseline": round(s["bytes"] / s["base"], 4) if s["base"] else None,
            "nz_rate": round(s["nz"] / n, 4),
            "encode_mbps": rate(t["enc"]),
            "decode_mbps": rate(t["dec"]),
            "baseline_encode_mbps": rate(t["benc"]),
            "baseline_decode_mbps": rate(t["bdec"]),
            "speedup_vs_baseline": round((t["benc"] + t["bdec"]) / (t["enc"] + t["dec"]), 2)
            if t["enc"] + t["dec"] > 0 else None,
            "max_abs_err": s["err"],
        }


def measure(model_name: str, video: str, frames: int, frame_size: Tuple[int, int], threshold: float,
            input_threshold: float) -> Dict[str, object]:
    """Run the benchmark and return the JSON-ready result."""
    model = build_model(model_name, weights="random", seed=SEED)
    graph = LayerGraph.from_model(model, frame_size)
    stages = [TorchStage(graph, k, k + 1) for k in range(len(graph.cuts) - 1)]
    stats = [_HopStats(c, input_threshold if c.index == 0 else threshold) for c in graph.cuts]
    count = 0
    t0 = time.perf_counter()
    for frame in _frames(video, frame_size, frames):
        for st, x in zip(stats, _activations(stages, frame)):
            st.add(x)
        count += 1
    hops = [st.result() for st in stats]
    later = [h["ratio_vs_baseline"] for h in hops[1:] if h["ratio_vs_baseline"] is not None]
    speed = [h["speedup_vs_baseline"] for h in hops if h["speedup_vs_baseline"] is not None]
    meds = [st.median_times() for st in stats]
    tot_ours = sum(m["enc"] + m["dec"] for m in meds)
    tot_base = sum(m["benc"] + m["bdec"] for m in meds)
    return {
        "model": model_name,
        "weights": "random",
        "seed": SEED,
        "video": video or "synthetic",
        "frames": count,
        "frame_size": list(frame_size),
        "threshold": threshold,
        "input_threshold": input_threshold,
        "ratio_vs_baseline_median": float(np.median(later)) if later else None,
        "input_ratio_vs_baseline": hops[0]["ratio_vs_baseline"],
        "speedup_vs_baseline_median": float(np.median(speed)) if speed else None,
        "speedup_vs_baseline_total": round(tot_base / tot_ours, 2) if tot_ours > 0 else None,
        "bytes_per_frame": round(sum(float(h["bytes"]) for h in hops), 1),
        "bytes_baseline_per_frame": round(sum(float(h["bytes_baseline"]) for h in hops), 1),
        "wall_s": round(time.perf_counter() - t0, 2),
        "hops": hops,
    }


def _table(result: Dict[str, object]) -> str:
    """A human-readable table of the per-hop figures."""
    lines = ["%-14s %12s %12s %12s %7s %7s %8s" % ("cut", "dense", "ours", "baseline", "ratio", "nz", "speedup")]
    for h in result["hops"]:
        lines.append("%-14s %12d %12.0f %12.0f %7s %7.3f %8s" % (
            h["name"], h["bytes_dense_fp32"], h["bytes"], h["bytes_baseline"], h["ratio_vs_baseline"],
            h["nz_rate"], h["speedup_vs_baseline"]))
    lines.append("median ratio (later cuts) %s, input ratio %s, median speedup %s" % (
        result["ratio_vs_baseline_median"], result["input_ratio_vs_baseline"], result["speedup_vs_baseline_median"]))
    return "\n".join(lines)


def run(args) -> int:
    """CLI entry: print one JSON object (--json) or a table."""
    video = args.video if args.video else _default_video()
    frames = int(args.frames)
    if frames < 2:
        log.warning("--frames %d: need at least 2 (a keyframe and one delta); using 2", frames)
        frames = 2
    if args.threshold < 0 or args.input_threshold < 0:
        raise SystemExit("cnnvideo bench codec: thresholds must be >= 0")
    log.info("bench codec: model %s, video %s, %d frames, %s", args.model, video or "synthetic", frames,
             tuple(args.frame_size))
    result = measure(args.model, video, frames, tuple(args.frame_size), float(args.threshold),
                     float(args.input_threshold))
    print(json.dumps(result) if args.json else _table(result))
    return 0
