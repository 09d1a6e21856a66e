"""One multi-arch tag built on this amd64 machine with scripts/build_multiarch.sh: arm64 under qemu
from a debootstrap base whose architecture is set right, a smoke check inside each architecture, a
push of both to a local registry (Debian's docker-registry on 127.0.0.1) joined by `docker manifest`,
then that one name runs as either architecture with `docker run --platform`.

Two depths, so CI stays well inside its budget:
- default (what `.ci/run` runs): `--base-only`, the Debian base images (amd64 + arm64 bookworm made
  here) as 127.0.0.1:5000/cnnvideo/base; smoke = uname and dpkg's architecture under qemu;
- CNNVIDEO_MULTIARCH_FULL=1: the node image itself (the Dockerfile under qemu: tens of minutes the
  first time, see README), its smoke check (torch, layer graph, plan, a 3-frame `cnnvideo local`)
  and `docker run --platform linux/arm64 127.0.0.1:5000/cnnvideo/node plan`.
"""
import json
import os
import re
import subprocess

import pytest
from dockerutil import REPO, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REGISTRY = os.environ.get("CNNVIDEO_REGISTRY", "127.0.0.1:5000")
FULL = os.environ.get("CNNVIDEO_MULTIARCH_FULL") == "1"
TAG = "%s/cnnvideo/%s" % (REGISTRY, "node" if FULL else "base")
MACHINES = [("linux/arm64", "aarch64"), ("linux/amd64", "x86_64")]


@pytest.fixture(scope="module")
def built(engine):
    if os.geteuid() != 0:
        pytest.skip("build_multiarch.sh needs root (debootstrap, binfmt, the local registry)")
    args = ["--arch", "amd64,arm64"] + ([] if FULL else ["--base-only"])
    proc = subprocess.run(["bash", str(REPO / "scripts" / "build_multiarch.sh")] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=5400)
    print(proc.stdout[-6000:])
    if proc.returncode != 0 and "no qemu handler" in proc.stdout and os.environ.get("CNNVIDEO_DOCKER_TESTS") != "1":
        pytest.skip("no qemu here: " + proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def test_smoke_checks_ran_inside_their_architecture(built):
    """uname -m inside each image is its own architecture; in full mode each tiny local run completed 3/3."""
    assert "uname -m: x86_64" in built and "uname -m: aarch64" in built
    if FULL:
        runs = re.findall(r"local run: (\{.*\})", built)
        assert len(runs) == 2 and all("'completed': 3, 'frames': 3, 'lost': 0" in r for r in runs), runs
    else:
        assert "dpkg: arm64" in built and "dpkg: amd64" in built


def test_manifest_lists_both_architectures(built):
    out = docker("manifest", "inspect", "--insecure", TAG)
    platforms = sorted(m["platform"]["architecture"] for m in json.loads(out)["manifests"])
    assert platforms == ["amd64", "arm64"]


@pytest.mark.parametrize("platform, machine", MACHINES)
def test_one_name_runs_as_either_architecture(built, platform, machine, tmp_path):
    """`docker run --platform P` of the one tag pulls P's variant; full mode also runs `cnnvideo plan` in it."""
    docker("pull", "-q", "--platform", platform, TAG, timeout=900)
    assert docker("run", "--rm", "--platform", platform, "--entrypoint", "uname", TAG, "-m").strip() == machine
    if not FULL:
        return
    (tmp_path / "c.yml").write_text("model: alexnet\nweights: random\nframe_size: [64, 96]\n"
                                    "video: /usr/share/cnnvideo/vtest.avi\n")
    tmp_path.chmod(0o755)
    out = docker("run", "--rm", "--platform", platform, "--network", "none", "-v", "%s:/cfg:ro" % tmp_path, TAG,
                 "plan", "-c", "/cfg/c.yml", timeout=900)
    assert re.search(r"^lbs\s+[0-9.]+", out, re.M), out
