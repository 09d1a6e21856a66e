"""`cnnvideo local` emulation pieces: the tc rules per hop (the netem helper's builder, matched on worker ports),
the namespace probe, and real cgroup CPU caps on a busy process."""
import os
import subprocess
import sys
import time

import pytest

from cnnvideo import config
from cnnvideo.tools import linkemu


def cfg(**over):
    data = {"cluster": {"trainer": "127.0.0.1:5000", "workers": ["127.0.0.1:5001", "127.0.0.1:5002"]},
            "bandwidth": [3.0, 1.5], "video": "x.avi"}
    data.update(over)
    return config.from_dict(data, check_files=False)


def test_hop_rules_shape_each_worker_port_at_its_rate():
    """One htb class per hop at its rate (24 and 12 Mbit), filtered on the worker's TCP port, one MSS per packet."""
    rules = linkemu.hop_rules(cfg())
    text = [" ".join(r) for r in rules]
    assert text[0] == "tc qdisc add dev lo root handle 1: htb"
    assert any("classid 1:10 htb rate 24000000bit" in t for t in text)
    assert any("classid 1:11 htb rate 12000000bit" in t for t in text)
    assert any("match ip dport 5001 0xffff flowid 1:10" in t for t in text)
    assert any("match ip dport 5002 0xffff flowid 1:11" in t for t in text)
    assert rules[-1][:3] == ["ip", "link", "set"]


def test_role_shares_follow_the_planner_keys():
    """w<i>, worker<i>, worker/workers name workers; master and trainer are themselves."""
    c = cfg(cpus={"worker": 0.4, "w1": 0.2, "master": 1.5})
    assert linkemu.role_shares(c) == {"master": 1.5, "w0": 0.4, "w1": 0.2}


def test_resolve_links():
    """paced and none are taken as they are; auto becomes tc exactly when a namespace with htb can be made."""
    assert linkemu.resolve_links("paced")[0] == "paced" and linkemu.resolve_links("none")[0] == "none"
    ok, why = linkemu.netns_possible()
    assert linkemu.resolve_links("auto")[0] == ("tc" if ok else "paced")
    if not ok:
        with pytest.raises(config.ConfigError, match="local.links"):
            linkemu.resolve_links("tc")


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.serial  # reads a CPU share over 2 s of wall time
def test_cgroup_cap_limits_a_busy_process():
    """A busy loop in a 0.2-CPU cgroup uses about 0.2 s of CPU per wall second (uncapped it would use ~1)."""
    caps = linkemu.CpuCaps({"busy": 0.2}, "auto")
    if caps.method == "none":
        pytest.skip("no writable cgroup here: %s" % caps.note)
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        caps.add("busy", proc.pid)
        time.sleep(0.3)
        c0, t0 = _cpu_seconds(proc.pid), time.time()
        time.sleep(2.0)
        share = (_cpu_seconds(proc.pid) - c0) / (time.time() - t0)
        assert 0.1 < share < 0.3, share
    finally:
        proc.kill()
        proc.wait()
        caps.remove()
    assert caps.summary()["method"].startswith("cgroup")


def test_caps_that_cannot_be_applied(tmp_path, caplog):
    """No cgroup under the root: `auto` and `cgroup` stop with one line naming `cpus` and the way out; `best-effort`
    (the demo's) runs uncapped with one warning, and the summary says why."""
    root = str(tmp_path / "no-cgroup")
    for mode in ("auto", "cgroup"):
        with pytest.raises(config.ConfigError, match=r"^config key 'cpus' asks for CPU caps \(w0 0.25\) but no cgroup "
                                                     r"is writable here .*; set local.cpus: none to run uncapped$"):
            linkemu.CpuCaps({"w0": 0.25}, mode, root=root)
    caps = linkemu.CpuCaps({"w0": 0.25}, "best-effort", root=root)
    caps.add("w0", os.getpid())  # no cgroup: nothing to join
    summary = caps.summary()
    assert summary["method"] == "none" and summary["shares"] == {}
    assert summary["note"].startswith("local.cpus: best-effort: no cgroup writable here")
    assert [r.levelname for r in caplog.records if "not applied" in r.getMessage()] == ["WARNING"]
    assert config.from_dict({"local": {"cpus": "best-effort"}}, check_files=False).local.cpus == "best-effort"
