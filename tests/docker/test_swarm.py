"""Docker Swarm across "devices": five docker-in-docker nodes on this machine (one engine each, the
dind setup of scripts/dind_test.sh) form a swarm; the trainer's and the master's are labelled
cnnvideo.role=trainer/master, the two worker nodes cnnvideo.worker=true, and `scripts/swarm_deploy.sh` (checks +
`docker stack deploy` of docker-stack.yml) brings up the whole pool from the manager: two workers join the master,
a run completes across the nodes, the global shaping helper has shaped each device's egress by role, a rate
changes in place, and the stack is removed. Then the pool grows mid-run: `docker service scale cnnvideo_worker=4`
(the trainer's and the second master's nodes labelled as worker nodes too) adds two workers that join the running
pool, the fps goes up under the workers' CPU caps, and no frame is lost. Then two cameras share a pool: the stack
scripts/compose_workers.py renders from a config listing two cameras runs one master per camera (master-door,
master-yard, each on its own node) on the same trainer and the one joining `worker` service, whose two workers
each join both masters. Bad input (an unlabelled role, a
registry that is down, an image of the wrong architecture) is refused before anything is deployed, with the
command that fixes it.

Host networking per node, as on the Pis: each node's roles listen on the node's own address, the
cluster config is the one swarm config every node gets, and tc shapes the node's real interface.
"""
import concurrent.futures
import io
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest
import yaml
from dockerutil import REPO, build_image, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROLES = ["trainer", "master"]  # the placed roles of docker-stack.yml; its workers go to nodes labelled cnnvideo.worker
WORKER_NODES = ["worker0", "worker1"]
NODES = ROLES + WORKER_NODES + ["master2"]  # master2: the second camera's master (test_two_cameras_share_the_pool)
CAMERAS = ("door", "yard")
FRAMES = 5
TOKEN = "swarm-test-join-token-0123456789"
STORE_ROOT = "/var/tmp"  # the nodes' engine stores: one folder, so their layers can be hard links to one seed
DIND = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
        "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined", "--cgroupns", "host",
        "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]


def node_image() -> str:
    tag = "cnnvideo/swarm-node"
    base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
    docker("build", "-q", "-f", str(REPO / "docker" / "swarm-node.Dockerfile"), "--build-arg", "BASE_IMAGE=" + base,
           "-t", tag, str(REPO / "docker"), timeout=1200)
    return tag


def on(node: str, *cmd: str, check: bool = True, timeout: float = 300, env: dict = None, stdin: bytes = None):
    """Run cmd inside a node container; return the CompletedProcess (stdout+stderr as text)."""
    envs = [x for k, v in (env or {}).items() for x in ("-e", "%s=%s" % (k, v))]
    proc = subprocess.run(["docker", "exec", "-i"] + envs + [node] + list(cmd), input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    proc.text = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError("%s: %s failed:\n%s" % (node, " ".join(cmd), proc.text[-3000:]))
    return proc


def wait_for(what: str, probe, timeout: float, every: float = 2.0):
    end = time.time() + timeout
    while time.time() < end:
        value = probe()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def wait_for_engine(node: str) -> None:
    """Until the Docker engine inside the node container answers."""
    wait_for("dockerd in " + node, lambda: on(node, "docker", "info", check=False).returncode == 0, 90, 1)


class Swarm:
    """Node containers on one bridge network; node i is named <prefix>-<role>, the master's node manages.

    Each node's engine keeps its store in a host folder, <STORE_ROOT>/<prefix>/<role>. The images are loaded once,
    into a seed store, and every node's store starts as hard links to the seed's layers (`cp -al`): the layers of an
    overlay2 store are read-only lower directories, and a container writes only in its own upper directory, so the
    nodes share the bytes but not the state (each gets its own copy of the image metadata and a fresh engine and
    swarm identity). One `docker load` of the 2.2 GB instead of five: the module's setup took 198 s and then 70 s,
    the module 450 s and then 305 s, alone on an idle 2-core host."""

    def __init__(self, image: str, images) -> None:
        self.prefix = "cnnvideo-swarm-%s" % uuid.uuid4().hex[:6]
        self.nodes = {role: "%s-%s" % (self.prefix, role) for role in NODES}
        self.manager = self.nodes["master"]
        self.store = os.path.join(STORE_ROOT, self.prefix)
        self.ips = {}
        os.makedirs(self.store)
        seed = os.path.join(self.store, "seed")
        self.loaded_s = self.seed(image, images, seed)
        docker("network", "create", self.prefix)
        for role, name in self.nodes.items():
            store = os.path.join(self.store, role)
            os.makedirs(store)
            subprocess.run(["cp", "-a", os.path.join(seed, "image"), store], check=True)
            subprocess.run(["cp", "-al", os.path.join(seed, "overlay2"), store], check=True)
            docker("run", "-d", "--name", name, "--hostname", name, "--network", self.prefix, *DIND,
                   "-v", store + ":/var/lib/docker", image)
            self.ips[role] = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                    name).strip()
        for name in self.nodes.values():
            wait_for_engine(name)

    def seed(self, image: str, images, seed: str) -> float:
        """`docker save` the images and `docker load` them once, into the seed store (folder `seed`), by a throwaway
        engine that then stops cleanly; return seconds."""
        start = time.time()
        name = self.prefix + "-seed"
        os.makedirs(seed)
        tar = os.path.join(self.store, "images.tar")
        subprocess.run(["docker", "save", "-o", tar] + list(images), check=True, timeout=900)
        self.check_room(os.path.getsize(tar))
        docker("run", "-d", "--name", name, *DIND, "-v", seed + ":/var/lib/docker", "-v", tar + ":/images.tar:ro",
               image)
        try:
            wait_for_engine(name)
            on(name, "docker", "load", "-q", "-i", "/images.tar", timeout=900)
            stop = "kill $(pidof dockerd) && while pidof dockerd containerd >/dev/null; do sleep 0.2; done"
            on(name, "bash", "-c", stop, timeout=120)
        finally:
            docker("rm", "-f", name, check=False)
            os.remove(tar)
        return time.time() - start

    def form(self) -> None:
        on(self.manager, "docker", "swarm", "init", "--advertise-addr", self.ips["master"])
        token = on(self.manager, "docker", "swarm", "join-token", "-q", "worker").text.strip()
        for role, name in self.nodes.items():
            if name != self.manager:
                on(name, "docker", "swarm", "join", "--advertise-addr", self.ips[role], "--token", token,
                   self.ips["master"] + ":2377")

    def check_room(self, image_bytes: int) -> None:
        """Fail with the sizes, before loading, when the host cannot hold the saved images and the seed store (the
        nodes' stores link to the seed's layers)."""
        need, free = 2 * image_bytes, shutil.disk_usage(self.store).free
        if free < need:
            raise AssertionError("%s has %.1f GB free; saving and loading %.1f GB of images needs %.1f GB "
                                 "(scripts/docker_reclaim.sh frees what earlier runs left)"
                                 % (self.store, free / 1e9, image_bytes / 1e9, need / 1e9))

    def label(self, roles) -> None:
        for role in roles:
            on(self.manager, "docker", "node", "update", "--label-add", "cnnvideo.role=" + role, self.nodes[role])

    def label_workers(self, nodes, add: bool = True) -> None:
        """Label (or unlabel) nodes as ones that may run a joining worker (cnnvideo.worker=true)."""
        for node in nodes:
            flag = ["--label-add", "cnnvideo.worker=true"] if add else ["--label-rm", "cnnvideo.worker"]
            on(self.manager, "docker", "node", "update", *flag, self.nodes[node])

    def copy_repo(self, config_text: str) -> None:
        """The files a manager's user needs: stack file, deploy script, the cluster config (a join pool); the scale
        test's config; and the two-camera stack and its config (a join pool too), rendered by
        scripts/compose_workers.py from the same config."""
        files = ["docker-stack.yml", "scripts/swarm_deploy.sh"]
        tar = subprocess.run(["tar", "-C", str(REPO), "-c"] + files, stdout=subprocess.PIPE, check=True).stdout
        on(self.manager, "bash", "-c", "mkdir -p /repo/configs && tar -C /repo -x", stdin=tar)
        on(self.manager, "bash", "-c", "cat > /repo/configs/swarm-test.yml", stdin=config_text.encode())
        on(self.manager, "bash", "-c", "cat > /repo/configs/swarm-scale.yml", stdin=scale_config(config_text).encode())
        stack, cameras = cameras_stack(config_text)
        on(self.manager, "bash", "-c", "cat > /repo/docker-stack.cameras.yml", stdin=stack.encode())
        on(self.manager, "bash", "-c", "cat > /repo/configs/swarm-cameras.yml", stdin=cameras.encode())

    def remove(self) -> None:
        """Nodes, the network and the nodes' stores (a node's containers leave files of other owners: root removes
        them)."""
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda name: docker("rm", "-f", name, check=False, timeout=300), self.nodes.values()))
        docker("network", "rm", self.prefix, check=False)
        shutil.rmtree(self.store, ignore_errors=True)


def config_text(ips) -> str:
    return """cluster:
  trainer: {trainer}:50051
  workers: []
  join: 0.0.0.0:50070
model: alexnet
weights: random
seed: 0
video: /usr/share/cnnvideo/vtest.avi
frame_size: [96, 128]
mode: delta
check: true
frames: {frames}
in_flight: 2
group_size: 5
scheduler: lbs
bandwidth: [3.0]
trainer:
  frames: 10
cache_dir: /var/cache/cnnvideo
out: /app/out
""".format(frames=FRAMES, **ips)


SCALE_CAPS = "0.1"  # each worker's CPU cap in the scale test: the pool, not the host, sets the pace


def scale_config(text: str) -> str:
    """The scale test's config: the test's join pool, whole frames to the workers in turn (replicas), a looping clip
    read as fast as the pool takes it until the master gets SIGTERM (frames 0), frames big enough for a capped worker
    to be the bottleneck. A fifth of the results is checked: checking every one ran the unsplit model on the master
    for each frame (80 ms of CPU), and on a loaded CI host that, not the workers, set the pace at 2.2-2.7 fps."""
    mapping = yaml.safe_load(text)
    mapping.update(scheduler="replicas", frame_size=[240, 320], in_flight=8, frames=0, check_share=0.2,
                   source={"loop": True, "realtime": False})
    return yaml.safe_dump(mapping, sort_keys=False)


def cameras_stack(text: str):
    """(stack file, cluster config) of two cameras on the test's join pool: the config lists door and yard (both play
    the video the image carries; the trainer fits on it), and scripts/compose_workers.py renders the stack: a master
    per camera, each on its own node, and the one joining `worker` service, which joins both masters at their
    nodes' addresses (MASTER_DOOR_IP, MASTER_YARD_IP: swarm_deploy.sh takes them from the labelled nodes)."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import compose_workers

    mapping = yaml.safe_load(text)
    video = mapping.pop("video")
    mapping["trainer"]["video"] = video
    mapping["cameras"] = {name: {"video": video} for name in CAMERAS}
    _, stack, cfg = compose_workers.build_pi(2, 3.0, "swarm-cameras.yml", cluster=mapping)
    text = io.StringIO()
    compose_workers.dump_compose(stack, text)
    return text.getvalue(), yaml.safe_dump(cfg, sort_keys=False)


@pytest.fixture(scope="module")
def swarm(engine):
    sw = Swarm(node_image(), [build_image("runtime"), build_image("netem")])
    try:
        sw.form()
        print("swarm: images loaded once and linked into %d nodes' stores in %.0f s" % (len(sw.nodes), sw.loaded_s))
        sw.copy_repo(config_text(sw.ips))
        yield sw
    finally:
        sw.remove()


def deploy(sw: Swarm, *args: str, check: bool = True, **env):
    base = {"PI_CONFIG": "swarm-test.yml", "IMAGE": "cnnvideo/runtime", "NETEM_IMAGE": "cnnvideo/netem",
            "FRAMES": str(FRAMES), "JOIN_TOKEN": TOKEN}
    base.update(env)
    return on(sw.manager, "bash", "/repo/scripts/swarm_deploy.sh", *args, env=base, check=check, timeout=300)


def task_container(sw: Swarm, node: str, service: str) -> str:
    out = on(sw.nodes[node], "docker", "ps", "-aq", "--filter",
             "label=com.docker.swarm.service.name=cnnvideo_" + service)
    return out.text.split()[0] if out.text.split() else ""


def master_done(sw: Swarm, service: str = "master") -> str:
    """The master task's state line once it has ended (Complete/Failed/Rejected), else ''."""
    out = on(sw.manager, "docker", "service", "ps", "cnnvideo_" + service, "--format", "{{.CurrentState}}|{{.Error}}",
             check=False).text.strip().split("\n")[0]
    return out if out.startswith(("Complete", "Failed", "Rejected")) else ""


def remove_stack(sw: Swarm) -> None:
    on(sw.manager, "docker", "stack", "rm", "cnnvideo")
    wait_for("the stack's services gone",
             lambda: not on(sw.manager, "docker", "service", "ls", "-q").text.strip(), 120)
    # a helper of a removed stack clears its device's rules as it exits: it must be gone before the next one starts
    wait_for("the containers of the stack gone", lambda: not any(on(
        node, "docker", "ps", "-q", "--filter", "label=com.docker.stack.namespace=cnnvideo").text.strip()
        for node in sw.nodes.values()), 180)


def master_file(sw: Swarm, node: str, service: str, path: str) -> bytes:
    """A file of the (ended) master task's container on `node`."""
    container = task_container(sw, node, service)
    assert container, "no %s task on node %s" % (service, sw.nodes[node])
    return _untar_one(on(sw.nodes[node], "docker", "cp", container + ":" + path, "-").stdout)


def test_unlabelled_role_is_refused_with_the_fix(swarm):
    """Before any label: the deploy names the missing role and the docker node update that fixes it; no worker
    node, or no token, is refused the same way."""
    proc = deploy(swarm, "--check-only", check=False)
    assert proc.returncode == 1, proc.text
    fix = "no node is labelled cnnvideo.role=trainer: docker node update --label-add cnnvideo.role=trainer"
    assert fix in proc.text
    assert "has no cnnvideo.role label" in proc.text
    assert "0 node(s) are labelled cnnvideo.worker=true (none) but WORKERS=2 workers need one each: docker node " \
           "update --label-add cnnvideo.worker=true NODE" in proc.text, proc.text
    token = deploy(swarm, "--check-only", check=False, JOIN_TOKEN="")
    assert token.returncode == 1 and "JOIN_TOKEN is not set: export JOIN_TOKEN=$(openssl rand -hex 16)" in token.text


def test_registry_down_and_wrong_architecture_are_refused(swarm):
    """An image in a registry that does not answer, or with no variant for the nodes' architecture, is refused."""
    swarm.label(ROLES)
    swarm.label_workers(WORKER_NODES)
    down = deploy(swarm, "--check-only", check=False, IMAGE="127.0.0.1:5999/cnnvideo/node")
    assert down.returncode == 1 and "registry 127.0.0.1:5999 does not answer" in down.text, down.text
    # a real registry on the manager holding a tiny image that says arm64 only (the nodes are amd64)
    on(swarm.manager, "bash", "-c", "printf 'version: 0.1\\nstorage: {filesystem: {rootdirectory: /var/tmp/reg}}\\n"
       "http: {addr: 127.0.0.1:5000}\\n' > /etc/reg.yml && (setsid docker-registry serve /etc/reg.yml "
       ">/var/log/reg.log 2>&1 &) && for i in $(seq 30); do curl -fs http://127.0.0.1:5000/v2/ && break; sleep 1; done")
    tiny = subprocess.run(["tar", "-C", str(REPO / "scripts"), "-c", "image_arch.py"], stdout=subprocess.PIPE,
                          check=True).stdout
    on(swarm.manager, "docker", "import", "-", "127.0.0.1:5000/tiny:arm64", stdin=tiny)
    fixer = (REPO / "scripts" / "image_arch.py").read_bytes()
    on(swarm.manager, "bash", "-c", "cat > /tmp/image_arch.py", stdin=fixer)
    on(swarm.manager, "bash", "-c", "docker save 127.0.0.1:5000/tiny:arm64 | python3 /tmp/image_arch.py arm64 "
       "| docker load -q && docker push -q 127.0.0.1:5000/tiny:arm64")
    wrong = deploy(swarm, "--check-only", check=False, IMAGE="127.0.0.1:5000/tiny:arm64")
    assert wrong.returncode == 1, wrong.text
    assert "is linux/amd64 but 127.0.0.1:5000/tiny:arm64 has only: linux/arm64" in wrong.text, wrong.text


def test_stack_runs_across_the_nodes_and_rates_change_in_place(swarm):
    """One deploy from the manager: the trainer and the master on their labelled nodes, one worker on each
    worker-labelled node joining the pool, a run to completion, each device's egress shaped by role."""
    swarm.label(ROLES)
    swarm.label_workers(WORKER_NODES)
    start = time.time()
    deploy(swarm)
    state = wait_for("the master's run", lambda: master_done(swarm), 900, 5)
    logs = on(swarm.manager, "docker", "service", "logs", "--raw", "cnnvideo_master", check=False).text
    assert state.startswith("Complete"), state + logs[-3000:]
    run_s = time.time() - start
    report = json.loads(master_file(swarm, "master", "master", "/app/out/report.json"))
    assert report["completed"] == report["frames"] == FRAMES and report["lost"] == 0, report
    assert report["max_abs_err"] == 0.0
    ips = swarm.ips
    assert sorted(report["workers"]) == sorted("%s:50060" % ips[node] for node in WORKER_NODES)
    # every role ran on its own node (a container of its service exists there and nowhere else)
    placed = {"trainer": ["trainer"], "master": ["master"], "worker": WORKER_NODES}
    for service, nodes in placed.items():
        for node in NODES:
            assert bool(task_container(swarm, node, service)) == (node in nodes), (service, node)
    # the global helper shaped worker0's egress by role: the master at RET (3 MB/s), the trainer not at all (its
    # filter goes to htb's direct queue), every other destination (worker1) by the default class at HOP (3 MB/s)
    assert "default 0xf" in on(swarm.nodes["worker0"], "tc", "qdisc", "show", "dev", "eth0").text
    classes = on(swarm.nodes["worker0"], "tc", "class", "show", "dev", "eth0").text
    assert classes.count("rate 24Mbit") == 2 and "class htb 1:f " in classes, classes
    filters = on(swarm.nodes["worker0"], "tc", "filter", "show", "dev", "eth0").text
    print("swarm: run of %d frames in %.0f s (report wall %.1f s)" % (FRAMES, run_s, report["wall_s"]))
    assert _hex_ip(ips["master"]) in filters and _hex_ip(ips["trainer"]) in filters, filters
    assert _hex_ip(ips["worker1"]) not in filters, filters  # a joined worker needs no rule of its own
    assert "default 0xf" in on(swarm.nodes["master"], "tc", "qdisc", "show", "dev", "eth0").text
    # change the hop rate in place: only the helper is updated; worker0's worker keeps its container
    before = task_container(swarm, "worker0", "worker")
    deploy(swarm, HOP_RATE="1")
    wait_for("worker>worker at 1 MB/s on worker0", lambda: "rate 8Mbit" in on(
        swarm.nodes["worker0"], "tc", "class", "show", "dev", "eth0").text, 120)
    assert task_container(swarm, "worker0", "worker") == before
    remove_stack(swarm)


class ServiceLog:
    """The master service's log, read again on each poll: the highest frame sent, the workers that joined."""

    def __init__(self, sw: Swarm, service: str = "cnnvideo_master") -> None:
        self.sw, self.service, self.text = sw, service, ""

    def poll(self) -> str:
        self.text = on(self.sw.manager, "docker", "service", "logs", "--raw", self.service, check=False).text
        return self.text

    def sent(self) -> int:
        return max([int(n) for n in re.findall(r"sent frame (\d+)/", self.poll())] or [0])

    def joined(self) -> list:
        return re.findall(r"(w\d+) at \S+ joined the pool", self.poll())


def fps_between(times, start: float, end: float) -> float:
    """Frames completed in (start, end], per second (report `times`: done_s from the run's start)."""
    done = [t["done_s"] for t in times if t["done_s"] is not None and start < t["done_s"] <= end]
    return len(done) / (end - start)


def workers_busy(spans, start: float, end: float) -> float:
    """How many workers were working at once on average over (start, end]: the seconds of their decode, compute and
    encode spans (report `spans`: [frame, actor, stage, start_s, end_s, bytes], times from the run's start) that
    ended in the window, over its length. Unlike fps it does not fall when the shared host slows every worker alike:
    it says whether the pool gives the workers frames to work on at once."""
    busy = sum(row[4] - row[3] for row in spans
               if str(row[1]).startswith("w") and row[2] in ("decode", "compute", "encode") and start < row[4] <= end)
    return busy / (end - start)


def test_scale_grows_the_pool_mid_run(swarm):
    """The stack starts with 2 workers capped at SCALE_CAPS CPU; once the run goes on, two more nodes are labelled
    for workers and `docker service scale cnnvideo_worker=4` adds two, which join the running pool. After they take
    frames the pool completes frames faster than before. `docker service scale cnnvideo_worker=3` then stops one
    (SIGTERM: it drains its frames and leaves) and the run goes on over three. Stopped with SIGTERM, the master
    drains and reports every frame completed, exact, none lost."""
    swarm.label(ROLES)
    swarm.label_workers(WORKER_NODES)
    start = time.time()
    deploy(swarm, PI_CONFIG="swarm-scale.yml", FRAMES="0", WORKERS="2", WORKER_CPUS=SCALE_CAPS)
    log = ServiceLog(swarm)
    try:
        wait_for("the run going on 2 workers", lambda: log.sent() >= 41, 900, 3)
        swarm.label_workers(["trainer", "master2"])
        scaled = time.time()
        on(swarm.manager, "docker", "service", "scale", "--detach", "cnnvideo_worker=4")
        wait_for("two workers joined the running pool", lambda: len(log.joined()) == 2, 600, 3)
        joined = time.time()
        at = log.sent()
        wait_for("frames on 4 workers", lambda: log.sent() >= at + 120, 300, 3)
        grown = time.time()
        on(swarm.manager, "docker", "service", "scale", "--detach", "cnnvideo_worker=3")  # one gets SIGTERM
        wait_for("a worker drained and left the pool", lambda: "left the pool after" in log.poll(), 180, 3)
        left = log.sent()
        wait_for("frames on 3 workers", lambda: log.sent() >= left + 20, 180, 3)
        master = task_container(swarm, "master", "master")
        stopped = time.time()
        on(swarm.nodes["master"], "docker", "kill", "-s", "TERM", master)  # no new frame; it drains and reports
        state = wait_for("the master's report", lambda: master_done(swarm), 300, 3)
        phases = (scaled - start, joined - scaled, grown - joined, stopped - grown, time.time() - stopped)
        assert state.startswith("Complete"), state + log.poll()[-3000:]
        report = json.loads(master_file(swarm, "master", "master", "/app/out/report.json"))
        results = master_file(swarm, "master", "master", "/app/out/results.jsonl").decode().splitlines()
        shaped = on(swarm.nodes["master2"], "tc", "qdisc", "show", "dev", "eth0").text
    finally:
        swarm.label_workers(["trainer", "master2"], add=False)
    assert report["completed"] == report["frames"] > at and report["lost"] == 0, report
    assert report["max_abs_err"] == 0.0, report["max_abs_err"]
    joins = [e for e in report["pool"]["left_out"] if e.get("scope") == "joined"]
    assert [e["joined"] for e in joins] == [[2], [3]], report["pool"]["left_out"]
    leaves = [e for e in report["pool"]["left_out"] if e.get("scope") == "left"]
    assert len(leaves) == 1 and len(leaves[0]["left_out"]) == 1, report["pool"]["left_out"]
    lines = [json.loads(line) for line in results]
    assert [e["frame"] for e in lines] == list(range(report["completed"]))
    served = {w: sum(e["route"][0] == w for e in lines) for w in range(4)}
    assert all(served[w] > 0 for w in range(4)), served
    # fps on 2 workers: after the first frames (start-up) until the first join; on 4: from the first frame the last
    # joined worker completed until the scale-down (the leaver drains its frames before it is left out)
    times = sorted(report["times"], key=lambda t: t["frame"])
    t_warm = times[20]["done_s"]
    before = fps_between(times, t_warm, joins[0]["at_s"])
    first_w3 = min(e["frame"] for e in lines if e["route"][0] == 3)
    t_four = times[first_w3]["done_s"]
    t_end = leaves[0]["at_s"]
    after = fps_between(times, t_four, t_end)
    busy_before = workers_busy(report["spans"], t_warm, joins[0]["at_s"])
    busy_after = workers_busy(report["spans"], t_four, t_end)
    print("\nswarm scale 2 -> 4 workers (cap %s): %.2f fps before (%.0f s), %.2f fps after (%.0f s); workers busy at "
          "once %.2f before, %.2f after; %d frames, served per worker %s; deploy to 41 frames sent %.0f s, scale to "
          "both joined %.0f s, 120 more frames %.0f s, scale to 3, one left and 20 more frames %.0f s, drain and "
          "report %.0f s"
          % ((SCALE_CAPS, before, joins[0]["at_s"] - t_warm, after, t_end - t_four, busy_before, busy_after,
              report["completed"], served) + phases))
    # The pool's pace is its workers' (each capped): 4 of them working at once where 2 did is what raises the fps.
    # Two CI rehearsals read 2.10 -> 2.18 and 2.43 -> 2.73 fps with 1.98 -> 2.13 workers busy: checking every
    # result on the master, not the workers, set the pace on the loaded host (now a fifth: scale_config). Beside a
    # running integration tier it then read 2.97 -> 5.91 fps, 1.98 -> 3.99 busy. The fps of two windows of a shared
    # host also move with its load between them, so their bar is lower than the workers'.
    assert busy_after > 1.5 * busy_before, (busy_before, busy_after, before, after)
    assert after > 1.2 * before, (before, after, busy_before, busy_after)
    assert "default 0xf" in shaped, shaped  # a node that became a worker's is shaped as one
    remove_stack(swarm)


def test_two_cameras_share_the_pool(swarm):
    """The stack rendered from a config listing two cameras: master-door and master-yard, each on the node labelled
    for it, run their camera (`--camera`) on the one trainer and the stack's one joining `worker` service (WORKERS
    replicas on the worker-labelled nodes, as docker-stack.yml's): each worker joins both masters, each master starts
    once both joined; each writes its own report with every frame completed and exact, and both workers served
    both cameras; each worker's helper shapes its results to both masters."""
    swarm.label(["trainer"])
    swarm.label_workers(WORKER_NODES)
    on(swarm.manager, "docker", "node", "update", "--label-add", "cnnvideo.role=master-door", swarm.nodes["master"])
    on(swarm.manager, "docker", "node", "update", "--label-add", "cnnvideo.role=master-yard", swarm.nodes["master2"])
    start = time.time()
    deploy(swarm, PI_CONFIG="swarm-cameras.yml", STACK_FILE="/repo/docker-stack.cameras.yml")
    nodes = {"door": "master", "yard": "master2"}
    workers = sorted("%s:50060" % swarm.ips[node] for node in WORKER_NODES)
    for camera in CAMERAS:
        service = "master-" + camera
        state = wait_for("the run of " + service, lambda s=service: master_done(swarm, s), 900, 5)
        logs = on(swarm.manager, "docker", "service", "logs", "--raw", "cnnvideo_" + service, check=False).text
        assert state.startswith("Complete"), state + logs[-3000:]
        report = json.loads(master_file(swarm, nodes[camera], service, "/app/out/%s/report.json" % camera))
        assert report["completed"] == report["frames"] == FRAMES and report["lost"] == 0, report
        assert report["max_abs_err"] == 0.0 and report.get("camera", camera) == camera, report
        assert sorted(report["workers"]) == workers, report["workers"]  # both joined this camera's master
        results = master_file(swarm, nodes[camera], service, "/app/out/%s/results.jsonl" % camera).decode()
        served = sorted({report["workers"][w] for line in results.splitlines() for w in json.loads(line)["route"]})
        assert served == workers, (camera, served, report["pool"])
    print("swarm: two cameras of %d frames each on the joining workers in %.0f s" % (FRAMES, time.time() - start))
    want = [_hex_ip(swarm.ips[node]) for node in ("master", "master2", "trainer")]  # results to each master's node
    # (the trainer unshaped); the hop into worker1 by the default class
    seen = []

    def shaped():  # the helper re-checks its rules every few seconds
        seen[:] = [on(swarm.nodes["worker0"], "tc", "filter", "show", "dev", "eth0", check=False).text]
        return all(ip in seen[0] for ip in want)

    try:
        wait_for("worker0's egress shaped to both masters and the trainer", shaped, 60)
    except AssertionError:
        helper = on(swarm.manager, "docker", "service", "logs", "--raw", "cnnvideo_netem", check=False).text
        raise AssertionError("worker0's helper did not shape %s; tc filter show: %r\n%s"
                             % (want, seen[0][-1500:], helper[-2000:])) from None
    remove_stack(swarm)


def _untar_one(data: bytes) -> bytes:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(tar.getmembers()[0]).read()


def _hex_ip(ip: str) -> str:
    """An IPv4 as tc's u32 filter prints it (match c0a80116/ffffffff)."""
    return "".join("%02x" % int(x) for x in ip.split("."))
