"""CPU milliseconds per frame of each role of one `cnnvideo local` run: runs it, samples every role process's
utime + stime from /proc twice a second, and divides the CPU used in the middle 70% of the run's streaming (from
report.json's wall time) by the frames completed in that window. Caps, links and engine come from the config.
It also gives each worker's decode, compute and encode CPU a frame from its stage reports (over the whole run; the
rest of its CPU is messages, threads and the interpreter), and counts each role's context switches per frame in that
window, by thread (voluntary + involuntary, from /proc/PID/task/TID/status): every hand-off between a role's threads
is one, so they say where a frame's thread switches come from. Each thread's CPU a frame in that window is given too
(a thread that ended inside the window, such as the master's source reader once it has read its last frame, is
missing from those; the per-role figures count it). Each role's minor page faults a frame in that window and its peak
resident memory (sampled) are given too. `master_report` is report.json's `master` (the master's process
CPU over the whole run divided by frames completed, measured by the master itself).

Usage: python tools/probes/cpu_per_frame.py CONFIG.yml   (the config's `out` folder gets report.json as usual)
Why: under a CPU cap a worker's wall times mix CPU with throttling; its CPU per frame says what a split costs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml


def role_of(cmd, config: str):
    """'master', 'trainer', 'worker<i>' for a role process of the run on `config` (its folder's config.yml),
    else None: roles of other runs on the host (a compose cluster, another local run) are not counted."""
    names = [c.decode() for c in cmd]
    if not any("cnnvideo" in c for c in names[:3]) or config not in map(os.path.abspath, names):
        return None
    for role in ("worker", "master", "trainer"):
        if role in names:
            return role + (names[names.index("-i") + 1] if "-i" in names else "")
    return None


def thread_counts(pid: str) -> dict:
    """{"name/tid": (voluntary + involuntary context switches, CPU seconds) so far} of one process's threads (Python
    names no OS thread: its own show as the process's name; `py-spy dump --pid` maps a tid to its Python thread)."""
    out: dict = {}
    for tid in os.listdir("/proc/%s/task" % pid):
        try:
            status = open("/proc/%s/task/%s/status" % (pid, tid)).read().splitlines()
            ran_ns = int(open("/proc/%s/task/%s/schedstat" % (pid, tid)).read().split()[0])  # ns, unlike stat's ticks
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        name = "%s/%s" % (fields.get("Name", "?").strip(), tid)
        switches = int(fields.get("voluntary_ctxt_switches", 0)) + int(fields.get("nonvoluntary_ctxt_switches", 0))
        out[name] = (switches, ran_ns / 1e9)
    return out


def per_frame(series: dict, a: float, b: float, frames: int, scale: float, digits: int) -> dict:
    """{role: growth of a cumulative counter (CPU seconds, faults) a frame in the window [a, b]}, times `scale`,
    from each role's (time, value) samples there; a role sampled in part of the window counts for that part."""
    out = {}
    for role, pts in sorted(series.items()):
        pts = [p for p in pts if a <= p[0] <= b]
        if len(pts) > 1 and frames:
            share = (pts[-1][0] - pts[0][0]) / (b - a)  # the sampled part of the window
            out[role] = round(scale * (pts[-1][1] - pts[0][1]) / (frames * share), digits)
    return out


def main(cfg_path: str) -> None:
    cfg = yaml.safe_load(open(cfg_path))
    # each role its own program (no fork server): its /proc cmdline then names its role and config (role_of)
    env = dict(os.environ, CNNVIDEO_PREFORK="0")
    run = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    tick, samples, threads = os.sysconf("SC_CLK_TCK"), {}, {}
    page, faults, peak = os.sysconf("SC_PAGE_SIZE"), {}, {}
    run_cfg = os.path.abspath(os.path.join(cfg["out"], "config.yml"))  # `cnnvideo local` starts every role on this copy
    while run.poll() is None:
        now = time.time()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                role = role_of(open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0"), run_cfg)
                if role:
                    st = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
                    samples.setdefault(role, []).append((now, (int(st[11]) + int(st[12])) / tick))
                    faults.setdefault(role, []).append((now, int(st[7])))  # minflt
                    peak[role] = max(peak.get(role, 0), int(st[21]) * page)  # rss (pages)
                    threads.setdefault(role, []).append((now, thread_counts(pid)))
            except OSError:
                pass
        time.sleep(0.5)
    if run.returncode != 0:
        sys.exit("cpu_per_frame: cnnvideo local exited with %d" % run.returncode)
    rep = json.load(open(os.path.join(cfg["out"], "report.json")))
    end, wall = samples["master"][-1][0], rep["wall_s"]
    a, b = end - wall * 0.8, end - wall * 0.1
    done = [end - wall + t["done_s"] for t in rep["times"]]
    frames = sum(1 for t in done if a <= t <= b)
    out = {"fps": rep["throughput_fps"], "cuts": rep["cuts"], "frames_in_window": frames,
           "master_report": rep.get("master")}  # the master's own count over the whole run (report.json `master`)
    out["cpu_ms_per_frame"] = per_frame(samples, a, b, frames, 1e3, 2)
    out["minor_faults_per_frame"] = per_frame(faults, a, b, frames, 1.0, 1)
    out["peak_rss_mib"] = {role: round(v / 2 ** 20, 1) for role, v in sorted(peak.items())}
    out["switches_per_frame"], out["thread_cpu_ms_per_frame"] = {}, {}
    for role, pts in sorted(threads.items()):
        pts = [p for p in pts if a <= p[0] <= b]
        if len(pts) > 1 and frames:
            n = frames * (pts[-1][0] - pts[0][0]) / (b - a)
            first, last = pts[0][1], pts[-1][1]
            per, cpu = {}, {}
            for k, (count, ran) in sorted(last.items()):
                count0, ran0 = first.get(k, (0, 0.0))
                per[k], cpu[k] = round((count - count0) / n, 1), round(1e3 * (ran - ran0) / n, 2)
            out["switches_per_frame"][role] = {k: v for k, v in per.items() if v > 0}
            out["thread_cpu_ms_per_frame"][role] = {k: v for k, v in cpu.items() if v > 0}
    # what each worker's own thread spent a frame in decode, compute (the model) and encode, from the stage reports
    out["stage_cpu_ms_per_frame"] = {
        actor: {k: round(1e3 * v["cpu_mean_s"], 2) for k, v in stages.items() if "cpu_mean_s" in v}
        for actor, stages in sorted(rep.get("stages", {}).items()) if any("cpu_mean_s" in v for v in stages.values())}
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
