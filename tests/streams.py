"""Real stream servers for tests: a stdlib MJPEG-over-HTTP server whose frames, failures and garbage the test
controls, and an ffmpeg-served stream of a video file (the way a camera or a re-streamer serves one)."""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator, Optional

import numpy as np

from cnnvideo.rpc.net import free_port  # noqa: F401 (tests import it from here)

BOUNDARY = "ffmpeg"


class MjpegServer:
    """Serves GET /cam.mjpg as multipart/x-mixed-replace JPEG frames from `frames()` at `fps`.

    `frames` is called once per connection and yields BGR uint8 frames or raw bytes (sent as a part as is:
    garbage); when it ends, the connection closes (a dropped stream). `max_connections` refuses later ones."""

    def __init__(self, frames: Callable[[int], Iterator], fps: float = 25.0, max_connections: int = 0) -> None:
        self.frames, self.fps, self.max_connections = frames, fps, max_connections
        self.connections = 0
        self.sent = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                owner.connections += 1
                n = owner.connections
                if owner.max_connections and n > owner.max_connections:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace;boundary=%s" % BOUNDARY)
                self.end_headers()
                import cv2

                t0 = time.time()
                try:
                    for i, frame in enumerate(owner.frames(n)):
                        if isinstance(frame, bytes):
                            data = frame
                        else:
                            data = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
                        head = "--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % (BOUNDARY,
                                                                                                    len(data))
                        self.wfile.write(head.encode() + data + b"\r\n")
                        self.wfile.flush()
                        owner.sent += 1
                        wait = t0 + (i + 1) / owner.fps - time.time()
                        if wait > 0:
                            time.sleep(wait)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d/cam.mjpg" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "MjpegServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def pattern(n: int, size=(96, 128), seed: int = 0) -> Iterator[np.ndarray]:
    """n BGR frames of a moving block on a textured background."""
    rng = np.random.RandomState(seed)
    base = rng.randint(0, 255, size=size + (3,)).astype(np.uint8)
    for t in range(n):
        f = base.copy()
        f[(t * 3) % size[0]:(t * 3) % size[0] + 10, :20] = 255
        yield f


def _listening(port: int) -> bool:
    """True if something listens on 127.0.0.1:port (from /proc/net/tcp, without connecting)."""
    try:
        with open("/proc/net/tcp") as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        return False
    return any(r.split()[1].endswith(":%04X" % port) and r.split()[3] == "0A" for r in rows)


class FfmpegStream:
    """`ffmpeg -re -stream_loop -1 -i VIDEO ... -f mpjpeg -listen 1 http://127.0.0.1:PORT/cam.mjpg`: a live
    MJPEG stream of a file at its own fps (one client; needs Debian's ffmpeg)."""

    def __init__(self, video: str, fps: Optional[float] = None, quality: int = 2) -> None:
        if shutil.which("ffmpeg") is None:
            raise RuntimeError("ffmpeg is not installed (apt-get install ffmpeg)")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/cam.mjpg" % self.port
        rate = ["-r", "%g" % fps] if fps else []
        self.argv = ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", video, "-an",
                     "-c:v", "mjpeg", "-q:v", str(quality)] + rate + ["-f", "mpjpeg", "-listen", "1", self.url]
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "FfmpegStream":
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + 10
        while time.time() < deadline and not _listening(self.port):  # (a test connection would be its one client)
            time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
