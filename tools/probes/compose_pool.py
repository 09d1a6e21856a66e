"""Compose pool figure (docs/results/pool-compose): `edge` on 1 worker and a pool on 4, each worker capped at 0.1,
tc 3 MB/s into every worker, the detector of configs/compose.yml (ORT, 480x720), input threshold 4, 6 in flight,
a fifth of the frames checked, 150 frames. Prints one line per run and writes each run's report.json under
$TMPDIR/cnnvideo-pool-compose/<run>/out.

    .venv/bin/python tools/probes/compose_pool.py                            # fp32, 4 x `replicas`
    .venv/bin/python tools/probes/compose_pool.py --precision int8 --scheduler optimal   # the planner's pick
"""
import argparse
import json
import os
import subprocess
import sys
import uuid

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import compose_workers  # noqa: E402


def run(n, caps, scheduler, frames, tag, precision="fp32"):
    """One compose run of n workers; its report.json as a dict."""
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cnnvideo-pool-compose", tag)
    configs = os.path.join(tmp, "configs")
    os.makedirs(configs, exist_ok=True)
    os.chmod(configs, 0o755)  # the roles run as uid 10001
    compose, cfg = compose_workers.build(n, 3.0, caps, config_name="pool.yml")
    cfg.update(frames=frames, scheduler=scheduler, check=True, check_share=0.2, in_flight=6)
    cfg.setdefault("delta", {})["input_threshold"] = 4
    if precision != "fp32":  # int8: calibrated on frames past the run's (int8.calibration_start)
        cfg.update(precision=precision, int8={"calibration_start": 400})
    with open(os.path.join(configs, "pool.yml"), "w") as fh:
        yaml.safe_dump(cfg, fh, sort_keys=False)
    for svc in compose["services"].values():
        svc["volumes"] = [configs + ":/app/configs:ro" if v.startswith("./configs:") else v
                          for v in svc.get("volumes", [])]
    path = os.path.join(tmp, "docker-compose.yml")
    with open(path, "w") as fh:
        compose_workers.dump_compose(compose, fh)
    out = os.path.join(tmp, "out")
    project = "cnnvideo-fig-%s" % uuid.uuid4().hex[:6]
    env = dict(os.environ, OUT_DIR=out, FRAMES=str(frames), COMPOSE_PROJECT_NAME=project)
    cmd = ["docker", "compose", "--project-directory", REPO, "-f", path]
    try:
        proc = subprocess.run(cmd + ["up", "--build", "--exit-code-from", "master"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=2400)
        with open(os.path.join(tmp, "log.txt"), "w") as fh:
            fh.write(proc.stdout)
    finally:
        subprocess.run(cmd + ["down", "-v", "--remove-orphans"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "report.json")) as fh:
        report = json.load(fh)
    print(tag, "exit", proc.returncode, "completed", report["completed"], "fps", report["throughput_fps"],
          "predicted", report.get("predicted_fps"), "groups", (report.get("pool") or {}).get("groups"),
          "F1", (report.get("detection_agreement") or {}).get("f1"), "latency", report["latency_s"],
          "master", report.get("master"))
    return report


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    ap.add_argument("--scheduler", default="replicas", help="the 4-worker run's scheduler (replicas, optimal)")
    args = ap.parse_args()
    edge = run(1, 0.1, "edge", 150, "edge1-%s" % args.precision, args.precision)
    pool = run(4, 0.1, args.scheduler, 150, "%s4-%s" % (args.scheduler, args.precision), args.precision)
    print("%s / edge (%s): %.2fx" % (args.scheduler, args.precision, pool["throughput_fps"] / edge["throughput_fps"]))
