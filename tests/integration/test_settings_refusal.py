"""Roles refuse requests whose result-changing settings differ from their own, naming the key (real processes).

The compose experiments used to run the trainer and workers on the base config while each master run got its
variant: runs with an input threshold planned with predictors fitted at threshold 0, silently."""
from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from .helpers import REPO, base_config, cnnvideo, env, master_settings, stop_procs, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def servers(tmp_path_factory, synthetic_video):
    """A trainer on the base config (input threshold 0) and two workers on the variant (threshold 2)."""
    from cnnvideo import config
    from cnnvideo.rpc import net

    tmp = tmp_path_factory.mktemp("settings")
    cluster = {"trainer": "127.0.0.1:%d" % net.free_port(),
               "workers": ["127.0.0.1:%d" % net.free_port(), "127.0.0.1:%d" % net.free_port()]}
    base = base_config(synthetic_video, str(tmp / "cache"), cluster=cluster, frame_size=[64, 96], frames=6)
    variant = dict(base, delta={"input_threshold": 2})
    paths = {"base": write_config(str(tmp / "base.yml"), base), "variant": write_config(str(tmp / "t2.yml"), variant)}
    argv = {"trainer": ["trainer", "-c", paths["base"]], "w0": ["worker", "-c", paths["variant"], "-i", "0"],
            "w1": ["worker", "-c", paths["variant"], "-i", "1"]}
    addrs = {"trainer": cluster["trainer"], "w0": cluster["workers"][0], "w1": cluster["workers"][1]}
    logs = {n: str(tmp / (n + ".log")) for n in argv}
    procs = {n: subprocess.Popen([sys.executable, "-m", "cnnvideo"] + a, env=env(), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=open(logs[n], "w")) for n, a in argv.items()}
    try:
        for n, a in addrs.items():
            assert net.wait_healthy(a, 300, alive=lambda p=procs[n]: p.poll() is None), open(logs[n]).read()[-3000:]
        yield {k: config.load(p) for k, p in paths.items()}, paths, addrs
    finally:
        stop_procs(procs.values())


def test_trainer_refuses_a_master_with_another_input_threshold(servers):
    """GetPredictors with a master's settings at input threshold 2 from a trainer fitted at 0: FAILED_PRECONDITION
    'delta.input_threshold: master 2, trainer 0'; the same request at 0 gets the predictors."""
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
    from cnnvideo.rpc import net

    cfgs, _, addrs = servers
    with net.channel(addrs["trainer"], 64 << 20) as chan:
        stub = pb_grpc.TrainerStub(chan)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetPredictors(pb.PredictorRequest(settings=master_settings(cfgs["variant"], trainer=True)), timeout=60)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details() == "delta.input_threshold: master 2, trainer 0"
        ok = stub.GetPredictors(pb.PredictorRequest(settings=master_settings(cfgs["base"], trainer=True)), timeout=120)
        assert len(ok.arrays) > 0


def test_worker_refuses_costs_and_start_run_with_other_settings(servers):
    """A worker at threshold 2 refuses Costs and StartRun from a master at 0, naming the key; agrees at 2."""
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
    from cnnvideo.rpc import net

    cfgs, _, addrs = servers
    with net.channel(addrs["w1"], 64 << 20) as chan:
        stub = pb_grpc.WorkerStub(chan)
        for call, req in ((stub.Costs, pb.CostRequest(settings=master_settings(cfgs["base"]))),
                          (stub.StartRun, pb.RunSetup(run_id="r", mode="delta", n_workers=2,
                                                      settings=master_settings(cfgs["base"])))):
            with pytest.raises(grpc.RpcError) as err:
                call(req, timeout=60)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.value.details() == "delta.input_threshold: master 0, w1 2"
        assert stub.Costs(pb.CostRequest(settings=master_settings(cfgs["variant"])), timeout=60).worker_id == 1


def test_master_run_against_a_trainer_of_other_settings_fails_naming_the_key(servers, tmp_path):
    """`cnnvideo master` on the variant (workers agree, the trainer does not) stops before the run with the key
    named, non-zero, and writes no report."""
    _, paths, _ = servers
    proc = cnnvideo(["master", "-c", paths["variant"], "--out", str(tmp_path / "out")], timeout=300)
    assert proc.returncode != 0
    assert "delta.input_threshold: master 2, trainer 0" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out" / "report.json").exists()
