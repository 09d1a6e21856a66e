"""scripts/compose_workers.py: an N-worker compose file and config that validate and chain the hops."""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from cnnvideo import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import compose_workers  # noqa: E402


def test_four_worker_chain():
    """4 workers: services worker0..3, netem links master->w0->...->w3->master, config lists the chain."""
    compose, cfg = compose_workers.build(4, rate=2.0, cpus=0.25)
    services = compose["services"]
    assert sorted(s for s in services if s.startswith("worker")) == ["worker%d" % i for i in range(4)]
    assert services["worker3"]["command"][-1] == "3" and services["worker3"]["cpus"] == 0.25
    links = [c.split(",")[0] for c in services["netem"]["command"] if c != "--link"]
    assert links == ["master<>worker0", "worker0<>worker1", "worker1<>worker2", "worker2<>worker3", "worker3<>master"]
    assert set(services["master"]["depends_on"]) == {"trainer", "netem", "worker0", "worker1", "worker2", "worker3"}
    loaded = config.from_dict(cfg, check_files=False)
    assert loaded.cluster.workers == ["worker%d:50060" % i for i in range(4)] and loaded.bandwidth == [2.0] * 4


def test_per_hop_rates_and_per_worker_caps():
    """Lists give each hop its rate and each worker its cap; a list of the wrong length is refused."""
    compose, cfg = compose_workers.build(3, rate=[1, 2, 4, 8], cpus=[0.5, 0.25, 0.125])
    services = compose["services"]
    rates = [c.split(",")[1] for c in services["netem"]["command"] if c != "--link"]
    assert rates == ["rate=1", "rate=2", "rate=4", "rate=8"] and cfg["bandwidth"] == [1.0, 2.0, 4.0]
    assert [services["worker%d" % i]["cpus"] for i in range(3)] == [0.5, 0.25, 0.125]
    assert services["worker1"]["environment"]["CNNVIDEO_HOST"] == "worker1-cpus0.25"
    with pytest.raises(ValueError, match="3 hop rates for 4"):
        compose_workers.build(3, rate=[1, 2, 4], cpus=0.5)


def test_env_templated_two_workers_are_docker_compose_yml_s():
    """The experiment runner's env-templated build: for 2 workers the worker and trainer services are exactly
    docker-compose.yml's, and the hop rates use its variable names; for 4, the names run on (HOP3_RATE,
    WORKER3_CPUS)."""
    with open(os.path.join(ROOT, "docker-compose.yml")) as fh:
        committed = yaml.safe_load(fh)["services"]
    two = compose_workers.env_templated(2)["services"]
    for name in ("trainer", "worker0", "worker1"):
        assert two[name] == committed[name], name
    assert [c.split(",")[1] for c in two["netem"]["command"] if c != "--link"] == \
        ["rate=${HOP0_RATE:-3}", "rate=${HOP1_RATE:-3}", "rate=${RET_RATE:-3}"]
    four = compose_workers.env_templated(4)["services"]
    assert four["worker3"]["cpus"] == "${WORKER3_CPUS:-0.5}" and "rate=${HOP3_RATE:-3}" in four["netem"]["command"][7]
    assert compose_workers.hop_rate_vars(4) == ["HOP0_RATE", "HOP1_RATE", "HOP2_RATE", "HOP3_RATE", "RET_RATE"]


def test_written_compose_file_validates(tmp_path):
    """The script writes files that `docker compose config` accepts (when the compose plugin exists)."""
    proc = subprocess.run([sys.executable, "scripts/compose_workers.py", "3"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    path = os.path.join(ROOT, "docker-compose.w3.yml")
    try:
        with open(path) as fh:
            assert "worker2" in yaml.safe_load(fh)["services"]
        docker = shutil.which("docker")
        if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
            check = subprocess.run([docker, "compose", "-f", path, "config", "-q"], cwd=ROOT, capture_output=True,
                                   text=True)
            assert check.returncode == 0, check.stderr
    finally:
        os.remove(path)
        os.remove(os.path.join(ROOT, "configs", "compose-w3.yml"))


def test_committed_env_and_compose_config_are_in_sync():
    """configs/compose.yml holds the frames, bandwidth and cpus .env sets (it is generated from .env)."""
    assert compose_workers.env_drift() == ""
    proc = subprocess.run([sys.executable, "scripts/compose_workers.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_an_edited_env_is_caught_and_regenerating_fixes_it(tmp_path):
    """A rate changed in .env alone is reported with the key; --from-env's writer brings the config in line and
    keeps every other key."""
    env = tmp_path / ".env"
    env.write_text(open(os.path.join(ROOT, ".env")).read().replace("HOP1_RATE=3", "HOP1_RATE=1.5"))
    cfg = tmp_path / "compose.yml"
    shutil.copy(os.path.join(ROOT, "configs", "compose.yml"), str(cfg))
    drift = compose_workers.env_drift(str(env), str(cfg))
    assert drift.startswith("bandwidth:") and "1.5" in drift
    compose_workers.write_from_env(str(env), str(cfg))
    assert compose_workers.env_drift(str(env), str(cfg)) == ""
    before = yaml.safe_load(open(os.path.join(ROOT, "configs", "compose.yml")))
    after = yaml.safe_load(cfg.read_text())
    assert after["bandwidth"] == [3.0, 1.5] and {k: v for k, v in after.items() if k != "bandwidth"} == \
        {k: v for k, v in before.items() if k != "bandwidth"}
