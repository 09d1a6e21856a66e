"""The compose cluster end to end: build the images, `docker compose up --exit-code-from master` on a
short clip, and the master's report says every frame completed, none lost, over shaped hops; the cluster runs the
trained person detector (configs/compose.yml, the image's model cache) and the master ends with people per frame."""
import json
import os
import re
import subprocess
import uuid

import pytest
from dockerutil import REPO, up_build

from cnnvideo.master.reporting import detector_lines

pytestmark = pytest.mark.docker
FRAMES = 10


def test_compose_up_runs_the_demo_to_completion(wheels_present, tmp_path):
    """Exit code 0 from the master, report.json completed == frames, lost == 0, netem shaped the hops; the person
    detector ran split and exact (F1 1.0 against the unsplit model), found people in most frames, and the master's
    log ends with the same people-per-frame, detections and F1 lines as report.json's detector fields."""
    project = "cnnvideo-test-%s" % uuid.uuid4().hex[:8]
    out = tmp_path / "out"
    env = dict(os.environ, OUT_DIR=str(out), FRAMES=str(FRAMES), COMPOSE_PROJECT_NAME=project)
    compose = ["docker", "compose", "-p", project]
    try:
        proc = subprocess.run(compose + ["up", *up_build(), "--exit-code-from", "master"], cwd=str(REPO), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=1800)
        assert proc.returncode == 0, proc.stdout[-5000:]
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES and report["lost"] == 0
        assert "master-1 (eth0): worker-" in proc.stdout, "netem did not shape the master's egress"
        # the image carries build/models/ (the Dockerfile copies it into its model cache): no fallback
        assert (REPO / "build" / "models" / "person-ssdlite.onnx").exists(), "no detector: scripts/fetch_detector.sh"
        assert report["model"] == "person-ssdlite" and report["detector"], report.get("model")
        pairs = report["people_per_frame"]
        people = [n for _, n in pairs]
        assert [f for f, _ in pairs] == list(range(FRAMES)) and sum(n > 0 for n in people) >= FRAMES - 2, pairs
        assert report["detections"]["person"]["boxes"] == sum(people), report["detections"]
        assert report["detection_agreement"]["f1"] == 1.0, report["detection_agreement"]
        master = [re.sub(r"^master-1\s+\|\s+\S+ \S+ INFO cnnvideo\.master\.finishing: ", "", line)
                  for line in proc.stdout.splitlines() if line.startswith("master-1") and "finishing:" in line]
        for line in detector_lines(report):  # what the master printed is what report.json holds
            assert line in master, "master did not print %r; it ended with:\n%s" % (line, "\n".join(master))
        assert "people per frame       " + " ".join(str(n) for n in people) in master
        print("\ncompose: %d/%d frames in %.2f s, people per frame %s, F1 %s, hops %s" % (
            report["completed"], report["frames"], report["wall_s"], people, report["detection_agreement"]["f1"],
            [(h["name"], h["bytes_sent"], h.get("effective_MBps")) for h in report["hops"]]))
    finally:
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
