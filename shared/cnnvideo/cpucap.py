"""This process's CPU cap: the CFS quota and period of its cgroup (v2 cpu.max, or v1 cpu.cfs_*), as `cnnvideo
local`, docker --cpus and a Pi's own cgroup set it. The engines read it (how they time a profile under a cap) and
the planner does (the cost of a capped worker), so it sits below both. And how busy the whole host's CPU has been
(host_cpu_seconds), which the test tiers and tools/probes/container_cpu.py report."""
from __future__ import annotations

import os
from typing import Optional, Tuple

CFS_PERIOD_S = 0.1  # the kernel's default CFS period (docker --cpus keeps it)


def own_cgroup(version: int) -> str:
    """This process's cgroup path (v2 unified, or v1 cpu hierarchy) from /proc/self/cgroup; '' if unknown."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.strip().split(":", 2)
                if (version == 2 and controllers == "") or (version == 1 and "cpu" in controllers.split(",")):
                    return path.lstrip("/")
    except (OSError, ValueError):
        pass
    return ""


def cfs_quota(root: str = "/sys/fs/cgroup") -> Tuple[float, float]:
    """(quota, period) seconds of this process's CFS CPU cap (cgroup v2 cpu.max or v1 cpu.cfs_*), read in the
    process's own cgroup (as `cnnvideo local` caps roles) and else at the root (a container's view); (0, 0)
    when uncapped or unreadable."""
    for v1_dir in ("cpu", "cpu,cpuacct"):
        own = own_cgroup(1)
        if own and root == "/sys/fs/cgroup":
            got = _cfs_v1(os.path.join(root, v1_dir, own))
            if got is not None:
                return got
    own2 = own_cgroup(2)
    if own2 and root == "/sys/fs/cgroup" and os.path.isfile(os.path.join(root, own2, "cpu.max")):
        return _cfs_at(os.path.join(root, own2))
    return _cfs_at(root)


def _cfs_v1(path: str) -> Optional[Tuple[float, float]]:
    try:
        with open(os.path.join(path, "cpu.cfs_quota_us")) as fh:
            quota = int(fh.read().strip())
        with open(os.path.join(path, "cpu.cfs_period_us")) as fh:
            period = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return (quota / 1e6, period / 1e6) if quota > 0 and period > 0 else None


def _cfs_at(root: str) -> Tuple[float, float]:
    try:
        with open(os.path.join(root, "cpu.max")) as fh:
            quota, period = fh.read().split()[:2]
        if quota == "max":
            return 0.0, 0.0
        return int(quota) / 1e6, int(period) / 1e6
    except (OSError, ValueError):
        pass
    for sub in ("cpu", "cpu,cpuacct"):
        try:
            with open(os.path.join(root, sub, "cpu.cfs_quota_us")) as fh:
                quota = int(fh.read().strip())
            with open(os.path.join(root, sub, "cpu.cfs_period_us")) as fh:
                period = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        return (quota / 1e6, period / 1e6) if quota > 0 and period > 0 else (0.0, 0.0)
    return 0.0, 0.0


def host_cpu_seconds() -> Tuple[float, float]:
    """(busy, all) CPU seconds of the whole host since boot, from /proc/stat's first line (every core, every
    process and container): user to steal (guest time is inside user); iowait and steal, time a hypervisor gave
    another guest, count as not busy."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]] + [0] * 8
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(ticks[:8])
    return (total - ticks[3] - ticks[4] - ticks[7]) / tick, total / tick
