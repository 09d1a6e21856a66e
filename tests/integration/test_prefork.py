"""`cnnvideo local`'s fork server (tools/prefork.py) runs each role as its own process forked from one that has
imported torch and torchvision: a role's output and exit code come back as from `python -m cnnvideo`, a role killed
by a signal reads as such, gRPC is never imported before a fork, and the server leaves once the launcher has let it go
and its roles have ended. Each holds for a server the launcher starts and for one a prefork hub forks for it."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cnnvideo.tools import prefork

from .helpers import base_config, run_local, write_config
from .helpers import env as role_env


@pytest.fixture(params=["own", "hub"])
def server(request, prefork_hub):
    """The launcher's server: one it starts itself, or one forked for it by the session's hub (conftest.py)."""
    env = role_env()
    env.pop(prefork.HUB_ENV, None)
    if request.param == "hub":
        if prefork_hub is None:
            pytest.skip("no prefork hub in this session (CNNVIDEO_TEST_HUB=0)")
        env[prefork.HUB_ENV] = prefork_hub
    s = prefork.Server(env)
    assert (s.proc is None) == (request.param == "hub"), "the hub did not answer"
    yield s
    s.close()


def _left(server) -> bool:
    """Whether the server has left once closed: its process exited 0, or a hub's server closed the connection."""
    return server.proc.returncode == 0 if server.proc is not None else not server.reader.is_alive()


def _trainer(server, tmp_path, video):
    """A trainer forked by `server`, serving on a free port (its cluster's workers need not exist)."""
    from cnnvideo.rpc.net import free_port

    ports = ["127.0.0.1:%d" % free_port() for _ in range(3)]
    data = base_config(video, str(tmp_path / "cache"), cluster={"trainer": ports[0], "workers": ports[1:]})
    return server.spawn(["trainer", "-c", write_config(str(tmp_path / "c.yml"), data)], role_env())


def _until_fitted(proc, timeout: float = 120.0) -> None:
    """Read the role's log until its predictors line: it serves, is done fitting, and has its SIGTERM handler."""
    deadline = time.time() + timeout
    while time.time() < deadline and b"predictors" not in proc.stdout.readline():
        pass


def test_a_role_prints_and_exits_as_from_a_new_interpreter(server, tmp_path):
    """A master given a missing config (a path relative to the launcher's directory, which the role runs in)
    prints cnnvideo's one-line error and exits 2, as `python -m cnnvideo` does."""
    missing = os.path.relpath(str(tmp_path / "missing.yml"))
    proc = server.spawn(["master", "-c", missing], role_env())
    out = proc.stdout.read().decode()
    assert proc.wait(60) == 2, out
    assert "cnnvideo: error" in out and "missing.yml" in out, out
    direct = subprocess.run([sys.executable, "-m", "cnnvideo", "master", "-c", missing], capture_output=True,
                            text=True, env=role_env(), timeout=120)
    assert direct.returncode == 2 and direct.stderr.strip().splitlines()[-1] == out.strip().splitlines()[-1]


def test_a_killed_role_reads_as_killed_and_the_server_leaves_after_its_roles(server, tmp_path, synthetic_video):
    """A role that waits (a trainer serving) killed with SIGKILL has returncode -9, as Popen gives; it ran in a
    session of its own (the launcher stops a role by its process group)."""
    proc = _trainer(server, tmp_path, synthetic_video)
    time.sleep(1.0)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    assert os.getpgid(proc.pid) == proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    server.close()
    assert _left(server)


def test_role_argv_takes_only_cnnvideo_commands():
    assert prefork.role_argv([sys.executable, "-m", "cnnvideo", "-v", "worker", "-i", "1"]) == ["-v", "worker", "-i",
                                                                                                 "1"]
    assert prefork.role_argv(["nsenter", "-t", "1", sys.executable, "-m", "cnnvideo"]) is None
    assert prefork.role_argv([sys.executable, "-m", "cnnvideo.tools.prefork", "3"]) is None


def test_a_role_whose_output_reader_went_away_is_not_killed_by_sigpipe(server, tmp_path, synthetic_video):
    """A forked role ignores SIGPIPE, as a new interpreter does: a write to a pipe or socket whose reader went away
    raises BrokenPipeError in the role instead of killing it. Once the roles reset SIGPIPE to its default, and a
    master whose live page lost a browser connection mid-answer died silently (code -13) under CI load. Here a
    trainer's log pipe is closed at our end, and SIGTERM makes it log as it stops: it exits as it would with its
    reader there (0), not killed by SIGPIPE."""
    proc = _trainer(server, tmp_path, synthetic_video)
    _until_fitted(proc)
    time.sleep(0.5)
    proc.stdout.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_a_role_left_running_when_the_launcher_goes_is_stopped(server, tmp_path, synthetic_video):
    """The launcher lets the server go (or is killed) while a role still serves: the server sends it SIGTERM, so
    it stops as it would at the launcher's own SIGTERM (exit 0), and the server then leaves."""
    proc = _trainer(server, tmp_path, synthetic_video)
    _until_fitted(proc)
    server.close()
    assert _left(server)
    assert proc.wait(30) == 0


@pytest.mark.parametrize("links", ["none", "tc"])
def test_a_local_run_in_this_session_takes_its_server_from_the_hub(prefork_hub, tmp_path, synthetic_video, links):
    """`cnnvideo local` under CNNVIDEO_PREFORK_HUB asks the hub for its server, with tc links too (the server enters
    the launcher's network namespace): the run completes, and the hub has reaped one more server, whose CPU (its
    roles' included) it adds to what it reports."""
    if prefork_hub is None:
        pytest.skip("no prefork hub in this session (CNNVIDEO_TEST_HUB=0)")
    if links == "tc" and (os.geteuid() != 0 or shutil.which("ip") is None):
        pytest.skip("tc links need root and `ip`")

    def reaped_cpu():
        with open(prefork_hub + ".cpu") as fh:
            return float(fh.read())

    before = reaped_cpu()
    data = base_config(synthetic_video, str(tmp_path / "cache"), local={"links": links, "cpus": "none"})
    proc, report, _ = run_local(tmp_path, data, frames=4)
    assert proc.returncode == 0 and report["completed"] == 4, proc.stderr[-2000:]
    assert report["link_emulation"] == links, report["link_emulation"]
    deadline = time.time() + 10
    while reaped_cpu() == before and time.time() < deadline:
        time.sleep(0.2)
    assert reaped_cpu() > before + 0.5, (before, reaped_cpu())
