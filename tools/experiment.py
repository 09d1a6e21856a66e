"""`cnnvideo experiment -c EXPERIMENT.yml`: a matrix of runs on the compose cluster (or local processes),
every report.json collected, a results table (Markdown + CSV) and SVG plots written to the output folder.

EXPERIMENT.yml:
    name: paper                  # sub-folder of `out`
    out: docs/results            # where results.md/.csv/.html go (raw reports: <work>/<name>/runs)
    work: out/experiments        # raw per-run folders
    backend: compose             # compose (docker compose + tc helper) | local (`cnnvideo local`, no shaping)
    frames: 8                    # per run
    cpus: {worker0: 0.35, worker1: 0.35}   # compose CPU caps (also written into each run's config)
    base: {...}                  # cnnvideo config keys shared by every run
    variants: {full: {mode: full}, delta: {mode: delta}, delta_t2: {mode: delta, delta: {input_threshold: 2}}}
    matrix:                      # every combination, run in this key order (outer first); a list of such
                                 # mappings runs the union of their products (each run once)
      bandwidth: [1, 3, 8]       # MB/s on every hop (tc rates on compose; cost-model input everywhere)
      variant: [full, delta]
      in_flight: [1, 3, 6]
      scheduler: [lbs, optimal]
    runs:                        # extra single runs; `change` re-shapes one link mid-run (compose only)
      - {scheduler: adaptive, variant: delta, in_flight: 3, bandwidth: 3, frames: 40,
         change: {after_frame: 10, link: "worker0<>worker1", rate: 1}}

Each compose run is a fresh master container against long-lived trainer/workers (every run starts with
StartRun, which resets the workers' delta caches; tc rules are re-created whenever the rates change and
after a mid-run change). Pure helpers (expand, summarise, tables, SVG) are separate from the runners.
"""
from __future__ import annotations

import copy
import csv
import html
import io
import itertools
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import yaml

log = logging.getLogger(__name__)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HOPS = ("m->w0", "w0->w1", "w1->m")
SCHEDULER_COLOURS = {"lbs": "#4e79a7", "edge": "#f28e2b", "cloud": "#e15759", "nsc": "#76b7b2", "das": "#59a14f",
                     "optimal": "#edc948", "adaptive": "#b07aa1"}


class ExperimentError(RuntimeError):
    """The experiment file is wrong or the cluster cannot run."""


# ---------------------------------------------------------------------------------------------- the matrix
def load_spec(path: str) -> Dict[str, Any]:
    with open(path) as fh:
        spec = yaml.safe_load(fh) or {}
    if not isinstance(spec, dict):
        raise ExperimentError("%s must hold a mapping" % path)
    known = {"name", "out", "work", "backend", "frames", "cpus", "base", "variants", "matrix", "runs", "gantt",
             "timeout_s"}
    bad = sorted(set(spec) - known)
    if bad:
        raise ExperimentError("unknown experiment key(s) %s (known: %s)" % (", ".join(bad), ", ".join(sorted(known))))
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
    return spec


def expand(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every run as a flat mapping: scheduler, in_flight, bandwidth, variant, frames (+ change), with an id."""
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


def bandwidth_list(bw: Any, n_workers: int = 2) -> List[float]:
    return [float(b) for b in bw] if isinstance(bw, (list, tuple)) else [float(bw)] * n_workers


def run_config(spec: Dict[str, Any], r: Dict[str, Any]) -> Dict[str, Any]:
    """The cnnvideo config mapping of one run (before backend-specific addresses and paths)."""
    variants = {"full": {"mode": "full"}, "delta": {"mode": "delta"}}
    variants.update(spec.get("variants") or {})
    cfg = _merge(spec.get("base") or {}, variants[r["variant"]])
    cfg["scheduler"] = r["scheduler"]
    cfg["in_flight"] = int(r["in_flight"])
    cfg["frames"] = int(r["frames"])
    n = len(((cfg.get("cluster") or {}).get("workers")) or [0, 0])
    cfg["bandwidth"] = bandwidth_list(r["bandwidth"], n)
    if spec.get("cpus"):
        cfg["cpus"] = dict(spec["cpus"])
    for k in ("scheduler_options", "group_size"):
        if k in r:
            cfg[k] = r[k]
    return cfg


# ---------------------------------------------------------------------------------------------- backends
class LocalBackend:
    """`cnnvideo local` per run (no tc shaping: bandwidth only feeds the cost model)."""

    name = "local"

    def __init__(self, spec: Dict[str, Any], work: str) -> None:
        self.spec = spec
        self.work = work

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def facts(self) -> Dict[str, Any]:
        return {"shaping": "none (backend local: bandwidth is a cost-model input only)",
                "cpu_caps": "none (local processes)"}

    def run(self, r: Dict[str, Any], cfg: Dict[str, Any], run_dir: str) -> Tuple[int, str]:
        cfg = dict(cfg)
        cfg["out"] = run_dir
        path = os.path.join(run_dir, "config.yml")
        with open(path, "w") as fh:
            yaml.safe_dump(cfg, fh, sort_keys=False)
        if r.get("change"):
            log.warning("run %s: mid-run rate changes need the compose backend; running without it", r["id"])
        cmd = [sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", run_dir]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=float(self.spec.get("timeout_s", 900)), cwd=REPO)
        return proc.returncode, proc.stdout


class ComposeBackend:
    """Long-lived trainer, workers and tc helper of a dedicated compose project; a fresh master per run."""

    name = "compose"

    def __init__(self, spec: Dict[str, Any], work: str, project: str = "cnnvideo-exp") -> None:
        self.spec = spec
        self.work = os.path.abspath(work)
        self.project = project
        self.gen = os.path.join(self.work, "gen")
        self.rates: Optional[List[float]] = None
        self.dirty = False  # tc rules changed behind the helper's back

    # ---------------------------------------------------------------- compose plumbing
    def _env(self, rates: Sequence[float]) -> Dict[str, str]:
        cpus = self.spec.get("cpus") or {}
        env = dict(os.environ, COMPOSE_PROJECT_NAME=self.project, OUT_DIR=self.work, CONFIG="../gen/cluster.yml",
                   FRAMES=str(self.spec.get("frames", 8)))
        for role, var in (("worker0", "WORKER0_CPUS"), ("worker1", "WORKER1_CPUS"), ("master", "MASTER_CPUS"),
                          ("trainer", "TRAINER_CPUS")):
            if role in cpus:
                env[var] = "%g" % float(cpus[role])
        env["HOP0_RATE"], env["HOP1_RATE"] = "%g" % rates[0], "%g" % rates[1]
        env["RET_RATE"] = "%g" % rates[-1]
        return env

    def compose(self, *args: str, rates: Optional[Sequence[float]] = None, timeout: float = 1800,
                check: bool = True) -> str:
        cmd = self._compose_cmd() + list(args)
        proc = subprocess.run(cmd, cwd=REPO, env=self._env(rates or self.rates or [3.0, 3.0]),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise ExperimentError("%s failed (%d): %s" % (" ".join(cmd[3:]), proc.returncode, proc.stdout[-3000:]))
        return proc.stdout

    def _compose_cmd(self) -> List[str]:
        src = os.path.join(self.gen, "src")
        return ["docker", "compose", "-p", self.project, "--project-directory", src, "-f",
                os.path.join(src, "docker-compose.yml"), "-f", os.path.join(self.gen, "override.yml")]

    def _write_gen(self) -> None:
        """Export the committed tree (git HEAD) as the build context and compose project: a run never picks up
        uncommitted edits of the working tree; images are tagged cnnvideo-exp/* so other users are unaffected."""
        src = os.path.join(self.gen, "src")
        if os.path.exists(src):
            shutil.rmtree(src)
        os.makedirs(src)
        archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        self.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, stdout=subprocess.PIPE,
                                     universal_newlines=True, check=True).stdout.strip()
        for sub in ("wheels", "weights"):  # not in git: filled by scripts/docker_setup.sh
            shutil.copytree(os.path.join(REPO, "build", sub), os.path.join(src, "build", sub))
        cluster = _merge(self.spec.get("base") or {}, {
            "cluster": {"trainer": "trainer:50051", "workers": ["worker0:50060", "worker1:50060"]},
            "video": "/usr/share/cnnvideo/vtest.avi", "cache_dir": "/var/cache/cnnvideo", "out": "/app/out"})
        cluster.pop("tls", None)
        for k in ("scheduler_options",):
            cluster.pop(k, None)
        with open(os.path.join(self.gen, "cluster.yml"), "w") as fh:
            yaml.safe_dump(cluster, fh, sort_keys=False)
        gen_mount = "%s:/app/gen:ro" % self.gen
        node = {"image": "cnnvideo-exp/node", "volumes": [gen_mount]}
        override = {"services": {
            "trainer": dict(node), "worker0": dict(node), "worker1": dict(node), "master": dict(node),
            "netem": {"image": "cnnvideo-exp/netem"},
        }}
        with open(os.path.join(self.gen, "override.yml"), "w") as fh:
            yaml.safe_dump(override, fh, sort_keys=False)
        base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
        for target, tag in (("runtime", "cnnvideo-exp/node"), ("netem", "cnnvideo-exp/netem")):
            proc = subprocess.run(["docker", "build", "-q", "--build-arg", "BASE_IMAGE=" + base, "--target", target,
                                   "-t", tag, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=3600)
            if proc.returncode != 0:
                raise ExperimentError("docker build %s failed: %s" % (target, proc.stdout[-3000:]))

    def lock(self) -> None:
        """Hold the host-wide lock of this compose project: two experiments on one project would recreate each
        other's containers and tc rules mid-run. ExperimentError naming the holder if it is taken."""
        import fcntl
        import tempfile

        path = os.path.join(tempfile.gettempdir(), "cnnvideo-%s.lock" % self.project)
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown process"
            fh.close()
            raise ExperimentError("compose project %s is in use by another experiment (%s, lock %s): wait for it "
                                  "to finish or stop it" % (self.project, holder, path)) from None
        fh.seek(0)
        fh.truncate()
        fh.write("pid %d" % os.getpid())
        fh.flush()
        self._lock_fh = fh

    def unlock(self) -> None:
        fh = getattr(self, "_lock_fh", None)
        if fh is not None:
            fh.close()  # closing releases the flock
            self._lock_fh = None

    def start(self) -> None:
        self.lock()
        os.makedirs(os.path.join(self.work, "runs"), exist_ok=True)
        os.chmod(self.work, 0o777)
        os.chmod(os.path.join(self.work, "runs"), 0o777)
        self._write_gen()
        self.rates = [3.0, 3.0]
        self.compose("down", "--timeout", "5", check=False, timeout=600)
        # the netem helper turns GSO off on every shaped container's eth0 (one MSS per packet) so htb paces small
        # messages too; sockets cache that when they connect, hence the master's 3 s start delay below
        self.compose("up", "-d", "--wait", "trainer", "worker0", "worker1", "netem", timeout=3600)

    def stop(self) -> None:
        try:
            self.compose("down", "--timeout", "5", check=False, timeout=600)
        finally:
            self.unlock()

    def set_rates(self, rates: List[float]) -> None:
        """Re-create the tc helper with new per-hop rates (it removes its rules on exit, applies the new ones)."""
        if rates == self.rates and not self.dirty:
            return
        self.rates = list(rates)
        self.compose("up", "-d", "--wait", "--force-recreate", "--no-deps", "netem", timeout=600)
        self.dirty = False

    def change_link(self, link: str, rate: float) -> str:
        """Change one link's rate in place (all three links re-applied by a one-shot helper in the netem container)."""
        rates = list(self.rates or [3.0, 3.0])
        links = {"master<>worker0": rates[0], "worker0<>worker1": rates[1], "worker1<>master": rates[-1]}
        if link not in links:
            raise ExperimentError("change.link must be one of %s, got %r" % (", ".join(links), link))
        links[link] = float(rate)
        args = ["exec", "-T", "netem", "python3", "-m", "netem", "--once", "--project", self.project]
        for name, r in links.items():
            args += ["--link", "%s,rate=%g" % (name, r)]
        self.dirty = True
        return self.compose(*args, timeout=120, check=False)

    def facts(self) -> Dict[str, Any]:
        return {"shaping": "tc htb per destination by the netem helper (compose project %s); every shaped "
                "container's eth0 with gso_max_size 1500 / gso_max_segs 1 (set by the helper) so htb paces each "
                "message" % self.project,
                "cpu_caps": self.spec.get("cpus") or {}, "code": "git HEAD %s (images cnnvideo-exp/*)"
                % getattr(self, "commit", "?")}

    def run(self, r: Dict[str, Any], cfg: Dict[str, Any], run_dir: str) -> Tuple[int, str]:
        self.set_rates(bandwidth_list(r["bandwidth"]))
        cfg = _merge(cfg, {"cluster": {"trainer": "trainer:50051", "workers": ["worker0:50060", "worker1:50060"]},
                           "video": "/usr/share/cnnvideo/vtest.avi", "cache_dir": "/var/cache/cnnvideo"})
        cfg.pop("tls", None)
        cfg_dir = os.path.join(self.gen, "runs")
        os.makedirs(cfg_dir, exist_ok=True)
        with open(os.path.join(cfg_dir, r["id"] + ".yml"), "w") as fh:
            yaml.safe_dump(cfg, fh, sort_keys=False)
        rel = os.path.relpath(run_dir, self.work)
        os.chmod(run_dir, 0o777)
        master = "exec cnnvideo-entrypoint master -c /app/gen/runs/%s.yml --out /app/out/%s --frames %d" % (
            r["id"], rel, int(r["frames"]))
        cmd = self._compose_cmd() + ["run", "--rm", "--no-deps", "-T", "--entrypoint", "sh", "master", "-c",
                                     "sleep 3; " + master]
        proc = subprocess.Popen(cmd, cwd=REPO, env=self._env(self.rates), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True)
        lines: List[str] = []
        change = r.get("change")
        changed = threading.Event()
        deadline = time.time() + float(self.spec.get("timeout_s", 900))
        timer = threading.Timer(max(deadline - time.time(), 1.0), proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                lines.append(line)
                if change and not changed.is_set() and _sent_frame(line) >= int(change.get("after_frame", 0)):
                    changed.set()
                    t = time.time()
                    out = self.change_link(str(change["link"]), float(change["rate"]))
                    lines.append("[experiment] %.3f link %s -> %g MB/s (%.2f s): %s\n"
                                 % (t, change["link"], float(change["rate"]), time.time() - t, out.strip()[-300:]))
            rc = proc.wait()
        finally:
            timer.cancel()
        return rc, "".join(lines)


def _sent_frame(line: str) -> int:
    """The master logs 'sent frame N/T' every 10 frames: N - 1 is the frame index just sent (-1 if none)."""
    i = line.find("sent frame ")
    if i < 0:
        return -1
    try:
        return int(line[i + len("sent frame "):].split("/", 1)[0]) - 1
    except ValueError:
        return -1


# ---------------------------------------------------------------------------------------------- summaries
def hop(report: Dict[str, Any], name: str) -> Dict[str, Any]:
    for h in report.get("hops") or []:
        if h.get("name") == name:
            return h
    return {}


def measured_stages(report: Dict[str, Any]) -> List[Optional[float]]:
    """Mean seconds per frame of the cost model's stages: [transfer into w0, work on w0, transfer into w1,
    work on w1 (+ result transfer)], from hop totals and the workers' decode + compute + encode spans."""
    st = report.get("stages") or {}
    frames = max(int(report.get("completed") or 0), 1)

    def comp(actor: str) -> float:
        spans = st.get(actor) or {}
        return sum(float((spans.get(name) or {}).get("total_s", 0.0)) for name in ("decode", "compute", "encode")) \
            / frames

    h0, h1 = hop(report, "m->w0"), hop(report, "w0->w1")
    res = sum(float(hop(report, "w%d->m" % w).get("transfer_s", 0.0)) for w in range(2)) / frames
    return [float(h0.get("transfer_s", 0.0)) / frames, comp("w0"), float(h1.get("transfer_s", 0.0)) / frames,
            comp("w1") + res]


def recurrence_fps(stage_s: Sequence[Optional[float]], frames: int, in_flight: int) -> Optional[float]:
    """The cost model's pipeline recurrence fed with the run's own measured mean stage costs (so it checks the
    timing model, not the profile): frames / simulated makespan."""
    from cnnvideo.costmodel import simulate

    if frames <= 0 or any(c is None for c in stage_s):
        return None
    costs = [[float(c) for c in stage_s]] * frames
    done = simulate(costs, in_flight)
    span = float(done[-1, -1])
    return round(frames / span, 4) if span > 0 else None


def steady_ratio(report: Dict[str, Any], name: str, actor: str) -> Optional[float]:
    """Bytes sent / dense float32 on a hop over frames 1.. (frame 0 is always a keyframe), from the send spans."""
    h = hop(report, name)
    if not h.get("messages") or not h.get("bytes_dense"):
        return None
    dense = float(h["bytes_dense"]) / float(h["messages"])
    sent = [int(b) for f, a, st, _, _, b in report.get("spans") or [] if a == actor and st == "send" and int(f) > 0]
    if not sent or dense <= 0:
        return None
    return round(sum(sent) / (dense * len(sent)), 4)


def after_change_fps(report: Dict[str, Any], frame: int) -> Optional[float]:
    """Frames per second over the frames sent at or after `frame` (finish of frame-1 to the last finish)."""
    times = sorted((t["frame"], t["done_s"]) for t in report.get("times") or [] if t.get("done_s") is not None)
    before = [d for f, d in times if f < frame]
    after = [d for f, d in times if f >= frame]
    if not before or len(after) < 2:
        return None
    t0 = max(before)
    span = max(after) - t0
    return len(after) / span if span > 0 else None


def summarise(r: Dict[str, Any], report: Optional[Dict[str, Any]], rc: int, seconds: float) -> Dict[str, Any]:
    """One results row from a run's settings and its report.json (None if the run failed)."""
    row: Dict[str, Any] = {"id": r["id"], "scheduler": r["scheduler"], "variant": r["variant"],
                           "in_flight": int(r["in_flight"]), "bandwidth": r["bandwidth"], "frames": int(r["frames"]),
                           "exit": rc, "run_s": round(seconds, 1)}
    if not report:
        row["error"] = "no report"
        return row
    fps = report.get("throughput_fps")
    pred = report.get("predicted_fps")
    row.update({
        "mode": report.get("mode"),
        "completed": report.get("completed"),
        "fps": fps,
        "s_per_frame": round(1.0 / fps, 4) if fps else None,
        "latency_mean_s": (report.get("latency_s") or {}).get("mean"),
        "pred_fps": pred,
        "model_err": round(fps / pred - 1.0, 4) if fps and pred else None,
        "cuts": "-".join(str(c) for c in report.get("cuts") or []),
        "cut_names": "|".join(report.get("cut_names") or []),
        "plans": len(report.get("plan_decisions") or []),
        "max_abs_err": report.get("max_abs_err"),
        "error": report.get("error"),
    })
    for name in HOPS:
        h = hop(report, name)
        key = name.replace("->", "_")
        row["bytes_" + key] = h.get("bytes_sent")
        row["ratio_" + key] = None if h.get("ratio") is None else round(h["ratio"], 4)
        row["MBps_" + key] = h.get("effective_MBps")
    for name, actor in (("m->w0", "m"), ("w0->w1", "w0")):
        row["steady_" + name.replace("->", "_")] = steady_ratio(report, name, actor)
    pst = report.get("predicted_stage_s") or []
    mst = measured_stages(report)
    row["recur_fps"] = recurrence_fps(mst, int(report.get("completed") or 0), int(r["in_flight"]))
    row["recur_err"] = round(fps / row["recur_fps"] - 1.0, 4) if fps and row["recur_fps"] else None
    for i, label in enumerate(("t0", "c0", "t1", "c1")):
        p = pst[i] if i < len(pst) else None
        m = mst[i]
        row["pred_" + label] = p
        row["meas_" + label] = None if m is None else round(m, 5)
    if r.get("change"):
        at = int(r["change"].get("after_frame", 0))
        row["fps_after_change"] = after_change_fps(report, at + 1)
        row["fps_before_change"] = _fps_window(report, 1, at)
        dec = [d for d in report.get("plan_decisions") or [] if d["from_frame"] > at]
        row["replanned_at_frame"] = dec[0]["from_frame"] if dec else None
    return row


def _fps_window(report: Dict[str, Any], lo: int, hi: int) -> Optional[float]:
    times = {t["frame"]: t["done_s"] for t in report.get("times") or [] if t.get("done_s") is not None}
    if lo - 1 not in times or hi not in times or hi <= lo - 1:
        return None
    span = times[hi] - times[lo - 1]
    return (hi - lo + 1) / span if span > 0 else None


COLUMNS = ["id", "scheduler", "variant", "mode", "in_flight", "bandwidth", "frames", "completed", "fps", "s_per_frame",
           "latency_mean_s", "pred_fps", "model_err", "recur_fps", "recur_err", "cuts", "cut_names", "plans",
           "max_abs_err",
           "bytes_m_w0", "ratio_m_w0", "steady_m_w0", "bytes_w0_w1", "ratio_w0_w1", "steady_w0_w1", "bytes_w1_m",
           "ratio_w1_m",
           "MBps_m_w0", "MBps_w0_w1", "pred_t0", "meas_t0", "pred_c0", "meas_c0", "pred_t1", "meas_t1", "pred_c1",
           "meas_c1", "fps_before_change", "fps_after_change", "replanned_at_frame", "exit", "run_s", "error"]


def write_csv(rows: Sequence[Dict[str, Any]], path: str) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(row.get(k)) for k in COLUMNS})


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return "%.4g" % v
    if isinstance(v, (list, tuple)):
        return "-".join("%g" % x for x in v)
    return "" if v is None else v


def _fmt(v: Any, spec: str = "%.3g") -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return spec % v
    if isinstance(v, (list, tuple)):
        return "-".join("%g" % x for x in v)
    return str(v)


def md_table(rows: Sequence[Dict[str, Any]], cols: Sequence[Tuple[str, str]]) -> str:
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(row.get(k)) for k, _ in cols) + " |")
    return "\n".join(out)


def _median(values: Sequence[float]) -> float:
    data = sorted(values)
    n = len(data)
    return data[n // 2] if n % 2 else 0.5 * (data[n // 2 - 1] + data[n // 2])


def ratios_vs(rows: Sequence[Dict[str, Any]], base: str = "lbs") -> List[Dict[str, Any]]:
    """Per (variant, bandwidth, in_flight): every scheduler's fps, the best one and its ratio to `base`."""
    lists: Dict[tuple, Dict[str, List[float]]] = {}
    for row in rows:
        if row.get("fps") and not row.get("id", "").count("_chg"):
            key = (row["variant"], _fmt(row["bandwidth"]), row["in_flight"])
            lists.setdefault(key, {}).setdefault(row["scheduler"], []).append(float(row["fps"]))
    # repeats of a run: the median fps
    groups: Dict[tuple, Dict[str, Dict[str, Any]]] = {
        key: {name: {"scheduler": name, "fps": _median(v), "n": len(v)} for name, v in g.items()}
        for key, g in lists.items()}
    out = []
    for key in sorted(groups, key=lambda k: (k[0], float(k[1].split("-")[0]), k[2])):
        g = groups[key]
        best = max(g.values(), key=lambda r: r["fps"])
        entry: Dict[str, Any] = {"variant": key[0], "bandwidth": key[1], "in_flight": key[2],
                                 "best": best["scheduler"], "best_fps": best["fps"],
                                 "repeats": max(r["n"] for r in g.values())}
        for name, r in g.items():
            entry["fps_" + name] = r["fps"]
        if base in g:
            entry["best_vs_" + base] = round(best["fps"] / g[base]["fps"], 3)
            if "optimal" in g:
                entry["optimal_vs_" + base] = round(g["optimal"]["fps"] / g[base]["fps"], 3)
            for name in ("das", "adaptive"):
                if name in g:
                    entry[name + "_vs_" + base] = round(g[name]["fps"] / g[base]["fps"], 3)
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------------- SVG
def bar_chart(groups: Sequence[Tuple[str, Dict[str, Optional[float]]]], series: Sequence[str], title: str,
              unit: str, width: int = 1000, height: int = 300) -> str:
    """Grouped bars: groups = [(label, {series: value})]."""
    pad_l, pad_r, pad_t, pad_b = 60, 130, 30, 60
    vals = [v for _, d in groups for v in d.values() if v is not None]
    vmax = (max(vals) if vals else 1.0) * 1.1 or 1.0
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="16" font-size="13">%s</text>' % (pad_l, html.escape(title))]
    for i in range(5):
        v = vmax * i / 4
        y = pad_t + ph * (1 - v / vmax)
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (pad_l, pad_l + pw, y, y))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.3g %s</text>' % (pad_l - 4, y + 3, v, unit))
    n = max(len(groups), 1)
    gw = pw / n
    bw = gw * 0.8 / max(len(series), 1)
    for gi, (label, d) in enumerate(groups):
        x0 = pad_l + gi * gw + gw * 0.1
        for si, s in enumerate(series):
            v = d.get(s)
            if v is None:
                continue
            h = ph * v / vmax
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.4g %s'
                         '</title></rect>' % (x0 + si * bw, pad_t + ph - h, max(bw - 1, 1), h,
                                              SCHEDULER_COLOURS.get(s, _colour(si)), html.escape(label), s, v, unit))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (pad_l + gi * gw + gw / 2,
                                                                               pad_t + ph + 14, html.escape(label)))
    for si, s in enumerate(series):
        y = pad_t + 12 * si
        parts.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                     % (width - pad_r + 10, y, SCHEDULER_COLOURS.get(s, _colour(si)), width - pad_r + 24, y + 9,
                        html.escape(s)))
    parts.append("</svg>")
    return "".join(parts)


def _colour(i: int) -> str:
    palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]
    return palette[i % len(palette)]


def scatter(points: Sequence[Tuple[float, float, str]], title: str, xlabel: str, ylabel: str, width: int = 520,
            height: int = 420) -> str:
    """Predicted (x) vs measured (y) with the y = x line."""
    pad = 60
    vals = [v for p in points for v in p[:2]] or [1.0]
    vmax = max(vals) * 1.1
    pw, ph = width - 2 * pad, height - 2 * pad
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="18" font-size="13">%s</text>' % (pad, html.escape(title)),
             '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>' % (pad, pad, pw, ph),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#aaa" stroke-dasharray="4"/>' % (pad, pad + ph, pad + pw,
                                                                                            pad)]
    for i in range(5):
        v = vmax * i / 4
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>' % (pad + pw * v / vmax, pad + ph + 14,
                                                                                 v))
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%.3g</text>' % (pad - 4, pad + ph * (1 - v / vmax) + 3,
                                                                              v))
    parts.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (pad + pw / 2, height - 12, xlabel))
    parts.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>'
                 % (pad + ph / 2, pad + ph / 2, ylabel))
    for x, y, s in points:
        parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.8"><title>%s: predicted %.3g, '
                     'measured %.3g</title></circle>' % (pad + pw * x / vmax, pad + ph * (1 - y / vmax),
                                                          SCHEDULER_COLOURS.get(s.split(" ")[0], "#888"),
                                                          html.escape(s), x, y))
    parts.append("</svg>")
    return "".join(parts)


def timeline(series: Sequence[Tuple[str, Sequence[Tuple[int, float]]]], title: str, mark: Optional[float] = None,
             width: int = 900, height: int = 320) -> str:
    """Cumulative frames finished over time per run (done_s), with an optional vertical mark."""
    pad_l, pad_r, pad_t, pad_b = 50, 140, 30, 40
    xs = [t for _, pts in series for _, t in pts] or [1.0]
    ys = [len(pts) for _, pts in series] or [1]
    xmax, ymax = max(xs) * 1.05, max(ys) * 1.05
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="10">' % (width, height),
             '<text x="%d" y="16" font-size="13">%s</text>' % (pad_l, html.escape(title)),
             '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>' % (pad_l, pad_t, pw, ph)]
    for i in range(6):
        t = xmax * i / 5
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f s</text>' % (pad_l + pw * t / xmax,
                                                                                   pad_t + ph + 14, t))
    for i in range(5):
        v = ymax * i / 4
        parts.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (pad_l - 4, pad_t + ph * (1 - v / ymax) + 3,
                                                                            round(v)))
    for si, (name, pts) in enumerate(series):
        ordered = sorted(t for _, t in pts)
        line = " ".join("%.1f,%.1f" % (pad_l + pw * t / xmax, pad_t + ph * (1 - (i + 1) / ymax))
                        for i, t in enumerate(ordered))
        colour = SCHEDULER_COLOURS.get(name.split(" ")[0], _colour(si))
        parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"/>' % (line, colour))
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>' % (width - pad_r + 8, pad_t + 12 * si + 9, colour,
                                                                  html.escape(name)))
    if mark is not None:
        x = pad_l + pw * mark / xmax
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c00" stroke-dasharray="3"/>' % (
            x, x, pad_t, pad_t + ph))
    parts.append('<text x="%d" y="%d" text-anchor="middle">time since the run started</text>' % (
        pad_l + pw / 2, height - 6))
    parts.append("</svg>")
    return "".join(parts)


def gantt(report: Dict[str, Any]) -> str:
    from cnnvideo.report import StageSpan, _gantt_svg

    spans = [StageSpan(int(f), a, s, float(t0), float(t1), int(b)) for f, a, s, t0, t1, b in report.get("spans") or []]
    return _gantt_svg(spans, ["m", "w0", "w1"], max_frames=60)


# ---------------------------------------------------------------------------------------------- the page
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


def write_results(spec: Dict[str, Any], rows: List[Dict[str, Any]], reports: Dict[str, Dict[str, Any]],
                  out_dir: str, command: str, facts: Dict[str, Any]) -> List[str]:
    """results.md, results.csv, results.html (plots) in out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "results.csv")
    write_csv(rows, csv_path)
    ratio_rows = ratios_vs(rows)
    ok = [r for r in rows if r.get("fps")]
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
             "per frame, predicted vs measured.\n\n" % (len(rows), len(ok)))
    if ratio_rows:
        md.write("## Best scheduler vs lbs\n\n")
        scheds = [s for s in SCHEDULER_COLOURS if any(("fps_" + s) in e for e in ratio_rows)]
        md.write("fps = median over repeats (`repeats` runs each).\n\n")
        cols = [("variant", "variant"), ("bandwidth", "MB/s"), ("in_flight", "in flight"), ("repeats", "repeats")] + \
               [("fps_" + s, s + " fps") for s in scheds] + \
               [("best", "best"), ("best_vs_lbs", "best/lbs"), ("optimal_vs_lbs", "optimal/lbs"),
                ("das_vs_lbs", "das/lbs"), ("adaptive_vs_lbs", "adaptive/lbs")]
        md.write(md_table(ratio_rows, cols) + "\n\n")
    md.write("## Bytes per hop (mean over runs; ratio = bytes sent / dense float32)\n\n")
    md.write("`steady` = frames 1.. only (frame 0 is a keyframe on every hop); w0->w1 depends on the cut each "
             "scheduler chose (runs where w0->w1 carried nothing are left out).\n\n")
    md.write(md_table(bytes_summary(ok), [("variant", "variant"), ("ratio_m_w0", "m->w0 all"),
                                          ("steady_m_w0", "m->w0 steady"), ("ratio_w0_w1", "w0->w1 all"),
                                          ("steady_w0_w1", "w0->w1 steady"), ("ratio_w1_m", "w1->m"),
                                          ("max_abs_err", "max abs output error"), ("n", "runs")]) + "\n\n")
    md.write("## Cost model accuracy\n\n")
    md.write("`fps err` = measured / predicted - 1 with the profiled compute and configured bandwidth (what the "
             "schedulers see); `recurrence` = the same pipeline recurrence fed with the run's measured mean stage "
             "costs (checks the timing model apart from the profile). Stage errors: measured / predicted - 1, mean "
             "over runs.\n\n")
    md.write(md_table(model_summary(ok), [("group", "runs"), ("n", "n"), ("mean_abs_err", "mean |fps err|"),
                                          ("within_15", "share within 15%"),
                                          ("recur_mean_abs_err", "recurrence mean |err|"),
                                          ("recur_within_15", "recurrence within 15%"), ("t0", "t0 err"),
                                          ("c0", "c0 err"),
                                          ("t1", "t1 err"), ("c1", "c1 err")]) + "\n\n")
    chg = [r for r in rows if "_chg" in r["id"]]
    if chg:
        md.write("## Mid-run rate change\n\n")
        md.write(md_table(chg, [("scheduler", "scheduler"), ("fps_before_change", "fps before"),
                                ("fps_after_change", "fps after"), ("replanned_at_frame", "re-planned at frame"),
                                ("cuts", "main plan"), ("plans", "plans used")]) + "\n\n")
    md.write("## All runs\n\n")
    md.write(md_table(rows, [("id", "run"), ("fps", "fps"), ("pred_fps", "pred fps"), ("model_err", "model err"),
                             ("recur_err", "recur err"),
                             ("latency_mean_s", "latency s"), ("cuts", "cuts"), ("ratio_m_w0", "m->w0"),
                             ("ratio_w0_w1", "w0->w1"), ("max_abs_err", "max err"), ("pred_t0", "t0 p"),
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


def bytes_summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for variant in sorted({r["variant"] for r in rows}):
        rs = [r for r in rows if r["variant"] == variant]
        entry: Dict[str, Any] = {"variant": variant, "n": len(rs)}
        for k in ("ratio_m_w0", "steady_m_w0", "ratio_w0_w1", "steady_w0_w1", "ratio_w1_m"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            entry[k] = sum(vals) / len(vals) if vals else None
        errs = [r["max_abs_err"] for r in rs if r.get("max_abs_err") is not None]
        entry["max_abs_err"] = max(errs) if errs else None
        out.append(entry)
    return out


def model_summary(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    def stats(name: str, rs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        errs = [abs(r["model_err"]) for r in rs if r.get("model_err") is not None]
        entry: Dict[str, Any] = {"group": name, "n": len(errs)}
        entry["mean_abs_err"] = sum(errs) / len(errs) if errs else None
        entry["within_15"] = sum(e <= 0.15 for e in errs) / len(errs) if errs else None
        rec = [abs(r["recur_err"]) for r in rs if r.get("recur_err") is not None]
        entry["recur_mean_abs_err"] = sum(rec) / len(rec) if rec else None
        entry["recur_within_15"] = sum(e <= 0.15 for e in rec) / len(rec) if rec else None
        for label in ("t0", "c0", "t1", "c1"):
            pairs = [(r.get("pred_" + label), r.get("meas_" + label)) for r in rs]
            pairs = [(p, m) for p, m in pairs if p and m is not None and p > 1e-4]
            entry[label] = (sum(m / p - 1 for p, m in pairs) / len(pairs)) if pairs else None
        return entry

    out = [stats("all", rows)]
    for s in [s for s in SCHEDULER_COLOURS if any(r["scheduler"] == s for r in rows)]:
        out.append(stats(s, [r for r in rows if r["scheduler"] == s]))
    for v in sorted({r["variant"] for r in rows}):
        out.append(stats(v, [r for r in rows if r["variant"] == v]))
    return out


def plots(spec: Dict[str, Any], rows: Sequence[Dict[str, Any]], reports: Dict[str, Dict[str, Any]]
          ) -> List[Tuple[str, str]]:
    ok = [r for r in rows if r.get("fps") and "_chg" not in r["id"]]
    scheds = [s for s in SCHEDULER_COLOURS if any(r["scheduler"] == s for r in ok)]
    out: List[Tuple[str, str]] = []
    for variant in sorted({r["variant"] for r in ok}):
        rs = [r for r in ok if r["variant"] == variant]
        keys = sorted({(float(bandwidth_list(r["bandwidth"])[0]), r["in_flight"]) for r in rs})
        for metric, unit, title in (("fps", "fps", "throughput"), ("latency_mean_s", "s", "mean latency")):
            groups = []
            for bw, m in keys:
                d = {r["scheduler"]: r.get(metric) for r in rs
                     if float(bandwidth_list(r["bandwidth"])[0]) == bw and r["in_flight"] == m}
                groups.append(("%g MB/s, %d in flight" % (bw, m), d))
            out.append(("%s per scheduler (%s)" % (title.capitalize(), variant),
                        bar_chart(groups, scheds, "%s, %s" % (title, variant), unit)))
    hop_groups = []
    for e in bytes_summary([r for r in rows if r.get("fps")]):
        hop_groups.append((e["variant"], {"m->w0": e["ratio_m_w0"], "w0->w1": e["ratio_w0_w1"],
                                          "w1->m": e["ratio_w1_m"]}))
    if hop_groups:
        out.append(("Bytes per hop / dense float32", bar_chart(hop_groups, list(HOPS), "bytes sent / dense float32",
                                                                "x")))
    pts = [(r["pred_fps"], r["fps"], "%s %s m%d" % (r["scheduler"], r["variant"], r["in_flight"]))
           for r in ok if r.get("pred_fps")]
    if pts:
        out.append(("Cost model: predicted vs measured throughput", scatter(pts, "fps: predicted (x) vs measured (y)",
                                                                          "predicted fps", "measured fps")))
    chg = [r for r in rows if "_chg" in r["id"] and r["id"] in reports]
    if chg:
        series = [("%s (%s)" % (r["scheduler"], r["variant"]), [(t["frame"], t["done_s"])
                                                                 for t in reports[r["id"]].get("times") or []
                                                                 if t.get("done_s") is not None]) for r in chg]
        out.append(("Mid-run rate change: frames finished over time", timeline(series, "frames finished")))
    gid = spec.get("gantt")
    pick = reports.get(gid) if gid else None
    if pick is None:
        cands = [r for r in ok if r["scheduler"] == "optimal" and r["variant"] == "delta" and r["id"] in reports]
        pick = reports[cands[0]["id"]] if cands else None
        gid = cands[0]["id"] if cands else None
    if pick is not None and pick.get("spans"):
        out.append(("Gantt chart of run %s" % gid, gantt(pick)))
    return out


# ---------------------------------------------------------------------------------------------- driver
def trimmed(report: Dict[str, Any]) -> Dict[str, Any]:
    """A report without the bulky per-span list (kept in the raw run folder)."""
    return {k: v for k, v in report.items() if k not in ("spans", "per_frame")}


def run_experiment(spec: Dict[str, Any], command: str, only: Optional[str] = None, resume: bool = False,
                   limit: int = 0) -> Tuple[List[Dict[str, Any]], List[str]]:
    runs = expand(spec)
    if only:
        runs = [r for r in runs if only in r["id"]]
    if limit > 0:
        runs = runs[:limit]
    work = os.path.join(spec["work"], spec["name"])
    os.makedirs(os.path.join(work, "runs"), exist_ok=True)
    backend = ComposeBackend(spec, work) if spec["backend"] == "compose" else LocalBackend(spec, work)
    facts = machine_facts()
    facts["backend"] = spec["backend"]
    base = spec.get("base") or {}
    facts["model / weights / frame size"] = "%s / %s / %s" % (
        base.get("model", "alexnet"), base.get("weights", "random"), base.get("frame_size", [480, 720]))
    facts["frames per run"] = spec.get("frames")
    facts["cost model"] = cost_model_facts(base)
    facts["note"] = ("2 cores shared with other jobs: timings are noisy" if (os.cpu_count() or 0) <= 2 else "")
    rows: List[Dict[str, Any]] = []
    reports: Dict[str, Dict[str, Any]] = {}
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
                with open(path) as fh:
                    report = json.load(fh)
                reports[r["id"]] = report
            rows.append(summarise(r, report, rc, time.time() - t0))
    finally:
        backend.stop()
    with open(os.path.join(work, "meta.json"), "w") as fh:  # for --report-only
        json.dump({"command": command, "facts": facts}, fh, indent=1, default=str)
    out_dir = os.path.join(spec["out"], spec["name"])
    paths = write_results(spec, rows, reports, out_dir, command, facts)
    with open(os.path.join(out_dir, "reports.jsonl"), "w") as fh:
        for rid, rep in reports.items():
            fh.write(json.dumps(dict(trimmed(rep), experiment_run=rid)) + "\n")
    return rows, paths


def rebuild(spec: Dict[str, Any], command: str) -> List[str]:
    """Re-write the tables and plots from the raw run folders (no runs)."""
    work = os.path.join(spec["work"], spec["name"])
    rows, reports = [], {}
    for r in expand(spec):
        path = os.path.join(work, "runs", r["id"], "report.json")
        if os.path.exists(path):
            with open(path) as fh:
                reports[r["id"]] = json.load(fh)
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
    from cnnvideo.config import Config

    default = Config()
    return "profile_iters %s, profile_rescale %s, net_cpu_ns_per_byte %s" % (
        base.get("profile_iters", default.profile_iters), base.get("profile_rescale", default.profile_rescale),
        base.get("net_cpu_ns_per_byte", default.net_cpu_ns_per_byte))


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
