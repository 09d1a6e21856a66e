"""Shaping is real: rates set by the tc helper are what a TCP stream gets, changed in place, and the
helper container applies, reapplies after a restart, and removes its rules. Traffic stays between
the two containers these tests create."""
import json
import os
import subprocess
import time

import pytest
from dockerutil import Project, docker

from cnnvideo.plan.costinputs import payload_share
from netem import tc
from netem.cluster import Shaper, netem_supported, subprocess_runner
from netem.links import parse_links

pytestmark = [pytest.mark.docker, pytest.mark.serial]  # measured rates and RTTs within 10%: runs alone
SECONDS = 4.0
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def pair(netem_image):
    if os.geteuid() != 0:
        pytest.skip("applying tc rules from the test process needs root (nsenter)")
    project = Project(netem_image)
    try:
        project.run("sender")
        project.run("receiver")
        yield project
    finally:
        project.remove()


def measure_rate(project: Project, port: int) -> float:
    """MB/s of one TCP stream sender -> receiver over SECONDS, measured at the receiver."""
    receiver = project.name + "-receiver"
    ip = project.targets()["receiver-1"].ips[project.name]
    sink = subprocess.Popen(["docker", "exec", receiver, "python3", "/probe/probe.py", "sink", str(port),
                             str(SECONDS)], stdout=subprocess.PIPE, universal_newlines=True)
    try:
        docker("exec", project.name + "-sender", "python3", "/probe/probe.py", "source", ip, str(port),
               str(SECONDS), timeout=SECONDS + 30)
        out, _ = sink.communicate(timeout=SECONDS + 30)
    finally:
        sink.kill()
    return json.loads(out)["rate_Bps"] / 1e6


def rtt_ms(project: Project, port: int, count: int = 20) -> float:
    """Median UDP round-trip time sender -> receiver -> sender."""
    receiver = project.name + "-receiver"
    ip = project.targets()["receiver-1"].ips[project.name]
    echo = subprocess.Popen(["docker", "exec", receiver, "python3", "/probe/probe.py", "echo", str(port), "8"],
                            stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = docker("exec", project.name + "-sender", "python3", "/probe/probe.py", "ping", ip, str(port),
                     str(count), timeout=60)
    finally:
        echo.kill()
    rtts = sorted(json.loads(out)["rtt_ms"])
    assert len(rtts) >= count // 2, "too many lost pings: %r" % rtts
    return rtts[len(rtts) // 2]


def tc_classes(pid: int) -> str:
    return subprocess_runner(tc.in_netns(pid, ["tc", "class", "show", "dev", "eth0"]), True)


def test_rates_1_3_8_mbytes_per_second_within_10_percent_changed_in_place(pair):
    """One Shaper sets 1, then 3, then 8 MB/s on sender>receiver (class replace); each stream's payload rate is
    within 10% of what that rate carries (htb counts whole Ethernet frames: 1448 payload bytes in 1514, the share
    the cost model plans with)."""
    results = {}
    shaper = None
    for i, rate in enumerate((1, 3, 8)):
        links = parse_links(["sender>receiver,rate=%g" % rate])
        if shaper is None:
            shaper = Shaper(links, netem=False)
        shaper.links = links
        shaper.sync(pair.targets())
        results[rate] = measure_rate(pair, 5001 + i)
    shaper.clear()
    print("\nshaping: set MB/s -> measured MB/s: %s" % {k: round(v, 3) for k, v in results.items()})
    for rate, got in results.items():
        want = rate * payload_share("tc")
        assert abs(got - want) <= TOLERANCE * want, "set %g MB/s (%.3f of payload), measured %.3f MB/s" % (
            rate, want, got)


def test_delay_50ms_gives_rtt_within_10_percent(pair):
    """netem delay 50 ms one way (sender>receiver) -> UDP RTT ~50 ms (the reverse path is unshaped)."""
    if not netem_supported():
        pytest.skip("this kernel has no sch_netem (CONFIG_NET_SCH_NETEM): delay/jitter/loss cannot be "
                    "emulated here; rates (htb) are tested above")
    shaper = Shaper(parse_links(["sender>receiver,rate=8,delay=50"]), netem=True)
    shaper.sync(pair.targets())
    try:
        got = rtt_ms(pair, 5011)
    finally:
        shaper.clear()
    print("\nRTT with 50 ms delay: %.1f ms" % got)
    assert abs(got - 50.0) <= 5.0


def helper_args(project: Project, *extra: str):
    return ["--pid", "host", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE",
            "-v", "/var/run/docker.sock:/var/run/docker.sock", "--label", "cnnvideo-test=" + project.name]


def test_helper_container_applies_reapplies_after_restart_and_removes(pair, netem_image):
    """The netem image (not privileged) shapes by label, follows a restarted container, cleans up on stop."""
    name = pair.name + "-netem"
    docker("run", "-d", "--name", name, *helper_args(pair), netem_image, "--project", pair.name,
           "--link", "sender>receiver,rate=2")
    try:
        assert wait_for(lambda: "rate 16Mbit" in tc_classes(pair.targets()["sender-1"].pid)), docker("logs", name)
        docker("restart", "-t", "1", pair.name + "-sender")
        assert wait_for(lambda: "rate 16Mbit" in tc_classes(pair.targets()["sender-1"].pid)), docker("logs", name)
        assert "rate" not in tc_classes(pair.targets()["receiver-1"].pid)  # no link leaves the receiver
    finally:
        docker("stop", "-t", "10", name, check=False)
        logs = docker("logs", name, check=False)
        docker("rm", "-f", name, check=False)
    assert "htb" not in tc_classes(pair.targets()["sender-1"].pid), logs


def wait_for(check, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.3)
    return False
