"""The experiment file: load and check it, expand the matrix into runs, and the cnnvideo config of each run."""
from __future__ import annotations

import copy
import itertools
import os
import re
from typing import Any, Dict, List

import yaml

from cnnvideo import config
from cnnvideo.wire import settings

KNOWN = ("name", "out", "work", "backend", "frames", "cpus", "base", "variants", "matrix", "runs", "gantt",
         "timeout_s", "workers")


class ExperimentError(RuntimeError):
    """The experiment file is wrong or the cluster cannot run."""


# ---------------------------------------------------------------------------------------------- the matrix
def load_spec(path: str) -> Dict[str, Any]:
    with open(path) as fh:
        spec = yaml.safe_load(fh) or {}
    if not isinstance(spec, dict):
        raise ExperimentError("%s must hold a mapping" % path)
    bad = sorted(set(spec) - set(KNOWN))
    if bad:
        raise ExperimentError("unknown experiment key(s) %s (known: %s)" % (", ".join(bad), ", ".join(sorted(KNOWN))))
    spec.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    spec.setdefault("out", "docs/results")
    spec.setdefault("work", "out/experiments")
    spec.setdefault("backend", "compose")
    spec.setdefault("frames", 8)
    spec.setdefault("cpus", {})
    spec.setdefault("base", {})
    spec.setdefault("variants", {})
    spec.setdefault("matrix", {})
    spec.setdefault("runs", [])
    if spec["backend"] not in ("compose", "local"):
        raise ExperimentError("backend must be compose or local, got %r" % spec["backend"])
    n_workers(spec)  # checked now, not after the first run
    return spec


def n_workers(spec: Dict[str, Any]) -> int:
    """Workers in the chain: the spec's `workers`, else as many as base.cluster.workers lists, else 2."""
    listed = ((spec.get("base") or {}).get("cluster") or {}).get("workers")
    n = spec.get("workers", len(listed) if listed else 2)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ExperimentError("workers must be a positive integer, got %r" % (n,))
    if listed and len(listed) != n:
        raise ExperimentError("workers is %d but base.cluster.workers lists %d addresses" % (n, len(listed)))
    return n


def run_workers(spec: Dict[str, Any], r: Dict[str, Any]) -> int:
    """Workers in run r's chain: its own `workers` (a matrix dimension), else the spec's (n_workers)."""
    n = r.get("workers")
    if n is None:
        return n_workers(spec)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ExperimentError("run %s: workers must be a positive integer, got %r" % (r.get("id", r), n))
    listed = ((spec.get("base") or {}).get("cluster") or {}).get("workers")
    if listed and len(listed) != n:
        raise ExperimentError("run %s has %d workers but base.cluster.workers lists %d addresses"
                              % (r.get("id", r), n, len(listed)))
    return n


def check_caps(r: Dict[str, Any]) -> None:
    """A run's `caps` (every worker's CPU share, a matrix dimension): a positive number, or null for none."""
    c = r.get("caps")
    if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or c <= 0):
        raise ExperimentError("run %s: caps must be a positive CPU share (1.0 = one core) or null, got %r"
                              % (r.get("id", r), c))


def expand(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every run as a flat mapping: scheduler, in_flight, bandwidth, variant, frames (+ change, workers, caps,
    repeat), with an id."""
    blocks = spec.get("matrix") or {}
    blocks = blocks if isinstance(blocks, list) else [blocks]  # a list of matrices = the union of their products
    runs: List[Dict[str, Any]] = []
    for matrix in blocks:
        keys = list(matrix)
        for values in itertools.product(*(list(matrix[k]) for k in keys)):
            runs.append(dict(zip(keys, values)))
    runs.extend(dict(r) for r in spec.get("runs") or [])
    out = []
    for r in runs:
        r.setdefault("variant", "delta")
        r.setdefault("scheduler", "optimal")
        r.setdefault("in_flight", 3)
        r.setdefault("bandwidth", 3)
        r.setdefault("frames", spec.get("frames", 8))
        if r["variant"] not in (spec.get("variants") or {}) and r["variant"] not in ("full", "delta"):
            raise ExperimentError("run %r names unknown variant %r" % (r, r["variant"]))
        run_workers(spec, r)
        check_caps(r)
        r["id"] = run_id(r)
        out.append(r)
    seen = set()
    unique = []
    for r in out:  # overlapping matrices: each run once, first position wins
        if r["id"] not in seen:
            seen.add(r["id"])
            unique.append(r)
    return unique


def run_id(r: Dict[str, Any]) -> str:
    bw = r["bandwidth"]
    bws = "-".join("%g" % b for b in bw) if isinstance(bw, (list, tuple)) else "%g" % bw
    rid = "%s_%s_m%d_bw%s" % (r["scheduler"], r["variant"], int(r["in_flight"]), bws)
    if r.get("workers") is not None:  # matrix dimensions only where the run sets them: older ids stay as they were
        rid += "_w%d" % int(r["workers"])
    if "caps" in r:
        rid += "_c%s" % ("none" if r["caps"] is None else "%g" % float(r["caps"]))
    if r.get("repeat") is not None:
        rid += "_r%d" % int(r["repeat"])
    if r.get("change"):
        c = r["change"]
        rid += "_chg%s-%g-at%d" % (str(c.get("link", "")).replace("<>", "").replace(">", ""), float(c["rate"]),
                                   int(c.get("after_frame", 0)))
    return rid


def _merge(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(a)
    for k, v in (b or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def bandwidth_list(bw: Any, n: int = 2) -> List[float]:
    """MB/s per hop: a list as given, a number for every one of the n hops."""
    return [float(b) for b in bw] if isinstance(bw, (list, tuple)) else [float(bw)] * n


def run_config(spec: Dict[str, Any], r: Dict[str, Any]) -> Dict[str, Any]:
    """The cnnvideo config mapping of one run (before backend-specific addresses and paths)."""
    variants = {"full": {"mode": "full"}, "delta": {"mode": "delta"}}
    variants.update(spec.get("variants") or {})
    cfg = _merge(spec.get("base") or {}, variants[r["variant"]])
    cfg["scheduler"] = r["scheduler"]
    cfg["in_flight"] = int(r["in_flight"])
    cfg["frames"] = int(r["frames"])
    n = run_workers(spec, r)
    cfg["bandwidth"] = bandwidth_list(r["bandwidth"], n)
    cluster = cfg.setdefault("cluster", {})
    if not cluster.get("workers"):  # placeholders: the backend gives the real addresses (free ports, service names)
        cluster["workers"] = ["127.0.0.1:%d" % (50060 + i) for i in range(n)]
    cpus = run_cpus(spec, r)
    if cpus:
        cfg["cpus"] = cpus
    for k in ("scheduler_options", "group_size"):
        if k in r:
            cfg[k] = r[k]
    return cfg


def run_cpus(spec: Dict[str, Any], r: Dict[str, Any]) -> Dict[str, float]:
    """CPU caps of run r: the spec's `cpus` without worker keys beyond its chain; a run's `caps` replaces every
    worker's cap (`workers` key) and null removes them (master and trainer keep the spec's)."""
    n = run_workers(spec, r)
    out = {}
    for k, v in (spec.get("cpus") or {}).items():
        m = re.fullmatch(r"w(?:orker)?(\d+)", k)  # worker<i> (or the old w<i>)
        idx = m.group(1) if m else ""
        if idx.isdigit() and int(idx) >= n:
            continue
        if "caps" in r and (k == "workers" or idx.isdigit()):
            continue
        out[k] = float(v)
    if r.get("caps") is not None:
        out["workers"] = float(r["caps"])
    return out


def settings_key(spec: Dict[str, Any], r: Dict[str, Any]) -> str:
    """Digest of the settings of run r that the long-lived trainer and workers depend on (cnnvideo.wire.settings):
    runs with the same key can share them; a new key needs them restarted with that run's config."""
    cfg = config.from_dict(run_config(spec, r), check_files=False)
    caps = sorted(run_cpus(spec, r).items())  # the compose backend re-creates the workers for new caps or count
    return "%s|w%d|%s" % (settings.of(cfg, settings.TRAINER_KEYS).digest, run_workers(spec, r), caps)


def grouped(spec: Dict[str, Any], runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The runs ordered by settings_key (groups in order of first appearance, runs in order within a group), so
    the trainer and workers restart once per group."""
    order: Dict[str, int] = {}
    keys = [settings_key(spec, r) for r in runs]
    for k in keys:
        order.setdefault(k, len(order))
    return [r for _, _, r in sorted((order[k], i, r) for i, (k, r) in enumerate(zip(keys, runs)))]
