"""Experiment runner pieces that need no Docker engine: the compose project lock, the number of workers from the
spec, and the compose backend's project for N workers (checked with `docker compose config` when the plugin is
there), and the rows and tables of the summary."""
import json
import os
import shutil
import subprocess

import pytest
import yaml

from cnnvideo import config
from cnnvideo.tools.experiment import ComposeBackend, ExperimentError
from cnnvideo.tools.experiment import backends as backends_mod

ROOT = backends_mod.REPO


def test_second_experiment_on_one_compose_project_is_refused(tmp_path):
    """While one runner holds a compose project, another one's start is refused with the holder named (two
    runners on one project would recreate each other's containers mid-run); after unlock it is free again."""
    project = "cnnvideo-locktest-%d" % id(tmp_path)
    first = ComposeBackend({}, str(tmp_path / "a"), project=project)
    second = ComposeBackend({}, str(tmp_path / "b"), project=project)
    first.lock()
    try:
        with pytest.raises(ExperimentError, match="in use by another experiment.*pid"):
            second.lock()
    finally:
        first.unlock()
    second.lock()
    second.unlock()


def test_workers_come_from_the_spec(tmp_path):
    """n_workers: the spec's `workers`, else base.cluster.workers, else 2; bad values are refused; a run config
    gets one bandwidth per hop."""
    from cnnvideo.tools.experiment import spec as spec_mod

    assert spec_mod.n_workers({}) == 2
    assert spec_mod.n_workers({"base": {"cluster": {"workers": ["a:1", "b:2", "c:3"]}}}) == 3
    assert spec_mod.n_workers({"workers": 4}) == 4
    for bad in ({"workers": 0}, {"workers": "3"}, {"workers": 2, "base": {"cluster": {"workers": ["a:1"]}}}):
        with pytest.raises(ExperimentError, match="workers"):
            spec_mod.n_workers(bad)
    spec = {"workers": 3, "frames": 4, "runs": [{"scheduler": "lbs", "bandwidth": 2}]}
    r = spec_mod.expand(spec)[-1]
    cfg = spec_mod.run_config(spec, r)
    assert cfg["bandwidth"] == [2.0, 2.0, 2.0] and len(cfg["cluster"]["workers"]) == 3


def _compose_plugin() -> bool:
    docker = shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "compose", "version"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL).returncode == 0


def test_compose_backend_project_has_the_spec_s_workers(tmp_path):
    """A 3-worker spec: the backend writes a compose file with worker0..2 (scripts/compose_workers.py's), an
    override and a cluster config naming all three (valid for the roles though the spec's base sets no
    bandwidth), and sets one rate variable per hop and the caps the spec gives; `docker compose config` resolves
    them to 4 shaped links at the run's rates and the caps."""
    spec = {"workers": 3, "cpus": {"worker2": 0.25, "master": 1.0}}
    b = ComposeBackend(spec, str(tmp_path / "work"), project="cnnvideo-w3test")
    src = os.path.join(b.gen, "src")
    for rel in ("scripts/compose_workers.py", "docker-compose.yml", "configs/compose.yml", ".env"):
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(src, rel))
    b.write_project(src)
    cluster = config.from_dict(yaml.safe_load(open(os.path.join(b.gen, "cluster.yml"))), check_files=False)
    assert cluster.cluster.workers == ["worker0:50060", "worker1:50060", "worker2:50060"]
    assert b.roles_key({}) == b.roles_key({"bandwidth": [3.0, 3.0, 3.0]})  # a base without bandwidth is valid
    override = yaml.safe_load(open(os.path.join(b.gen, "override.yml")))["services"]
    assert sorted(override) == ["master", "netem", "trainer", "worker0", "worker1", "worker2"]
    env = b._env([1, 2, 4])
    assert [env[v] for v in ("HOP0_RATE", "HOP1_RATE", "HOP2_RATE", "RET_RATE")] == ["1", "2", "4", "4"]
    assert env["WORKER2_CPUS"] == "0.25" and env["MASTER_CPUS"] == "1"
    with pytest.raises(ExperimentError, match="3 workers need 3 bandwidths"):
        b._env([1, 2])
    if not _compose_plugin():
        pytest.skip("no docker compose plugin to resolve the written project")
    resolved = json.loads(b.compose("config", "--format", "json", rates=[1, 2, 4]))["services"]
    assert sorted(s for s in resolved if s.startswith("worker")) == ["worker0", "worker1", "worker2"]
    assert [resolved["worker%d" % i]["cpus"] for i in range(3)] == [0.5, 0.5, 0.25]
    assert resolved["worker2"]["command"] == ["worker", "-c", "/app/configs/../gen/cluster.yml", "-i", "2"]
    links = [c.split(",")[:2] for c in resolved["netem"]["command"] if c != "--link"]
    assert links == [["master<>worker0", "rate=1"], ["worker0<>worker1", "rate=2"], ["worker1<>worker2", "rate=4"],
                     ["worker2<>master", "rate=4"]]
    assert resolved["worker0"]["image"] == "cnnvideo-exp/node"


def _report(cut: str, dense: int, sent_per_frame: int, agreement: float) -> dict:
    """A two-worker report.json as the master writes it (3 frames, frame 0 a keyframe on w0->w1)."""
    spans = [[0, "m", "send", 0.0, 0.1, 1000], [0, "w0", "send", 0.1, 0.2, dense]]
    for f in (1, 2):
        spans += [[f, "m", "send", 0.0, 0.1, 100], [f, "w0", "send", 0.1, 0.2, sent_per_frame]]
    return {"completed": 3, "throughput_fps": 2.0, "predicted_fps": 2.0, "workers": ["w0", "w1"],
            "cuts": [0, 5, 9], "cut_names": ["input", cut, "classifier.1"], "max_abs_err": 0.0,
            "top1_agreement": agreement, "top5_overlap": 1.0, "spans": spans,
            "hops": [{"name": "m->w0", "bytes_sent": 1200, "bytes_dense": 12000, "messages": 3, "ratio": 0.1},
                     {"name": "w0->w1", "bytes_sent": dense + 2 * sent_per_frame, "bytes_dense": 3 * dense,
                      "messages": 3, "ratio": (dense + 2.0 * sent_per_frame) / (3 * dense)},
                     {"name": "w1->m", "bytes_sent": 12000, "bytes_dense": 12000, "messages": 3, "ratio": 1.0}]}


def test_rows_and_cut_table_carry_agreement_and_bytes_per_cut():
    """Each run's row keeps the report's top-1 agreement and the dense size of each hop; cut_summary groups
    runs by variant and the tensor w0->w1 carries, with steady bytes per frame (frames 1.., the keyframe left
    out) and the lowest agreement of the group, so a lossy variant's cost in bytes and answers shows per cut."""
    from cnnvideo.tools.experiment.summary import IDLE_W1, bytes_summary, cut_summary, summarise

    def run(sched, variant, m):
        return {"id": "%s_%s_m%d_bw3" % (sched, variant, m), "scheduler": sched, "variant": variant,
                "in_flight": m, "bandwidth": 3, "frames": 3}

    rows = [summarise(run("lbs", "delta", 1), _report("features.2", 4000, 3000, 1.0), 0, 1.0),
            summarise(run("das", "delta", 6), _report("features.2", 4000, 2000, 1.0), 0, 1.0),
            summarise(run("das", "t003", 6), _report("features.2", 4000, 400, 0.9), 0, 1.0),
            summarise(run("optimal", "t003", 6), _report("features.14", 800, 100, 1.0), 0, 1.0),
            summarise(run("adaptive", "delta", 1), _report("classifier.1", 4000, 400, 1.0), 0, 1.0)]
    assert rows[2]["top1_agreement"] == 0.9 and rows[0]["dense_w0_w1"] == 4000
    cuts = {(c["variant"], c["cut"]): c for c in cut_summary(rows)}
    assert set(cuts) == {("delta", "features.2"), ("t003", "features.2"), ("t003", "features.14"),
                         ("delta", IDLE_W1)}
    # worker 1 idle in the main plan: w0->w1 only carried other plans' frames, so it has no figures here
    assert cuts[("delta", IDLE_W1)].get("bytes_frame_w0_w1") is None and cuts[("delta", IDLE_W1)]["n"] == 1
    lossless = cuts[("delta", "features.2")]
    assert lossless["n"] == 2 and lossless["runs"] == "lbs m1, das m6"
    assert abs(lossless["steady_w0_w1"] - 0.625) < 1e-9 and lossless["bytes_frame_w0_w1"] == 2500
    assert lossless["bytes_frame_m_w0"] == 100 and lossless["top1_min"] == 1.0
    assert cuts[("t003", "features.2")]["bytes_frame_w0_w1"] == 400
    assert cuts[("t003", "features.2")]["top1_min"] == 0.9
    assert {b["variant"]: b["top1_min"] for b in bytes_summary(rows)} == {"delta": 1.0, "t003": 0.9}


def test_results_md_shows_agreement_per_run_and_the_cut_table(tmp_path):
    """results.md gets the per-cut bytes table and a top-1 agreement column in the all-runs table."""
    from cnnvideo.tools.experiment import summarise, write_results

    r = {"id": "das_delta_m6_bw3", "scheduler": "das", "variant": "delta", "in_flight": 6, "bandwidth": 3,
         "frames": 3}
    rows = [summarise(r, _report("features.4.conv.2", 4000, 2000, 0.967), 0, 1.0)]
    md_path = write_results({"name": "t"}, rows, {}, str(tmp_path), "cnnvideo experiment -c x.yml", {})[0]
    text = open(md_path).read()
    assert "## Bytes per hop at each cut chosen" in text
    assert "| delta | features.4.conv.2 | das m6 | 4000 | 0.5 | 2000 |" in text
    assert "top-1 agr" in text and "| 0.967 |" in text


def test_a_failed_start_releases_the_project(tmp_path):
    """A start that fails after taking the project lock (here: its work folder is a file) takes the project down
    and unlocks it, so the next experiment can start (the runner only calls stop() after a good start)."""
    if not shutil.which("docker"):
        pytest.skip("no docker CLI for the start's compose down")
    project = "cnnvideo-failtest-%d" % id(tmp_path)
    blocker = tmp_path / "work"
    blocker.write_text("not a folder")
    failed = ComposeBackend({}, str(blocker), project=project)
    with pytest.raises(OSError):
        failed.start()
    other = ComposeBackend({}, str(tmp_path / "b"), project=project)
    other.lock()  # free again, though `failed` is still alive
    other.unlock()


def test_workers_and_caps_are_matrix_dimensions():
    """A matrix over workers and caps: each run's id names both, its config has one bandwidth and one address per
    worker and every worker capped at the run's caps (the spec's per-worker caps replaced, master's kept; a
    worker key beyond a shorter chain dropped; null = uncapped); runs of one caps and worker count are grouped
    together (the compose backend re-creates workers between groups); bad values are refused."""
    from cnnvideo.tools.experiment import spec as spec_mod

    spec = {"frames": 4, "cpus": {"master": 1.0, "worker1": 0.5},
            "matrix": {"scheduler": ["edge", "lbs"], "workers": [1, 3], "caps": [0.1, None]}}
    runs = spec_mod.expand(spec)
    ids = [r["id"] for r in runs]
    assert "edge_delta_m3_bw3_w1_c0.1" in ids and "lbs_delta_m3_bw3_w3_cnone" in ids and len(ids) == 8
    by_id = {r["id"]: r for r in runs}
    three = spec_mod.run_config(spec, by_id["lbs_delta_m3_bw3_w3_c0.1"])
    assert three["bandwidth"] == [3.0] * 3 and len(three["cluster"]["workers"]) == 3
    assert three["cpus"] == {"master": 1.0, "workers": 0.1}
    cfg = config.from_dict(three, check_files=False)
    assert [cfg.cpu_share("worker%d" % i) for i in range(3)] == [0.1, 0.1, 0.1]
    one = spec_mod.run_config(spec, by_id["edge_delta_m3_bw3_w1_cnone"])
    assert one["cpus"] == {"master": 1.0} and len(one["cluster"]["workers"]) == 1
    config.from_dict(one, check_files=False)  # worker1's cap would name a worker the 1-worker chain lacks
    two = dict(spec, matrix={"workers": [2]})
    kept = spec_mod.run_config(two, spec_mod.expand(two)[0])
    assert kept["cpus"] == {"master": 1.0, "worker1": 0.5}  # without caps the spec's own stand
    order = [(r.get("workers"), r.get("caps")) for r in spec_mod.grouped(spec, runs)]
    blocks = [o for i, o in enumerate(order) if i == 0 or order[i - 1] != o]  # each (workers, caps) in one block
    assert blocks == list(dict.fromkeys(order)) and len(blocks) == 4
    for bad in ({"workers": [0]}, {"caps": [-1]}, {"caps": ["0.1"]}):
        with pytest.raises(ExperimentError, match="workers|caps"):
            spec_mod.expand(dict(spec, matrix=bad))


def test_compose_backend_resizes_for_a_run_with_another_worker_count(tmp_path):
    """A 2-worker project meeting a 3-worker run writes a 3-worker compose file, rates for 3 hops and the run's
    caps for every worker; `docker compose config` (when the plugin is here) resolves worker2 with the cap."""
    b = ComposeBackend({"cpus": {"master": 1.0}}, str(tmp_path / "work"), project="cnnvideo-resizetest")
    src = os.path.join(b.gen, "src")
    for rel in ("scripts/compose_workers.py", "docker-compose.yml", "configs/compose.yml", ".env"):
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(src, rel))
    b.write_project(src)
    if not shutil.which("docker"):
        pytest.skip("no docker CLI for the resize's compose down")
    b.resize(3)  # its `down` finds nothing of a project never started
    assert b.n == 3 and b.workers == ["worker0", "worker1", "worker2"] and b.rates == [3.0] * 3
    assert b.running_key == "" and b.dirty  # the run's configure_roles and set_rates bring them up
    assert "worker2:" in open(os.path.join(src, "docker-compose.exp.yml")).read()
    b.cpus = {"master": 1.0, "workers": 0.1}
    env = b._env([3, 3, 3])
    assert [env["WORKER%d_CPUS" % i] for i in range(3)] == ["0.1"] * 3 and env["MASTER_CPUS"] == "1"
    assert b.roles_key({"cpus": {"workers": 0.1}}) != b.roles_key({"cpus": {"workers": 0.4}})
    if not _compose_plugin():
        pytest.skip("no docker compose plugin to resolve the written project")
    resolved = json.loads(b.compose("config", "--format", "json", rates=[3, 3, 3]))["services"]
    assert [resolved["worker%d" % i]["cpus"] for i in range(3)] == [0.1, 0.1, 0.1]
