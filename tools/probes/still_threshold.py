"""The delta.input_threshold a still scene of vtest.avi needs before its input deltas come out empty.

Two measures, at each frame size asked (the master resizes with INTER_AREA, as here):

- real: vtest.avi's own still pixels. The background is the per-pixel temporal median of the clip (people keep
  moving, so the median is the empty hall); a pixel is still over a window of `--window` frames when it and its
  neighbours stay within `--person` levels of the background all along (no one passes). A closed-loop sender
  keeps what it last sent, so such a pixel stays unsent at threshold T when max_t |x_t - x_first| <= T over the
  window. Reported: the quantiles of that need over still pixel-windows, and per window the largest need over its
  still pixels (what a frame made of such pixels needs to be empty).
- synthetic: one vtest frame (the background median: the empty hall) plus Gaussian sensor noise of the sigma
  measured on the still pixels at full resolution (robust: 1.4826 x MAD of their frame-to-frame differences /
  sqrt 2), quantised to uint8, resized, then played through the real closed-loop HopSender at T = 0, 1, ...: the
  share of empty deltas (after the keyframe) per T, and the smallest T where every still frame is empty.

    python tools/probes/still_threshold.py [--video media/vtest.avi] [--sizes 96x128,480x720] \
        [--frames 60] [--limit 200]
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from cnnvideo.wire.hop import HopSender


def _read(path: str, limit: int):
    import cv2

    cap = cv2.VideoCapture(path)
    frames = []
    while len(frames) < limit:
        ok, bgr = cap.read()
        if not ok:
            break
        frames.append(bgr[:, :, ::-1])
    cap.release()
    if not frames:
        raise SystemExit("cannot read %s" % path)
    return np.stack(frames)


def _resize(frames: np.ndarray, size) -> np.ndarray:
    import cv2

    h, w = size
    return np.stack([cv2.resize(np.ascontiguousarray(f), (w, h), interpolation=cv2.INTER_AREA) for f in frames])


def still_mask(frames: np.ndarray, background: np.ndarray, person: int) -> np.ndarray:
    """[T, H, W] True where the pixel (all channels) and its 3x3 neighbours are within `person` of the background."""
    import cv2

    kernel = np.ones((3, 3), np.uint8)
    bg = background.astype(np.int16)
    out = np.empty(frames.shape[:3], dtype=bool)
    for i, f in enumerate(frames):  # frame by frame: bounded memory
        far = (np.abs(f.astype(np.int16) - bg) > person).any(axis=-1)
        out[i] = cv2.dilate(far.astype(np.uint8), kernel) == 0
    return out


def real_need(frames: np.ndarray, window: int, person: int):
    """Closed-loop threshold each still pixel-window needs, and each window's largest need."""
    background = np.median(frames, axis=0).astype(np.uint8)
    still = still_mask(frames, background, person)
    needs, per_window = [], []
    for t0 in range(0, frames.shape[0] - window + 1, window):
        ok = still[t0:t0 + window].all(axis=0)
        if not ok.any():
            continue
        x = frames[t0:t0 + window].astype(np.int16)
        need = np.abs(x[1:] - x[0]).max(axis=(0, 3))[ok]
        needs.append(need)
        per_window.append(int(need.max()))
    needs = np.concatenate(needs)
    q = {str(p): float(np.percentile(needs, p)) for p in (50, 90, 99, 99.9)}
    return {"pixel_windows": int(needs.size), "need_quantiles": q, "need_max": int(needs.max()),
            "share_need_0": round(float((needs == 0).mean()), 4),
            "window_need": {"median": float(np.median(per_window)), "p90": float(np.percentile(per_window, 90)),
                            "max": int(max(per_window)), "windows": len(per_window)}}


def noise_sigma(frames: np.ndarray, person: int) -> float:
    """Robust per-pixel temporal noise sigma on the still pixels (full resolution)."""
    background = np.median(frames, axis=0).astype(np.uint8)
    still = still_mask(frames, background, person)
    hist = np.zeros(511, dtype=np.int64)  # frame-to-frame differences -255..255 of still pixels, counted
    for i in range(1, frames.shape[0]):
        both = still[i] & still[i - 1]
        d = (frames[i].astype(np.int16) - frames[i - 1].astype(np.int16))[both].reshape(-1)
        hist += np.bincount(d + 255, minlength=511)
    values = np.arange(-255, 256, dtype=np.float64)
    n = hist.sum()
    mean = (hist * values).sum() / n
    std = np.sqrt((hist * (values - mean) ** 2).sum() / n)

    def median(h, v):
        order = np.argsort(v)
        c = np.cumsum(h[order])
        return v[order][np.searchsorted(c, (c[-1] + 1) // 2)]

    med = median(hist, values)
    mad = median(hist, np.abs(values - med))
    if mad == 0:  # most still differences are exactly 0 (the codec's skipped blocks): use the std instead
        return float(std / np.sqrt(2.0))
    return float(1.4826 * mad / np.sqrt(2.0))


def synthetic_empty(background: np.ndarray, sigma: float, size, frames: int, thresholds, seed: int = 0):
    """Share of empty closed-loop input deltas per threshold over `frames` noisy still frames (after the key)."""
    rng = np.random.default_rng(seed)
    clip = []
    for _ in range(frames + 1):
        noisy = background.astype(np.float64) + rng.normal(0.0, sigma, background.shape)
        clip.append(np.clip(np.rint(noisy), 0, 255).astype(np.uint8))
    clip = _resize(np.stack(clip), size)
    out = {}
    for t in thresholds:
        sender = HopSender(threshold=t)
        sender.encode(clip[0][None])
        empty = 0
        for f in clip[1:]:
            sender.encode(f[None])
            empty += sender.last_nnz == 0
        out[t] = round(empty / float(frames), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--video", default="media/vtest.avi")
    ap.add_argument("--sizes", default="96x128,480x720")
    ap.add_argument("--frames", type=int, default=60, help="synthetic still frames after the keyframe")
    ap.add_argument("--window", type=int, default=10, help="frames of a real still window (1 s of vtest)")
    ap.add_argument("--person", type=int, default=30, help="levels from the background that mean someone is there")
    ap.add_argument("--max-threshold", type=int, default=12)
    ap.add_argument("--limit", type=int, default=200, help="frames of the video read (memory: 1.3 MB each)")
    args = ap.parse_args()
    full = _read(args.video, args.limit)
    sigma = noise_sigma(full, args.person)
    background = np.median(full, axis=0).astype(np.uint8)
    result = {"video": args.video, "frames": int(full.shape[0]), "noise_sigma_full_res": round(sigma, 3), "sizes": {}}
    for spec in args.sizes.split(","):
        size = tuple(int(v) for v in spec.split("x"))
        small = _resize(full, size)
        syn = synthetic_empty(background, sigma, size, args.frames, range(args.max_threshold + 1))
        first = next((t for t, share in syn.items() if share == 1.0), None)
        result["sizes"][spec] = {"real_still_pixels": real_need(small, args.window, args.person),
                                 "synthetic_empty_share": syn, "synthetic_all_empty_at": first}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
