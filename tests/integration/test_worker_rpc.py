"""Two real worker processes driven by the test as a stand-in master: plan changes, out-of-order arrival, bad input."""
from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

from .helpers import REPO, base_config, env, master_settings, stop_procs, write_config

pytestmark = pytest.mark.slow

PLANS = [[0, 5, 23], [0, 5, 23], [0, 12, 23], [0, 12, 23], [0, 0, 23], [0, 23, 23], [0, 23, 23], [0, 3, 23],
         [0, 3, 23], [0, 12, 23], [0, 12, 23], [0, 12, 23]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, synthetic_video):
    """Two workers on free ports; yields (config, stubs, addresses)."""
    from cnnvideo import config
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
    from cnnvideo.rpc import net

    tmp = tmp_path_factory.mktemp("workers")
    ports = [net.free_port(), net.free_port()]
    addrs = ["127.0.0.1:%d" % p for p in ports]
    data = base_config(synthetic_video, str(tmp / "cache"), cluster={"trainer": "127.0.0.1:%d" % net.free_port(),
                                                                    "workers": addrs})
    path = write_config(str(tmp / "w.yml"), data)
    procs = [subprocess.Popen([sys.executable, "-m", "cnnvideo", "worker", "-c", path, "-i", str(i)], env=env(),
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(str(tmp / ("w%d.log" % i)), "w"))
             for i in range(2)]
    try:
        for a, p in zip(addrs, procs):
            assert net.wait_healthy(a, 300, alive=lambda p=p: p.poll() is None), open(str(tmp / "w0.log")).read()
        chans = [net.channel(a, 64 << 20) for a in addrs]
        yield config.load(path), [pb_grpc.WorkerStub(c) for c in chans], addrs
        for c in chans:
            c.close()
    finally:
        stop_procs(procs)


def _frames(cfg, n):
    from cnnvideo.video.frames import read_frames

    return list(read_frames(cfg.video, tuple(cfg.frame_size), limit=n))


def _collect(stub, run_id, kind, sink, stop):
    from cnnvideo.rpc import cnnvideo_pb2 as pb

    call = getattr(stub, kind)(pb.StreamRequest(run_id=run_id))
    stop.append(call)
    try:
        for item in call:
            sink.append(item)
    except grpc.RpcError:
        pass


def test_plan_changes_and_out_of_order_arrivals(cluster):
    from cnnvideo.model.engines.torch_engine import TorchStage
    from cnnvideo.model.loading import load_graph
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.wire.hop import HopReceiver, HopSender

    cfg, stubs, _ = cluster
    info = stubs[0].Info(pb.Empty(), timeout=30)
    assert len(info.cuts) == 24 and info.model == "alexnet"
    costs = stubs[1].Costs(pb.CostRequest(settings=master_settings(cfg)), timeout=60)
    assert list(costs.seconds.shape) == [23]
    assert list(costs.encode.shape) == [24] and list(costs.decode.shape) == [24] and costs.wall_per_cpu > 0
    assert costs.cfs_quota_s >= 0 and (costs.cfs_quota_s == 0 or costs.cfs_period_s > 0)
    # rescaled: one factor for all
    now = stubs[1].Costs(pb.CostRequest(iters=1, rescale=True, settings=master_settings(cfg)), timeout=60)
    from cnnvideo.rpc import convert

    ratio = convert.from_array(now.seconds) / convert.from_array(costs.seconds)
    assert np.all(np.isfinite(ratio)) and np.ptp(ratio) < 1e-9 * ratio.max() and ratio[0] > 0
    run_id = "plans"
    for s in stubs:
        s.StartRun(pb.RunSetup(run_id=run_id, mode="delta", n_workers=2, settings=master_settings(cfg)), timeout=30)
    results, stages, calls = [[], []], [[], []], []
    threads = [threading.Thread(target=_collect, args=(stubs[w], run_id, k, sink[w], calls), daemon=True)
               for w in range(2) for k, sink in (("Results", results), ("Stages", stages))]
    for t in threads:
        t.start()
    frames = _frames(cfg, len(PLANS))
    sender = HopSender()
    tasks = []
    for f, (frame, cuts) in enumerate(zip(frames, PLANS)):
        data = sender.encode(frame[None], keyframe=(f == 0))
        tasks.append(pb.FrameTask(run_id=run_id, frame_id=f, cuts=cuts, keyframe=[f == 0, False], epoch=[0, 0],
                                  hop=0, seq=f, route=[0, 1], payload=pb.Tensor(cut=0, data=data)))
    order = list(range(len(tasks)))
    random.Random(3).shuffle(order)  # arrivals out of order: the worker must run them by sequence number
    with futures.ThreadPoolExecutor(4) as pool:
        for fut in [pool.submit(stubs[0].Process, tasks[i], timeout=30) for i in order]:
            assert fut.result().ok
    deadline = 120
    t0 = time.time()
    while sum(len(r) for r in results) < len(tasks) and time.time() - t0 < deadline:
        time.sleep(0.1)
    for c in calls:
        c.cancel()
    assert sum(len(r) for r in results) == len(tasks), [s.error for w in stages for s in w if s.error]
    outputs = {}
    for w in range(2):
        rx = HopReceiver(64 << 20)
        for res in results[w]:
            outputs[res.frame_id] = (w, np.array(rx.decode(res.output.data)))
    graph = load_graph(cfg)
    ex = TorchStage(graph, 0, len(graph.cuts) - 1)
    for f, frame in enumerate(frames):
        w, out = outputs[f]
        expected_worker = 0 if PLANS[f][1] == 23 else 1
        assert w == expected_worker, (f, PLANS[f])
        assert np.max(np.abs(out - ex.run(frame))) <= 1e-4
    # a new cut into worker 1 is a keyframe; the same cut again is an update
    kf = {r.frame_id: r.keyframe_out for r in stages[0] if r.hop_out == 1}
    assert kf[0] and not kf[1] and kf[2] and not kf[3] and kf[7] and kf[9]
    for s in stubs:
        s.EndRun(pb.StreamRequest(run_id=run_id), timeout=10)


def test_bad_input_gets_error_status_and_worker_keeps_serving(cluster):
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import net

    cfg, stubs, addrs = cluster
    stubs[0].StartRun(pb.RunSetup(run_id="bad", mode="delta", n_workers=2, settings=master_settings(cfg)), timeout=30)
    cases = [
        (pb.FrameTask(run_id="nope", cuts=[0, 5, 23], hop=0, route=[0, 1]), grpc.StatusCode.FAILED_PRECONDITION),
        (pb.FrameTask(run_id="bad", cuts=[0, 5], hop=0, route=[0]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.FrameTask(run_id="bad", cuts=[0, 9, 5], hop=0, route=[0, 1]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.FrameTask(run_id="bad", cuts=[0, 5, 23], hop=1, route=[0, 1]), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.FrameTask(run_id="bad", cuts=[0, 5, 23], hop=0, route=[0, 1], payload=pb.Tensor(cut=4)),
         grpc.StatusCode.INVALID_ARGUMENT),
        (pb.FrameTask(run_id="bad", cuts=[0, 5, 23], hop=0), grpc.StatusCode.INVALID_ARGUMENT),  # no route
    ]
    for task, code in cases:
        with pytest.raises(grpc.RpcError) as err:
            stubs[0].Process(task, timeout=10)
        assert err.value.code() == code, err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stubs[0].StartRun(pb.RunSetup(run_id="x", mode="sideways", n_workers=2, settings=master_settings(cfg)),
                          timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # garbage payload: refused at once from its headers (nothing queued)
    with pytest.raises(grpc.RpcError) as err:
        stubs[0].Process(pb.FrameTask(run_id="bad", cuts=[0, 5, 23], hop=0, seq=0, route=[0, 1],
                                      payload=pb.Tensor(cut=0, data=b"\x00garbage" * 10)), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad payload" in err.value.details()
    # headers fine but undecodable in sequence (an update with no keyframe before it): the run fails with a
    # reported error, the process keeps serving
    from cnnvideo.wire.hop import HopSender

    frame = np.zeros((1,) + tuple(cfg.frame_size) + (3,), np.uint8)
    update = bytearray(HopSender().encode(frame, keyframe=True))
    update[3] = 2  # hop kind ADD256
    stages, calls = [], []
    t = threading.Thread(target=_collect, args=(stubs[0], "bad", "Stages", stages, calls), daemon=True)
    t.start()
    stubs[0].Process(pb.FrameTask(run_id="bad", cuts=[0, 5, 23], hop=0, seq=0, route=[0, 1],
                                  payload=pb.Tensor(cut=0, data=bytes(update))), timeout=10)
    t0 = time.time()
    while not stages and time.time() - t0 < 20:
        time.sleep(0.1)
    for c in calls:
        c.cancel()
    assert stages and stages[0].error, stages
    assert net.check_health(addrs[0])
    assert stubs[0].Info(pb.Empty(), timeout=10).worker_id == 0
    stubs[0].EndRun(pb.StreamRequest(run_id="bad"), timeout=10)


def test_start_run_builds_the_stage_of_its_warm_plan_before_it_answers(cluster):
    """StartRun with a warm plan: each worker builds its stage of that plan before it answers (its log says so, so
    the first frame does not pay for an export); a warm plan that does not fit the cluster is INVALID_ARGUMENT
    naming it."""
    import os

    from cnnvideo.rpc import cnnvideo_pb2 as pb

    cfg, stubs, _ = cluster
    for s in stubs:
        s.StartRun(pb.RunSetup(run_id="warm", mode="delta", n_workers=2, settings=master_settings(cfg),
                               warm=pb.StagePlan(cuts=[0, 7, 23], stage_of=[0, 1])), timeout=60)
    folder = os.path.dirname(os.path.expanduser(cfg.cache_dir))
    logs = [open(os.path.join(folder, "w%d.log" % w)).read() for w in range(2)]
    assert "worker 0: stage 0..7 ready on torch-fp32 before the run" in logs[0]
    assert "worker 1: stage 7..23 ready on torch-fp32 before the run" in logs[1]
    with pytest.raises(grpc.RpcError) as err:
        stubs[0].StartRun(pb.RunSetup(run_id="warm2", mode="delta", n_workers=2, settings=master_settings(cfg),
                                      warm=pb.StagePlan(cuts=[0, 30, 23], stage_of=[0, 1])), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "warm:" in err.value.details()


def test_prepare_builds_a_stage_in_the_background_and_says_when_it_is_ready(cluster):
    """Prepare (a re-plan's new cut): a stage the worker never built answers not ready at once and builds in the
    background, later answers ready; an empty stage is ready at once; a plan that does not fit the cluster is
    INVALID_ARGUMENT naming it."""
    import os

    from cnnvideo.rpc import cnnvideo_pb2 as pb

    cfg, stubs, _ = cluster
    plan = [0, 9, 23]  # no other test of this module runs stage 0..9 or 9..23
    first = [s.Prepare(pb.PrepareRequest(plan=pb.StagePlan(cuts=plan, stage_of=[0, 1])), timeout=30) for s in stubs]
    assert [r.ready for r in first] == [False, False] and [r.error for r in first] == ["", ""]
    deadline = time.time() + 120
    while not all(s.Prepare(pb.PrepareRequest(plan=pb.StagePlan(cuts=plan, stage_of=[0, 1])), timeout=30).ready
                  for s in stubs):
        assert time.time() < deadline, "stages of %s not built in 120 s" % plan
        time.sleep(0.2)
    folder = os.path.dirname(os.path.expanduser(cfg.cache_dir))

    def logged(name, text):  # the stage counts as built just before its thread logs so: wait for the line
        while text not in open(os.path.join(folder, name)).read():
            assert time.time() < deadline, "%s lacks %r" % (name, text)
            time.sleep(0.2)
        return True

    assert logged("w0.log", "worker 0: stage 0..9 built in the background on torch-fp32")
    assert logged("w1.log", "worker 1: stage 9..23 built in the background")
    assert stubs[0].Prepare(pb.PrepareRequest(plan=pb.StagePlan(cuts=[0, 0, 23], stage_of=[0, 1])),
                            timeout=30).ready  # w0 only forwards
    for cuts, stage_of in (([0, 30, 23], [0, 1]), ([0, 5], [0, 1]), ([3, 5, 23], [0, 1]), ([0, 5, 23], [0, 0]),
                           ([0, 5, 23], [])):
        with pytest.raises(grpc.RpcError) as err:
            stubs[1].Prepare(pb.PrepareRequest(plan=pb.StagePlan(cuts=cuts, stage_of=stage_of)), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "prepare:" in err.value.details()
