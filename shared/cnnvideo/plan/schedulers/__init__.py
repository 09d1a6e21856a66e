"""Schedulers that choose a Plan (cut points) from CostInputs: lbs, edge, cloud, nsc, das, optimal.

Every scheduler has the signature fn(inputs, in_flight=0, delta=True, **options) -> Plan and is
registered in SCHEDULERS (the names a config may use); `schedule(name, ...)` dispatches. OPTIONS lists what a
config's `scheduler_options` may set, and check_options is the one validator of them (config_validation.validate
calls it).

The package: `plans` (one-plan schedulers and the objective), `groups` (das), `registry` (names, options, the
validator, schedule) and `objects` (schedulers over a run, create).
"""
from __future__ import annotations

from cnnvideo.plan.costmodel import compute_costs
from cnnvideo.plan.schedulers.groups import all_plans, das, das_decide, group_costs
from cnnvideo.plan.schedulers.objects import (
    RUNTIME,
    AdaptiveScheduler,
    Compute,
    GroupScheduler,
    InputDelta,
    PipelineState,
    Scheduler,
    Transfer,
    create,
)
from cnnvideo.plan.schedulers.plans import (
    OptimalResult,
    adaptive,
    capacities,
    cloud,
    edge,
    lbs,
    nsc,
    objective,
    optimal,
    optimal_result,
)
from cnnvideo.plan.schedulers.registry import OPTIONS, RUNTIME_OPTIONS, SCHEDULERS, check_options, schedule

__all__ = [
    "OPTIONS",
    "RUNTIME",
    "RUNTIME_OPTIONS",
    "SCHEDULERS",
    "check_options",
    "AdaptiveScheduler",
    "Compute",
    "GroupScheduler",
    "InputDelta",
    "PipelineState",
    "Scheduler",
    "Transfer",
    "create",
    "OptimalResult",
    "adaptive",
    "all_plans",
    "capacities",
    "cloud",
    "compute_costs",
    "das",
    "das_decide",
    "edge",
    "group_costs",
    "lbs",
    "nsc",
    "objective",
    "optimal",
    "optimal_result",
    "schedule",
]
