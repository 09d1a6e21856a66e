"""The heartbeat file containers probe: touched while the server answers its own gRPC health check."""
import os
import subprocess
import time

from cnnvideo.rpc import net

HEALTHCHECK = os.path.join(os.path.dirname(__file__), "..", "..", "docker", "healthcheck.sh")


def _probe(path, max_age=10):
    return subprocess.run(["sh", HEALTHCHECK, str(max_age)], env=dict(os.environ, CNNVIDEO_HEARTBEAT=path)).returncode


def test_heartbeat_follows_serving_and_the_probe_reads_it(tmp_path, monkeypatch):
    """A server started with CNNVIDEO_HEARTBEAT touches the file (probe healthy), keeps it fresh while serving,
    and removes it on stop (probe unhealthy); a stale file fails the probe too."""
    path = str(tmp_path / "alive")
    monkeypatch.setenv(net.HEARTBEAT_ENV, path)
    server = net.Server("127.0.0.1:0", 1 << 20)
    assert _probe(path) != 0  # nothing yet
    server.start()
    try:
        deadline = time.time() + 10
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.1)
        assert os.path.exists(path)
        assert _probe(path) == 0
        first = os.stat(path).st_mtime
        time.sleep(net.HEARTBEAT_S * 2 + 0.5)
        assert os.stat(path).st_mtime > first  # refreshed while serving
    finally:
        server.stop()
    assert not os.path.exists(path)
    assert _probe(path) != 0
    with open(path, "w"):
        pass
    os.utime(path, (time.time() - 60, time.time() - 60))
    assert _probe(path) != 0  # a minute old: a hung server is unhealthy
