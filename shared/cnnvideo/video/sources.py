"""Frame sources: a file (as fast as asked, or played as if live), a stream URL, a V4L2 device, a GStreamer pipeline.

A reader thread captures frames as they arrive into a small bounded queue. When the consumer is slower than the
source, `drop` decides which captured frames are skipped (`newest`: the frames just captured wait for room and are
skipped if there is none; `oldest`: the oldest queued frame makes room; `none`: the reader waits). Every captured
frame is delivered or counted as skipped, never lost. A stream that drops is reopened with backoff (counted in
`reconnects`; each time it stopped and came back is an outage: `outages`, `outage_s` and the frames its fps would
have given meanwhile, `missed_frames`); a source that cannot be opened, a frame size that changes mid-stream or a
stream that stays down raise SourceError with one line naming the source.

When `cnnvideo local` with tc links runs the roles in a network namespace of their own, a live source is opened
in the host's network (cnnvideo.hostnet, which owns that rule): a camera on the host's 127.0.0.1 or on the LAN
stays reachable, and only the capture threads leave the role's namespace.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterator, Optional, Tuple

import numpy as np

from cnnvideo.hostnet import NetnsError, in_netns
from cnnvideo.video.frames import VideoError, _cv2, read_frames, to_rgb

log = logging.getLogger(__name__)

KINDS = ("file", "stream", "device", "gstreamer")
DROPS = ("newest", "oldest", "none")
STREAM_SCHEMES = ("rtsp://", "rtsps://", "http://", "https://", "rtmp://", "udp://", "tcp://", "srt://")
OPEN_TIMEOUT_MS = 5000  # FFmpeg open/read timeouts for streams: a dead URL fails in seconds, not minutes


class SourceError(VideoError):
    """The source cannot be opened, stays down, or sends frames the run cannot use."""


@dataclass
class SourceOptions:
    """How a source is read (config key `source`)."""

    realtime: bool = False  # a file is played at its own fps, as if it were a camera
    drop: str = "oldest"  # newest | oldest | none: which captured frames are skipped when the consumer lags
    queue: int = 4  # captured frames held at most (bounded memory)
    loop: bool = True  # a file starts again at its end
    fps: float = 0.0  # pace of a realtime file (0 = the file's own)
    reopen_s: float = 10.0  # a dropped stream is reopened with backoff for this long


@dataclass
class Captured:
    """One captured frame: capture number (from 0, skipped ones included), capture time (time.time()), RGB."""

    seq: int
    t: float
    rgb: np.ndarray


def kind_of(video: str) -> str:
    """file | stream (URL) | device (/dev/videoN) | gstreamer (a pipeline: elements joined by '!')."""
    low = video.strip().lower()
    if low.startswith(STREAM_SCHEMES):
        return "stream"
    if low.startswith("/dev/video") or low.startswith("v4l2://"):
        return "device"
    if "!" in video:
        return "gstreamer"
    return "file"


def has_gstreamer() -> bool:
    """True if this OpenCV was built with GStreamer."""
    cv2 = _cv2()
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith("GStreamer:"):
            return "YES" in line
    return False


def _shown(video: str) -> str:
    """The source as shown in messages (a URL without its password)."""
    if "://" in video and "@" in video.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = video.split("://", 1)
        return "%s://***@%s" % (scheme, rest.split("@", 1)[1])
    return video


def open_capture(video: str, kind: str):
    """An opened cv2.VideoCapture for `video`, else SourceError saying why."""
    cv2 = _cv2()

    shown = _shown(video)
    if kind == "file":
        if not os.path.isfile(video):
            raise SourceError("video file not found: %s" % video)
        cap = cv2.VideoCapture(video)
        what = "cannot open video (not a video file or unsupported codec): %s" % video
    elif kind == "device":
        path = video[len("v4l2://"):] if video.startswith("v4l2://") else video
        if not os.path.exists(path):
            raise SourceError("video device %s does not exist" % path)
        cap = cv2.VideoCapture(path, cv2.CAP_V4L2)
        what = "cannot open video device %s (busy, no permission, or not a capture device)" % path
    elif kind == "gstreamer":
        if not has_gstreamer():
            raise SourceError("video is a GStreamer pipeline but this OpenCV has no GStreamer support: %s" % video)
        cap = cv2.VideoCapture(video, cv2.CAP_GSTREAMER)
        what = "cannot start GStreamer pipeline: %s" % video
    else:
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS, cv2.CAP_PROP_READ_TIMEOUT_MSEC, OPEN_TIMEOUT_MS]
        cap = cv2.VideoCapture(video, cv2.CAP_FFMPEG, params)
        what = "cannot open stream %s (unreachable, refused, or not a video stream)" % shown
    if not cap.isOpened():
        cap.release()
        raise SourceError(what)
    return cap


def open_live(video: str, kind: str, netns: Optional[str] = None):
    """open_capture, in the host's network when the role runs in a namespace of its own (cnnvideo.hostnet; or in
    network namespace `netns` when given, "" for this thread's) for a source that is not a file. The capture's
    sockets, and threads the decoder starts, stay in that namespace whichever thread reads them later."""
    if kind == "file":
        return open_capture(video, kind)
    try:
        return in_netns(lambda: open_capture(video, kind), netns, name="source-open")
    except NetnsError as exc:
        raise SourceError("cannot read source %s from the host's network (%s)" % (_shown(video), exc)) from None


def probe(video: str) -> None:
    """Open and release a device or pipeline (SourceError, one line, if it cannot be opened): bad input is found
    before any role starts. Files are checked by the config; stream URLs only by the master (a single-client
    server, like `ffmpeg -listen 1`, would spend its one connection on a probe)."""
    kind = kind_of(video)
    if kind in ("device", "gstreamer"):
        open_live(video, kind).release()


class Source:
    """Captured frames of one source through a bounded queue (see the module doc)."""

    def __init__(self, video: str, frame_size: Tuple[int, int], options: Optional[SourceOptions] = None,
                 limit: int = 0) -> None:
        self.video = video
        self.limit = int(limit)  # a file read as fast as asked stops after this many frames (0 = no limit)
        self.kind = kind_of(video)
        self.frame_size = (int(frame_size[0]), int(frame_size[1]))
        self.options = options or SourceOptions()
        if self.options.drop not in DROPS:
            raise SourceError("source.drop must be one of %s, got %r" % ("|".join(DROPS), self.options.drop))
        # a file read as fast as the consumer asks never skips: the reader waits for room
        self.drop = self.options.drop if self.live else "none"
        self.cond = threading.Condition()
        self.queue: Deque[Captured] = collections.deque()
        self.cap_size = max(int(self.options.queue), 1)
        self.captured = self.skipped = self.delivered = self.reconnects = 0
        self.outages = 0  # times a stream, device or pipeline stopped sending and came back
        self.outage_s = 0.0  # seconds from the last frame before each outage to the first after it
        self.native: Optional[Tuple[int, int]] = None  # (h, w) of the first frame: a change mid-run is an error
        self.fps = 0.0
        self.error: Optional[str] = None
        self.ended = False
        self.closed = False
        self.thread: Optional[threading.Thread] = None
        self._cap = None

    @property
    def live(self) -> bool:
        """True if frames arrive on their own clock (a stream, a device, a pipeline, a realtime file)."""
        return self.kind != "file" or self.options.realtime

    def open(self) -> "Source":
        """Open the source (SourceError if it cannot be) and start the reader thread."""
        cv2 = _cv2()

        self._cap = open_live(self.video, self.kind)
        fps = float(self._cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = self.options.fps if self.options.fps > 0 else (fps if 0 < fps < 1000 else 25.0)
        self.thread = threading.Thread(target=self._run, name="source-reader", daemon=True)
        self.thread.start()
        return self

    # ------------------------------------------------------------------ reader side
    def _run(self) -> None:
        try:
            self._read_loop()
        except SourceError as exc:
            with self.cond:
                self.error = str(exc)
        except Exception as exc:  # an unexpected decoder failure still ends the run with one line
            with self.cond:
                self.error = "source %s failed: %s" % (_shown(self.video), exc)
        finally:
            if self._cap is not None:
                self._cap.release()
                self._cap = None
            with self.cond:
                self.ended = True
                self.cond.notify_all()

    def _read_loop(self) -> None:
        period = 1.0 / self.fps if self.fps > 0 else 0.0
        t0 = time.time()
        n_file = 0  # frames read from a file since t0 (pacing of a realtime file)
        last_good = time.time()
        delay = 0.2
        down = False  # a read failed since the last good frame (a stream's outage)
        while not self.closed:
            if self.limit > 0 and not self.live and self.captured >= self.limit:
                return
            ok, bgr = self._cap.read()
            if ok and bgr is not None and bgr.ndim == 3 and bgr.size:
                delay = 0.2
                now = time.time()
                if down:
                    with self.cond:
                        self.outages += 1
                        self.outage_s += now - last_good
                    down = False
                last_good = now
                if self.kind == "file" and self.options.realtime:
                    due = t0 + n_file * period
                    n_file += 1
                    wait = due - time.time()
                    if wait > 0:
                        time.sleep(wait)
                self._offer(self._frame(bgr))
                continue
            if self.closed:
                return
            if self.kind == "file":
                if self.captured == 0:
                    raise SourceError("video has no decodable frames: %s" % self.video)
                if not self.options.loop:
                    return
                self._cap.release()
                self._cap = open_capture(self.video, "file")
                continue
            if self.captured == 0:
                raise SourceError("source %s sends no decodable video frames" % _shown(self.video))
            # a stream/device/pipeline that stopped: reopen with backoff until reopen_s without a frame
            down = True
            waited = time.time() - last_good
            if waited > self.options.reopen_s:
                raise SourceError("source %s stopped sending frames and did not come back within %.0f s "
                                  "(%d reconnects)" % (_shown(self.video), self.options.reopen_s, self.reconnects))
            log.warning("source %s: no frame; reconnecting in %.1f s", _shown(self.video), delay)
            self._cap.release()
            self._cap = None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            if self.closed:
                return
            try:
                self._cap = open_live(self.video, self.kind)
                self.reconnects += 1
                log.warning("source %s: reconnected (%d)", _shown(self.video), self.reconnects)
            except SourceError:
                self._cap = _Closed()

    def _frame(self, bgr: np.ndarray) -> Captured:
        shape = (int(bgr.shape[0]), int(bgr.shape[1]))
        if self.native is None:
            self.native = shape
        elif shape != self.native:
            raise SourceError("source %s changed frame size mid-run: %dx%d -> %dx%d at captured frame %d"
                              % (_shown(self.video), self.native[1], self.native[0], shape[1], shape[0],
                                 self.captured))
        return Captured(self.captured, time.time(), to_rgb(bgr, self.frame_size))

    def _offer(self, item: Captured) -> None:
        with self.cond:
            self.captured += 1
            if len(self.queue) >= self.cap_size:
                if self.drop == "none":
                    while len(self.queue) >= self.cap_size and not self.closed:
                        self.cond.wait(0.5)
                elif self.drop == "newest":
                    self.skipped += 1
                    return
                else:
                    self.queue.popleft()
                    self.skipped += 1
            if self.closed:
                self.skipped += 1
                return
            self.queue.append(item)
            self.cond.notify_all()

    # ------------------------------------------------------------------ consumer side
    def get(self, timeout: Optional[float] = None) -> Optional[Captured]:
        """The next frame; None at the end of the source (or after `timeout` s with nothing: check `ended`).
        Frames already queued are delivered before the reader's error is raised as SourceError."""
        deadline = None if timeout is None else time.time() + timeout
        with self.cond:
            while not self.queue:
                if self.error is not None:
                    raise SourceError(self.error)
                if self.ended or self.closed:
                    return None
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    return None
                self.cond.wait(0.5 if left is None else min(left, 0.5))
            item = self.queue.popleft()
            self.delivered += 1
            self.cond.notify_all()
            return item

    def close(self) -> None:
        """Stop the reader; frames still queued count as skipped (captured = delivered + skipped)."""
        with self.cond:
            self.closed = True
            self.skipped += len(self.queue)
            self.queue.clear()
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(OPEN_TIMEOUT_MS / 1000.0 + 2.0)

    def stats(self) -> Dict[str, Any]:
        """What the report says about the source."""
        with self.cond:
            return {"kind": self.kind, "video": _shown(self.video), "live": self.live,
                    "realtime": bool(self.options.realtime), "drop": self.drop, "queue": self.cap_size,
                    "fps": round(self.fps, 3), "captured": self.captured, "delivered": self.delivered,
                    "skipped": self.skipped, "reconnects": self.reconnects, "outages": self.outages,
                    "outage_s": round(self.outage_s, 3),
                    "missed_frames": int(round(self.outage_s * self.fps)) if self.fps > 0 else None,
                    "native_size": list(self.native) if self.native else None}


class _Closed:
    """Stands in for a capture that could not be reopened: every read fails (the reader backs off again)."""

    def read(self):
        return False, None

    def release(self) -> None:
        pass


def source_frames(video: str, frame_size: Tuple[int, int], limit: int) -> Iterator[np.ndarray]:
    """`limit` consecutive RGB frames of any source (a file as read_frames does, looping; a stream, device or
    pipeline as they arrive, none skipped): what the trainer plays to fit its predictors."""
    if kind_of(video) == "file":
        yield from read_frames(video, frame_size, limit=limit)
        return
    src = Source(video, frame_size, SourceOptions(drop="none")).open()
    try:
        for _ in range(limit):
            item = src.get()
            if item is None:
                raise SourceError("source %s ended before %d frames" % (_shown(video), limit))
            yield item.rgb
    finally:
        src.close()
