"""The scheduler names a config may use (SCHEDULERS), the options each takes (OPTIONS; RUNTIME_OPTIONS are the
master's per-group arguments), check_options (the one validator: config_validation.validate calls it) and schedule(); a
scheduler without an OPTIONS entry fails at import."""
from __future__ import annotations

import logging
from typing import Callable, Dict, Tuple

from cnnvideo.plan.costmodel import CostInputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.schedulers.groups import das
from cnnvideo.plan.schedulers.plans import adaptive, cloud, edge, fixed, lbs, nsc, optimal, replicas

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- registry
SCHEDULERS: Dict[str, Callable[..., Plan]] = {
    "lbs": lbs,
    "edge": edge,
    "cloud": cloud,
    "fixed": fixed,
    "nsc": nsc,
    "das": das,
    "optimal": optimal,
    "adaptive": adaptive,
    "replicas": replicas,
}


# options a config may set per scheduler (`scheduler_options`); anything else is an error naming the key
OPTIONS: Dict[str, Tuple[str, ...]] = {
    "lbs": (),
    "edge": (),
    "cloud": (),
    "fixed": ("cuts", "groups"),
    "nsc": ("frames", "max_steps"),
    "das": ("group_size", "max_plans"),
    "optimal": ("pool",),
    "adaptive": ("alpha", "gain", "min_samples", "pool"),
    "replicas": (),
}
# schedulers whose plan may run the whole model on a worker (edge, full replication): the master builds that int8
# stage while the workers profile, before it knows the plan (services/master/stage_push.StagePush.build_whole)
WHOLE_MODEL = ("edge", "optimal", "adaptive", "replicas")
# arguments the master's planner passes at run time (per-group state), never set by a config
RUNTIME_OPTIONS: Dict[str, Tuple[str, ...]] = {"das": ("frame_bytes", "prev", "ready", "finished", "now")}

_missing = [name for name in SCHEDULERS if name not in OPTIONS]
if _missing:
    raise ImportError("schedulers without an OPTIONS entry: %s" % ", ".join(_missing))


def check_options(name: str, options: Dict[str, object], runtime: bool = False) -> None:
    """ValueError naming the first option the scheduler does not take (runtime: also allow RUNTIME_OPTIONS)."""
    if name not in SCHEDULERS:
        raise ValueError("unknown scheduler %r (known: %s)" % (name, ", ".join(SCHEDULERS)))
    allowed = OPTIONS[name] + (RUNTIME_OPTIONS.get(name, ()) if runtime else ())
    for key in options:
        if key not in allowed:
            known = ", ".join(OPTIONS[name]) or "none"
            raise ValueError("scheduler %s has no option %r (options: %s)" % (name, key, known))


def schedule(name: str, inputs: CostInputs, in_flight: int = 0, delta: bool = True, **options) -> Plan:
    """Run the named scheduler with its options (ValueError on an unknown name or option)."""
    check_options(name, options, runtime=True)
    plan = SCHEDULERS[name](inputs, in_flight, delta, **options)
    log.debug("scheduler %s -> %s", name, plan)
    return plan
