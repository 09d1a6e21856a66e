"""The integration tier's session: one prefork hub per test process (tools/prefork.py), so that each `cnnvideo local`
run forks its roles' server from it instead of importing torch and the library again, about 7 CPU-s a run on
2 shared cores. Roles are still processes of their own, forked as they are without the hub; the hub only takes
the server's imports off each run. CNNVIDEO_TEST_HUB=0 runs every launcher with a server of its own."""
import os
import select
import shutil
import subprocess
import sys
import tempfile

import pytest

from cnnvideo.tools import prefork

from .helpers import env as role_env


def _ready(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether the hub said "ready" on its stdout within `timeout` seconds."""
    readable, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(readable) and proc.stdout.readline().startswith(b"ready")


@pytest.fixture(scope="session", autouse=True)
def prefork_hub():
    """A hub for this test process's launchers, named by CNNVIDEO_PREFORK_HUB in the environment every test's
    commands inherit; stopped when the session ends. A hub that fails to start leaves the tests as they were."""
    if os.environ.get("CNNVIDEO_TEST_HUB", "1") == "0" or not prefork.enabled() or prefork.HUB_ENV in os.environ:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="cnnvideo-hub-")  # short: a Unix socket's path has at most 107 bytes
    path = os.path.join(folder, "hub.sock")
    hub_env = dict(role_env(), MKL_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "cnnvideo.tools.prefork", "--hub", path], stdout=subprocess.PIPE,
                            env=hub_env)
    if not _ready(proc, 300.0):
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
        sys.stderr.write("prefork hub did not start: each run starts a server of its own\n")
        yield None
        return
    os.environ[prefork.HUB_ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(prefork.HUB_ENV, None)
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        shutil.rmtree(folder, ignore_errors=True)
