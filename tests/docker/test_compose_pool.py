"""A pool of workers on the compose cluster, by compose's own convention (issue 45): `docker compose up --scale
worker=4`, the one `worker` service run four times, each container under `cpus: WORKER_CPUS`, each joining the master
(which starts once WORKERS have joined), every path a pool can use shaped by the netem helper at 3 MB/s as each worker
container appears, a small model (random AlexNet at 96x128: the plumbing, not the figures) planned by a replicating
scheduler. The run completes every frame, and more than one worker returns results to the master.

SCHEDULER is `replicas` (the pool's own); CNNVIDEO_POOL_SCHEDULER=optimal runs the same plumbing with the optimal
scheduler."""
import json
import os
import subprocess

import pytest
from dockerutil import REPO, ComposeRun, docker, shaped_peers, up_build

pytestmark = pytest.mark.docker
N = 4
FRAMES = 12
RATE = 3.0  # MB/s into every worker (and into the master): .env's HOP_RATE and RET_RATE
CAPS = 0.2  # the issue's Pi-like figure is 0.1 a worker; 0.2 keeps 4 workers' cold start short, the tier light
SCHEDULER = os.environ.get("CNNVIDEO_POOL_SCHEDULER", "replicas")


def test_four_worker_pool_completes_with_results_from_several_workers(wheels_present, tmp_path):
    # the plumbing, not the figures (docs/results/pool-compose has the detector's): a small model and frame and a
    # short trainer keep 4 workers' cold start short under the docker tier's load
    run = ComposeRun(tmp_path, "cnnvideo-pool", "pool.yml", FRAMES, scheduler=SCHEDULER, model="alexnet",
                     weights="random", frame_size=[96, 128], trainer={"frames": 16}, fallback=[])
    project, out, compose = run.project, run.out, run.compose
    env = dict(run.env, WORKERS=str(N), WORKER_CPUS=str(CAPS))
    try:
        proc = subprocess.run(compose + ["up", *up_build(), "--scale", "worker=%d" % N, "--exit-code-from", "master"],
                              cwd=str(REPO), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=1200)
        master = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("master-1"))
        assert proc.returncode == 0, "the master's log:\n%s\n\nthe end of the run:\n%s" % (
            master[-6000:], proc.stdout[-3000:])
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES and report["lost"] == 0, \
            {k: report.get(k) for k in ("frames", "completed", "lost")}
        assert report["scheduler"] == SCHEDULER and len(report["workers"]) == N, report["workers"]

        # every worker container ran under its cap
        ids = docker("ps", "-aq", "--filter", "label=com.docker.compose.project=" + project,
                     "--filter", "label=com.docker.compose.service=worker").split()
        assert len(ids) == N, ids
        for cid in ids:
            nano = int(docker("inspect", "-f", "{{.HostConfig.NanoCpus}}", cid).strip())
            assert nano == int(CAPS * 1e9), (cid, nano)

        # every path a pool uses was shaped at the receiver's rate: into each worker from the master and every other
        # worker, into the master from every worker; the trainer's traffic is not shaped
        seen = shaped_peers(proc.stdout)
        workers = ["worker-%d" % (i + 1) for i in range(N)]
        want = {"master-1": {w: RATE for w in workers}}
        want.update({w: dict({v: RATE for v in workers if v != w}, **{"master-1": RATE}) for w in workers})
        for src, peers in want.items():
            assert peers in seen.get(src, []), "netem never shaped %s's egress to %s; it logged %s" % (
                src, sorted(peers), seen.get(src))

        # the pool: results came back from more than one worker (replicas of the last stage)
        done = [f for f in report["per_frame"] if f["status"] == "completed"]
        by_worker = {}
        for f in done:
            by_worker[f["worker"]] = by_worker.get(f["worker"], 0) + 1
        print("\npool: %d/%d frames in %.2f s (%s), results per worker %s, plan %s, hops %s" % (
            report["completed"], report["frames"], report["wall_s"], SCHEDULER, by_worker,
            [len(stage) for stage in report["plan"]],
            [(h["name"], h["bytes_sent"]) for h in report["hops"]]))
        assert len(done) == FRAMES and all(0 <= w < N for w in by_worker), by_worker
        assert len(by_worker) > 1, "every result came from one worker: %s (plans %s)" % (
            by_worker, report.get("plans_used"))
    finally:
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
