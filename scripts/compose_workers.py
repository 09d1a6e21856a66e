#!/usr/bin/env python3
"""Write a compose file and cluster config for N *listed* workers (worker0..worker<N-1>, each its own service with
its own CPU cap and link rate), derived from docker-compose.yml's one joining `worker` service; the same for the Pis
and the Swarm stack. A pool of alike workers needs none of this: `docker compose up --scale worker=N`. This is for
heterogeneous pools (experiments: tools/experiment), several cameras, and a Swarm stack with one listed worker per
labelled node (docker-stack.yml's own pool joins and scales: `docker service scale cnnvideo_worker=N`; so does the
stack of several cameras, whose one joining `worker` service joins every camera's master).

    python3 scripts/compose_workers.py              # N = WORKERS (environment, else .env)
    python3 scripts/compose_workers.py 4            # -> docker-compose.w4.yml, configs/compose-w4.yml
    docker compose -f docker-compose.w4.yml up --build --exit-code-from master
    python3 scripts/compose_workers.py 4 --pi       # also docker-compose.w4.pi.yml, docker-compose.w4.stack.yml,
                                                    #   configs/compose-w4-pi.yml (edit its addresses)
    .venv/bin/python scripts/compose_workers.py 2 --config configs/cameras.yml --media ./media
        # a cluster config listing several cameras -> docker-compose.w2-cameras.yml, configs/compose-w2-cameras.yml
        # (trainer, workers) and configs/compose-w2-cameras-<camera>.yml (each camera's master), then:
    docker compose -f docker-compose.w2-cameras.yml up --build --attach-dependencies --exit-code-from report report
    docker compose -f docker-compose.w2-cameras.yml down

The links are a pool's (docs/deploy/compose.md): the master and every worker may send to any worker, every worker
returns results to the master. Link i is the link INTO worker i: every path that ends at worker i is shaped at its
rate (`bandwidth[i]` of the config), each sender on its own egress; link N is the return link into the master.
`--chain` writes the old chain links instead (master<>worker0<>...<>worker<N-1><>master). Every worker gets the
same CPU cap and every link the same rate unless `--rate` / `--cpus` list one per link / worker. Needs PyYAML (in
the venv and in the images).
"""
import argparse
import copy
import dataclasses
import json
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    from cnnvideo import cluster as clus
except ImportError:  # run by a python3 without the project installed: the core's cluster description is plain data
    sys.path.insert(0, os.path.join(REPO, "shared"))
    from cnnvideo import cluster as clus

TOPOLOGIES = clus.TOPOLOGIES
MEDIA = "/app/media"  # where --media mounts a host folder of video files (trainer and masters, read-only)


class _NoAliases(yaml.SafeDumper):
    """Write shared sub-mappings out in full: the generated file should read on its own."""

    def ignore_aliases(self, data):
        return True


def dump_compose(compose, fh):
    """Write a compose mapping to an open file, every shared sub-mapping in full (no YAML aliases)."""
    yaml.dump(compose, fh, Dumper=_NoAliases, sort_keys=False)


def hop_prefixes(n):
    """The .env prefixes of the n+1 links of an n-worker cluster: HOP<i> (the link into worker i), RET (the return
    link into the master); each has _RATE, _DELAY_MS, _JITTER_MS, _LOSS_PCT."""
    return ["HOP%d" % i for i in range(n)] + ["RET"]


def hop_rate_vars(n):
    """The .env names of the n+1 link rates: HOP<i>_RATE (into worker i: from the master and every other worker in
    a pool; from the previous role in a chain), RET_RATE (into the master); for 2 workers, docker-compose.yml's."""
    return [p + "_RATE" for p in hop_prefixes(n)]


def cpu_vars(n):
    """The .env names of the n workers' CPU caps: WORKER<i>_CPUS."""
    return ["WORKER%d_CPUS" % i for i in range(n)]


def templated_link(prefix, rate=3):
    """A link whose settings are read from the environment at `docker compose` time, as docker-compose.yml writes
    them (${<prefix>_RATE:-rate}, ...)."""
    return clus.Link.templated(prefix, rate)


def describe(n, rate, cpus, topology="pool", cameras=("",), templated=False):
    """The Cluster (cnnvideo.cluster) these arguments describe: `rate` MB/s of every link or the n+1 links (into
    worker0..n-1, into the masters), or with `templated` the n+1 Links read at deploy time; `cpus` every worker's
    cap or n of them; `cameras` the camera names (one master each)."""
    return clus.from_rates(cameras, n, rate, cpus, topology)


def env_templated(n, rate=3, cpus=0.5, topology="chain"):
    """The compose mapping of build(n, ...) with every link's settings and worker cap read from the environment at
    `docker compose` time (${HOP<i>_RATE:-rate}, ${HOP<i>_DELAY_MS:-0}, ..., ${WORKER<i>_CPUS:-cpus},
    ${CONFIG:-compose.yml}), as docker-compose.yml does: the experiment runner's compose backend sets them per run.
    Its default topology stays the chain while tools/experiment names and re-shapes chain links (hop_links,
    change_link)."""
    links = [templated_link(p, rate) for p in hop_prefixes(n)]
    caps = ["${%s:-%s}" % (v, cpus) for v in cpu_vars(n)]
    return build(n, links, caps, config_name="${CONFIG:-compose.yml}", topology=topology, templated=True)[0]


def build(n, rate, cpus, config_name=None, topology="pool", templated=False, cluster=None, media=None):
    """(compose mapping, cluster config mapping) for n workers. `rate`: MB/s of every link, or a list of the n+1
    links (into worker0, ..., into worker n-1, into the master); `cpus`: every worker's cap, or a list of n;
    `config_name`: the file in /app/configs the roles read (default compose-w<n>.yml); `topology`: pool (every path
    a pool uses, shaped at its receiver's rate) or chain; `templated`: `rate` holds whole link settings texts
    (env_templated's), not numbers; `cluster`: the cluster config mapping to start from (default
    configs/compose.yml's; it is not changed); `media`: a host folder mounted read-only at /app/media in the trainer
    and the master (video files). One master: a config listing several cameras is build_cameras'."""
    spec = describe(n, rate, cpus, topology)
    caps = [spec.worker_cap(i) for i in range(n)]
    with open(os.path.join(REPO, "docker-compose.yml")) as fh:
        compose = yaml.safe_load(fh)  # resolves the x-role anchors and merge keys
    if cluster is None:
        with open(os.path.join(REPO, "configs", "compose.yml")) as fh:
            cfg = yaml.safe_load(fh)
    else:
        cfg = copy.deepcopy(cluster)
    services = compose["services"]
    template = listed_worker(services.pop("worker"))
    config_name = config_name or "compose-w%d.yml" % n
    for svc in services.values():
        if isinstance(svc.get("command"), list):
            svc["command"] = [c.replace("${CONFIG:-compose.yml}", config_name) for c in svc["command"]]
    services["master"]["command"] = without_min_workers(services["master"]["command"])
    listed_pool(cfg)
    for i, name in enumerate(spec.worker_names()):
        svc = copy.deepcopy(template)
        svc["command"] = ["worker", "-c", "/app/configs/" + config_name, "-i", str(i)]
        svc["cpus"] = caps[i]
        svc["environment"] = {"CNNVIDEO_HOST": "worker%d-cpus%s" % (i, caps[i])}
        services[name] = svc
    services["netem"]["command"] = spec.link_args()
    services["master"]["depends_on"] = {
        name: {"condition": "service_healthy"} for name in ["trainer", "netem"] + spec.worker_names()
    }
    for name in ("trainer", "master") if media else ():
        services[name]["volumes"] = services[name].get("volumes", []) + ["%s:%s:ro" % (media, MEDIA)]
    cfg["cluster"]["workers"] = ["%s:50060" % name for name in spec.worker_names()]
    rates = [spec.link_into(i).rate for i in range(n)]
    if not templated and all(isinstance(v, (int, float)) for v in rates + caps):
        cfg["bandwidth"] = [float(r) for r in rates]
        cfg["cpus"] = dict({"master": 1.0, "trainer": 1.0}, **{"worker%d" % i: caps[i] for i in range(n)})
    return compose, cfg


# the one-shot service of a several-camera cluster that writes <out>/report.json once every master-<camera> exited 0:
# run as the output folder's owner (as the image's entry point runs the master), never as root
REPORT_SERVICE = "report"
REPORT_SHELL = ('uid=$$(stat -c %u /app/out); gid=$$(stat -c %g /app/out); '
                'if [ "$$uid" = 0 ]; then uid=$$(id -u cnnvideo); gid=$$(id -g cnnvideo); fi; '
                'exec setpriv --reuid="$$uid" --regid="$$gid" --clear-groups --inh-caps=-all -- '
                'python3 -m cnnvideo.tools.camera_report "$$@"')


def listed_worker(service):
    """A copy of a file's one joining `worker` service, as the template of one listed worker<i> (no replicas)."""
    svc = copy.deepcopy(service)
    svc.pop("deploy", None)
    return svc


def without_min_workers(command):
    """A master's command without `--min-workers N` (a pool of listed workers starts with all of them)."""
    command = list(command)
    if "--min-workers" in command:
        i = command.index("--min-workers")
        del command[i:i + 2]
    return command


def listed_pool(cfg):
    """A cluster config mapping turned into one whose workers are listed (filled by the caller), without joins."""
    for key in ("join", "min_workers"):
        cfg.setdefault("cluster", {}).pop(key, None)


def _plain(value):
    """Tuples to lists, so that yaml.safe_dump writes the value."""
    return json.loads(json.dumps(value))


def camera_mappings(cluster):
    """[(camera name, the config mapping its master runs)] of a cluster config mapping that lists several cameras,
    from config.camera_configs: the cluster's mapping as written without `cameras`, with the camera's `video`, its
    `source` (when its own keys change it), `check_share`, `in_flight` (scaled by its weight), `out` (<out>/<name>),
    `events.camera` (its name), its zones and MQTT client_id. The model `fallback` is left to each role to resolve in
    its image. ValueError (one line) when the config is refused; the check needs the project's Python (torch)."""
    data = copy.deepcopy(cluster)
    data.pop("fallback", None)  # resolved here it would follow this host's model cache, not the image's
    try:
        try:
            from cnnvideo import config
        except ImportError:
            sys.path.insert(0, os.path.join(REPO, "shared"))
            from cnnvideo import config
        try:
            cfg = config.from_dict(data, check_files=False)
        except config.ConfigError as exc:
            raise ValueError(str(exc)) from None
        ones = config.camera_configs(cfg)
    except ImportError as exc:
        raise ValueError("splitting a config of several cameras needs the project's Python "
                         "(.venv/bin/python scripts/compose_workers.py ...): %s" % exc) from None
    out = []
    for one in ones:
        mapping = copy.deepcopy(cluster)
        mapping.pop("cameras", None)
        mapping["video"] = one.video
        source = dataclasses.asdict(one.source)
        if source != dataclasses.asdict(cfg.source):
            mapping["source"] = _plain(source)
        mapping.update(check_share=one.check_share, in_flight=one.in_flight, out=one.out)
        events = dict(mapping.get("events") or {}, camera=one.events.camera)
        if one.events.zones:
            events["zones"] = _plain(one.events.zones)
        else:
            events.pop("zones", None)
        if one.events.mqtt:  # its own client id and availability topic (config.camera_configs)
            events["mqtt"] = dict(events.get("mqtt") or {}, **{k: one.events.mqtt[k] for k in
                                                              ("client_id", "availability") if k in one.events.mqtt})
        mapping["events"] = events
        out.append((one.events.camera, mapping))
    return out


def camera_file(config_name, camera):
    """The config file of a camera's master, beside the cluster config: compose-w4.yml -> compose-w4-door.yml."""
    base = config_name[:-4] if config_name.endswith(".yml") else config_name
    return "%s-%s.yml" % (base, camera)


def build_cameras(n, rate, cpus, cluster, config_name=None, topology="pool", media=None):
    """(compose mapping, cluster config mapping, {camera: (config file name, its master's config mapping)}) for n
    workers and the several cameras the cluster config mapping `cluster` lists (docs/cameras.md): build()'s trainer,
    workers and helper, and instead of the master one `master-<camera>` service per camera, each with the master's
    `cpus:` cap, its own config file (camera_file: written beside the cluster config) and output folder
    /app/out/<camera>, each shaped by the helper as the one master is (the helper finds containers by service name:
    every master sends into worker i at link i's rate and gets results at the return link's). The trainer and
    workers read the cluster config, whose `trainer.video` is the first camera's video unless set. A one-shot
    `report` service starts once every master exited 0 and writes <out>/report.json from the cameras' reports
    (tools/camera_report.py): `up --attach-dependencies --exit-code-from report report`. `media`: a host folder
    mounted read-only at /app/media in the trainer and the masters (the cameras' files; the trainer checks every
    camera's file, a master its own)."""
    cameras = (cluster or {}).get("cameras") or {}
    if len(cameras) < 2:
        raise ValueError("the cluster config lists %d camera(s); one camera runs on the one master (build)"
                         % len(cameras))
    config_name = config_name or "compose-w%d.yml" % n
    compose, cfg = build(n, rate, cpus, config_name=config_name, topology=topology, cluster=cluster, media=media)
    trainer = dict(cfg.get("trainer") or {})
    if not trainer.get("video"):  # the trainer fits on one video (`cnnvideo local` takes the first camera's too)
        trainer["video"] = (cameras[next(iter(cameras))] or {}).get("video")
    cfg["trainer"] = trainer
    services = compose["services"]
    template = services.pop("master")
    spec = describe(n, rate, cpus, topology, cameras=tuple(cameras))
    mappings = dict(camera_mappings(cfg))
    files = {}
    for service, name in spec.masters():
        files[name] = (camera_file(config_name, name), mappings[name])
        svc = copy.deepcopy(template)
        command = [c.replace("/app/configs/" + config_name, "/app/configs/" + files[name][0]) for c in svc["command"]]
        command[command.index("--out") + 1] = "/app/out/" + name
        svc["command"] = command
        services[service] = svc
    masters = spec.master_names()
    services["netem"]["command"] = spec.link_args()
    services[REPORT_SERVICE] = {
        "image": template["image"],
        "user": "0",  # only to read the output folder's owner: REPORT_SHELL drops to it
        "init": True,
        "restart": "no",
        "entrypoint": ["sh", "-c", REPORT_SHELL, "camera_report"],
        "command": ["-c", "/app/configs/" + config_name, "--out", "/app/out"],
        "volumes": [v for v in template["volumes"] if v.endswith((":/app/configs:ro", ":/app/out"))],
        "depends_on": {m: {"condition": "service_completed_successfully"} for m in masters},
    }
    return compose, cfg, files


def master_ip_var(service):
    """The deploy-time variable that holds a master's address for the Swarm helper (a master has no server, so the
    config lacks it): master -> MASTER_IP, master-<camera> -> MASTER_<CAMERA>_IP (scripts/swarm_deploy.sh fills
    each from its node's address)."""
    return service.upper().replace("-", "_") + "_IP"


def _pi_master(template, service, camera, config_name, swarm):
    """One master service of the Pi compose file or the stack, for `camera` ('' = the one camera)."""
    svc = copy.deepcopy(template)
    command = list(svc["command"])
    if "--camera" in command:  # the Pi compose file's `--camera ${CAMERA:-}`
        command[command.index("--camera") + 1] = camera or "${CAMERA:-}"
    elif camera:
        command += ["--camera", camera]
    svc["command"] = command
    if swarm:
        svc["deploy"]["placement"] = {"constraints": ["node.labels.cnnvideo.role == %s" % service]}
    return svc


def joining_command(command, masters):
    """A joining worker's command with its `--join` naming every camera's master, comma-separated (their addresses
    at deploy time: ${MASTER_<CAMERA>_IP}, each at its camera's join port)."""
    command = list(command)
    command[command.index("--join") + 1] = ",".join(masters)
    return command


def build_pi(n, rate=3.0, config_name=None, cluster=None):
    """(Pi compose mapping, Swarm stack mapping, Pi cluster config) from docker-compose.pi.yml, docker-stack.yml
    and `cluster` (a cluster config mapping; default configs/swarm.yml), rendered from its cnnvideo.cluster
    description. One camera: n *listed* workers worker<i> (the stack places worker<i> on the node labelled
    cnnvideo.role=worker<i>); the config's addresses continue the file's pattern (the next LAN address and port per
    worker: edit them). Several cameras: one master per camera (master-<camera>, run with `--camera <camera>`,
    placed on the node labelled cnnvideo.role=master-<camera>, its address MASTER_<CAMERA>_IP) and the files' one
    joining `worker` service, which joins every camera's master: the stack's names each master at its node's
    address, ${MASTER_<CAMERA>_IP}:<its join port> (cluster.join's port for the first camera, the next ports for the
    next ones, as config.camera_config gives each master), scaled with `docker service scale <stack>_worker=N`;
    each master waits for WORKERS (the Pis': for n, cluster.min_workers) to join. The stack's helper shapes by
    role as docker-stack.yml's does (HOP_*, RET_* at deploy time; it needs only the masters' addresses); the
    config's `bandwidth` (what the cost model plans with) is `rate`."""
    config_name = config_name or "compose-w%d-pi.yml" % n
    with open(os.path.join(REPO, "docker-compose.pi.yml")) as fh:
        pi = yaml.safe_load(fh)
    with open(os.path.join(REPO, "docker-stack.yml")) as fh:
        stack = yaml.safe_load(fh)
    if cluster is None:
        with open(os.path.join(REPO, "configs", "swarm.yml")) as fh:
            cluster = yaml.safe_load(fh)
    cfg = copy.deepcopy(cluster)
    several = len(cfg.get("cameras") or {}) > 1
    if several:  # a join pool: the workers join every camera's master
        cfg.setdefault("cluster", {}).update(workers=[], min_workers=n)
        cfg["cluster"].setdefault("join", "0.0.0.0:50070")
    else:
        listed_pool(cfg)
    cameras = tuple(cfg["cameras"]) if several else ("",)
    rates = rate if isinstance(rate, (list, tuple)) else [rate] * n
    spec = describe(n, [templated_link(p) for p in hop_prefixes(n)], None, "pool", cameras)
    port = int(str(cfg["cluster"].get("join") or ":50070").rpartition(":")[2])
    masters = ["${%s:?set %s to the address of its master's node}:%d" % (master_ip_var(s), master_ip_var(s), port + i)
               for i, s in enumerate(spec.master_names())]
    for doc, var in ((pi, "${PI_CONFIG:-compose-pi.yml}"), (stack, None)):
        services = doc["services"]
        joining = services.pop("worker")
        template = listed_worker(joining)
        master = services.pop("master")
        if several:
            services["worker"] = joining
            if var is None:
                joining["command"] = joining_command(joining["command"], masters)
        else:
            master["command"] = without_min_workers(master["command"])
        for i, name in enumerate([] if several else spec.worker_names()):
            svc = copy.deepcopy(template)
            svc["command"] = svc["command"][:3] + ["-i", str(i)]  # ["worker", "-c", CONFIG, "-i", "<i>"]
            if var is None:  # the stack: one listed worker on its own labelled node
                deploy = {k: v for k, v in joining["deploy"].items() if k not in ("replicas", "placement")}
                svc["deploy"] = dict(deploy, placement={"constraints": ["node.labels.cnnvideo.role == %s" % name]})
            services[name] = svc
        for service, camera in spec.masters():
            services[service] = _pi_master(master, service, camera, config_name, swarm=var is None)
        if var:
            for svc in services.values():
                if isinstance(svc.get("command"), list):
                    svc["command"] = [c.replace(var, "${PI_CONFIG:-%s}" % config_name) for c in svc["command"]]
        elif not several:  # listed workers join nothing: no token to require
            for svc in services.values():
                (svc.get("environment") or {}).pop("CNNVIDEO_JOIN_TOKEN", None)
                if "environment" in svc and not svc["environment"]:
                    del svc["environment"]
        for key in [k for k in doc if k.startswith("x-")]:  # the anchors' sources: expanded in every service
            del doc[key]
        # keep the masters last, as in the committed files
        last = set(spec.master_names()) | {"netem"}
        doc["services"] = {k: services[k] for k in sorted(services, key=lambda k: (k in last, k == "netem", k))}
    netem = stack["services"]["netem"]
    command, keep, one, links = list(netem["command"]), [], [], []  # --config FILE; the masters' addresses are the
    while command:                                                  # cluster's; the links are by role (any N)
        arg = command.pop(0)
        if arg in ("--link", "--address"):
            value = command.pop(0)
            if arg == "--link":
                links += [arg, value]
            elif value.startswith("master="):
                one = [arg, value]  # the one master's, as the committed stack writes it
            else:
                keep += [arg, value]
        else:
            keep.append(arg)
    addresses = [] if spec.several else one
    for service in spec.master_names() if spec.several else []:  # no '-' in the message: docker's interpolation
        var = master_ip_var(service)                                 # reads `${V:?a-b}` as V:?a with default b
        addresses += ["--address", "%s=${%s:?set %s to the address of this master's node (it has no server, so the "
                                   "config lacks it)}" % (service, var, var)]
    netem["command"] = keep + addresses + links
    stack["configs"]["cluster"]["file"] = "./configs/${PI_CONFIG:-%s}" % config_name
    if len(rates) != n:
        raise ValueError("%d link rates for %d workers" % (len(rates), n))
    cfg["bandwidth"] = [float(r) for r in rates]
    if several:
        return pi, stack, cfg
    workers = [str(w) for w in cfg["cluster"].get("workers") or []] or ["192.168.1.21:50060"]
    host, _, port = workers[-1].rpartition(":")
    prefix, _, last_ip = host.rpartition(".")
    for step in range(1, n - len(workers) + 1):
        workers.append("%s.%d:%d" % (prefix, int(last_ip) + step, int(port) + step))
    cfg["cluster"]["workers"] = workers[:n]
    return pi, stack, cfg


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


def _numbers(text):
    """'3' -> 3.0, '1,2,4' -> [1.0, 2.0, 4.0] (argparse type)."""
    values = [float(v) for v in text.split(",")]
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("must be > 0: %r" % text)
    return values[0] if len(values) == 1 else values


def env_workers(env_path=None):
    """N of the generated cluster: WORKERS from the environment, else from .env, else None."""
    if os.environ.get("WORKERS"):
        return int(os.environ["WORKERS"])
    env_path = env_path or os.path.join(REPO, ".env")
    value = read_env(env_path).get("WORKERS") if os.path.exists(env_path) else None
    return int(value) if value else None


def _write(path, header, mapping, compose_file):
    with open(path, "w") as fh:
        fh.write(header)
        if compose_file:
            dump_compose(mapping, fh)
        else:
            yaml.safe_dump(mapping, fh, sort_keys=False)
    return os.path.relpath(path, REPO)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workers", type=int, nargs="?",
                        help="number of workers (>= 1; default: WORKERS from the environment, else from .env)")
    parser.add_argument("--rate", type=_numbers, default=3.0,
                        help="MB/s of every link, or N+1 comma-separated: into worker0..N-1, into the master "
                             "(default 3)")
    parser.add_argument("--cpus", type=_numbers, default=0.5,
                        help="CPU cap of every worker, or N comma-separated (default 0.5)")
    parser.add_argument("--chain", action="store_true", help="chain links (worker i <> worker i+1) instead of a pool's")
    parser.add_argument("--pi", action="store_true",
                        help="also write the Pi compose file, the Swarm stack and the Pi cluster config for N workers")
    parser.add_argument("--config", metavar="FILE",
                        help="cluster config to start from (default configs/compose.yml); FILE's name goes into the "
                             "generated names (cameras.yml -> docker-compose.wN-cameras.yml, configs/compose-wN-"
                             "cameras.yml). One that lists several cameras gets a master-<camera> service and a "
                             "config file per camera and a report service (needs the project's Python)")
    parser.add_argument("--pi-config", metavar="FILE",
                        help="with --pi: the Pi cluster config to render (default configs/compose-pi.yml); one that "
                             "lists several cameras gets a master-<camera> service per camera in the Pi file and "
                             "the stack (placed on the node labelled cnnvideo.role=master-<camera>) and keeps their "
                             "one joining worker service, which joins every camera's master")
    parser.add_argument("--media", metavar="DIR",
                        help="host folder (absolute, or relative to the repository) mounted read-only at /app/media "
                             "in the trainer and the master(s): the cameras' video files")
    args = parser.parse_args(argv)
    n = args.workers if args.workers is not None else env_workers()
    if n is None:
        parser.error("give the number of workers (or WORKERS in .env)")
    if n < 1:
        parser.error("workers must be >= 1")
    topology = "chain" if args.chain else "pool"
    source = args.config or os.path.join(REPO, "configs", "compose.yml")
    stem = os.path.splitext(os.path.basename(source))[0]
    suffix = "" if stem == "compose" else "-" + stem
    compose_name, config_name = "docker-compose.w%d%s.yml" % (n, suffix), "compose-w%d%s.yml" % (n, suffix)
    try:
        with open(source) as fh:
            cluster = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        parser.error("--config: %s" % exc)
    several = len(cluster.get("cameras") or {}) > 1
    files = {}
    try:
        if several:
            compose, cfg, files = build_cameras(n, args.rate, args.cpus, cluster, config_name, topology, args.media)
            if args.pi and "compose-w%d-pi.yml" % n in [f for f, _ in files.values()]:
                raise ValueError("a camera named 'pi' would overwrite the Pi cluster config: rename it")
        else:
            compose, cfg = build(n, args.rate, args.cpus, config_name=config_name, topology=topology,
                                 cluster=cluster, media=args.media)
        pi_cluster = None
        if args.pi_config:
            with open(args.pi_config) as fh:
                pi_cluster = yaml.safe_load(fh) or {}
        pi = build_pi(n, args.rate if not isinstance(args.rate, list) else args.rate[:n],
                      cluster=pi_cluster) if args.pi else None
    except (ValueError, OSError, yaml.YAMLError) as exc:
        parser.error(str(exc))
    flags = [" --chain" if args.chain else "", " --pi" if args.pi else "",
             " --config %s" % os.path.relpath(source, REPO) if args.config else "",
             " --media %s" % args.media if args.media else ""]
    made = "# generated by scripts/compose_workers.py %d%s; do not edit by hand\n" % (n, "".join(flags))
    plain = made.replace("; do not edit by hand", "")
    wrote = [_write(os.path.join(REPO, compose_name), made, compose, True),
             _write(os.path.join(REPO, "configs", config_name), plain, cfg, False)]
    for name, (file_name, mapping) in files.items():
        wrote.append(_write(os.path.join(REPO, "configs", file_name), plain.replace(
            "\n", ": the master of camera %s\n" % name), mapping, False))
    if pi:
        pi_compose, stack, pi_cfg = pi
        wrote += [_write(os.path.join(REPO, "docker-compose.w%d.pi.yml" % n), made, pi_compose, True),
                  _write(os.path.join(REPO, "docker-compose.w%d.stack.yml" % n), made, stack, True),
                  _write(os.path.join(REPO, "configs", "compose-w%d-pi.yml" % n),
                         made.replace("; do not edit by hand", "; the addresses continue compose-pi.yml's: edit them"),
                         pi_cfg, False)]
    print("wrote %s" % ", ".join(wrote))
    if several:  # each master's exit would end an `--exit-code-from master` run: follow the report service instead
        print("run:  docker compose -f %s up --build --attach-dependencies --exit-code-from report report; "
              "docker compose -f %s down" % (compose_name, compose_name))
    else:
        print("run:  docker compose -f %s up --build --exit-code-from master" % compose_name)
    if pi:
        print("Pis:  PI_CONFIG=compose-w%d-pi.yml docker compose -f docker-compose.w%d.pi.yml up -d --build ROLE"
              % (n, n))
        print("swarm: STACK_FILE=docker-compose.w%d.stack.yml PI_CONFIG=compose-w%d-pi.yml scripts/swarm_deploy.sh"
              % (n, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
