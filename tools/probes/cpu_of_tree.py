"""CPU seconds of a command and of every process it starts: runs the command, reads each descendant's utime + stime
from /proc twice a second, and prints (to stderr) each process that used half a second or more, then the sum.

Usage: python tools/probes/cpu_of_tree.py COMMAND [ARGS...]
Why: a `cnnvideo local` run or a test starts roles, fork servers and joining workers that its own rusage does not
count (a process killed or left to its parent is never reaped into it); this says which of them used the CPU.
A process that lives less than half a second may be missed, and one's last half second is not counted.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from typing import Dict, List, Tuple

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> List[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    with open("/proc/%d/stat" % pid) as fh:
        text = fh.read()
    return text[text.rfind(")") + 2:].split()


def descendants(root: int) -> List[int]:
    """root and every process below it, from each process's parent id."""
    children = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children[int(_stat(int(name))[1])].append(int(name))
            except (OSError, IndexError):
                pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def main(argv: List[str]) -> int:
    proc = subprocess.Popen(argv)
    seen: Dict[Tuple[int, int], Tuple[float, str]] = {}  # (pid, start time) -> (CPU s, command line)
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                fields = _stat(pid)
                with open("/proc/%d/cmdline" % pid) as fh:
                    cmd = fh.read().replace("\0", " ").strip()[:160]
            except OSError:
                continue
            seen[(pid, int(fields[19]))] = ((int(fields[11]) + int(fields[12])) / TICK, cmd)
        time.sleep(0.5)
    for (pid, _), (cpu, cmd) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
        if cpu >= 0.5:
            print("%7.1f  %d  %s" % (cpu, pid, cmd), file=sys.stderr)
    print("%7.1f  sampled in all" % sum(cpu for cpu, _ in seen.values()), file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
