"""The compose cluster end to end: build the images, `docker compose up --exit-code-from master` on a
short clip, and the master's report says every frame completed, none lost, over shaped hops."""
import json
import os
import subprocess
import uuid

import pytest
from dockerutil import REPO

pytestmark = pytest.mark.docker
FRAMES = 10


def test_compose_up_runs_the_demo_to_completion(wheels_present, tmp_path):
    """Exit code 0 from the master, report.json completed == frames, lost == 0, netem shaped the hops."""
    project = "cnnvideo-test-%s" % uuid.uuid4().hex[:8]
    out = tmp_path / "out"
    env = dict(os.environ, OUT_DIR=str(out), FRAMES=str(FRAMES), COMPOSE_PROJECT_NAME=project)
    compose = ["docker", "compose", "-p", project]
    try:
        proc = subprocess.run(compose + ["up", "--build", "--exit-code-from", "master"], cwd=str(REPO), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=1800)
        assert proc.returncode == 0, proc.stdout[-5000:]
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES and report["lost"] == 0
        assert "master (eth0): worker0" in proc.stdout, "netem did not shape the master's egress"
        print("\ncompose: %d/%d frames in %.2f s, hops %s" % (report["completed"], report["frames"], report["wall_s"],
              [(h["name"], h["bytes_sent"], h.get("effective_MBps")) for h in report["hops"]]))
    finally:
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
