"""CPU seconds of every Docker container that ran while a command ran: runs the command, reads each container's
cgroup CPU counter twice a second, and prints (to stderr) the containers by CPU, with their names and images, then
the sum and how busy the whole host was.

Usage: python tools/probes/container_cpu.py [--json OUT] COMMAND [ARGS...]
Why: a docker test's own process uses little CPU; its containers (roles, swarm nodes, the Pi stand-in's tests) use
the rest, and pytest's per-test CPU does not see them. A container that lives less than half a second may be missed,
and its last half second is not counted. cgroup v1 (cpuacct) and v2 (cpu.stat) are both read.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from typing import Dict, Optional, Tuple

from cnnvideo.cpucap import host_cpu_seconds

_V1 = "/sys/fs/cgroup/cpuacct/docker/*/cpuacct.usage"  # nanoseconds
_V2 = "/sys/fs/cgroup/system.slice/docker-*.scope/cpu.stat"  # usage_usec line


def usage() -> Dict[str, float]:
    """{container id: CPU seconds so far} of the running containers."""
    out = {}
    for path in glob.glob(_V1):
        try:
            out[os.path.basename(os.path.dirname(path))] = int(open(path).read()) / 1e9
        except (OSError, ValueError):
            continue
    for path in glob.glob(_V2):
        cid = os.path.basename(os.path.dirname(path))[len("docker-"):-len(".scope")]
        try:
            fields = dict(line.split() for line in open(path) if line.strip())
            out[cid] = int(fields["usage_usec"]) / 1e6
        except (OSError, ValueError, KeyError):
            continue
    return out


def describe(ids) -> Dict[str, Tuple[str, str]]:
    """{id: (name, image)} of the containers docker still knows."""
    if not ids:
        return {}
    proc = subprocess.run(["docker", "inspect", "--format", "{{.Id}} {{.Name}} {{.Config.Image}}"] + list(ids),
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    named = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            named[parts[0]] = (parts[1].lstrip("/"), parts[2])
    return named


def main(argv) -> int:
    out_json: Optional[str] = None
    if argv[:1] == ["--json"]:
        out_json, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    seen: Dict[str, float] = {}
    names: Dict[str, Tuple[str, str]] = {}
    start = usage()  # containers already running count from now
    host0 = host_cpu_seconds()
    proc = subprocess.Popen(argv)
    while True:
        now = usage()
        names.update(describe([c for c in now if c not in names]))
        for cid, sec in now.items():
            seen[cid] = max(seen.get(cid, 0.0), sec - start.get(cid, 0.0))
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    busy, total = (b - a for a, b in zip(host0, host_cpu_seconds()))
    rows = sorted(((sec, names.get(cid, ("?", "?")), cid[:12]) for cid, sec in seen.items()), reverse=True)
    for sec, (name, image), cid in rows:
        if sec >= 0.5:
            print("%8.1f  %s  %s  %s" % (sec, cid, image, name), file=sys.stderr)
    print("%8.1f  in %d containers; the host: %.0f of %.0f CPU-s busy" % (sum(r[0] for r in rows), len(rows), busy,
                                                                         total), file=sys.stderr)
    if out_json:
        with open(out_json, "w") as fh:
            json.dump({"containers": [{"cpu_s": round(s, 2), "id": c, "image": i, "name": n}
                                      for s, (n, i), c in rows], "host_busy_s": busy, "host_all_s": total}, fh,
                      indent=1)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
