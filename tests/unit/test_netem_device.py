"""The per-device shaping helper (netem.device, the swarm's global service): it tells a device's role from its
addresses alone (a master's, the trainer's, else a worker's: joined workers are in no file), shapes a worker's
egress to the masters at worker>master and everything else at worker>worker (htb's default class), a master's at
master>worker, leaves the trainer unshaped, and replaces a changed rate in place (no teardown)."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "services"))

from netem import tc  # noqa: E402
from netem.device import (  # noqa: E402
    DeviceRules,
    DeviceShaper,
    Roles,
    desired,
    device_kind,
    local_addresses,
    parse_address,
    role_addresses,
    role_shapes,
)
from netem.links import LinkError, parse_links  # noqa: E402

IP_OUTPUT = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
23: eth0@if24    inet 10.0.9.3/24 brd 10.0.9.255 scope global eth0\\       valid_lft forever
3: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever
"""
ROUTE_OUTPUT = "10.0.9.5 dev eth0 src 10.0.9.3 uid 0 \\    cache \n"
ROLES = Roles({"master": "10.0.9.5"}, "10.0.9.2")
HOP, RET, W2W = tc.Shape(3.0), tc.Shape(2.0), tc.Shape(1.5)


def shapes(hop=3, ret=2, w2w=1.5):
    return role_shapes(parse_links(["master>worker,rate=%g" % hop, "worker>master,rate=%g" % ret,
                                    "worker>worker,rate=%g" % w2w]))


def test_the_trainer_comes_from_the_config_and_masters_from_address():
    """trainer from cluster.trainer (port dropped; listed workers are not needed); --address adds the masters."""
    cluster = {"trainer": "pc:50051", "workers": ["10.0.9.3:50060"], "join": "0.0.0.0:50070"}
    assert role_addresses(cluster, {"master": "10.0.9.5"}) == {"trainer": "pc", "master": "10.0.9.5"}
    assert parse_address("master-door=10.0.9.6") == ("master-door", "10.0.9.6")
    with pytest.raises(LinkError, match="workers need no address"):
        parse_address("worker0=10.0.9.3")


def test_links_are_by_role():
    """master>worker, worker>worker, worker>master; a listed worker's name (the old per-worker links) is refused."""
    assert shapes() == {("master", "worker"): HOP, ("worker", "master"): RET, ("worker", "worker"): W2W}
    with pytest.raises(LinkError, match="shapes by role"):
        role_shapes(parse_links(["master>worker0,rate=3"]))


def test_a_device_is_the_master_s_the_trainer_s_or_else_a_worker_s():
    local = local_addresses(IP_OUTPUT)
    assert device_kind(ROLES, local) == "worker"  # 10.0.9.3 is in no file: a joined worker
    assert device_kind(Roles({"master": "10.0.9.3"}, "10.0.9.2"), local) == "master"
    assert device_kind(Roles({"master": "10.0.9.5"}, "10.0.9.3"), local) == "trainer"
    assert desired(shapes(), Roles({"master": "10.0.9.5"}, "10.0.9.3"), local, "eth0") == {}


def test_a_worker_shapes_results_to_the_master_and_everything_else_as_worker_to_worker():
    """On a worker's device (its interface: the route to the master): the master at worker>master, the trainer
    unshaped (htb's direct queue), every other destination (any other worker) by the default class at worker>worker."""
    want = desired(shapes(), ROLES, local_addresses(IP_OUTPUT), "eth0")
    assert want == {"eth0": DeviceRules(W2W, {0: ("10.0.9.2", None), 1: ("10.0.9.5", RET)})}
    several = Roles({"master-door": "10.0.9.5", "master-yard": "10.0.9.6"}, "10.0.9.2")
    peers = desired(shapes(), several, local_addresses(IP_OUTPUT), "eth0")["eth0"].peers
    assert sorted(peers.values(), key=str) == [("10.0.9.2", None), ("10.0.9.5", RET), ("10.0.9.6", RET)]
    assert desired(shapes(), ROLES, local_addresses(IP_OUTPUT), None) == {}  # no route to the master yet


def test_a_master_shapes_every_destination_but_the_trainer_as_master_to_worker():
    local = local_addresses(IP_OUTPUT.replace("10.0.9.3/24", "10.0.9.5/24"))
    assert desired(shapes(), ROLES, local, None) == {"eth0": DeviceRules(HOP, {0: ("10.0.9.2", None)})}
    with_trainer = local_addresses(IP_OUTPUT.replace("10.0.9.3/24", "10.0.9.5/24") + IP_OUTPUT.replace(
        "10.0.9.3/24", "10.0.9.2/24").replace("eth0", "eth1"))
    assert desired(shapes(), ROLES, with_trainer, None) == {"eth0": DeviceRules(HOP, {})}  # a local trainer
    only_ret = role_shapes(parse_links(["worker>master,rate=2"]))
    assert desired(only_ret, ROLES, local, None) == {}  # no master>worker link: nothing to shape on the master


def test_tc_commands_of_a_default_class_and_an_unshaped_peer():
    """htb with `default f`, class 1:f at the default shape; the unshaped peer's filter goes to 1:0 (direct)."""
    commands = [" ".join(c) for c in tc.plan("eth0", None, {0: ("10.0.9.2", None), 1: ("10.0.9.5", RET)},
                                             netem=False, default=W2W)]
    assert commands[1] == "tc qdisc add dev eth0 root handle 1: htb default f"
    assert "classid 1:f htb rate 12000000bit" in commands[2]
    assert commands[3].endswith("match ip dst 10.0.9.2/32 flowid 1:0")
    assert "classid 1:11 htb rate 16000000bit" in commands[4] and commands[5].endswith("flowid 1:11")
    assert len(commands) == 6
    assert tc.route_dev(ROUTE_OUTPUT) == "eth0" and tc.route_dev("") is None


class Recorder:
    def __init__(self, ip_output=IP_OUTPUT):
        self.calls = []
        self.ip_output = ip_output

    def __call__(self, argv, may_fail=False):
        self.calls.append(list(argv))
        if argv[:3] == ["ip", "-o", "-4"] and "route" in argv:
            return ROUTE_OUTPUT
        return self.ip_output if argv[:2] == ["ip", "-o"] else ""


def tc_calls(run):
    return [" ".join(c) for c in run.calls if c[0] == "tc"]


def test_first_sync_builds_the_tree_and_a_rate_change_is_one_class_replace():
    """Fresh: root htb with a default class, the master's class, two filters. A new worker>worker rate: only the
    default class is replaced; a new worker>master rate: only the master's class."""
    run = Recorder()
    shaper = DeviceShaper(shapes(), ROLES, run=run, netem=False)
    shaper.sync()
    first = tc_calls(run)
    assert first[0].startswith("tc qdisc del dev eth0 root") and "htb default f" in first[1]
    assert sum("class replace" in c for c in first) == 2 and sum("filter add" in c for c in first) == 2
    run.calls.clear()
    shaper.sync()
    assert tc_calls(run) == []  # nothing changed: nothing run
    shaper.shapes = shapes(w2w=1)
    shaper.sync()
    changed = tc_calls(run)
    assert len(changed) == 1 and "classid 1:f " in changed[0] and "rate 8000000bit" in changed[0], changed
    run.calls.clear()
    shaper.shapes = shapes(w2w=1, ret=4)
    shaper.sync()
    changed = tc_calls(run)
    assert len(changed) == 1 and "classid 1:11 " in changed[0] and "rate 32000000bit" in changed[0], changed
    run.calls.clear()
    shaper.clear()
    assert tc_calls(run) == ["tc qdisc del dev eth0 root"]


def test_a_peer_that_becomes_unshaped_keeps_its_filter_on_the_direct_queue():
    """plan() in place: a shaped peer turned unshaped gets its filter re-pointed to 1:0 and its class deleted."""
    old = {1: ("10.0.9.5", RET)}
    commands = [" ".join(c) for c in tc.plan("eth0", old, {1: ("10.0.9.5", None)}, netem=False)]
    assert commands[0].startswith("tc filter del") and commands[1].endswith("flowid 1:0")
    assert commands[2] == "tc class del dev eth0 classid 1:11"
    assert [" ".join(c) for c in tc.plan("eth0", {0: ("10.0.9.2", None)}, {}, netem=False)] == [
        "tc filter del dev eth0 parent 1: protocol ip prio 1 handle 800::10 u32"]


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "netem.device"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          cwd=os.path.join(os.path.dirname(__file__), "..", "..", "services"))


def test_bad_arguments_exit_2_with_the_reason(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("cluster: {trainer: 'a:1', join: '0.0.0.0:50070'}\n")
    link = "master>worker,rate=3"
    proc = run_main("--config", str(cfg), "--address", "master", "--link", link)
    assert proc.returncode == 2 and "--address must be ROLE=HOST" in proc.stderr
    proc = run_main("--config", str(cfg), "--link", link)
    assert proc.returncode == 2 and "--address master=HOST" in proc.stderr
    proc = run_main("--config", str(tmp_path / "missing.yml"), "--address", "master=127.0.0.1", "--link", link)
    assert proc.returncode == 2 and "missing.yml" in proc.stderr
    proc = run_main("--config", str(cfg), "--address", "master=127.0.0.1", "--link", "master>worker,rate=-1")
    assert proc.returncode == 2 and "rate" in proc.stderr
    proc = run_main("--config", str(cfg), "--address", "master=127.0.0.1", "--link", "master>worker0,rate=3")
    assert proc.returncode == 2 and "shapes by role" in proc.stderr and proc.stderr.count("\n") == 1
