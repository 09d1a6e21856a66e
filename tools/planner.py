"""`cnnvideo plan`: every scheduler's split and predicted per-frame time for a config, without any network.

Segment and hop codec times are profiled locally (one thread; on the config's engine and precision, as a worker
profiles: torch segment times scaled by ONNX Runtime stages, int8 codec times on the uint8 cut tensors) and
divided by each worker's CPU share
(`cpus: {worker0: 0.07}`; `worker<i>`, else `workers` for all; shares above 1 count
as 1), as is the network CPU charge (`cost_model.net_cpu_ns_per_byte`; with 1 frame in flight, CFS bursts instead)
and the CPU per gRPC message (`cost_model.net_cpu_us_per_message`, 3 a frame per worker; with 1 in flight inside
the burst).
Delta bytes per cut come from the trainer's predictor cache when present, else from predictors fitted on
~20 frames of the config's video (synthetic frames if the file is missing). CostInputs come from
cnnvideo.plan.costinputs, the builder the master uses.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from cnnvideo import artifacts
from cnnvideo import config as config_mod
from cnnvideo.model.engines import factory_for
from cnnvideo.model.loading import check_weights, load_graph
from cnnvideo.plan import costinputs, overhead, pool
from cnnvideo.plan.costmodel import CostInputs
from cnnvideo.plan.plan import Plan
from cnnvideo.plan.predict import Predictors, fit_recorder, record_video
from cnnvideo.plan.profiling import device_tag, profile_worker, senders_for
from cnnvideo.plan.schedulers import RUNTIME_OPTIONS, SCHEDULERS, create, objective
from cnnvideo.video.frames import read_frames, synthetic_frames

log = logging.getLogger(__name__)

FIT_FRAMES = 20


def worker_share(cfg: config_mod.Config, w: int) -> float:
    """CPU share of worker w from cfg.cpus (1.0 when not given; capped at 1 since profiles use one core)."""
    share = cfg.cpu_share("worker%d" % w)
    return 1.0 if share is None else min(float(share), 1.0)


def seg_times(cfg: config_mod.Config, profile: np.ndarray) -> np.ndarray:
    """[W, K] (or [W, K+1] for per-cut codec times) seconds per worker: the local profile divided by each
    worker's CPU share."""
    shares = np.array([worker_share(cfg, w) for w in range(cfg.n_workers)])
    return np.asarray(profile, dtype=np.float64)[None, :] / shares[:, None]


def _frames(cfg: config_mod.Config, n: int):
    """n frames of the config's video, or synthetic frames when the file is missing."""
    if os.path.isfile(cfg.video):
        return read_frames(cfg.video, cfg.frame_size, n), cfg.video
    return synthetic_frames(n, cfg.frame_size, seed=cfg.seed), "synthetic"


@dataclass
class PlanContext:
    """Everything the schedulers were given, and where it came from."""

    graph: Any
    inputs: CostInputs
    engine: str  # engine-precision the stages were profiled on (e.g. onnxruntime-int8)
    predictors: Any
    profile: np.ndarray
    source: str
    frame_bytes: Optional[np.ndarray]


def engine_stages(cfg: config_mod.Config, graph):
    """The StageFactory `plan` profiles with, as a worker does (engines.factory_for): None on torch fp32 (the torch
    profile is the engine's own), else the config's engine and precision, one intra-op thread unless the config
    sets them (the profile is of one core, then divided by each worker's share)."""
    if cfg.engine == "torch" and cfg.precision == "fp32":
        return None
    import dataclasses

    if cfg.engine_options.threads <= 0:
        cfg = dataclasses.replace(cfg, engine_options=dataclasses.replace(cfg.engine_options, threads=1))
    return factory_for(cfg, graph)


def profiled_engine(cfg: config_mod.Config, stages) -> str:
    """engine-precision the profile ran on: what the stages really built (a fallback says torch or fp32)."""
    if stages is None:
        return "torch-fp32"
    used = stages.engines_used()
    return "+".join(used) if used else "%s-%s" % (cfg.engine, stages.precision)


def build_context(cfg: config_mod.Config, fit_frames: int = FIT_FRAMES) -> PlanContext:
    """Graph, profile, predictors and CostInputs for a config."""
    import torch

    torch.set_num_threads(1)
    graph = load_graph(cfg)  # a zoo model's LayerGraph, or an ONNX file's OnnxGraph
    stages = engine_stages(cfg, graph)
    prof = profile_worker(graph, cfg.profile_iters, senders_for(cfg.delta), cfg.max_message_bytes, stages=stages)
    profile = prof.seconds
    path = artifacts.predictor_path(cfg)
    preds = None
    frame_bytes = None
    source = ""
    if os.path.isfile(path):
        try:
            preds = Predictors.load(path)
            if preds.n_cuts != len(graph.cuts):
                raise ValueError("cut count %d != %d" % (preds.n_cuts, len(graph.cuts)))
            source = "trainer cache %s" % path
        except (OSError, ValueError) as exc:
            log.warning("ignoring predictor cache %s: %s", path, exc)
            preds = None
    if preds is None:
        frames, video = _frames(cfg, fit_frames + 1)
        rec = record_video(graph, frames, cfg.delta.threshold, cfg.delta.input_threshold, cfg.delta.fp16)
        preds = fit_recorder(rec, graph, fp16=cfg.delta.fp16)
        frame_bytes = preds.predict_bytes(rec.arrays()[0])
        source = "fitted on %d frames of %s" % (rec.frames, video)
    shares = [worker_share(cfg, w) for w in range(cfg.n_workers)]
    cpus = [costinputs.share_cpu(s, prof.wall_per_cpu) for s in shares]  # as the master's workers report them
    dense = np.array([float(c.bytes_dense) for c in graph.cuts])
    seg, message_us = seg_times(cfg, profile), cfg.cost_model.net_cpu_us_per_message
    found = stored_overheads(cfg, cpus) if cfg.cost_model.measured_overhead else [None] * cfg.n_workers
    if any(s is not None for s in found):  # what the last runs here measured (master.overheads stores it)
        seg, message_us = overhead.apply(seg, message_us, found)
        log.info("planning with the measured overhead: %s", "; ".join(
            "w%d compute x%.3f, %.0f us a message (run %s)" % (w, s.compute_ratio, s.message_us, s.run_id)
            for w, s in enumerate(found) if s is not None))
    inputs = costinputs.build(seg, cfg.bandwidth_bytes(), dense, preds, preds.input_nz,
                              seg_times(cfg, prof.encode), seg_times(cfg, prof.decode), delta_mode=cfg.mode == "delta",
                              share=costinputs.payload_share(cfg.local.links),
                              turnaround=cfg.cost_model.master_turnaround_s, master_time=costinputs.master_time(cfg),
                              input_stride_exponent=costinputs.input_stride_exponent(cfg),
                              **costinputs.cpu_model(cpus, cfg.in_flight, cfg.cost_model.net_cpu_ns_per_byte,
                                                     message_us))
    return PlanContext(graph, inputs, profiled_engine(cfg, stages), preds, profile, source, frame_bytes)


def stored_overheads(cfg: config_mod.Config, cpus) -> List[Any]:
    """Per worker, the figures (overhead.Stored or None) runs on this device stored for its CPU cap, else for the
    device at any cap."""
    device = device_tag()
    return [overhead.load_for(cfg, device, c.cfs_quota_s, c.cfs_period_s) for c in cpus]


def _options(cfg: config_mod.Config, name: str, ctx: PlanContext) -> Dict[str, Any]:
    """Options for one scheduler: config scheduler_options for the configured one, plus the predicted bytes of
    the video's last group for a scheduler that takes them (its group size comes from the config)."""
    opts: Dict[str, Any] = {}
    takes_bytes = "frame_bytes" in RUNTIME_OPTIONS.get(name, ())
    if takes_bytes and ctx.frame_bytes is not None and ctx.frame_bytes.shape[0] >= cfg.group_size:
        opts["frame_bytes"] = ctx.frame_bytes[-cfg.group_size:]
    if name == cfg.scheduler:
        opts.update(cfg.scheduler_options)
    return opts


def evaluate(cfg: config_mod.Config, ctx: PlanContext) -> List[Dict[str, Any]]:
    """One row per scheduler: plan, split, predicted per-frame time, throughput, latency, decision time."""
    delta = cfg.mode == "delta"
    rows = []
    names = [c.name for c in ctx.graph.cuts]
    for name in SCHEDULERS:
        if name == "fixed" and cfg.scheduler != name:
            continue  # it has no plan of its own: only the config's cuts, when the config names it
        t0 = time.perf_counter()
        plan = create(name, ctx.inputs, cfg.in_flight, delta, _options(cfg, name, ctx), cfg.group_size).initial_plan()
        decide_ms = 1000 * (time.perf_counter() - t0)
        rows.append(_row(name, plan, cfg, ctx, names, delta, decide_ms))
    return rows


def shapes(cfg: config_mod.Config, ctx: PlanContext) -> List[Dict[str, Any]]:
    """The best plan of each shape (edge, chain, replicas, hybrid: cnnvideo.plan.pool) with its predicted fps."""
    delta = cfg.mode == "delta"
    names = [c.name for c in ctx.graph.cuts]
    return [_row(shape, c.plan, cfg, ctx, names, delta, 0.0)
            for shape, c in sorted(pool.best_by_shape(ctx.inputs, cfg.in_flight, delta).items())]


def _row(name: str, plan: Plan, cfg: config_mod.Config, ctx: PlanContext, names: List[str], delta: bool,
         decide_ms: float) -> Dict[str, Any]:
    period = objective(plan, ctx.inputs, cfg.in_flight, delta)
    row = {
        "scheduler": name,
        "cuts": plan.to_list(),
        "split": _split(plan, ctx, names),
        "per_frame_s": period,
        "throughput_fps": 1.0 / period if period > 0 else float("inf"),
        "decide_ms": round(decide_ms, 3),
    }
    pc = pool.pool_costs(plan, ctx.inputs, cfg.in_flight, delta)
    row.update(groups=[list(g) for g in plan.groups], shape=plan.shape(), latency_s=pc.latency,
               stage_costs_s=[round(float(c), 6) for c in pc.stage_costs()])
    return row


def _split(plan: Plan, ctx: PlanContext, names: List[str]) -> List[Dict[str, Any]]:
    """Per stage: its first worker, `workers` all of them, input cut, output cut, segment count, layer names."""
    layers = plan.stage_layers(ctx.graph)
    return [{"worker": g[0], "workers": list(g), "from": names[a], "to": names[b], "segments": b - a,
             "layers": [ctx.graph.layers[i].name for i in layers[s]]}
            for s, (g, (a, b)) in enumerate(zip(plan.groups, plan.stage_bounds()))]


def _load(args) -> config_mod.Config:
    """Config from -c, or the demo config (config.DEMO_PATH; video check relaxed: synthetic frames if it is missing)."""
    if getattr(args, "config", None):
        cfg = config_mod.load(args.config)
        config_mod.require_one_camera(cfg, "cnnvideo plan takes a config of one camera (they all share its plan)")
        return cfg
    return config_mod.load_demo(check_files=False)


def _weights(cfg: config_mod.Config) -> str:
    """The weights the plan's model has: an ONNX model's are in its file (the `weights` key is not used there)."""
    if artifacts.onnx_model_path(cfg.model):
        return check_weights(cfg).describe()
    return cfg.weights


def run(args) -> int:
    """CLI entry: print a table (or JSON with --json) of every scheduler's plan."""
    cfg = _load(args)  # scheduler_options are checked by config_validation.validate (schedulers.check_options)
    ctx = build_context(cfg)
    rows = evaluate(cfg, ctx)
    inputs = ctx.inputs
    summary = {
        "model": cfg.model,
        "weights": _weights(cfg),
        "frame_size": list(cfg.frame_size),
        "mode": cfg.mode,
        "workers": cfg.n_workers,
        "in_flight": cfg.in_flight,
        "bandwidth_MBps": [b / 1e6 for b in cfg.bandwidth_bytes()],
        "cpu_share": [worker_share(cfg, w) for w in range(cfg.n_workers)],
        "engine": ctx.engine,
        "profile_total_s": float(ctx.profile.sum()),
        "predictors": ctx.source,
        "objective": "steady-state s/frame = max(max stage cost, sum of stage costs / in_flight)",
        "cuts": [{"index": c.index, "name": c.name, "bytes_dense": int(c.bytes_dense),
                  "bytes_full": float(inputs.bytes_full[c.index]), "bytes_delta": float(inputs.bytes_delta[c.index])}
                 for c in ctx.graph.cuts],
        "schedulers": rows,
        "shapes": shapes(cfg, ctx) if cfg.n_workers > 1 else [],
    }
    if getattr(args, "json", False):
        print(json.dumps(summary, indent=2))
        return 0
    print("%s (%s) %dx%d, mode %s, %d workers, in_flight %d, bandwidth %s MB/s, cpu share %s" % (
        cfg.model, summary["weights"], cfg.frame_size[0], cfg.frame_size[1], cfg.mode, cfg.n_workers, cfg.in_flight,
        "/".join("%g" % b for b in summary["bandwidth_MBps"]), "/".join("%g" % s for s in summary["cpu_share"])))
    print("profile (1 core, %s): %.4f s per frame; predictors: %s" % (ctx.engine, summary["profile_total_s"],
                                                                     ctx.source))
    print("%-8s %10s %9s %10s  %s" % ("sched", "s/frame", "fps", "latency_s", "split (worker: first..last layer)"))
    for row in rows + ([{"scheduler": "--- best of each shape (pool model) ---", "split": [], "per_frame_s": 0.0,
                         "throughput_fps": 0.0, "latency_s": 0.0}] + summary["shapes"] if summary["shapes"] else []):
        if row["scheduler"].startswith("---"):
            print(row["scheduler"])
            continue
        parts = []
        for s in row["split"]:
            if s["layers"]:
                who = "+".join("w%d" % w for w in s.get("workers", [s["worker"]]))
                parts.append("%s: %s..%s (%d)" % (who, s["layers"][0], s["layers"][-1], len(s["layers"])))
            else:
                parts.append("w%d: -" % s["worker"])
        print("%-8s %10.4f %9.3f %10.4f  %s" % (
            row["scheduler"], row["per_frame_s"], row["throughput_fps"], row["latency_s"], "; ".join(parts)))
    return 0
