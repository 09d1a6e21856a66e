"""`cnnvideo bench capped-profile`: an ORT engine profile taken under a real CFS cap against the same profile
taken uncapped, at every cut.

The planner cuts a capped worker's stage by the shares of its per-node profile (`OrtStage.segment_seconds`). Under a
cap each run of a stage is throttled several times for most of a CFS period, and a stall that lands in one node
makes that node look tens of times slower (issue 43: cut 9 of MobileNetV2 read 0.02-0.06 under cap 0.1 against
0.17-0.19 uncapped). This benchmark profiles the whole model uncapped in this process, then `--profiles` times in a
child process moved into a cgroup capped at `--cap` (as `cnnvideo local` caps a Pi stand-in), and prints each
cut's share of the model in both, the stages timed alone at two cuts, and the largest differences. The
deterministic check of the attribution is `tests/unit/test_ort_profile_capped.py` (a simulated CFS scheduler).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

import numpy as np

from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.plan.profiling import _engine_time, profile_compute
from cnnvideo.tools import linkemu

CHILD = r"""
import json, sys
from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.cpucap import cfs_quota
from cnnvideo.plan.profiling import profile_compute
cache, model, h, w, precision, profiles = sys.argv[1:7]
g = LayerGraph.from_model(build_model(model, seed=0), (int(h), int(w)))
stages = engines.StageFactory(g, engines.EngineSpec("onnxruntime", precision, threads=1), cache, "bench", None)
x = profile_compute(g, 1)[2][0]
whole = stages.stage(0, g.num_segments)
x = x if whole.q_in is None else whole.q_in.quantize(x)
print(json.dumps({"seconds": [whole.segment_seconds(x, 5).tolist() for _ in range(int(profiles))],
                  "cfs_quota": cfs_quota()}))
"""


def _shares(seconds: np.ndarray) -> np.ndarray:
    """Each cut's share of the model: the segments before it over all (cut c = segments 0..c-1)."""
    c = np.cumsum(seconds, axis=-1)
    return c / c[..., -1:]


def measure(model: str, frame_size, cap: float, profiles: int, precision: str, cache_dir: str,
            alone_cuts: List[int]) -> Dict[str, Any]:
    """Uncapped and capped profiles of `model`'s whole ORT stage, as a dict (see the module docstring)."""
    g = LayerGraph.from_model(build_model(model, seed=0), tuple(frame_size))
    k = g.num_segments
    stages = engines.StageFactory(g, engines.EngineSpec("onnxruntime", precision, threads=1), cache_dir, "bench",
                                  None)
    x = profile_compute(g, 1)[2]
    whole = stages.stage(0, k)
    x0 = x[0] if whole.q_in is None else whole.q_in.quantize(x[0])
    free = np.array([whole.segment_seconds(x0, 5) for _ in range(profiles)])
    alone = {}
    for c in alone_cuts:  # uncapped: each stage's best of three timings
        a, b = stages.stage(0, c), stages.stage(c, k)
        xa = x[0] if a.q_in is None else a.q_in.quantize(x[0])
        xb = x[c] if b.q_in is None else b.q_in.quantize(x[c])
        ta = min(_engine_time(a.run, xa, 3, 0.3) for _ in range(3))
        tb = min(_engine_time(b.run, xb, 3, 0.3) for _ in range(3))
        alone[c] = ta / (ta + tb)
    caps = linkemu.CpuCaps({"profile": cap})  # ConfigError (one line) when no cgroup is writable
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, cache_dir, model, str(frame_size[0]),
                                  str(frame_size[1]), precision, str(profiles)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        caps.add("profile", child.pid)
        out, err = child.communicate()
    finally:
        caps.remove()
    if child.returncode != 0:
        raise RuntimeError("the capped profile failed: %s" % err.strip().splitlines()[-1:])
    got = json.loads(out.strip().splitlines()[-1])
    capped = np.array(got["seconds"])
    free_share, capped_share = np.median(_shares(free), axis=0), np.median(_shares(capped), axis=0)
    diff = capped_share[:-1] - free_share[:-1]
    worst = int(np.argmax(np.abs(diff)))
    return {
        "model": model, "frame_size": list(frame_size), "engine": "onnxruntime-%s, 1 thread" % precision,
        "cap": cap, "cfs_quota_s": got["cfs_quota"], "profiles": profiles,
        "cuts": list(range(1, k)),
        "uncapped_share": [round(float(v), 4) for v in free_share[:-1]],
        "capped_share": [round(float(v), 4) for v in capped_share[:-1]],
        "capped_share_each": [[round(float(v), 4) for v in s[:-1]] for s in _shares(capped)],
        "stages_alone_share": {str(c): round(float(v), 4) for c, v in alone.items()},
        "max_abs_diff": round(float(abs(diff[worst])), 4), "max_abs_diff_cut": worst + 1,
        "mean_abs_diff": round(float(np.abs(diff).mean()), 4),
        "uncapped_total_s": round(float(np.median(free.sum(axis=1))), 5),
        "capped_total_s": round(float(np.median(capped.sum(axis=1))), 5),
    }


def write_page(result: Dict[str, Any], out: str) -> None:
    """results.md and capped-profile.json into `out`."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "capped-profile.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    r = result
    lines = ["# A profile under a CFS cap against the same profile uncapped", "",
             "`cnnvideo bench capped-profile --json --out %s` (module docstring: "
             "`tools/bench/capped_profile.py`)." % out, "",
             "- model %s at %dx%d, %s, the whole model as one ORT stage; %d profiles each (5 runs a profile, twice "
             "that under the cap), each cut's share the median over them" % (
                 r["model"], r["frame_size"][0], r["frame_size"][1], r["engine"], r["profiles"]),
             "- the capped child ran in a cgroup at cap %g (CFS quota %s s per %s s)" % (
                 r["cap"], r["cfs_quota_s"][0], r["cfs_quota_s"][1]),
             "- largest difference %.4f at cut %d; mean %.4f over %d cuts" % (
                 r["max_abs_diff"], r["max_abs_diff_cut"], r["mean_abs_diff"], len(r["cuts"])),
             "- the stages timed alone (uncapped, cut share of the first): %s" % ", ".join(
                 "cut %s %.3f" % kv for kv in r["stages_alone_share"].items()), "",
             "| cut | uncapped share | capped share | capped - uncapped |", "|---:|---:|---:|---:|"]
    for c, a, b in zip(r["cuts"], r["uncapped_share"], r["capped_share"]):
        lines.append("| %d | %.4f | %.4f | %+.4f |" % (c, a, b, b - a))
    with open(os.path.join(out, "results.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def run(args) -> int:
    ok, why = engines.ort_available()
    if not ok:
        print("cnnvideo: error: bench capped-profile needs onnxruntime (%s)" % why, file=sys.stderr)
        return 2
    cache = args.cache_dir or tempfile.mkdtemp(prefix="cnnvideo-capped-")
    cuts = [int(c) for c in args.alone_cuts.split(",") if c]
    result = measure(args.model, args.frame_size, args.cap, args.profiles, args.precision, cache, cuts)
    if args.out:
        write_page(result, args.out)
    if args.json:
        print(json.dumps(result))
    else:
        print("cut  uncapped  capped")
        for c, a, b in zip(result["cuts"], result["uncapped_share"], result["capped_share"]):
            print("%3d  %.4f    %.4f" % (c, a, b))
    return 0
