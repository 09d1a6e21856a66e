#!/usr/bin/env python3
"""Write a compose file and cluster config for N workers, derived from docker-compose.yml; and the default
cluster config configs/compose.yml from .env, so the two cannot drift apart.

    python3 scripts/compose_workers.py 4            # -> docker-compose.w4.yml, configs/compose-w4.yml
    docker compose -f docker-compose.w4.yml up --build --exit-code-from master
    python3 scripts/compose_workers.py --from-env   # -> configs/compose.yml: frames, bandwidth, cpus from .env
    python3 scripts/compose_workers.py --check      # exit 1 naming the key if configs/compose.yml and .env differ

Every worker gets the same CPU cap and every hop the same rate (flags below); edit the
written files for uneven clusters. Needs PyYAML (in the venv and in the images).
"""
import argparse
import copy
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _NoAliases(yaml.SafeDumper):
    """Write shared sub-mappings out in full: the generated file should read on its own."""

    def ignore_aliases(self, data):
        return True


def dump_compose(compose, fh):
    """Write a compose mapping to an open file, every shared sub-mapping in full (no YAML aliases)."""
    yaml.dump(compose, fh, Dumper=_NoAliases, sort_keys=False)


def hop_rate_vars(n):
    """The .env names of the n+1 hop rates of an n-worker chain: HOP0_RATE (master<>worker0), HOP<i>_RATE
    (worker<i-1><>worker<i>), RET_RATE (last worker<>master); for 2 workers, the names docker-compose.yml uses."""
    return ["HOP%d_RATE" % i for i in range(n)] + ["RET_RATE"]


def cpu_vars(n):
    """The .env names of the n workers' CPU caps: WORKER<i>_CPUS."""
    return ["WORKER%d_CPUS" % i for i in range(n)]


def env_templated(n, rate=3, cpus=0.5):
    """The compose mapping of build(n, ...) with every hop rate and worker cap read from the environment at
    `docker compose` time (${HOP<i>_RATE:-rate}, ${WORKER<i>_CPUS:-cpus}, ${CONFIG:-compose.yml}), as
    docker-compose.yml does: the experiment runner's compose backend sets them per run."""
    rates = ["${%s:-%s}" % (v, rate) for v in hop_rate_vars(n)]
    caps = ["${%s:-%s}" % (v, cpus) for v in cpu_vars(n)]
    return build(n, rates, caps, config_name="${CONFIG:-compose.yml}")[0]


def _per(value, count, what):
    """`value` for each of `count` items: a list of that length as given, a single value repeated."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError("%d %s for %d" % (len(value), what, count))
        return list(value)
    return [value] * count


def build(n, rate, cpus, config_name=None):
    """(compose mapping, cluster config mapping) for a chain of n workers. `rate`: MB/s of every hop, or a list of
    the n+1 hops (master->worker0, ..., last worker->master); `cpus`: every worker's cap, or a list of n;
    `config_name`: the file in /app/configs the roles read (default compose-w<n>.yml)."""
    rates = _per(rate, n + 1, "hop rates")
    caps = _per(cpus, n, "worker CPU caps")
    with open(os.path.join(REPO, "docker-compose.yml")) as fh:
        compose = yaml.safe_load(fh)  # resolves the x-role anchors and merge keys
    with open(os.path.join(REPO, "configs", "compose.yml")) as fh:
        cfg = yaml.safe_load(fh)
    services = compose["services"]
    template = services.pop("worker1")
    services.pop("worker0")
    config_name = config_name or "compose-w%d.yml" % n
    for svc in services.values():
        if isinstance(svc.get("command"), list):
            svc["command"] = [c.replace("${CONFIG:-compose.yml}", config_name) for c in svc["command"]]
    for i in range(n):
        svc = copy.deepcopy(template)
        svc["command"] = ["worker", "-c", "/app/configs/" + config_name, "-i", str(i)]
        svc["cpus"] = caps[i]
        svc["environment"] = {"CNNVIDEO_HOST": "worker%d-cpus%s" % (i, caps[i])}
        services["worker%d" % i] = svc
    chain = ["master"] + ["worker%d" % i for i in range(n)] + ["master"]
    command = []
    for a, b, r in zip(chain[:-1], chain[1:], rates):
        command += ["--link", "%s<>%s,rate=%s,delay=0,jitter=0,loss=0" % (a, b, r)]
    services["netem"]["command"] = command
    services["master"]["depends_on"] = {
        name: {"condition": "service_healthy"} for name in ["trainer", "netem"] + chain[1:-1]
    }
    cfg["cluster"]["workers"] = ["worker%d:50060" % i for i in range(n)]
    if all(isinstance(v, (int, float)) for v in rates + caps):  # templated (env) values: the caller's config
        cfg["bandwidth"] = [float(r) for r in rates[:n]]
        cfg["cpus"] = dict({"master": 1.0, "trainer": 1.0}, **{"worker%d" % i: caps[i] for i in range(n)})
    return compose, cfg


# configs/compose.yml keys that .env owns: config key -> how to compute it from the .env values
ENV_HEADER = """# Cluster config for docker-compose.yml; frames, bandwidth and cpus are GENERATED from .env by
# `python3 scripts/compose_workers.py --from-env`: edit .env (FRAMES, HOP*_RATE, *_CPUS) and re-run it;
# `--check` (and tests/unit/test_compose_workers.py) fail when the two differ. `bandwidth` is what the cost
# model plans with (the netem helper enforces .env's rates), `cpus` the caps compose sets (for the planner
# and the report). Other keys: edit here, they are kept.
# The model is the demo's (shared/cnnvideo/demo.yml): the trained person detector (`person-ssdlite`, ONNX: onnxruntime
# without an `engine:`), which the images carry in their model cache (the Dockerfile copies build/models/), split
# over the two workers and checked against the master's unsplit run; the master ends with people per frame. An
# image built without it runs the first runnable `fallback` entry instead, and one warning says why.
"""


def read_env(path):
    """KEY=VALUE lines of an env file (comments and blank lines skipped)."""
    out = {}
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                out[key.strip()] = value.strip()
    return out


def from_env(env, cfg):
    """configs/compose.yml mapping `cfg` with the keys .env owns set from `env`: frames, bandwidth per hop into
    each worker, cpus of every role."""
    cfg = dict(cfg)
    cfg["frames"] = int(env["FRAMES"])
    cfg["bandwidth"] = [float(env["HOP0_RATE"]), float(env["HOP1_RATE"])]
    cfg["cpus"] = {"master": float(env["MASTER_CPUS"]), "trainer": float(env["TRAINER_CPUS"]),
                   "worker0": float(env["WORKER0_CPUS"]), "worker1": float(env["WORKER1_CPUS"])}
    return cfg


def env_drift(env_path=None, config_path=None):
    """'' if configs/compose.yml holds what .env says, else the first key that differs and both values."""
    env_path = env_path or os.path.join(REPO, ".env")
    config_path = config_path or os.path.join(REPO, "configs", "compose.yml")
    with open(config_path) as fh:
        cfg = yaml.safe_load(fh)
    want = from_env(read_env(env_path), cfg)
    for key in ("frames", "bandwidth", "cpus"):
        if cfg.get(key) != want[key]:
            return "%s: configs/compose.yml has %r, .env says %r" % (key, cfg.get(key), want[key])
    return ""


def write_from_env(env_path=None, config_path=None):
    env_path = env_path or os.path.join(REPO, ".env")
    config_path = config_path or os.path.join(REPO, "configs", "compose.yml")
    with open(config_path) as fh:
        cfg = from_env(read_env(env_path), yaml.safe_load(fh))
    with open(config_path, "w") as fh:
        fh.write(ENV_HEADER)
        yaml.safe_dump(cfg, fh, sort_keys=False, default_flow_style=None)
    return config_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workers", type=int, nargs="?", help="number of workers in the chain (>= 1)")
    parser.add_argument("--rate", type=float, default=3.0, help="MB/s on every hop (default 3)")
    parser.add_argument("--cpus", type=float, default=0.5, help="CPU cap of every worker (default 0.5)")
    parser.add_argument("--from-env", action="store_true", help="write configs/compose.yml from .env")
    parser.add_argument("--check", action="store_true", help="exit 1 if configs/compose.yml and .env differ")
    args = parser.parse_args(argv)
    if args.check:
        drift = env_drift()
        if drift:
            print("compose_workers: %s (run scripts/compose_workers.py --from-env)" % drift, file=sys.stderr)
            return 1
        return 0
    if args.from_env:
        print("wrote %s" % os.path.relpath(write_from_env(), REPO))
        return 0
    if args.workers is None:
        parser.error("give the number of workers, --from-env or --check")
    if args.workers < 1 or args.rate <= 0 or args.cpus <= 0:
        parser.error("workers must be >= 1, rate and cpus > 0")
    compose, cfg = build(args.workers, args.rate, args.cpus)
    compose_path = os.path.join(REPO, "docker-compose.w%d.yml" % args.workers)
    config_path = os.path.join(REPO, "configs", "compose-w%d.yml" % args.workers)
    with open(compose_path, "w") as fh:
        fh.write("# generated by scripts/compose_workers.py %d; do not edit by hand\n" % args.workers)
        dump_compose(compose, fh)
    with open(config_path, "w") as fh:
        fh.write("# generated by scripts/compose_workers.py %d\n" % args.workers)
        yaml.safe_dump(cfg, fh, sort_keys=False)
    print("wrote %s and %s" % (os.path.relpath(compose_path, REPO), os.path.relpath(config_path, REPO)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
