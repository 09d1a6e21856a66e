"""A pool of workers on the compose cluster (issue 37): scripts/compose_workers.py's 4-worker cluster, every worker
under its own `cpus:` cap, every path a pool can use shaped by the netem helper at the receiver's rate (3 MB/s), a
small model (random AlexNet at 96x128: the plumbing, not the figures) planned by a replicating scheduler. The run
completes every frame, and more than one worker returns results to the master (replicas of the last stage share the
frames).

SCHEDULER is `replicas` (the pool's own); CNNVIDEO_POOL_SCHEDULER=optimal runs the same plumbing with the optimal
scheduler (it also picks replicated plans once the pool code plans them)."""
import json
import os
import subprocess
import sys
import uuid

import pytest
import yaml
from dockerutil import REPO, docker, one_replica_each, shaped_peers

sys.path.insert(0, str(REPO / "scripts"))
import compose_workers  # noqa: E402

pytestmark = pytest.mark.docker
N = 4
FRAMES = 12
RATE = 3.0  # MB/s into every worker (and into the master)
CAPS = 0.2  # the issue's Pi-like figure is 0.1 a worker; 0.2 keeps 4 workers' cold start short, the tier light
SCHEDULER = os.environ.get("CNNVIDEO_POOL_SCHEDULER", "replicas")
CONFIG = "pool.yml"
def write_project(tmp_path):
    """The generated 4-worker compose file (roles reading tmp_path/configs/pool.yml) and its cluster config."""
    compose, cfg = compose_workers.build(N, RATE, CAPS, config_name=CONFIG)
    configs = tmp_path / "configs"
    configs.mkdir()
    configs.chmod(0o755)  # the roles run as uid 10001
    # the plumbing, not the figures (docs/results/pool-compose has the detector's): a small model and frame and a
    # short trainer keep 4 workers' cold start short under the docker tier's load
    cfg.pop("fallback", None)
    cfg.update(frames=FRAMES, scheduler=SCHEDULER, model="alexnet", weights="random", frame_size=[96, 128],
               trainer={"frames": 16})
    (configs / CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))
    for svc in compose["services"].values():
        svc["volumes"] = [str(configs) + ":/app/configs:ro" if v.startswith("./configs:") else v
                          for v in svc.get("volumes", [])]
    path = tmp_path / "docker-compose.pool.yml"
    with open(str(path), "w") as fh:
        compose_workers.dump_compose(compose, fh)
    return path


def test_four_worker_pool_completes_with_results_from_several_workers(wheels_present, tmp_path):
    project = "cnnvideo-pool-%s" % uuid.uuid4().hex[:8]
    out = tmp_path / "out"
    env = dict(os.environ, OUT_DIR=str(out), FRAMES=str(FRAMES), COMPOSE_PROJECT_NAME=project)
    # the build context and .env are the repository's; the file and config this test's
    compose = ["docker", "compose", "-p", project, "--project-directory", str(REPO), "-f", str(write_project(tmp_path))]
    workers = ["worker%d" % i for i in range(N)]
    try:
        proc = subprocess.run(compose + ["up", "--build", "--exit-code-from", "master"], cwd=str(REPO), env=env,
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
        for name in workers:
            ids = docker("ps", "-aq", "--filter", "label=com.docker.compose.project=" + project,
                         "--filter", "label=com.docker.compose.service=" + name).split()
            assert len(ids) == 1, (name, ids)
            nano = int(docker("inspect", "-f", "{{.HostConfig.NanoCpus}}", ids[0]).strip())
            assert nano == int(CAPS * 1e9), (name, nano)

        # every path a pool uses was shaped at the receiver's rate: into each worker from the master and every other
        # worker, into the master from every worker; the trainer's traffic is not shaped
        seen = shaped_peers(proc.stdout)
        want = {"master": {w: RATE for w in workers}}
        want.update({w: dict({v: RATE for v in workers if v != w}, master=RATE) for w in workers})
        for src, peers in one_replica_each(want).items():
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
