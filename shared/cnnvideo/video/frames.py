"""Read video frames as uint8 RGB arrays of the configured size; make synthetic static-camera clips for tests."""
from __future__ import annotations

import os
from typing import Iterator, Tuple

import numpy as np


class VideoError(ValueError):
    """The video cannot be opened or decoded."""


_CV2 = None  # the cv2 module once imported (to_rgb runs for every frame)


def _cv2():
    global _CV2
    if _CV2 is not None:
        return _CV2
    # FFmpeg's and OpenCV's own log lines (a refused connection, a backend probe) would repeat our one-line
    # errors on stderr; set CNNVIDEO_CV_LOGS=1 to see them
    if not os.environ.get("CNNVIDEO_CV_LOGS"):
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
        os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    import cv2  # local: cv2 is heavy and only roles that read video need it

    _CV2 = cv2
    return cv2


def single_threaded() -> None:
    """OpenCV runs every call on the calling thread (cv2.setNumThreads(1)), for a role whose frame reading runs under
    a CPU cap beside its other threads (the master): its pool of worker threads spins after each call, and for the
    sub-millisecond calls of reading a frame the hand-off costs more than it saves (resize 768x576 -> 720x480 and
    the RGB swap between frames: 2.7 ms of CPU a frame on two threads, 1.4 ms on one)."""
    _cv2().setNumThreads(1)


def swap_rb(image: np.ndarray) -> np.ndarray:
    """A contiguous copy of an (H, W, 3) image with its first and last channels swapped (BGR <-> RGB): OpenCV's
    cvtColor for uint8 (0.07 ms for 480x720 against 1.2 ms for numpy's reversed-stride copy; the same bytes),
    numpy's copy for anything else."""
    three = image.ndim == 3 and image.shape[2] == 3 and image.size > 0
    if three and image.dtype == np.uint8 and image.flags.c_contiguous:
        cv2 = _cv2()
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    return np.ascontiguousarray(image[:, :, ::-1])


def interpolation(src: Tuple[int, int], dst: Tuple[int, int]) -> int:
    """OpenCV's interpolation for resizing (height, width) `src` to `dst`: INTER_AREA when an axis shrinks 2x or more
    (it averages every source pixel in, so fine detail does not alias), INTER_LINEAR for a milder change, where
    every source pixel still weighs in and AREA's general path costs 5-6x more (vtest's 768x576 to 720x480: 3.3 ms
    of CPU a frame against 0.55 ms, most of what the master spent reading a frame)."""
    cv2 = _cv2()
    shrink = max(src[0] / float(max(dst[0], 1)), src[1] / float(max(dst[1], 1)))
    return cv2.INTER_AREA if shrink >= 2.0 else cv2.INTER_LINEAR


def resize(bgr: np.ndarray, frame_size: Tuple[int, int]) -> np.ndarray:
    """`bgr` at `frame_size` (height, width), with interpolation()'s choice; the array itself when it is that size."""
    height, width = frame_size
    if bgr.shape[:2] == (height, width):
        return bgr
    return _cv2().resize(bgr, (width, height), interpolation=interpolation(bgr.shape[:2], (height, width)))


def to_rgb(bgr: np.ndarray, frame_size: Tuple[int, int]) -> np.ndarray:
    """An OpenCV BGR frame as (H, W, 3) uint8 RGB of `frame_size` (height, width) (resize())."""
    return swap_rb(resize(bgr, frame_size))


def read_frames(path: str, frame_size: Tuple[int, int], limit: int = 0, loop: bool = True) -> Iterator[np.ndarray]:
    """Yield up to `limit` frames (0 = all) as (H, W, 3) uint8 RGB; loop the clip if it is shorter."""
    cv2 = _cv2()
    if not os.path.isfile(path):
        raise VideoError("video file not found: %s" % path)
    height, width = frame_size
    produced = 0
    while True:
        cap = cv2.VideoCapture(path)
        if not cap.isOpened():
            raise VideoError("cannot open video (not a video file or unsupported codec): %s" % path)
        got_any = False
        try:
            while limit <= 0 or produced < limit:
                ok, bgr = cap.read()
                if not ok:
                    break
                got_any = True
                yield to_rgb(bgr, (height, width))
                produced += 1
        finally:
            cap.release()
        if not got_any:
            raise VideoError("video has no decodable frames: %s" % path)
        if limit <= 0 or produced >= limit or not loop:
            return


def synthetic_frames(n: int, frame_size: Tuple[int, int], seed: int = 0, noise: int = 2) -> Iterator[np.ndarray]:
    """A static textured background with a few moving blocks and sensor noise, like a fixed camera."""
    rng = np.random.RandomState(seed)
    height, width = frame_size
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack(
        [(xx * 255 // max(width - 1, 1)), (yy * 255 // max(height - 1, 1)), ((xx + yy) * 7) % 256], axis=-1
    ).astype(np.int16)
    base += rng.randint(0, 40, size=base.shape).astype(np.int16)
    blocks = [
        (rng.randint(0, height), rng.randint(0, width), rng.randint(1, 4), rng.randint(1, 4), rng.randint(0, 256, 3))
        for _ in range(4)
    ]
    bh, bw = max(height // 8, 1), max(width // 10, 1)
    for t in range(n):
        frame = base.copy()
        for y0, x0, vy, vx, colour in blocks:
            y = (y0 + vy * t) % max(height - bh, 1)
            x = (x0 + vx * t) % max(width - bw, 1)
            frame[y : y + bh, x : x + bw] = colour
        if noise:
            mask = rng.rand(height, width, 1) < 0.05
            frame = frame + mask * rng.randint(-noise, noise + 1, size=frame.shape)
        yield np.clip(frame, 0, 255).astype(np.uint8)


def read_image(path: str, frame_size: Tuple[int, int]) -> np.ndarray:
    """A photo as an (H, W, 3) uint8 RGB array of the frame size (resized as read_frames resizes)."""
    cv2 = _cv2()
    bgr = cv2.imread(path) if os.path.isfile(path) else None
    if bgr is None:
        raise VideoError("cannot read image: %s" % path)
    return to_rgb(bgr, frame_size)


def photo_clip(photo: np.ndarray, n: int, seed: int = 0, noise: float = 2.0, patch: int = 12) -> Iterator[np.ndarray]:
    """A static camera looking at `photo`: Gaussian sensor noise (sigma `noise` levels) on every frame plus one
    small grey patch (`patch` pixels square) moving along the bottom edge."""
    rng = np.random.RandomState(seed)
    height, width = photo.shape[:2]
    base = photo.astype(np.float32)
    y = max(height - patch - 2, 0)
    for t in range(n):
        frame = base + rng.normal(0.0, noise, size=base.shape).astype(np.float32) if noise else base.copy()
        x = (4 + 6 * t) % max(width - patch, 1)
        frame[y:y + patch, x:x + patch] = 128.0
        yield np.clip(np.rint(frame), 0, 255).astype(np.uint8)


def write_video(path: str, frames: Iterator[np.ndarray], fps: float = 25.0) -> str:
    """Write RGB frames to a lossless-enough AVI (MJPG) that OpenCV can read back."""
    cv2 = _cv2()
    writer = None
    try:
        for frame in frames:
            if writer is None:
                h, w = frame.shape[:2]
                writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
                if not writer.isOpened():
                    raise VideoError("cannot write video: %s" % path)
            writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    finally:
        if writer is not None:
            writer.release()
    return path


def default_video() -> str:
    """The sample video path (fetched by scripts/fetch_video.sh)."""
    return os.environ.get("CNNVIDEO_VIDEO", os.path.join("media", "vtest.avi"))
