"""scripts/pi_shape.sh (bare-metal shaping on a Pi): it emits exactly the container helper's tc
commands, refuses bad values, and really shapes a veth link between two namespaces it is given."""
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "pi_shape.sh")
sys.path.insert(0, str(REPO / "services"))

from netem import tc  # noqa: E402
from netem.links import Shape  # noqa: E402


def pi_shape(*args, check=True):
    proc = subprocess.run(["bash", SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_dry_run_matches_the_container_helper():
    """Same htb/netem/u32 layout as services/netem for the same destinations (fresh apply)."""
    out = pi_shape("--dry-run", "-i", "wlan0", "apply", "192.168.1.22=3", "192.168.1.20=0.05:20:2:0.5").stdout
    peers = {0: ("192.168.1.22", Shape(rate=3)), 1: ("192.168.1.20", Shape(rate=0.05, delay=20, jitter=2, loss=0.5))}
    expected = [" ".join(argv) for argv in tc.plan("wlan0", None, peers, netem=True)]
    assert out.splitlines() == expected


@pytest.mark.parametrize("spec, words", [
    ("192.168.1.300=3", "bad IPv4"), ("10.0.0.1=0", "rate must be in"), ("10.0.0.1=3:x", "delay must be"),
    ("10.0.0.1=3:0:0:101", "loss must be in"), ("10.0.0.1", "must be IP=RATE"), ("10.0.0.1=1:2:3:4:5", "too many"),
])
def test_bad_values_are_refused(spec, words):
    proc = pi_shape("--dry-run", "apply", spec, check=False)
    assert proc.returncode == 2 and words in proc.stderr


def test_bad_interface_is_refused():
    proc = pi_shape("-i", "wlan0;reboot", "--dry-run", "clear", check=False)
    assert proc.returncode == 2 and "bad interface" in proc.stderr


@pytest.fixture
def veth_pair():
    """Two network namespaces joined by a veth pair (10.231.0.1 <-> 10.231.0.2), removed afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root with ip and tc to make network namespaces")
    tag = uuid.uuid4().hex[:6]
    a, b = "pishape-a-" + tag, "pishape-b-" + tag
    cmds = [["ip", "netns", "add", a], ["ip", "netns", "add", b],
            ["ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb", "netns", b],
            ["ip", "-n", a, "addr", "add", "10.231.0.1/24", "dev", "va"],
            ["ip", "-n", b, "addr", "add", "10.231.0.2/24", "dev", "vb"],
            ["ip", "-n", a, "link", "set", "va", "up"], ["ip", "-n", b, "link", "set", "vb", "up"]]
    try:
        for cmd in cmds:
            subprocess.run(cmd, check=True, stderr=subprocess.PIPE)
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


@pytest.mark.serial  # a measured rate: runs alone
def test_shapes_a_real_link_to_3_mbytes_per_second(veth_pair):
    """3 MB/s to 10.231.0.2 measured by a TCP stream between the namespaces within 10%; clear removes it."""
    a, b = veth_pair
    pi_shape("-n", a, "-i", "va", "apply", "10.231.0.2=3")
    probe = str(REPO / "tests" / "docker" / "probe.py")
    sink = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, probe, "sink", "5201", "4"],
                            stdout=subprocess.PIPE, universal_newlines=True)
    try:
        time.sleep(0.3)
        subprocess.run(["ip", "netns", "exec", a, sys.executable, probe, "source", "10.231.0.2", "5201", "4"],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        rate = json.loads(sink.communicate(timeout=60)[0])["rate_Bps"] / 1e6
    finally:
        sink.kill()
    print("\npi_shape: set 3 MB/s, measured %.3f MB/s" % rate)
    assert abs(rate - 3.0) <= 0.3
    pi_shape("-n", a, "-i", "va", "clear")
    assert "htb" not in pi_shape("-n", a, "-i", "va", "show").stdout
