"""Frame sources: files as fast as asked or as if live, streams over real HTTP, drop policies, reconnects, and
one clear SourceError for each kind of bad input."""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from streams import MjpegServer, free_port, pattern  # noqa: E402

from cnnvideo.video.frames import read_frames  # noqa: E402
from cnnvideo.video.sources import Source, SourceError, SourceOptions, kind_of  # noqa: E402


def drain(src, limit=10 ** 6, pause=0.0, timeout=10.0):
    out = []
    while len(out) < limit:
        c = src.get(timeout)
        if c is None:
            break
        out.append(c)
        if pause:
            time.sleep(pause)
    return out


def test_kinds():
    """URLs, devices, pipelines and files are told apart by their spelling."""
    assert kind_of("rtsp://cam/stream") == "stream" and kind_of("http://h:1/cam.mjpg") == "stream"
    assert kind_of("/dev/video0") == "device" and kind_of("media/vtest.avi") == "file"
    assert kind_of("videotestsrc ! videoconvert ! appsink") == "gstreamer"


def test_offline_file_matches_read_frames_and_never_skips(synthetic_video):
    """A file read as fast as asked gives exactly read_frames' frames, looping, none skipped."""
    src = Source(synthetic_video, (48, 64), SourceOptions(queue=2), limit=50).open()
    got = drain(src, pause=0.002)
    src.close()
    want = list(read_frames(synthetic_video, (48, 64), limit=50))
    assert [c.seq for c in got] == list(range(50))
    assert all(np.array_equal(a.rgb, b) for a, b in zip(got, want))
    st = src.stats()
    assert not st["live"] and st["drop"] == "none" and st["captured"] == st["delivered"] + st["skipped"]
    assert st["skipped"] == 0 and st["captured"] == 50


def test_realtime_file_paces_at_its_fps(synthetic_video):
    """A realtime file delivers at its fps (40 fps here), not as fast as it can be decoded."""
    src = Source(synthetic_video, (48, 64), SourceOptions(realtime=True, fps=40.0)).open()
    t0 = time.time()
    assert len(drain(src, limit=30)) == 30
    dt = time.time() - t0
    src.close()
    assert 29 / 40.0 * 0.9 < dt < 29 / 40.0 * 1.6, dt
    assert src.stats()["skipped"] <= src.cap_size


@pytest.mark.parametrize("drop", ["oldest", "newest"])
def test_slow_consumer_skips_by_policy_and_counts(synthetic_video, drop):
    """A consumer at ~10 fps behind a 50 fps realtime file: frames are skipped by the policy, and captured =
    delivered + skipped. `oldest` keeps the freshest frames (small capture-to-delivery age); `newest` keeps
    the queued ones."""
    src = Source(synthetic_video, (48, 64), SourceOptions(realtime=True, fps=50.0, drop=drop, queue=2)).open()
    got = drain(src, limit=12, pause=0.1)
    src.close()
    st = src.stats()
    assert st["skipped"] > 20 and st["captured"] == st["delivered"] + st["skipped"] == st["skipped"] + 12
    seqs = [c.seq for c in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == 12
    assert max(np.diff(seqs)) >= 3  # gaps: skipped frames


def test_stream_reads_over_http_and_reconnects():
    """A real MJPEG-over-HTTP stream is read; when it drops, it is reopened and the reconnect counted, and the gap
    from its last frame to the first after it is one outage (with the frames its fps would have given)."""
    def frames(n):
        return pattern(15, (96, 128), seed=n)

    with MjpegServer(frames, fps=100.0, max_connections=2) as srv:
        src = Source(srv.url, (48, 64), SourceOptions(drop="none", reopen_s=2.0)).open()
        got = []
        with pytest.raises(SourceError, match="stopped sending frames.*1 reconnects"):
            while True:
                c = src.get(10)
                assert c is not None
                got.append(c)
        src.close()
    assert len(got) == 30 and src.stats()["reconnects"] == 1 and got[0].rgb.shape == (48, 64, 3)
    st = src.stats()
    assert st["outages"] == 1 and 0 < st["outage_s"] < 10 and st["missed_frames"] >= 0, st


def test_size_change_is_an_error_naming_both_sizes():
    """A stream that comes back at another frame size stops the run with one line naming both sizes."""
    def frames(n):
        return pattern(10, (96, 128) if n == 1 else (80, 100))

    with MjpegServer(frames, fps=100.0) as srv:
        src = Source(srv.url, (48, 64), SourceOptions(drop="none")).open()
        with pytest.raises(SourceError, match="changed frame size mid-run: 128x96 -> 100x80"):
            drain(src)
        src.close()
    assert src.stats()["delivered"] == 10


def test_bad_sources_fail_with_one_line(tmp_path):
    """Unreachable URL, missing device, garbage stream, GStreamer without support: SourceError, one line."""
    t0 = time.time()
    with pytest.raises(SourceError, match="cannot open stream http://127.0.0.1:%d" % 9):
        Source("http://127.0.0.1:9/cam.mjpg", (48, 64)).open()
    with pytest.raises(SourceError, match="video device /dev/video97 does not exist"):
        Source("/dev/video97", (48, 64)).open()
    with MjpegServer(lambda n: iter([os.urandom(5000)] * 50), fps=100.0) as srv:
        with pytest.raises(SourceError, match="sends no decodable video frames"):
            drain(Source(srv.url, (48, 64)).open())
    assert time.time() - t0 < 30
    from cnnvideo.video.sources import has_gstreamer

    if not has_gstreamer():
        with pytest.raises(SourceError, match="no GStreamer support"):
            Source("videotestsrc ! videoconvert ! appsink", (48, 64)).open()
    with pytest.raises(SourceError, match="not found"):
        Source(str(tmp_path / "none.avi"), (48, 64)).open()
    with pytest.raises(SourceError, match="drop"):
        Source("x.avi", (48, 64), SourceOptions(drop="sideways"))
    assert free_port() > 0


def test_stream_on_host_loopback_read_from_inside_a_network_namespace(monkeypatch):
    """A thread in a fresh network namespace (its 127.0.0.1 is its own, as a role's under tc links) cannot open
    a stream on the host's 127.0.0.1 by itself; with hostnet.HOST_NETNS_ENV naming the host's namespace a Source opens
    it (from a thread that enters that namespace) and reads frames, though the reading thread stays inside."""
    import shutil
    import subprocess
    import threading

    from cnnvideo import hostnet
    from cnnvideo.video import sources

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip (a network namespace)")
    name = "cnnvideo-srctest-%d" % os.getpid()
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("ip netns add failed")
    host = "/proc/%d/ns/net" % os.getpid()
    monkeypatch.setenv(hostnet.HOST_NETNS_ENV, host)
    out = {}
    try:
        with MjpegServer(lambda n: pattern(200, (96, 128), seed=n), fps=100.0) as srv:
            def inside():
                try:
                    hostnet.enter_netns("/var/run/netns/%s" % name)
                    try:
                        sources.open_live(srv.url, "stream", netns="")  # in the namespace: refused
                    except SourceError as exc:
                        out["alone"] = str(exc)
                    src = Source(srv.url, (48, 64), SourceOptions(drop="none")).open()
                    out["frames"] = [src.get(10) for _ in range(3)]
                    src.close()
                except Exception as exc:  # noqa: BLE001 - reported by the test thread
                    out["error"] = exc

            t = threading.Thread(target=inside)
            t.start()
            t.join(60)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    assert "error" not in out, out.get("error")
    assert "cannot open stream" in out["alone"]
    assert all(f is not None and f.rgb.shape == (48, 64, 3) for f in out["frames"])
