"""`cnnvideo bench plan`: time every scheduler on random CostInputs and check optimal beats them all."""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Dict, List

import numpy as np

from cnnvideo.plan.costmodel import random_inputs
from cnnvideo.plan.schedulers import SCHEDULERS, objective, schedule

log = logging.getLogger(__name__)

IN_FLIGHT = (0, 1, 3, 6)
BUDGET_MS = 200.0


def measure(workers: int, cuts: int, repeat: int, seed: int = 0) -> Dict[str, Any]:
    """Median decision ms per scheduler over `repeat` random inputs, and optimal-vs-others objective checks."""
    times: Dict[str, List[float]] = {name: [] for name in SCHEDULERS}
    ratio: Dict[str, List[float]] = {name: [] for name in SCHEDULERS}
    violations: List[Dict[str, Any]] = []
    for r in range(repeat):
        inputs = random_inputs(workers, cuts, seed + r)
        in_flight = IN_FLIGHT[r % len(IN_FLIGHT)]
        delta = r % 2 == 0
        values = {}
        for name in SCHEDULERS:
            t0 = time.perf_counter()
            plan = schedule(name, inputs, in_flight, delta)
            times[name].append(1000.0 * (time.perf_counter() - t0))
            values[name] = objective(plan, inputs, in_flight, delta)
        for name, v in values.items():
            ratio[name].append(v / values["optimal"])
            if values["optimal"] > v * (1 + 1e-9):
                violations.append({"repeat": r, "scheduler": name, "value": v, "optimal": values["optimal"]})
    result = {
        "workers": workers,
        "cuts": cuts,
        "repeat": repeat,
        "in_flight_cycle": list(IN_FLIGHT),
        "median_ms": {k: float(np.median(v)) for k, v in times.items()},
        "max_ms": {k: float(np.max(v)) for k, v in times.items()},
        "mean_objective_vs_optimal": {k: float(np.mean(v)) for k, v in ratio.items()},
        "optimal_never_worse": not violations,
        "violations": violations,
        "optimal_budget_ms": BUDGET_MS,
        "optimal_within_budget": bool(np.median(times["optimal"]) < BUDGET_MS),
        "objective": "steady-state s/frame = max(max stage cost, sum of stage costs / in_flight)",
    }
    return result


def run(args) -> int:
    """CLI entry: print JSON (--json) or a short table; exit 1 if optimal lost to another scheduler."""
    result = measure(args.workers, args.cuts, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("%d workers x %d cuts, %d random inputs" % (args.workers, args.cuts, args.repeat))
        print("%-8s %10s %10s %14s" % ("sched", "median_ms", "max_ms", "obj/optimal"))
        for name in result["median_ms"]:
            print("%-8s %10.2f %10.2f %14.3f" % (name, result["median_ms"][name], result["max_ms"][name],
                                                 result["mean_objective_vs_optimal"][name]))
        print("optimal never worse: %s" % result["optimal_never_worse"])
    return 0 if result["optimal_never_worse"] else 1
