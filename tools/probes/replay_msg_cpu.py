"""Replay committed cost-model runs with and without the per-message CPU charge (`cost_model.net_cpu_us_per_message`).

Each run's report stores the model's steady stage costs of its main plan (`predicted_stage_s`: t0, c0, t1, c1) and
its predicted makespan, not the CostInputs. So per work stage this recovers the fluid seconds the model of that
commit charged: at 1 frame in flight by inverting its burst_wall (a point burst before 155c69f, the +-10% spread
after) on c minus the result transfer; at more the stage is the fluid time. It then re-runs today's model on them
(`before`: smoothed burst, master turnaround 0.02 s) and the same plus MESSAGES_PER_FRAME x us per message (`after`:
inside the burst at x period/quota, else x wall/CPU ~ 1/cap). Frame 0 (a keyframe on every hop) keeps the stored
run's extra transfer time: the hops' measured keyframe bytes (total - 7 x steady) / rate, scaled so the
stored model reproduces the stored makespan. Errors as results.md: fps error = measured / predicted - 1.

    .venv/bin/python tools/probes/replay_msg_cpu.py [us_per_message ...]     # default: the config's; one table each
"""
from __future__ import annotations

import ast
import json
import os
import re
import sys
from typing import Dict, List

import numpy as np

from cnnvideo.config import CostModel
from cnnvideo.plan.costmodel import burst_wall, message_count, simulate

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results")
# experiment -> (burst CPU spread of the model that ran it, master turnaround in that model)
EXPERIMENTS = {"costmodel480-c01-smooth": (0.1, 0.02), "costmodel480-c01-r2": (0.0, 0.0),
               "costmodel480-smooth": (0.1, 0.02), "costmodel480-m1t": (0.0, 0.02), "costmodel480-r3": (0.0, 0.0)}
PERIOD = 0.1
RESULT_BYTES = 4000.0  # MobileNetV2's 1000 float32 logits (dense bytes at the last cut)
TURNAROUND = CostModel.master_turnaround_s


def invert_burst(wall: np.ndarray, quota: float, spread: float) -> np.ndarray:
    """Fluid seconds whose burst_wall (this spread) is `wall` (bisection; burst_wall is non-decreasing)."""
    lo, hi = np.zeros_like(wall), wall * PERIOD / quota + 1e-9  # wall >= CPU = fluid x quota / period
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        low = burst_wall(mid, quota, PERIOD, spread=spread) < wall
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return 0.5 * (lo + hi)


def work(fluid: np.ndarray, quota: float, m: int, result_s: float) -> np.ndarray:
    """[W] today's work stages from fluid seconds (burst at 1 in flight; the result transfer on the last)."""
    out = burst_wall(fluid, quota, PERIOD) if m == 1 else fluid.copy()
    out[-1] += result_s
    return out


def makespan(steady: np.ndarray, first: np.ndarray, frames: int, m: int, turnaround: float) -> float:
    costs = np.tile(steady, (frames, 1))
    costs[0] = first
    return float(simulate(costs, m, turnaround=turnaround)[-1, -1])


def keyframe_extra(report: dict, row: dict, steady: np.ndarray) -> np.ndarray:
    """[2W] frame 0's extra transfer seconds over the steady ones (keyframe bytes measured on each hop)."""
    extra = np.zeros_like(steady)
    for w, (name, key) in enumerate((("m->w0", "m_w0"), ("w0->w1", "w0_w1"))):
        hop = next((h for h in report["hops"] if h["name"] == name), None)
        ratio = row.get("steady_" + key)
        if hop and hop.get("messages") and ratio not in (None, ""):
            dense = hop["bytes_dense"] / hop["messages"]
            key_bytes = hop["bytes_sent"] - (hop["messages"] - 1) * float(ratio) * dense
            extra[2 * w] = max(key_bytes / report["configured_bandwidth_Bps"][w] - steady[2 * w], 0.0)
    return extra


def replay_run(report: dict, row: dict, cap: float, spread: float, old_t: float, us: float) -> Dict[str, float]:
    """Predicted fps and c0/c1 of one run: stored, today's model before and after the message charge."""
    m, frames, cuts = int(report["in_flight"]), int(report["frames"]), report["cuts"]
    quota = cap * PERIOD
    st = np.asarray(report["predicted_stage_s"], dtype=np.float64)
    result_s = RESULT_BYTES / report["configured_bandwidth_Bps"][-1]
    comp = st[1::2].copy()
    comp[-1] -= result_s
    fluid = invert_burst(comp, quota, spread) if m == 1 else comp
    msgs = message_count(cuts[-1])[np.asarray(cuts[:-1])]
    per_msg = us * 1e-6 / cap  # x period/quota inside a burst, x wall/CPU (~1/cap) otherwise
    # frame 0: scale the measured keyframe excess so the stored model gives the stored makespan
    extra = keyframe_extra(report, row, st)
    def old(scale: float) -> float:
        return makespan(st, st + scale * extra, frames, m, old_t)

    target = float(report["predicted_makespan_s"])
    lo, hi = 0.0, 4.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if old(mid) < target else (lo, mid)
    extra = extra * 0.5 * (lo + hi)
    out = {"fps": float(report["throughput_fps"]), "stored": frames / target,
           "stored_check": frames / old(0.5 * (lo + hi))}
    for name, add in (("before", 0.0), ("after", per_msg)):
        stages = st.copy()
        stages[1::2] = work(fluid + msgs * add, quota, m, result_s)
        out[name] = frames / makespan(stages, stages + extra, frames, m, TURNAROUND)
        out["c0_" + name], out["c1_" + name] = stages[1], stages[3]
    out["c0_meas"], out["c1_meas"] = _num(row.get("meas_c0")), _num(row.get("meas_c1"))
    return out


def _num(v):
    return float(v) if v not in (None, "") else None


def load(name: str):
    """(cap of the workers, [(report, csv row)]) of one committed experiment."""
    folder = os.path.join(ROOT, name)
    text = open(os.path.join(folder, "results.md")).read()
    caps = ast.literal_eval(re.search(r"cpu_caps: (\{.*\})", text).group(1))
    import csv

    rows = {r["id"]: r for r in csv.DictReader(open(os.path.join(folder, "results.csv")))}
    raw = folder.replace(os.path.join("docs", "results"), "results-data")  # raw records live outside docs/
    reports = [json.loads(line) for line in open(os.path.join(raw, "reports.jsonl")) if line.strip()]
    pairs = [(rp, rows[rp["experiment_run"]]) for rp in reports
             if rp.get("throughput_fps") and rp.get("predicted_makespan_s") and rp["experiment_run"] in rows]
    return float(caps["worker0"]), pairs


def table(us: float) -> List[Dict[str, object]]:
    """One entry per (variant, caps, in flight): mean and median |fps error| stored / before / after, the mean
    signed fps error (< 0: the model is too fast) and the median measured / predicted - 1 of c0 and c1."""
    groups: Dict[tuple, List[Dict[str, float]]] = {}
    for name, (spread, old_t) in EXPERIMENTS.items():
        cap, pairs = load(name)
        for report, row in pairs:
            r = replay_run(report, row, cap, spread, old_t, us)
            groups.setdefault((row["variant"], cap, int(report["in_flight"])), []).append(r)
    out = []
    for (variant, cap, m), rs in sorted(groups.items()):
        e: Dict[str, object] = {"variant": variant, "caps": cap, "in_flight": m, "n": len(rs)}
        for k in ("stored", "before", "after"):
            errs = np.array([r["fps"] / r[k] - 1.0 for r in rs])
            e["mean_" + k], e["median_" + k], e["bias_" + k] = (float(np.abs(errs).mean()),
                                                                float(np.median(np.abs(errs))), float(errs.mean()))
        for c in ("c0", "c1"):
            for k in ("before", "after"):
                v = [r[c + "_meas"] / r[c + "_" + k] - 1 for r in rs
                     if r[c + "_meas"] is not None and r[c + "_" + k] > 1e-4]
                e["%s_%s" % (c, k)] = float(np.median(v)) if v else float("nan")
        out.append(e)
    return out


COLUMNS = (("variant", "%s"), ("caps", "%g"), ("in_flight", "%d"), ("n", "%d"), ("mean_stored", "%.3f"),
           ("mean_before", "%.3f"), ("mean_after", "%.3f"), ("median_before", "%.3f"), ("median_after", "%.3f"),
           ("bias_before", "%+.3f"), ("bias_after", "%+.3f"), ("c0_before", "%+.2f"), ("c0_after", "%+.2f"),
           ("c1_before", "%+.2f"), ("c1_after", "%+.2f"))
HEADER = ("| variant | caps | in flight | runs | mean abs fps err: stored | before | after | median abs: before |"
          " after | mean signed: before | after | median c0 meas/pred-1: before | after | median c1: before | after |")


def main(argv: List[str]) -> None:
    for us in [float(a) for a in argv] or [CostModel.net_cpu_us_per_message]:
        print("\ncost_model.net_cpu_us_per_message = %g (x %d messages per worker per frame)"
              % (us, message_count(1)[0]))
        print(HEADER)
        print("|" + "---|" * len(COLUMNS))
        for e in table(us):
            print("| " + " | ".join(fmt % e[k] for k, fmt in COLUMNS) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
