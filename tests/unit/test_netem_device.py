"""The per-device shaping helper (netem.device, the swarm's global service): which roles live on this
device, which destinations it shapes, and that a changed rate is replaced in place (no teardown)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "services"))

from netem.device import DeviceShaper, desired, local_addresses, role_addresses  # noqa: E402
from netem.links import parse_links  # noqa: E402

IP_OUTPUT = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
23: eth0@if24    inet 10.0.9.3/24 brd 10.0.9.255 scope global eth0\\       valid_lft forever
"""
ROLES = {"trainer": "10.0.9.2", "worker0": "10.0.9.3", "worker1": "10.0.9.4", "master": "10.0.9.5"}


def links(hop1=3):
    return parse_links(["master<>worker0,rate=3", "worker0<>worker1,rate=%g" % hop1, "worker1<>master,rate=2"])


def test_role_addresses_from_the_cluster_section():
    """trainer and workers[i] come from the config (ports dropped); --address adds the master."""
    cluster = {"trainer": "pc:50051", "workers": ["10.0.9.3:50060", "10.0.9.4:50061"]}
    assert role_addresses(cluster, {"master": "10.0.9.5"}) == {
        "trainer": "pc", "worker0": "10.0.9.3", "worker1": "10.0.9.4", "master": "10.0.9.5"}


def test_worker0_shapes_towards_the_master_and_worker1_only():
    """On worker0's device: one class per destination of worker0's links; nothing for other roles."""
    want = desired(links(), ROLES, local_addresses(IP_OUTPUT))
    assert list(want) == ["eth0"]
    peers = sorted((ip, shape.rate) for ip, shape in want["eth0"].values())
    assert peers == [("10.0.9.4", 3.0), ("10.0.9.5", 3.0)]


def test_a_peer_on_the_same_device_and_a_device_with_no_role_are_not_shaped():
    same_host = dict(ROLES, worker1="10.0.9.3")  # worker0 and worker1 share this device
    peers = desired(links(), same_host, local_addresses(IP_OUTPUT))["eth0"]
    assert sorted(ip for ip, _ in peers.values()) == ["10.0.9.5"]
    assert desired(links(), dict(ROLES, worker0="10.0.9.99", worker1="10.0.9.98"), local_addresses(IP_OUTPUT)) == {}


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, argv, may_fail=False):
        self.calls.append(list(argv))
        return IP_OUTPUT if argv[:2] == ["ip", "-o"] else ""


def tc_calls(run):
    return [" ".join(c) for c in run.calls if c[0] == "tc"]


def test_first_sync_builds_the_tree_and_a_rate_change_is_one_class_replace():
    """Fresh: root htb, two classes, two filters. A new rate for hop 1: only that class is replaced."""
    run = Recorder()
    shaper = DeviceShaper(links(), ROLES, run=run, netem=False)
    shaper.sync()
    first = tc_calls(run)
    assert first[0].startswith("tc qdisc del dev eth0 root") and "htb" in first[1]
    assert sum("class replace" in c for c in first) == 2 and sum("filter add" in c for c in first) == 2
    run.calls.clear()
    shaper.sync()
    assert tc_calls(run) == []  # nothing changed: nothing run
    shaper.links = links(hop1=1)
    shaper.sync()
    changed = tc_calls(run)
    assert len(changed) == 1 and "class replace" in changed[0] and "rate 8000000bit" in changed[0], changed
    run.calls.clear()
    shaper.clear()
    assert tc_calls(run) == ["tc qdisc del dev eth0 root"]


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "netem.device"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          cwd=os.path.join(os.path.dirname(__file__), "..", "..", "services"))


def test_bad_arguments_exit_2_with_the_reason(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("cluster: {trainer: 'a:1', workers: ['b:2']}\n")
    proc = run_main("--config", str(cfg), "--address", "master", "--link", "master<>worker0,rate=3")
    assert proc.returncode == 2 and "--address must be ROLE=HOST" in proc.stderr
    proc = run_main("--config", str(tmp_path / "missing.yml"), "--link", "master<>worker0,rate=3")
    assert proc.returncode == 2 and "missing.yml" in proc.stderr
    proc = run_main("--config", str(cfg), "--link", "master<>worker0,rate=-1")
    assert proc.returncode == 2 and "rate" in proc.stderr
