"""`cnnvideo bench join`: a pool that grows while it runs, against one that started at its final size (issue 45).

Two `cnnvideo local` runs of one config, one after the other:
- `start-N`: N workers from the start;
- `grow`: N - J workers with joins on (`cluster.join`); once the master has sent `--join-at` frames, J workers are
  started with `cnnvideo local-worker` (the launcher's environment and a worker's CPU cap) and join.
From each run's results.jsonl (each frame's route and result time) and report.json it prints, as JSON: every frame
completed and none lost; for each joined worker the seconds from its process start to its own first result (and from
the master's join line); the fps of `grow` after the last joined worker's first result against `start-N`'s over the
same frames (the steady rate past its first 60 frames when they do not overlap), and the ratio.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import yaml

from cnnvideo.rpc.net import free_port

from . import join_compose


def _fps(times: List[float]) -> Optional[float]:
    times = sorted(times)
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) >= 2 and times[-1] > times[0] else None


def _lines(out: str) -> List[Dict[str, Any]]:
    with open(os.path.join(out, "results.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def _report(out: str) -> Dict[str, Any]:
    with open(os.path.join(out, "report.json")) as fh:
        return json.load(fh)


class LocalCluster:
    """`cnnvideo local` in the background: its stderr kept, the frames the master has sent so far."""

    def __init__(self, cfg_path: str, out: str, master_tag: str = "[master]") -> None:
        self.out = out
        self.master_tag = master_tag  # whose "sent frame" lines count (a camera's master: "[master-<name>]")
        self.proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path, "--out", out],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.sent = 0
        self.lines: List[str] = []
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if self.master_tag in line and "sent frame " in line:
                self.sent = max(self.sent, int(line.split("sent frame ")[1].split("/")[0]))

    def wait_sent(self, n: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while self.sent < n:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the run ended or stalled before frame %d:\n%s" % (n, "".join(self.lines[-30:])))
            time.sleep(0.2)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self.thread.join(5)
        return code


class Joiner:
    """`cnnvideo local-worker OUT`: when the command started, and when its worker process was forked (its
    `[local-worker] started w+PORT pid N` line) on which port."""

    def __init__(self, out: str) -> None:
        self.t_command = time.time()
        self.t_process: Optional[float] = None
        self.port = ""
        self.proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local-worker", out],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            if line.startswith("[local-worker] started w+") and self.t_process is None:
                self.t_process = time.time()
                self.port = line.split("started w+")[1].split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # it leaves (the run is over: at once)
        self.proc.wait(90)
        self.thread.join(5)


def _round(x: Optional[float]) -> Optional[float]:
    return round(x, 3) if x is not None else None


def _since(t: Optional[float], start: Optional[float]) -> Optional[float]:
    return round(t - start, 2) if t is not None and start is not None else None


def run(args) -> int:
    with open(args.config) as fh:
        base = yaml.safe_load(fh)
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    n, joins = args.workers, args.joins
    bw = list(base.get("bandwidth") or [3.0])[:1]
    results: Dict[str, Any] = {"config": args.config, "workers": n, "joins": joins, "join_at_frame": args.join_at,
                               "frames": base.get("frames"), "runs": {}}
    if getattr(args, "compose", False):
        return join_compose.run(args, base, work, results)

    def config_for(name: str, workers: int, join: str = "") -> str:
        cfg = dict(base, bandwidth=bw * workers)
        cluster = dict(cfg.get("cluster") or {})
        cluster["workers"] = ["127.0.0.1:%d" % (50060 + w) for w in range(workers)]  # (the launcher picks ports)
        if join:
            cluster["join"] = join
        cfg["cluster"] = cluster
        path = os.path.join(work, name + ".yml")
        with open(path, "w") as fh:
            yaml.safe_dump(cfg, fh)
        return path

    # start-N
    out_full = os.path.join(work, "start-%d" % n)
    full = LocalCluster(config_for("start-%d" % n, n), out_full)
    if full.wait(args.timeout) != 0:
        print("".join(full.lines[-40:]), file=sys.stderr)
        return 1
    # grow: N - J, then J join
    out_grow = os.path.join(work, "grow")
    join = "127.0.0.1:%d" % free_port()
    grow = LocalCluster(config_for("grow", n - joins, join), out_grow)
    grow.wait_sent(args.join_at, args.timeout)
    joiners = [Joiner(out_grow) for _ in range(joins)]
    t_leave = None
    if args.leave_at and joiners:  # shrinking: one joined worker sent SIGTERM drains and leaves
        grow.wait_sent(args.leave_at, args.timeout)
        joiners[0].proc.terminate()
        deadline = time.time() + 120
        while t_leave is None and time.time() < deadline and grow.proc.poll() is None:
            if any("left the pool after" in ln and "[master]" in ln for ln in list(grow.lines)):
                t_leave = time.time()
            time.sleep(0.1)
    code = grow.wait(args.timeout)
    for j in joiners:
        j.stop()
    if code != 0:
        print("".join(grow.lines[-40:]), file=sys.stderr)
        return 1

    joined_lines = [ln for ln in grow.lines if "joined the pool (" in ln]
    port_of = {int(ln.split(" worker w")[1].split()[0]): ln.split(" at 127.0.0.1:")[1].split()[0]
               for ln in joined_lines}  # "worker w2 at 127.0.0.1:31085 joined the pool (..."
    by_port = {j.port: j for j in joiners}
    starts = {w: (getattr(by_port.get(port_of.get(w)), "t_command", None),
                  getattr(by_port.get(port_of.get(w)), "t_process", None)) for w in port_of}
    results.update(analyse(n, joins, out_full, out_grow, joined_lines, starts, t_leave))
    return write_results(work, "join.json", results)


def write_join_config(work: str, name: str, cfg: Dict[str, Any], **cluster: Any) -> Tuple[str, str]:
    """Write `cfg` to `work`/`name`.yml with joins on a free loopback port (and the other `cluster` keys given):
    (its path, the join address). The join benches' one way of making their run's config."""
    join = "127.0.0.1:%d" % free_port()
    cfg = dict(cfg, cluster=dict(cfg.get("cluster") or {}, join=join, **cluster))
    path = os.path.join(work, name + ".yml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    return path, join


def write_results(work: str, name: str, results: Dict[str, Any]) -> int:
    text = json.dumps(results, indent=1)
    with open(os.path.join(work, name), "w") as fh:
        fh.write(text + "\n")
    print(text)
    return 0


def analyse(n: int, joins: int, out_full: str, out_grow: str, joined_lines: List[str],
            starts: Dict[int, tuple], t_leave: Optional[float]) -> Dict[str, Any]:
    """The figures of a `start-N` and a `grow` run from their outputs: `starts` {joined worker id: (when the command
    that started it ran, when its process started)}, `t_leave` when a leave was seen (None: no leave)."""
    results: Dict[str, Any] = {"runs": {}}
    rep_full, rep_grow = _report(out_full), _report(out_grow)
    lines_full, lines_grow = _lines(out_full), _lines(out_grow)
    new_ids = list(range(n - joins, n))
    first = {w: min((e["result_time"] for e in lines_grow if w in e["route"]), default=None) for w in new_ids}
    after = max(t for t in first.values() if t is not None) if all(first.values()) else None
    until = t_leave or float("inf")  # (with --leave-at: up to the leave)
    window = [e for e in lines_grow if after is not None and after <= e["result_time"] < until]
    from_frame = min(e["frame"] for e in window) if window else None
    to_frame = max(e["frame"] for e in window) if window else None
    grow_fps = _fps([e["result_time"] for e in window]) if window else None
    same = [e["result_time"] for e in lines_full if from_frame is not None and from_frame <= e["frame"] <= to_frame]
    full_fps = _fps(same) if len(same) >= 30 else rep_full["start"].get("fps_after_60")
    for name, rep in (("start-%d" % n, rep_full), ("grow", rep_grow)):
        results["runs"][name] = {"completed": rep["completed"], "lost": rep["lost"], "retried": rep["retried"],
                                 "max_abs_err": rep.get("max_abs_err"), "throughput_fps": rep["throughput_fps"],
                                 "start": rep.get("start"), "frames_sent_per_worker":
                                     rep["pool"].get("frames_sent_per_worker")}
    results.update({
        "joined_lines": [ln.strip() for ln in joined_lines],
        # from the `cnnvideo local-worker` command (its fork server starts first), and from the worker's own process
        "first_result_after_command_s": {"w%d" % w: _since(first[w], starts.get(w, (None, None))[0])
                                         for w in new_ids},
        "first_result_after_process_start_s": {"w%d" % w: _since(first[w], starts.get(w, (None, None))[1])
                                               for w in new_ids},
        "fps_after_joins": grow_fps and round(grow_fps, 3), "after_joins_frames": [from_frame, to_frame],
        "fps_start_n_same_frames": full_fps and round(full_fps, 3),
        "ratio": round(grow_fps / full_fps, 3) if grow_fps and full_fps else None,
    })
    if t_leave is not None:
        left_from = min((e["frame"] for e in lines_grow if e["result_time"] >= t_leave), default=None)
        after_leave = [e["result_time"] for e in lines_grow if e["result_time"] >= t_leave]
        same_full = [e["result_time"] for e in lines_full if left_from is not None and e["frame"] >= left_from]
        results.update({"leave_from_frame": left_from, "fps_after_leave": _round(_fps(after_leave)),
                        "fps_start_n_after_leave_frames": _round(_fps(same_full)),
                        "leave_ratio": _round(_fps(after_leave) / _fps(same_full))
                        if _fps(after_leave) and _fps(same_full) else None})
    return results
