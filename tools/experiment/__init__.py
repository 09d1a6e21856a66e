"""`cnnvideo experiment -c EXPERIMENT.yml`: a matrix of runs on the compose cluster (or local processes),
every report.json collected, a results table (Markdown + CSV) and SVG plots written to the output folder.

EXPERIMENT.yml:
    name: paper                  # sub-folder of `out`
    out: docs/results            # where results.md/.csv/.html go (raw reports: <work>/<name>/runs)
    work: out/experiments        # raw per-run folders
    backend: compose             # compose (docker compose + tc helper) | local (`cnnvideo local`, no shaping)
    frames: 8                    # per run
    cpus: {worker0: 0.35, worker1: 0.35}   # compose CPU caps (also written into each run's config)
    workers: 2                   # workers in the chain (default: as many as base.cluster.workers, else 2;
                                 # the compose backend runs docker-compose.yml's 2)
    base: {...}                  # cnnvideo config keys shared by every run
    variants: {full: {mode: full}, delta: {mode: delta}, delta_t2: {mode: delta, delta: {input_threshold: 2}}}
    matrix:                      # every combination, run in this key order (outer first); a list of such
                                 # mappings runs the union of their products (each run once)
      bandwidth: [1, 3, 8]       # MB/s on every hop (tc rates on compose; cost-model input everywhere)
      variant: [full, delta]
      in_flight: [1, 3, 6]
      scheduler: [lbs, optimal]
      workers: [1, 2, 4]         # optional: workers in this run's chain (the spec's `workers` otherwise; compose
                                 # re-creates the project for each count); the run id gains _w<N>
      caps: [0.1, 0.4]           # optional: every worker's CPU cap (replaces the spec's worker caps; null = none);
                                 # the run id gains _c<caps>
      repeat: [0, 1]             # optional: repeats (tables take medians over them); the run id gains _r<i>
    runs:                        # extra single runs; `change` re-shapes one link mid-run (compose only)
      - {scheduler: adaptive, variant: delta, in_flight: 3, bandwidth: 3, frames: 40,
         change: {after_frame: 10, link: "worker0<>worker1", rate: 1}}

Each compose run is a fresh master container against long-lived trainer/workers (every run starts with
StartRun, which resets the workers' delta caches; tc rules are re-created whenever the rates change and
after a mid-run change). Runs are grouped by the settings the trainer and workers depend on
(cnnvideo.wire.settings: thresholds, fp16, model, ...); they are re-created on each group's config, since they refuse
a master whose settings differ. A mid-run change fires when the master's progress.json says the frame was sent.

Tables (results.md): best scheduler vs lbs; medians over repeats per scheduler (fps, send- and capture-to-result
latency p50 / p95, F1 for a detector or top-1 agreement, kB per frame per hop); chain vs edge (the best scheduler
other than `edge` over `edge`'s fps, per engine, caps, in flight and N); scaling (fps_N / (N x fps_1) when the runs
have more than one worker count); bytes per hop; cost-model accuracy and criteria; engines against torch; all runs.

Modules: spec (the file, the matrix, each run's config), backends (local, compose), summary (rows and tables),
charts (SVG); this one drives a whole experiment.
"""
from __future__ import annotations

import html
import io
import json
import logging
import os
import platform
import shlex
import shutil
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from cnnvideo import artifacts
from cnnvideo.config import Config
from cnnvideo.config_upgrade import upgrade
from cnnvideo.results import report as rpt

from .backends import ComposeBackend, LocalBackend
from .charts import gantt, plots
from .spec import ExperimentError, expand, grouped, load_spec, n_workers, run_config, run_id, settings_key
from .summary import (
    SCHEDULERS,
    bytes_summary,
    criteria,
    cut_summary,
    edge_table,
    engine_table,
    md_table,
    medians,
    model_summary,
    ratios_vs,
    scaling,
    start_table,
    summarise,
    write_csv,
)

log = logging.getLogger(__name__)

__all__ = ["ComposeBackend", "ExperimentError", "LocalBackend", "expand", "gantt", "grouped", "load_spec",
           "n_workers", "rebuild", "run", "run_config", "run_experiment", "run_id", "settings_key", "summarise"]


def machine_facts() -> Dict[str, Any]:
    facts: Dict[str, Any] = {"cores": os.cpu_count(), "platform": platform.platform(),
                             "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    facts["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        facts["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    return facts


def write_results(spec: Dict[str, Any], rows: List[Dict[str, Any]], reports: Dict[str, rpt.RunReport],
                  out_dir: str, command: str, facts: Dict[str, Any]) -> List[str]:
    """results.md, results.csv, results.html (plots) in out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "results.csv")
    write_csv(rows, csv_path, max([int(r.get("workers") or 0) for r in rows] + [n_workers(spec)]))
    ratio_rows = ratios_vs(rows)
    ok = [r for r in rows if r.get("fps")]
    # caps and workers columns where the experiment varies them (or sets caps per run)
    dims = ([("caps", "caps")] if any(r.get("caps") is not None for r in rows) else []) + \
        ([("workers", "workers")] if len({r.get("workers") for r in ok}) > 1 else [])
    detector = any(r.get("f1") is not None for r in ok)
    svgs = plots(spec, rows, reports)
    # ---- markdown
    md = io.StringIO()
    md.write("# Experiment `%s`\n\n" % spec["name"])
    md.write("Reproduce:\n\n```sh\n%s\n```\n\n" % command)
    md.write("Machine and setup:\n\n")
    for k, v in facts.items():
        md.write("- %s: %s\n" % (k, v))
    md.write("\nRuns: %d (%d with a report). Throughput = completed frames / (last result - first send); "
             "`pred_fps` = the cost model's simulated makespan of the same number of frames for the plan used "
             "(first frame a keyframe); `model_err` = fps / pred_fps - 1. Stage columns: t0/t1 transfer into "
             "w0/w1, c0/c1 work on w0/w1: decode + compute + encode (c1 includes the result transfer), seconds "
             "per frame, predicted (the steady state) vs measured over frames 1.. (frame 0 is a keyframe on every "
             "hop).\n\n" % (len(rows), len(ok)))
    if ratio_rows:
        md.write("## Best scheduler vs lbs\n\n")
        scheds = [s for s in SCHEDULERS if any(("fps_" + s) in e for e in ratio_rows)]
        md.write("fps = median over repeats (`repeats` runs each).\n\n")
        cols = [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight")] + dims + \
               [("repeats", "repeats")] + \
               [("fps_" + s, s + " fps") for s in scheds] + \
               [("best", "best"), ("best_vs_lbs", "best/lbs"), ("optimal_vs_lbs", "optimal/lbs"),
                ("das_vs_lbs", "das/lbs"), ("adaptive_vs_lbs", "adaptive/lbs")]
        md.write(md_table(ratio_rows, cols) + "\n\n")
    med = medians(ok)
    if any(e["runs"] > 1 for e in med) or detector or dims:
        md.write("## Medians over repeats\n\n")
        md.write("Per group and scheduler, the median over its `runs` of: fps; send-to-result and capture-to-result "
                 "latency p50 / p95 (s, each run's own percentiles from report.json); %s; kB per frame on each hop "
                 "the plan used.\n\n" % ("F1 of the boxes against the unsplit fp32 model (IoU >= 0.5, same label)"
                                          if detector else "top-1 agreement with the unsplit fp32 model"))
        md.write(md_table(med, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight")] + dims +
                          [("scheduler", "scheduler"), ("runs", "runs"), ("fps", "fps"),
                           ("latency_p50_s", "latency p50"), ("latency_p95_s", "latency p95"),
                           ("capture_p50_s", "capture p50"), ("capture_p95_s", "capture p95"),
                           ("f1", "F1") if detector else ("top1_agreement", "top-1 agreement"),
                           ("hop_kB", "kB per frame per hop")]) + "\n\n")
    edge = edge_table(ok)
    if edge:
        md.write("## Chain vs edge (one device)\n\n")
        md.write("Per group (variant = engine and model, MB/s, in flight, caps) and chain of N workers: the best "
                 "scheduler other than `edge` (median fps over its repeats) over `edge`'s median fps (worker 0 runs "
                 "every layer; the same N, else any one-device run of the group), with each one's median "
                 "agreement (F1 or top-1) and the best's kB per frame per hop.\n\n")
        md.write(md_table(edge, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"),
                                 ("caps", "caps"), ("workers", "workers"), ("edge_fps", "edge fps"),
                                 ("edge_runs", "edge runs"), ("edge_agreement", "edge agreement"),
                                 ("best", "best chain"), ("best_fps", "best fps"), ("best_runs", "its runs"),
                                 ("best_agreement", "its agreement"), ("best_vs_edge", "best/edge"),
                                 ("best_capture_p50_s", "its capture p50"),
                                 ("best_hop_kB", "its kB per frame per hop")]) + "\n\n")
    scale = scaling(ok)
    if len({e["workers"] for e in scale}) > 1:
        md.write("## Scaling with the number of workers\n\n")
        md.write("Efficiency = fps_N / (N x fps_1): fps_N = the best scheduler's median fps with N workers (`edge` "
                 "included), fps_1 = one device's (`base`: the best 1-worker median, else `edge`'s median over all "
                 "N). Latency (s) and agreement are the best scheduler's medians.\n\n")
        md.write(md_table(scale, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"),
                                  ("caps", "caps"), ("workers", "N"), ("best", "best"), ("runs", "runs"),
                                  ("fps", "fps_N"), ("edge_fps", "edge fps"), ("fps_1", "fps_1"), ("base", "base"),
                                  ("efficiency", "efficiency"), ("latency_p50_s", "latency p50"),
                                  ("latency_p95_s", "latency p95"), ("capture_p50_s", "capture p50"),
                                  ("capture_p95_s", "capture p95"), ("agreement", "agreement"),
                                  ("hop_kB", "kB per frame per hop")]) + "\n\n")
    start = [e for e in start_table(ok) if e["first_result_s"] is not None]
    if start:
        md.write("## Start and steady state\n\n")
        md.write("Per group and number of workers N, the best scheduler's runs (by median fps): medians of the "
                 "time from the first frame read to the first result (s), of each run's fps over its first 80 "
                 "results over its fps over the rest, of the steady fps from the 60th result on, and of the "
                 "master's CPU a frame (ms; report.json `master`, the online check included when it runs "
                 "there). `vs one device`: over the median of `edge`'s runs in the group (else the 1-worker "
                 "runs).\n\n")
        md.write(md_table(start, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"),
                                  ("caps", "caps"), ("workers", "N"), ("best", "best"), ("runs", "runs"),
                                  ("fps", "fps"), ("first_result_s", "first result s"),
                                  ("first_vs_one", "first result vs one device"),
                                  ("first_80_over_rest", "fps first 80 / rest"),
                                  ("fps_after_60", "steady fps (after 60)"),
                                  ("steady_vs_one", "steady vs one device"),
                                  ("master_cpu_ms", "master CPU ms a frame")]) + "\n\n")
    md.write("## Bytes per hop (mean over runs; ratio = bytes sent / dense float32)\n\n")
    md.write("`steady` = frames 1.. only (frame 0 is a keyframe on every hop); w0->w1 depends on the cut each "
             "scheduler chose (runs where w0->w1 carried nothing are left out).\n\n")
    md.write(md_table(bytes_summary(ok), [("variant", "variant"), ("ratio_m_w0", "m->w0 all"),
                                          ("steady_m_w0", "m->w0 steady"), ("ratio_w0_w1", "w0->w1 all"),
                                          ("steady_w0_w1", "w0->w1 steady"), ("ratio_w1_m", "w1->m"),
                                          ("max_abs_err", "max abs output error"),
                                          ("top1_min", "lowest top-1 agreement"), ("f1_min", "lowest F1"),
                                          ("n", "runs")]) + "\n\n")
    cuts = cut_summary(ok)
    if cuts:
        md.write("## Bytes per hop at each cut chosen\n\n")
        md.write("Per variant and the tensor w0->w1 carries (the main plan's cut): dense = float32 bytes per frame; "
                 "steady ratio and bytes per frame over frames 1.. (mean over the runs that chose the cut); "
                 "top-1 agreement = share of frames whose top-1 equals the unsplit full-precision model's (lowest "
                 "among those runs; `check: true`).\n\n")
        md.write(md_table(cuts, [("variant", "variant"), ("cut", "w0->w1 cut"), ("runs", "runs"),
                                 ("dense_w0_w1", "w0->w1 dense B"), ("steady_w0_w1", "w0->w1 ratio"),
                                 ("bytes_frame_w0_w1", "w0->w1 B/frame"), ("steady_m_w0", "m->w0 ratio"),
                                 ("bytes_frame_m_w0", "m->w0 B/frame"), ("ratio_w1_m", "w1->m ratio"),
                                 ("max_abs_err", "max abs err"), ("top1_min", "top-1 agreement")]) + "\n\n")
    md.write("## Cost model accuracy\n\n")
    md.write("`fps err` = measured / predicted - 1 with the profiled compute and configured bandwidth (what the "
             "schedulers see); `recurrence` = the same pipeline recurrence fed with the run's measured mean stage "
             "costs over all frames and its measured turnaround (checks the timing model apart from the "
             "profile). Stage errors: measured over "
             "frames 1.. / predicted - 1, mean over runs.\n\n")
    md.write(md_table(model_summary(ok), [("group", "runs"), ("n", "n"), ("mean_abs_err", "mean |fps err|"),
                                          ("within_15", "share within 15%"),
                                          ("recur_mean_abs_err", "recurrence mean |err|"),
                                          ("recur_within_15", "recurrence within 15%"), ("t0", "t0 err"),
                                          ("c0", "c0 err"),
                                          ("t1", "t1 err"), ("c1", "c1 err")]) + "\n\n")
    crit = criteria(ok)
    if crit:
        md.write("## Cost model criteria (issue 12)\n\n")
        md.write("Per group: schedulers whose predicted fps is within 10%% of the measured one (`pred err` = "
                 "predicted / measured - 1, each the median over the scheduler's repeats; worst shown), and "
                 "`optimal`'s median fps over the best scheduler's (at least 0.95 asked). %d of %d groups meet the "
                 "first, %d of %d the second. `by plan`: the same check with runs pooled by plan, whichever "
                 "scheduler ran it (median fps of optimal's plan over the best plan's; plans run at least "
                 "twice): it tells a worse choice from one plan measured apart.\n\n"
                 % (sum(c["model_ok"] for c in crit), len(crit), sum(c["optimal_ok"] for c in crit), len(crit)))
        md.write(md_table(crit, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"),
                                 ("runs", "runs"), ("schedulers", "schedulers"), ("within", "within 10%"),
                                 ("worst_err", "worst |pred err|"),
                                 ("best", "best"), ("best_fps", "best fps"), ("optimal_vs_best", "optimal/best"),
                                 ("model_ok", "model ok"), ("optimal_ok", "optimal ok"),
                                 ("optimal_plan", "optimal's plan"), ("plan_runs", "its runs"),
                                 ("optimal_plan_vs_best", "by plan: optimal/best")]) + "\n\n")
    engines = engine_table(ok)
    if len({e["variant"] for e in engines}) > 1 and any("vs_torch" in e for e in engines):
        md.write("## Engines against torch (best scheduler of each)\n\n")
        md.write("`vs torch` = the variant's best fps / torch's best fps in the same (MB/s, in flight); kB per frame "
                 "and bytes / dense float32 on each hop of that best run; max abs error of the outputs and top-1 "
                 "agreement with the unsplit torch fp32 model over all the variant's runs of the group.\n\n")
        md.write(md_table(engines, [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"),
                                    ("best", "best"), ("best_fps", "fps"), ("vs_torch", "vs torch"),
                                    ("cuts", "cuts"), ("engines", "engines ran"), ("kB_m_w0", "m->w0 kB"),
                                    ("kB_w0_w1", "w0->w1 kB"), ("ratio_w0_w1", "w0->w1 ratio"),
                                    ("kB_w1_m", "w1->m kB"), ("max_abs_err", "max abs err"),
                                    ("top1_agreement", "top-1 agreement")]) + "\n\n")
    chg = [r for r in rows if "_chg" in r["id"]]
    if chg:
        md.write("## Mid-run rate change\n\n")
        md.write(md_table(chg, [("scheduler", "scheduler"), ("fps_before_change", "fps before"),
                                ("fps_after_change", "fps after"), ("replanned_at_frame", "re-planned at frame"),
                                ("cuts", "main plan"), ("plans", "plans used")]) + "\n\n")
    md.write("## All runs\n\n")
    md.write(md_table(rows, [("id", "run"), ("fps", "fps"), ("pred_fps", "pred fps"), ("model_err", "model err"),
                             ("pred_err", "pred err"),
                             ("recur_err", "recur err"), ("turnaround_s", "turnaround s"),
                             ("latency_mean_s", "latency s"), ("latency_p50_s", "lat p50"),
                             ("latency_p95_s", "lat p95"), ("capture_p95_s", "capture p95"), ("cuts", "cuts"),
                             ("ratio_m_w0", "m->w0"),
                             ("ratio_w0_w1", "w0->w1"), ("max_abs_err", "max err"),
                             ("top1_agreement", "top-1 agr"), ("f1", "F1"), ("pred_t0", "t0 p"),
                             ("meas_t0", "t0 m"), ("pred_c0", "c0 p"), ("meas_c0", "c0 m"), ("pred_t1", "t1 p"),
                             ("meas_t1", "t1 m"), ("pred_c1", "c1 p"), ("meas_c1", "c1 m"), ("exit", "exit")]))
    md.write("\n\nPlots: [results.html](results.html) (throughput, latency, bytes, model accuracy, Gantt chart).\n")
    md_path = os.path.join(out_dir, "results.md")
    with open(md_path, "w") as fh:
        fh.write(md.getvalue())
    # ---- html
    page = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>%s</title><style>body{font-family:sans-serif;"
            "margin:20px}pre{background:#f6f6f6;padding:8px}</style></head><body>" % html.escape(spec["name"]),
            "<h1>Experiment %s</h1><pre>%s</pre><ul>%s</ul>" % (
                html.escape(spec["name"]), html.escape(command),
                "".join("<li>%s: %s</li>" % (html.escape(str(k)), html.escape(str(v))) for k, v in facts.items()))]
    for title, svg in svgs:
        page.append("<h2>%s</h2>%s" % (html.escape(title), svg))
    page.append("</body></html>")
    html_path = os.path.join(out_dir, "results.html")
    with open(html_path, "w") as fh:
        fh.write("\n".join(page))
    return [md_path, csv_path, html_path]


def weights_fact(base: Dict[str, Any]) -> str:
    """The weights an experiment's runs use: an ONNX model's are its file's (`weights` does not apply to it)."""
    model = str(base.get("model", "alexnet"))
    if artifacts.onnx_model_path(model) is not None:
        return "the ONNX file's own" if model.lower().endswith(".onnx") else "trained (the model cache's ONNX file)"
    return str(base.get("weights", "random"))


def trimmed(report: rpt.RunReport) -> Dict[str, Any]:
    """A report without the bulky per-span list (kept in the raw run folder)."""
    return {k: v for k, v in report.to_dict().items() if k not in ("spans", "per_frame")}


def run_experiment(spec: Dict[str, Any], command: str, only: Optional[str] = None, resume: bool = False,
                   limit: int = 0) -> Tuple[List[Dict[str, Any]], List[str]]:
    runs = expand(spec)
    if only:
        runs = [r for r in runs if only in r["id"]]
    if limit > 0:
        runs = runs[:limit]
    runs = grouped(spec, runs)  # one trainer/worker configuration per group of runs
    work = os.path.join(spec["work"], spec["name"])
    os.makedirs(os.path.join(work, "runs"), exist_ok=True)
    backend = ComposeBackend(spec, work) if spec["backend"] == "compose" else LocalBackend(spec, work)
    facts = machine_facts()
    facts["backend"] = spec["backend"]
    base = spec.get("base") or {}
    facts["model / weights / frame size"] = "%s / %s / %s" % (
        base.get("model", "alexnet"), weights_fact(base), base.get("frame_size", [480, 720]))
    facts["frames per run"] = spec.get("frames")
    facts["cost model"] = cost_model_facts(base)
    facts["note"] = ("2 cores shared with other jobs: timings are noisy" if (os.cpu_count() or 0) <= 2 else "")
    rows: List[Dict[str, Any]] = []
    reports: Dict[str, rpt.RunReport] = {}
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dev extra
        def tqdm(it: Iterable, **kw: Any) -> Iterable:
            return it
    backend.start()
    facts.update(backend.facts())
    try:
        bar = tqdm(runs, desc=spec["name"], unit="run")
        for r in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(r["id"])
            run_dir = os.path.join(work, "runs", r["id"])
            path = os.path.join(run_dir, "report.json")
            t0 = time.time()
            rc = 0
            if not (resume and os.path.exists(path)):
                if os.path.exists(run_dir):
                    shutil.rmtree(run_dir)
                os.makedirs(run_dir)
                rc, text = backend.run(r, run_config(spec, r), run_dir)
                with open(os.path.join(run_dir, "log.txt"), "w") as fh:
                    fh.write(text)
                if rc != 0:
                    log.warning("run %s exited %d: %s", r["id"], rc, text.strip()[-500:])
            report = None
            if os.path.exists(path):
                report = rpt.read(path)
                reports[r["id"]] = report
            rows.append(summarise(r, report, rc, time.time() - t0))
    finally:
        backend.stop()
    with open(os.path.join(work, "meta.json"), "w") as fh:  # for --report-only
        json.dump({"command": command, "facts": facts}, fh, indent=1, default=str)
    out_dir = os.path.join(spec["out"], spec["name"])
    paths = write_results(spec, rows, reports, out_dir, command, facts)
    raw = raw_dir(out_dir)
    os.makedirs(raw, exist_ok=True)
    with open(os.path.join(raw, "reports.jsonl"), "w") as fh:
        for rid, rep in reports.items():
            fh.write(json.dumps(dict(trimmed(rep), experiment_run=rid)) + "\n")
    return rows, paths


def raw_dir(out_dir: str) -> str:
    """Where an experiment's raw run records (reports.jsonl) go: beside its pages, except that pages written into
    docs/results/<name> keep their raw records in results-data/<name> (docs/ holds no raw records)."""
    parts = os.path.normpath(os.path.abspath(out_dir)).split(os.sep)
    for i in range(len(parts) - 1):
        if parts[i] == "docs" and parts[i + 1] == "results":
            return os.sep.join(parts[:i] + ["results-data"] + parts[i + 2:])
    return out_dir


def rebuild(spec: Dict[str, Any], command: str) -> List[str]:
    """Re-write the tables and plots from the raw run folders (no runs)."""
    work = os.path.join(spec["work"], spec["name"])
    rows, reports = [], {}
    for r in expand(spec):
        path = os.path.join(work, "runs", r["id"], "report.json")
        if os.path.exists(path):
            reports[r["id"]] = rpt.read(path)
            rows.append(summarise(r, reports[r["id"]], 0, 0.0))
    meta_path = os.path.join(work, "meta.json")
    if os.path.exists(meta_path):  # the facts and command of the runs themselves
        with open(meta_path) as fh:
            meta = json.load(fh)
        command, facts = meta["command"], meta["facts"]
    else:
        facts = machine_facts()
        facts["backend"] = spec["backend"]
    facts.setdefault("cost model", cost_model_facts(spec.get("base") or {}))
    return write_results(spec, rows, reports, os.path.join(spec["out"], spec["name"]), command, facts)


def cost_model_facts(base: Dict[str, Any]) -> str:
    """The cost-model settings of the runs (config defaults where the experiment leaves them)."""
    default = Config()
    base = upgrade(base)  # old top-level cost-model keys: under cost_model
    cost = base.get("cost_model") or {}
    return "profile_iters %s, profile_rescale %s, net_cpu_ns_per_byte %s, net_cpu_us_per_message %s" % (
        base.get("profile_iters", default.profile_iters), base.get("profile_rescale", default.profile_rescale),
        cost.get("net_cpu_ns_per_byte", default.cost_model.net_cpu_ns_per_byte),
        cost.get("net_cpu_us_per_message", default.cost_model.net_cpu_us_per_message))


def run(args) -> int:
    spec = load_spec(args.config)
    if getattr(args, "backend", None):
        spec["backend"] = args.backend
    if getattr(args, "out", None):
        spec["out"] = args.out
    if getattr(args, "frames", None):
        spec["frames"] = args.frames
    command = "cnnvideo experiment " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else \
        "cnnvideo experiment -c %s" % args.config
    if getattr(args, "report_only", False):
        paths = rebuild(spec, command)
        print("\n".join(paths))
        return 0
    rows, paths = run_experiment(spec, command, only=getattr(args, "only", None),
                                 resume=getattr(args, "resume", False), limit=getattr(args, "limit", 0) or 0)
    failed = [r["id"] for r in rows if not r.get("fps")]
    print("%d runs, %d failed%s" % (len(rows), len(failed), (": " + ", ".join(failed)) if failed else ""))
    print("\n".join(paths))
    return 1 if failed else 0
