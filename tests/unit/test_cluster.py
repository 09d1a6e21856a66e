"""cnnvideo.cluster: one description of a cluster (cameras, workers, caps, links) that `cnnvideo local`, compose, the
Pi files and Swarm render; its naming, caps and link rules, and each renderer reading it."""
import os
import sys

import pytest
import yaml

from cnnvideo import cluster, config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import compose_workers  # noqa: E402


def test_one_camera_has_one_master_and_several_have_one_each():
    one = cluster.Cluster(workers=3)
    assert one.masters() == [("master", "")] and one.worker_names() == ["worker0", "worker1", "worker2"]
    two = cluster.Cluster(cameras=("door", "yard"), workers=2, master_cpus=1.0, worker_cpus=0.5, trainer_cpus=1)
    assert two.master_names() == ["master-door", "master-yard"] and two.several and two.alike()
    assert two.cpu_caps() == {"trainer": 1, "master-door": 1.0, "master-yard": 1.0, "worker0": 0.5, "worker1": 0.5}


def test_pool_links_reach_every_master_and_are_shaped_at_the_receiver():
    spec = cluster.from_rates(("door", "yard"), 2, [1, 2, 8], 0.5)
    specs = spec.link_specs()
    assert "master-door>worker0,rate=1,delay=0,jitter=0,loss=0" in specs
    assert "master-yard>worker1,rate=2,delay=0,jitter=0,loss=0" in specs
    assert "worker1>worker0,rate=1,delay=0,jitter=0,loss=0" in specs
    assert "worker0>master-yard,rate=8,delay=0,jitter=0,loss=0" in specs
    assert len(specs) == 2 * 3 + 2 * 2  # into each worker from 2 masters and the other worker; results to 2 masters
    chain = cluster.from_rates(("",), 2, 3, 0.5, topology="chain").link_specs()
    assert chain == ["master<>worker0,rate=3,delay=0,jitter=0,loss=0",
                     "worker0<>worker1,rate=3,delay=0,jitter=0,loss=0",
                     "worker1<>master,rate=3,delay=0,jitter=0,loss=0"]


def test_alike_workers_are_one_value_and_bad_counts_are_refused():
    """Workers with one cap and one rate are described as one value (what one scaled service runs, issue 45)."""
    spec = cluster.from_rates(("",), 4, [3, 3, 3, 3, 3], [0.5] * 4)
    assert spec.alike() and spec.worker_cpus == 0.5 and spec.link_in == cluster.Link(3)
    assert not cluster.from_rates(("",), 2, 3, [0.5, 0.25]).alike()
    with pytest.raises(ValueError, match="3 link rates for 4 links"):
        cluster.from_rates(("",), 3, [1, 2, 3], 0.5)
    with pytest.raises(ValueError, match="at least one worker"):
        cluster.Cluster(workers=0)
    with pytest.raises(ValueError, match="topology"):
        cluster.Cluster(topology="ring")


def test_from_config_reads_cameras_caps_and_bandwidth():
    cfg = config.from_dict({"cluster": {"workers": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]},
                            "bandwidth": [2.0], "cpus": {"workers": 0.25, "worker2": 0.5, "master": 1.0},
                            "cameras": {"door": {"video": "a"}, "yard": {"video": "b"}}}, check_files=False)
    spec = cluster.from_config(cfg)
    assert spec.master_names() == ["master-door", "master-yard"] and spec.workers == 3
    assert spec.worker_cpus == (0.25, 0.25, 0.5) and spec.link_in == cluster.Link(2.0)
    assert spec.link_return == cluster.Link(2.0) and spec.master_cpus == 1.0
    one = cluster.from_config(config.from_dict({"video": "x"}, check_files=False))
    assert one.master_names() == ["master"] and one.workers == 2


def test_local_names_its_masters_and_their_caps_from_the_description():
    import local_cameras

    cfg = config.from_dict({"cpus": {"master": 0.5}, "cameras": {"door": {"video": "a"}, "yard": {"video": "b"}}},
                           check_files=False)
    assert local_cameras.masters(cfg) == {"door": "master-door", "yard": "master-yard"}
    assert local_cameras.master_shares({"master": 0.5, "trainer": 1.0}, cfg) == {
        "trainer": 1.0, "master-door": 0.5, "master-yard": 0.5}
    one = config.from_dict({"video": "x"}, check_files=False)
    assert local_cameras.master_shares({"master": 0.5}, one) == {"master": 0.5}


def test_pi_files_and_swarm_stack_run_one_master_per_camera(monkeypatch):
    """A Pi cluster config listing two cameras renders a master-<camera> service per camera in the Pi compose file
    and in the stack: each runs `--camera <camera>`, the stack places it on the node labelled master-<camera> and
    waits for WORKERS to join; the pool is the files' one joining `worker` service, whose stack copy joins each
    master at ${MASTER_<CAMERA>_IP} and its camera's join port; the stack's helper knows each master's address and
    shapes by role."""
    with open(os.path.join(ROOT, "configs", "swarm.yml")) as fh:
        mapping = yaml.safe_load(fh)
    mapping.pop("video")
    mapping["trainer"] = {"frames": 10, "video": "/usr/share/cnnvideo/vtest.avi"}
    mapping["cameras"] = {"door": {"video": "/usr/share/cnnvideo/vtest.avi"}, "yard": {"video": "rtsp://cam/yard"}}
    pi, stack, cfg = compose_workers.build_pi(2, 3.0, "swarm-cams.yml", cluster=mapping)
    services = stack["services"]
    assert list(services) == ["trainer", "worker", "master-door", "master-yard", "netem"]
    door = services["master-door"]
    assert door["command"][-2:] == ["--camera", "door"] and door["command"][:3] == ["master", "-c",
                                                                                    "/app/configs/cluster.yml"]
    assert door["command"][-4:-2] == ["--min-workers", "${WORKERS:-2}"]
    assert door["deploy"]["placement"]["constraints"] == ["node.labels.cnnvideo.role == master-door"]
    join = services["worker"]["command"][services["worker"]["command"].index("--join") + 1]
    door_ip, yard_ip = join.split(",")
    assert door_ip.startswith("${MASTER_DOOR_IP:?") and door_ip.endswith("}:50070")
    assert yard_ip.startswith("${MASTER_YARD_IP:?") and yard_ip.endswith("}:50071")
    assert "-" not in join.replace("}:50070,", "") and join.count(",") == 1  # docker 20.10 splits `${V:?a-b}` at '-'
    command = services["netem"]["command"]
    assert "master-yard=${MASTER_YARD_IP:?" in " ".join(command) and "master=" not in " ".join(command)
    for value in [c for c in command if "${MASTER_" in c]:  # docker 20.10 splits `${V:?a-b}` at the '-'
        assert "-" not in value.partition(":?")[2], value
    links = [c for c in command if ">" in c]
    assert [c.split(",")[:2] for c in links] == [["master>worker", "rate=${HOP_RATE:-3}"],
                                                 ["worker>worker", "rate=${HOP_RATE:-3}"],
                                                 ["worker>master", "rate=${RET_RATE:-3}"]]
    assert pi["services"]["master-yard"]["command"][-2:] == ["--camera", "yard"]
    assert "--join" in pi["services"]["worker"]["command"] and "worker0" not in pi["services"]
    monkeypatch.setenv("CNNVIDEO_JOIN_TOKEN", "a-token-of-16-characters")  # what the stack gives every role
    loaded = config.from_dict(cfg, check_files=False)
    assert loaded.camera_names() == ["door", "yard"] and loaded.cluster.workers == []
    assert loaded.cluster.join == "0.0.0.0:50070" and loaded.cluster.min_workers == 2
    one_pi, one_stack, _ = compose_workers.build_pi(2)
    assert "master" in one_stack["services"] and "--camera" not in one_stack["services"]["master"]["command"]
    assert one_pi["services"]["master"]["command"][-1] == "${CAMERA:-}"
