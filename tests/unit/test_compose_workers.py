"""scripts/compose_workers.py: an N-worker compose file and config that validate and shape every path of a pool (each
at the receiving worker's link); the Pi compose file, Swarm stack and Pi config for N workers; N from .env."""
import json
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


def netem_links(services):
    """The helper's links as (name part, settings text) in order."""
    return [tuple(c.split(",", 1)) for c in services["netem"]["command"] if c != "--link"]


def test_four_worker_pool():
    """4 workers: services worker0..3, netem links every path a pool uses (master and every other worker into each
    worker, every worker into the master) and nothing else, the config lists the 4 workers."""
    compose, cfg = compose_workers.build(4, rate=2.0, cpus=0.25)
    services = compose["services"]
    assert sorted(s for s in services if s.startswith("worker")) == ["worker%d" % i for i in range(4)]
    assert services["worker3"]["command"][-1] == "3" and services["worker3"]["cpus"] == 0.25
    names = [name for name, _ in netem_links(services)]
    roles = ["master"] + ["worker%d" % i for i in range(4)]
    want = {"%s>worker%d" % (src, i) for i in range(4) for src in roles if src != "worker%d" % i}
    want |= {"worker%d>master" % i for i in range(4)}
    assert len(names) == len(set(names)) == 4 * 4 + 4 and set(names) == want
    assert names[:4] == ["master>worker0", "worker1>worker0", "worker2>worker0", "worker3>worker0"]  # by receiver
    assert set(services["master"]["depends_on"]) == {"trainer", "netem", "worker0", "worker1", "worker2", "worker3"}
    loaded = config.from_dict(cfg, check_files=False)
    assert loaded.cluster.workers == ["worker%d:50060" % i for i in range(4)] and loaded.bandwidth == [2.0] * 4


def test_the_helper_parses_the_pool_links_into_one_rule_per_path():
    """The netem helper reads the generated links as one directed rule per pair (no '<>' doubling), each at its
    receiver's rate: 3 workers + master = 4 x 3 rules."""
    sys.path.insert(0, os.path.join(ROOT, "services"))
    from netem.links import find_link, parse_links

    compose, _ = compose_workers.build(3, rate=[1, 2, 4, 8], cpus=0.5)
    links = parse_links([c for c in compose["services"]["netem"]["command"] if c != "--link"])
    assert len(links) == 12
    for i, rate in enumerate([1, 2, 4]):
        for src in ["master"] + ["worker%d" % j for j in range(3) if j != i]:
            assert find_link(links, src, "worker%d" % i).shape.rate == rate
    assert all(find_link(links, "worker%d" % j, "master").shape.rate == 8 for j in range(3))
    assert find_link(links, "master", "trainer") is None and find_link(links, "trainer", "worker0") is None


def test_chain_topology_is_still_available():
    """--chain (and env_templated's default, which the experiment runner's chain links rely on) write the hops
    master<>worker0<>...<>worker3<>master."""
    compose, _ = compose_workers.build(4, rate=2.0, cpus=0.25, topology="chain")
    names = [name for name, _ in netem_links(compose["services"])]
    assert names == ["master<>worker0", "worker0<>worker1", "worker1<>worker2", "worker2<>worker3", "worker3<>master"]
    with pytest.raises(ValueError, match="topology"):
        compose_workers.build(2, rate=1, cpus=1, topology="ring")


def test_per_link_rates_and_per_worker_caps():
    """Lists give each worker's link (and the master's) its rate and each worker its cap; a list of the wrong length
    is refused."""
    compose, cfg = compose_workers.build(3, rate=[1, 2, 4, 8], cpus=[0.5, 0.25, 0.125])
    services = compose["services"]
    rates = {name: settings.split(",")[0] for name, settings in netem_links(services)}
    assert rates["master>worker0"] == rates["worker2>worker0"] == "rate=1"
    assert rates["worker0>worker2"] == rates["worker1>worker2"] == "rate=4"
    assert rates["worker1>master"] == "rate=8" and cfg["bandwidth"] == [1.0, 2.0, 4.0]
    assert [services["worker%d" % i]["cpus"] for i in range(3)] == [0.5, 0.25, 0.125]
    assert services["worker1"]["environment"]["CNNVIDEO_HOST"] == "worker1-cpus0.25"
    with pytest.raises(ValueError, match="3 link rates for 4"):
        compose_workers.build(3, rate=[1, 2, 4], cpus=0.5)


def test_env_templated_workers_are_listed_copies_of_the_joining_worker_service():
    """The env-templated build (the experiment runner's): worker0..n-1 are docker-compose.yml's one joining `worker`
    service as listed workers (`-i <i>`, no replicas, each its own cap variable); its links use the per-hop .env names
    HOP0_*, HOP1_*, RET_*, and for 4 workers the names run on (HOP3_RATE, WORKER3_CPUS). The default keeps the chain's
    hops."""
    with open(os.path.join(ROOT, "docker-compose.yml")) as fh:
        committed = yaml.safe_load(fh)["services"]
    two = compose_workers.env_templated(2, topology="pool")["services"]
    assert two["trainer"] == committed["trainer"] and "worker" not in two
    assert two["worker1"]["command"] == ["worker", "-c", "/app/configs/${CONFIG:-compose.yml}", "-i", "1"]
    assert "deploy" not in two["worker1"] and two["worker1"]["cpus"] == "${WORKER1_CPUS:-0.5}"
    assert "--min-workers" not in two["master"]["command"]
    chain = compose_workers.env_templated(2)["services"]
    assert [c.split(",")[:2] for c in chain["netem"]["command"] if c != "--link"] == \
        [["master<>worker0", "rate=${HOP0_RATE:-3}"], ["worker0<>worker1", "rate=${HOP1_RATE:-3}"],
         ["worker1<>master", "rate=${RET_RATE:-3}"]]
    four = compose_workers.env_templated(4)["services"]
    assert four["worker3"]["cpus"] == "${WORKER3_CPUS:-0.5}" and "rate=${HOP3_RATE:-3}" in four["netem"]["command"][7]
    pool = compose_workers.env_templated(4, topology="pool")["services"]
    assert "worker0>worker3,rate=${HOP3_RATE:-3},delay=${HOP3_DELAY_MS:-0}" in "".join(pool["netem"]["command"])
    assert compose_workers.hop_rate_vars(4) == ["HOP0_RATE", "HOP1_RATE", "HOP2_RATE", "HOP3_RATE", "RET_RATE"]


def test_stack_pool_joins_and_scales_and_the_pi_files_grow_with_n(monkeypatch):
    """docker-stack.yml runs one joining `worker` service (WORKERS replicas, one per worker-labelled node, the
    master waiting for WORKERS) and its helper shapes by role with docker-compose.yml's links; build_pi(4) places
    listed workers worker0..3 on nodes labelled worker0..3 (no join, no token), its helper keeps the role links, the
    Pi compose file runs 4 workers on the generated config and the config continues swarm.yml's addresses."""
    with open(os.path.join(ROOT, "docker-stack.yml")) as fh:
        stack = yaml.safe_load(fh)["services"]
    with open(os.path.join(ROOT, "docker-compose.yml")) as fh:
        compose = yaml.safe_load(fh)["services"]
    links = [c for c in stack["netem"]["command"] if ">" in c]
    assert links == [c for c in compose["netem"]["command"] if c != "--link"]
    assert [link.split(",")[0] for link in links] == ["master>worker", "worker>worker", "worker>master"]
    worker = stack["worker"]
    assert worker["deploy"]["replicas"] == "${WORKERS:-2}"
    assert worker["deploy"]["placement"] == {"constraints": ["node.labels.cnnvideo.worker == true"],
                                             "max_replicas_per_node": 1}
    assert worker["command"][-2:] == ["--join", "${MASTER_IP:?set MASTER_IP to the master device's address}:50070"]
    assert worker["environment"]["CNNVIDEO_JOIN_TOKEN"].startswith("${JOIN_TOKEN:?")
    assert "-" not in worker["environment"]["CNNVIDEO_JOIN_TOKEN"].partition(":?")[2]  # docker 20.10 splits there
    assert stack["master"]["command"][-2:] == ["--min-workers", "${WORKERS:-2}"]
    monkeypatch.setenv("CNNVIDEO_JOIN_TOKEN", "a-token-of-16-characters")  # what the stack gives every role
    swarm = config.load(os.path.join(ROOT, "configs", "swarm.yml"), check_files=False)
    assert swarm.cluster.workers == [] and swarm.cluster.join.endswith(":50070")
    pi, stack4, cfg = compose_workers.build_pi(4, rate=2.0)
    assert sorted(pi["services"]) == ["master", "trainer", "worker0", "worker1", "worker2", "worker3"]
    assert pi["services"]["worker3"]["command"] == ["worker", "-c", "/app/configs/${PI_CONFIG:-compose-w4-pi.yml}",
                                                     "-i", "3"]
    services = stack4["services"]
    assert list(services) == ["trainer", "worker0", "worker1", "worker2", "worker3", "master", "netem"]
    assert services["worker2"]["deploy"]["placement"]["constraints"] == ["node.labels.cnnvideo.role == worker2"]
    assert "replicas" not in services["worker2"]["deploy"]
    assert services["worker2"]["command"] == ["worker", "-c", "/app/configs/cluster.yml", "-i", "2"]
    assert "--min-workers" not in services["master"]["command"]
    assert not any("JOIN_TOKEN" in str(svc) for svc in services.values())
    assert services["netem"]["command"] == stack["netem"]["command"]  # --config, --address master=..., role links
    assert stack4["configs"]["cluster"]["file"] == "./configs/${PI_CONFIG:-compose-w4-pi.yml}"
    loaded = config.from_dict(cfg, check_files=False)
    assert not loaded.cluster.join
    assert loaded.cluster.workers == ["192.168.1.21:50060", "192.168.1.22:50061", "192.168.1.23:50062",
                                      "192.168.1.24:50063"] and loaded.bandwidth == [2.0] * 4


def test_n_comes_from_workers_in_env(tmp_path, monkeypatch):
    """With no number, N is WORKERS from the environment, else from .env (the committed one says 2)."""
    monkeypatch.delenv("WORKERS", raising=False)
    assert compose_workers.env_workers() == 2
    env = tmp_path / ".env"
    env.write_text("FRAMES=20\nWORKERS=5\n")
    assert compose_workers.env_workers(str(env)) == 5
    monkeypatch.setenv("WORKERS", "3")
    assert compose_workers.env_workers(str(env)) == 3


def test_written_compose_file_validates(tmp_path):
    """The script writes files that `docker compose config` accepts (when the compose plugin exists): N from WORKERS,
    the compose file, and with --pi the Pi compose file and the stack; the configs load."""
    env = dict(os.environ, WORKERS="3")
    proc = subprocess.run([sys.executable, "scripts/compose_workers.py", "--pi"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    written = ["docker-compose.w3.yml", "configs/compose-w3.yml", "docker-compose.w3.pi.yml",
               "docker-compose.w3.stack.yml", "configs/compose-w3-pi.yml"]
    try:
        assert proc.returncode == 0, proc.stderr
        for rel in written:
            assert rel in proc.stdout, proc.stdout
        path = os.path.join(ROOT, "docker-compose.w3.yml")
        with open(path) as fh:
            assert "worker2" in yaml.safe_load(fh)["services"]
        for name in ("compose-w3.yml", "compose-w3-pi.yml"):
            assert config.load(os.path.join(ROOT, "configs", name), check_files=False).n_workers == 3
        docker = shutil.which("docker")
        if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
            for rel in written[0], written[2], written[3]:
                check = subprocess.run([docker, "compose", "-f", rel, "config", "-q"], cwd=ROOT, capture_output=True,
                                       text=True, env=dict(env, MASTER_IP="192.168.1.20"))
                assert check.returncode == 0, (rel, check.stderr)
    finally:
        for rel in written:
            if os.path.exists(os.path.join(ROOT, rel)):
                os.remove(os.path.join(ROOT, rel))


def camera_cluster(**cameras):
    """configs/compose.yml as a cluster config of the given cameras (its top-level video and camera name left out)."""
    with open(os.path.join(ROOT, "configs", "compose.yml")) as fh:
        cluster = yaml.safe_load(fh)
    del cluster["video"], cluster["events"]["camera"]
    compose_workers.listed_pool(cluster)
    cluster["cluster"]["workers"] = ["worker0:50060", "worker1:50060"]
    cluster["cameras"] = cameras
    return cluster


def test_several_cameras_get_one_master_each_shaped_and_a_report_service():
    """Two cameras: master-door and master-yard instead of the master, each with the master's cap, its own config
    file and output folder, each shaped into every worker at that worker's rate and from every worker at the return
    link's; a one-shot report service waits for both; --media is mounted in the trainer and the masters only."""
    cluster = camera_cluster(door={"video": "/usr/share/cnnvideo/vtest.avi"},
                             yard={"video": "/app/media/yard.avi", "weight": 2})
    compose, cfg, files = compose_workers.build_cameras(3, [1, 2, 4, 8], 0.5, cluster, media="/srv/clips")
    services = compose["services"]
    assert "master" not in services and {"master-door", "master-yard", "report"} <= set(services)
    for name in ("door", "yard"):
        svc = services["master-" + name]
        assert svc["command"][:5] == ["master", "-c", "/app/configs/compose-w3-%s.yml" % name, "--out",
                                      "/app/out/" + name]
        assert svc["cpus"] == "${MASTER_CPUS:-1.0}" and svc["user"] == "0"
        assert set(svc["depends_on"]) == {"trainer", "netem", "worker0", "worker1", "worker2"}
        assert "/srv/clips:/app/media:ro" in svc["volumes"] and "${OUT_DIR:-./out}:/app/out" in svc["volumes"]
    assert "/srv/clips:/app/media:ro" in services["trainer"]["volumes"]
    assert all("/srv/clips:/app/media:ro" not in services["worker%d" % i]["volumes"] for i in range(3))
    report = services["report"]
    assert report["depends_on"] == {m: {"condition": "service_completed_successfully"}
                                    for m in ("master-door", "master-yard")}
    assert report["command"] == ["-c", "/app/configs/compose-w3.yml", "--out", "/app/out"]
    assert "cnnvideo.tools.camera_report" in report["entrypoint"][2] and report["image"] == "cnnvideo/node"

    sys.path.insert(0, os.path.join(ROOT, "services"))
    from netem.links import find_link, parse_links

    links = parse_links([c for c in services["netem"]["command"] if c != "--link"])
    assert len(links) == 3 * 4 + 2 * 3  # into each worker from 2 masters + 2 workers; results to each master
    for master in ("master-door", "master-yard"):
        for i, rate in enumerate([1, 2, 4]):
            assert find_link(links, master, "worker%d" % i).shape.rate == rate
            assert find_link(links, "worker%d" % i, master).shape.rate == 8
    assert not [lk for lk in links if "master" in (lk.src, lk.dst)]

    # the trainer and workers read the cluster config (the trainer fits on the first camera's video)
    assert cfg["trainer"] == {"frames": 40, "video": "/usr/share/cnnvideo/vtest.avi"}
    loaded = config.from_dict(cfg, check_files=False)
    assert loaded.camera_names() == ["door", "yard"] and loaded.n_workers == 3
    # each master a single camera: its video, name, folder and window (in_flight 3 x weight / mean weight 1.5)
    assert sorted(files) == ["door", "yard"]
    for name, video, window in (("door", "/usr/share/cnnvideo/vtest.avi", 2), ("yard", "/app/media/yard.avi", 4)):
        file_name, mapping = files[name]
        assert file_name == "compose-w3-%s.yml" % name and "cameras" not in mapping
        assert mapping["fallback"] == cluster["fallback"]  # resolved by the master in its image, not here
        one = config.from_dict(mapping, check_files=False)
        config.require_one_camera(one)
        assert (one.video, one.events.camera, one.out, one.in_flight) == (video, name, "/app/out/" + name, window)
        assert one.cluster.workers == loaded.cluster.workers and one.trainer.video == "/usr/share/cnnvideo/vtest.avi"


def test_chain_links_reach_every_master_and_one_camera_keeps_one_master():
    """--chain with two cameras: each master's two hops, the workers' hops once. A single camera (or none) is the one
    master's run: build_cameras refuses it."""
    compose, _, _ = compose_workers.build_cameras(
        2, 3.0, 0.5, camera_cluster(a={"video": "/v/a.avi"}, b={"video": "/v/b.avi"}), topology="chain")
    names = [name for name, _ in netem_links(compose["services"])]
    assert names == ["master-a<>worker0", "worker0<>worker1", "worker1<>master-a", "master-b<>worker0",
                     "worker1<>master-b"]
    with pytest.raises(ValueError, match="1 camera"):
        compose_workers.build_cameras(2, 3.0, 0.5, camera_cluster(a={"video": "/v/a.avi"}))
    with pytest.raises(ValueError, match="cameras.b.weight"):
        compose_workers.build_cameras(2, 3.0, 0.5, camera_cluster(a={"video": "/v/a.avi"},
                                                                  b={"video": "/v/b.avi", "weight": 0}))


def test_cameras_cli_writes_a_compose_file_and_configs_that_validate(tmp_path):
    """--config FILE listing cameras: the compose file, the cluster config and one config per camera, named after
    FILE, the configs load, the run line follows the report service, `docker compose config` accepts the file."""
    source = tmp_path / "camtest.yml"
    source.write_text(yaml.safe_dump(camera_cluster(door={"video": "/usr/share/cnnvideo/vtest.avi"},
                                                    yard={"video": "/app/media/yard.avi"})))
    proc = subprocess.run([sys.executable, "scripts/compose_workers.py", "2", "--config", str(source), "--media",
                           "./media"], cwd=ROOT, capture_output=True, text=True)
    written = ["docker-compose.w2-camtest.yml", "configs/compose-w2-camtest.yml", "configs/compose-w2-camtest-door.yml",
               "configs/compose-w2-camtest-yard.yml"]
    try:
        assert proc.returncode == 0, proc.stderr
        for rel in written:
            assert rel in proc.stdout, proc.stdout
        assert "--exit-code-from report report" in proc.stdout
        assert config.load(os.path.join(ROOT, written[1]), check_files=False).n_workers == 2
        for name in ("door", "yard"):
            one = config.load(os.path.join(ROOT, "configs", "compose-w2-camtest-%s.yml" % name), check_files=False)
            assert one.events.camera == name and one.camera_names() == [name]
        docker = shutil.which("docker")
        if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
            check = subprocess.run([docker, "compose", "-f", written[0], "config", "-q"], cwd=ROOT,
                                   capture_output=True, text=True)
            assert check.returncode == 0, check.stderr
    finally:
        for rel in written:
            if os.path.exists(os.path.join(ROOT, rel)):
                os.remove(os.path.join(ROOT, rel))


def test_camera_report_combines_the_cameras_reports(tmp_path, capsys):
    """tools/camera_report.py (the report service): out/report.json with both cameras' sections, their shares of the
    total fps; exit 0 when both completed every frame, 1 naming the camera that did not; a missing report is down."""
    from cnnvideo.results import report as rpt
    from cnnvideo.tools import camera_report

    cluster = camera_cluster(door={"video": "/v/door.avi"}, yard={"video": "/v/yard.avi", "weight": 3})
    cluster.update(model="alexnet", weights="random", fallback=[], trainer={"video": "/v/door.avi"})
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(cluster))

    def write(name, completed, fps):
        (tmp_path / name).mkdir(exist_ok=True)
        report = rpt.RunReport(frames=4, completed=completed, lost=4 - completed, model="alexnet", mode="delta",
                               scheduler="das", workers=["worker0:50060", "worker1:50060"], throughput_fps=fps,
                               latency_s={"p50": 0.1, "p95": 0.2}, hops=[], plan=[], max_abs_err=0.0, wall_s=1.0,
                               stages={}, extra={"camera": name})
        rpt.write_json(report, str(tmp_path / name / "report.json"))

    write("door", 4, 1.0)
    write("yard", 4, 3.0)
    assert camera_report.main(["-c", str(path), "--out", str(tmp_path)]) == 0
    combined = json.loads((tmp_path / "report.json").read_text())
    assert sorted(combined["cameras"]) == ["door", "yard"] and combined["total_fps"] == 4.0
    assert combined["cameras"]["yard"]["share"] == 0.75 and combined["cameras"]["yard"]["weight"] == 3
    assert combined["cameras"]["door"]["status"] == "completed" and combined["workers"] == 2
    assert "total fps 4.0" in capsys.readouterr().out
    write("yard", 3, 3.0)
    assert camera_report.main(["-c", str(path), "--out", str(tmp_path)]) == 1
    assert "yard" in capsys.readouterr().err
    os.remove(str(tmp_path / "door" / "report.json"))
    assert camera_report.main(["-c", str(path), "--out", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "report.json").read_text())["cameras"]["door"]["status"] == "down"
