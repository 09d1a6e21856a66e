"""The 32-bit Pi image's stand-in (bullseye, Python 3.9, torch 1.7.1 / torchvision 0.8.2, no torch.fx):
the shared library's unit tests pass inside it and fx-only models fail with a clear GraphError.

Built by scripts/pi_standin.sh (debootstrap base if missing, PyPI wheels with the host's CA bundle);
the first build downloads about 1 GB and takes minutes, later ones reuse the cache.
"""
import os
import re
import subprocess

import pytest
from dockerutil import REPO, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCRIPT = str(REPO / "scripts" / "pi_standin.sh")
IMAGE = os.environ.get("CNNVIDEO_STANDIN_IMAGE", "cnnvideo/pi-standin")
BASE = os.environ.get("CNNVIDEO_STANDIN_BASE", "cnnvideo/debian:bullseye")


def _script(*args, timeout=3600):
    return subprocess.run(["bash", SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout)


@pytest.fixture(scope="module")
def standin(engine):
    """The stand-in image, built (or taken from the cache) by scripts/pi_standin.sh."""
    if os.geteuid() != 0 and docker("image", "inspect", BASE, check=False, timeout=30) == "":
        pytest.skip("base image %s missing and debootstrap needs root (run scripts/pi_standin.sh as root)" % BASE)
    proc = _script("--build-only")
    assert proc.returncode == 0, proc.stdout[-3000:]
    return IMAGE


def test_versions_match_the_pi_image(standin):
    """Python 3.9 / torch 1.7 / torchvision 0.8 and no torch.fx, like the Pi's 3.7 / 1.7 / 0.8."""
    out = docker("run", "--rm", "--network", "none", standin, "python3", "-c",
                 "import sys, torch, torchvision; print(sys.version_info[:2], torch.__version__, "
                 "torchvision.__version__, hasattr(torch, 'fx'))")
    assert out.split() == ["(3,", "9)", "1.7.1", "0.8.2", "False"], out


def test_unit_tests_pass_inside(standin):
    """scripts/pi_standin.sh runs the library's unit tests in the stand-in: all pass (fx-only cases skip)."""
    proc = _script()
    tail = proc.stdout[-4000:]
    assert proc.returncode == 0, tail
    summary = re.findall(r"^=*\s*(\d+ passed.*?)\s*=*$", proc.stdout, re.M)
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], tail
    assert int(summary[-1].split()[0]) >= 150, summary


def test_resnet50_graph_needs_fx(standin):
    """resnet50 (fx-only) raises GraphError saying torch.fx (torch>=1.8) is needed; alexnet graphs by chain."""
    code = (
        "from cnnvideo.model.graph import GraphError, LayerGraph\n"
        "from cnnvideo.model.zoo import build_model\n"
        "print('alexnet', LayerGraph.from_model(build_model('alexnet'), (64, 64)).method)\n"
        "try:\n"
        "    LayerGraph.from_model(build_model('resnet50'), (64, 64))\n"
        "except GraphError as exc:\n"
        "    print('GraphError:', exc)\n"
    )
    out = docker("run", "--rm", "--network", "none", standin, "python3", "-c", code, timeout=300)
    assert "alexnet chain" in out, out
    assert re.search(r"GraphError: ResNet is not a plain chain .*graph models need torch\.fx \(torch>=1\.8\), "
                     r"this torch is 1\.7\.1", out), out
