"""`cnnvideo bench join --compose`: `cnnvideo bench join` on the compose cluster, by compose's own commands.

Two projects of docker-compose.yml, one after the other, with the config given (mounted as the roles' config; the
master's video must be inside the image, e.g. /usr/share/cnnvideo/vtest.avi), `WORKER_CPUS` from its `cpus.workers`
and `HOP_RATE` from its `bandwidth`, real tc links shaped by the netem helper:
- `start-N`: `docker compose up -d --scale worker=N` (WORKERS=N: the run starts once N have joined);
- `grow`: WORKERS=N-J; once the master has sent `--join-at` frames, `docker compose up -d --scale worker=N
  --no-recreate`, and J more containers join the running pool.
With `--edge`, first a project of one worker (the whole model on one capped device) as the reference.
All share one cache volume (profiles, int8 stages, predictors), so `grow` does not pay `start-N`'s cold start. A
joined worker's start is its container's `State.StartedAt`. The figures are `bench join`'s (tools/bench/join.py).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import threading
import time
import uuid
from typing import Dict, List, Optional

import yaml

from . import join as joinbench  # (a module: join.py imports this one)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE_VOLUME = "cnnvideo-bench-join-cache"


def _docker(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(["docker"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("docker %s: %s" % (" ".join(args[:4]), proc.stdout.strip()[-2000:]))
    return proc.stdout


def _started_at(container: str) -> float:
    """A container's State.StartedAt as epoch seconds."""
    text = _docker("inspect", "-f", "{{.State.StartedAt}}", container).strip()
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", text).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp).timestamp()


class ComposeProject:
    """One docker-compose.yml project with this bench's config and output folder; the master's log, followed."""

    def __init__(self, work: str, name: str, cfg: dict, workers: int) -> None:
        self.name = "cnnvideo-bench-%s-%s" % (name, uuid.uuid4().hex[:6])
        self.out = os.path.join(work, name)
        configs = os.path.join(work, name + "-configs")
        os.makedirs(configs, exist_ok=True)
        os.makedirs(self.out, exist_ok=True)
        os.chmod(configs, 0o755)
        with open(os.path.join(configs, "bench.yml"), "w") as fh:
            yaml.safe_dump(cfg, fh)
        override = os.path.join(work, name + "-override.yml")
        mount = {"volumes": ["%s:/app/configs:ro" % configs, "%s:/var/cache/cnnvideo" % CACHE_VOLUME]}
        master = dict(mount, volumes=mount["volumes"] + ["%s:/app/out" % self.out])
        with open(override, "w") as fh:
            yaml.safe_dump({"services": {"trainer": mount, "worker": mount, "master": master},
                            "volumes": {CACHE_VOLUME: {"external": True}}}, fh)
        self.env = dict(os.environ, COMPOSE_PROJECT_NAME=self.name, CONFIG="bench.yml", OUT_DIR=self.out,
                        FRAMES=str(cfg.get("frames", 0)), WORKERS=str(workers),
                        WORKER_CPUS=str((cfg.get("cpus") or {}).get("workers", 0.5)),
                        HOP_RATE=str((cfg.get("bandwidth") or [3])[0]), RET_RATE=str((cfg.get("bandwidth") or [3])[0]))
        self.compose = ["docker", "compose", "-p", self.name, "-f", os.path.join(REPO, "docker-compose.yml"),
                        "-f", override]
        self.lines: List[str] = []
        self.sent = 0
        self.follow: Optional[subprocess.Popen] = None

    def up(self, *extra: str, timeout: float = 1800) -> None:
        proc = subprocess.run(self.compose + ["up", "-d"] + list(extra), cwd=REPO, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError("docker compose up %s: %s" % (" ".join(extra), proc.stdout.strip()[-3000:]))
        if self.follow is None:
            self.follow = subprocess.Popen(["docker", "logs", "-f", self.master], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
            threading.Thread(target=self._pump, daemon=True).start()

    master = property(lambda self: "%s-master-1" % self.name)

    def _pump(self) -> None:
        for line in self.follow.stdout:
            self.lines.append(line)
            m = re.search(r"sent frame (\d+)/", line)
            if m:
                self.sent = max(self.sent, int(m.group(1)))

    def wait_sent(self, n: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while self.sent < n:
            if time.time() > deadline or (self.follow is not None and self.follow.poll() is not None):
                raise RuntimeError("the run ended or stalled before frame %d:\n%s" % (n, "".join(self.lines[-30:])))
            time.sleep(0.3)

    def wait(self, timeout: float) -> int:
        return int(_docker("wait", self.master, timeout=timeout).strip())

    def worker_starts(self) -> Dict[str, float]:
        """{address a worker container is reached at (its IP or host name): when it started}."""
        ids = _docker("ps", "-aq", "--filter", "label=com.docker.compose.project=%s" % self.name,
                      "--filter", "label=com.docker.compose.service=worker").split()
        starts = {}
        for info in json.loads(_docker("inspect", *ids)) if ids else []:
            t = _started_at(info["Id"])
            nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
            for key in [info["Config"]["Hostname"]] + [n.get("IPAddress") for n in nets.values()]:
                starts[key] = t
        return starts

    def down(self) -> None:
        """Keep every container's log (`<out>/compose.log`, timestamped: when each worker loaded, joined, served),
        then remove the project."""
        if self.follow is not None and self.follow.poll() is None:
            self.follow.terminate()
        with open(os.path.join(self.out, "compose.log"), "w") as fh:
            subprocess.run(self.compose + ["logs", "--no-color", "--timestamps"], cwd=REPO, env=self.env, stdout=fh,
                           stderr=subprocess.STDOUT, timeout=300)
        subprocess.run(self.compose + ["down", "--timeout", "5"], cwd=REPO, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)


def edge(args, base: dict, work: str) -> dict:
    """One worker alone (`--scale worker=1`, the whole model on one capped device): the `edge` reference."""
    one = ComposeProject(work, "edge", base, 1)
    try:
        one.up("--build", "--scale", "worker=1")
        code = one.wait(args.timeout)
    finally:
        one.down()
    if code != 0:
        raise RuntimeError("the edge run failed:\n" + "".join(one.lines[-30:]))
    with open(os.path.join(one.out, "report.json")) as fh:
        rep = json.load(fh)
    return {"completed": rep["completed"], "lost": rep["lost"], "throughput_fps": rep["throughput_fps"],
            "start": rep.get("start"), "plan": [len(s) for s in rep.get("plan") or []]}


def run(args, base: dict, work: str, results: dict) -> int:
    n, joins = args.workers, args.joins
    _docker("volume", "create", CACHE_VOLUME)
    if getattr(args, "edge", False):
        results["edge"] = edge(args, base, work)
    full = ComposeProject(work, "start-%d" % n, base, n)
    try:
        full.up("--build", "--scale", "worker=%d" % n)
        code = full.wait(args.timeout)
    finally:
        full.down()
    if code != 0:
        print("".join(full.lines[-40:]))
        return 1
    grow = ComposeProject(work, "grow", base, n - joins)
    try:
        grow.up("--scale", "worker=%d" % (n - joins))
        grow.wait_sent(args.join_at, args.timeout)
        t_command = time.time()
        grow.up("--scale", "worker=%d" % n, "--no-recreate")
        code = grow.wait(args.timeout)
        starts = grow.worker_starts()
    finally:
        grow.down()
    if code != 0:
        print("".join(grow.lines[-40:]))
        return 1
    joined_lines = [ln for ln in grow.lines if "joined the pool (" in ln]
    joined = {}
    for ln in joined_lines:  # "worker w2 at 172.18.0.5:50060 joined the pool (..."
        m = re.search(r"worker w(\d+) at (\S+):\d+ joined the pool", ln)
        if m:
            joined[int(m.group(1))] = (t_command, starts.get(m.group(2)))
    results.update(backend="compose", start_n_dir=full.out, grow_dir=grow.out)
    results.update(joinbench.analyse(n, joins, full.out, grow.out, joined_lines, joined, None))
    if "edge" in results:  # the steady rates past the first 60 frames, each run's own
        fps_n = (results["runs"]["start-%d" % n].get("start") or {}).get("fps_after_60")
        fps_1 = (results["edge"].get("start") or {}).get("fps_after_60")
        results["start_n_over_edge"] = round(fps_n / fps_1, 3) if fps_n and fps_1 else None
    return joinbench.write_results(work, "join-compose.json", results)
