"""`cnnvideo bench join-cameras`: two cameras share a pool that grows while they run (issue 45).

One `cnnvideo local` run of a config listing several cameras, its listed workers, joins on (`cluster.join` on a free
loopback port). Once the first camera's master has sent `--join-at` frames, `--joins` `cnnvideo local-worker`
commands start; each joins every camera's pool. From each camera's results.jsonl it prints, as JSON: that camera's
fps before the joins (its results between its 60th frame and the first command) and after them (from the last
joined worker's first result for that camera), the ratio, which workers served it, and that every frame completed.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict

import yaml

from .join import Joiner, LocalCluster, _fps, _lines, _report, write_join_config, write_results


def run(args) -> int:
    with open(args.config) as fh:
        cfg = yaml.safe_load(fh)
    cameras = list((cfg.get("cameras") or {}).keys())
    if len(cameras) < 2:
        print("cnnvideo bench join-cameras: the config must list two or more cameras under 'cameras'")
        return 2
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    path, _ = write_join_config(work, "cameras", cfg)
    out = os.path.join(work, "run")
    pool = LocalCluster(path, out, master_tag="[master-%s]" % cameras[0])
    pool.wait_sent(args.join_at, args.timeout)
    t_joins = time.time()
    joiners = [Joiner(out) for _ in range(args.joins)]
    code = pool.wait(args.timeout)
    for j in joiners:
        j.stop()
    if code != 0:
        print("".join(pool.lines[-40:]))
        return 1
    n0 = len((cfg.get("cluster") or {}).get("workers") or [])
    new_ids = list(range(n0, n0 + args.joins))
    results: Dict[str, Any] = {"config": args.config, "cameras": cameras, "workers_at_start": n0,
                               "joins": args.joins, "join_at_frame": args.join_at, "per_camera": {}}
    for name in cameras:
        lines, report = _lines(os.path.join(out, name)), _report(os.path.join(out, name))
        firsts = [min((e["result_time"] for e in lines if w in e["route"]), default=None) for w in new_ids]
        after_t = max(firsts) if all(t is not None for t in firsts) else None
        before = [e["result_time"] for e in lines if e["frame"] >= 60 and e["result_time"] < t_joins]
        after = [e["result_time"] for e in lines if after_t is not None and e["result_time"] >= after_t]
        fps_before, fps_after = _fps(before), _fps(after)
        served = {}
        for e in lines:
            served[e["route"][0]] = served.get(e["route"][0], 0) + 1
        results["per_camera"][name] = {
            "completed": report["completed"], "frames": report["frames"], "lost": report["lost"],
            "retried": report["retried"], "max_abs_err": report.get("max_abs_err"),
            "fps_before_joins": fps_before and round(fps_before, 3), "frames_before": len(before),
            "fps_after_joins": fps_after and round(fps_after, 3), "frames_after": len(after),
            "ratio": round(fps_after / fps_before, 3) if fps_before and fps_after else None,
            "first_result_of_joined_after_commands_s": [round(t - t_joins, 2) if t else None for t in firsts],
            "frames_by_first_worker": {"w%d" % w: k for w, k in sorted(served.items())}}
    return write_results(work, "join-cameras.json", results)
