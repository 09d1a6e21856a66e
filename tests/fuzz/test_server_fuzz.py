"""Hostile calls into real servers: a trainer and a 2-worker chain in subprocesses on free 127.0.0.1 ports.

Typed messages with inconsistent fields (unknown run ids, bad plans, wrong hop/sequence, bad enums, payloads
that are truncated, oversize, mis-shaped or garbage) and raw random protobuf bytes sent with generic calls
(bypassing the stubs) go to every RPC of the Worker and Trainer services. Every call has a deadline; every
bad call must end with an error status that is not UNKNOWN (an unhandled handler exception), DEADLINE_EXCEEDED
(a hang) or UNAVAILABLE (a crash). Afterwards every server still answers SERVING, the chain still computes a
valid frame exactly, and each server's peak RSS (VmHWM) grew by a bounded amount.
(The master serves no RPCs: it only dials out.)
"""
from __future__ import annotations

import struct
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.helpers import REPO, base_config, env, master_settings, stop_procs, write_config

MAX_MB = 2  # the servers' message limit: oversize payloads are easy to make
TIMEOUT = 5.0  # deadline of every fuzz call
SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
BAD = ("UNKNOWN", "DEADLINE_EXCEEDED", "UNAVAILABLE")  # a handler crash, a hang, a dead server
COUNTS = {}
RSS_GROWTH_MB = 200  # allowed VmHWM growth of a server over the whole fuzz (limit 2 MB per message)


def _count(name):
    COUNTS[name] = COUNTS.get(name, 0) + 1


def _vmhwm_mb(pid):
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Cluster:
    def __init__(self, cfg, addrs, procs, logs):
        from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
        from cnnvideo.rpc import net

        self.cfg, self.addrs, self.procs, self.logs = cfg, addrs, procs, logs
        self.chans = {name: net.channel(a, 16 << 20) for name, a in addrs.items()}
        self.workers = [pb_grpc.WorkerStub(self.chans["w0"]), pb_grpc.WorkerStub(self.chans["w1"])]
        self.trainer = pb_grpc.TrainerStub(self.chans["trainer"])
        self.settings = master_settings(cfg)  # what a master with this config sends the workers
        self.hwm0 = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, synthetic_video):
    from cnnvideo import config
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import net

    tmp = tmp_path_factory.mktemp("fuzz")
    addrs = {"trainer": "127.0.0.1:%d" % net.free_port(), "w0": "127.0.0.1:%d" % net.free_port(),
             "w1": "127.0.0.1:%d" % net.free_port()}
    data = base_config(synthetic_video, str(tmp / "cache"), trainer={"frames": 8},
                       limits={"max_message_mib": float(MAX_MB), "rpc_timeout_s": 5.0},
                       cluster={"trainer": addrs["trainer"], "workers": [addrs["w0"], addrs["w1"]]})
    path = write_config(str(tmp / "fuzz.yml"), data)
    argv = {"trainer": ["trainer"], "w0": ["worker", "-i", "0"], "w1": ["worker", "-i", "1"]}
    logs = {n: str(tmp / (n + ".log")) for n in argv}
    procs = {n: subprocess.Popen([sys.executable, "-m", "cnnvideo"] + a + ["-c", path], env=env(), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=open(logs[n], "w")) for n, a in argv.items()}
    c = None
    try:
        for n, a in addrs.items():
            assert net.wait_healthy(a, 300, alive=lambda p=procs[n]: p.poll() is None), open(logs[n]).read()[-3000:]
        c = Cluster(config.load(path), addrs, procs, logs)
        deadline = time.time() + 120
        while not c.trainer.Status(pb.Empty(), timeout=10).ready and time.time() < deadline:
            time.sleep(0.3)
        _valid_frames(c, "warmup", 2)  # first inference allocates the executors: count from here
        c.hwm0 = {n: _vmhwm_mb(p.pid) for n, p in procs.items()}
        yield c
    finally:
        if c is not None:
            for ch in c.chans.values():
                ch.close()
        stop_procs(procs.values())
        print("\nserver fuzz cases: %s (total %d)" % (COUNTS, sum(COUNTS.values())))


def _frames(cfg, n, seed=0):
    from cnnvideo.video.frames import synthetic_frames

    return list(synthetic_frames(n, tuple(cfg.frame_size), seed=seed))


def _valid_frames(c, run_id, n, plan=None):
    """Run n frames through w0 -> w1 as the master would; compare the outputs with the whole model in process."""
    from cnnvideo.model.engines.torch_engine import TorchStage
    from cnnvideo.model.loading import load_graph
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.wire.hop import HopReceiver, HopSender

    graph = load_graph(c.cfg)
    k = len(graph.cuts) - 1
    plan = plan or [0, 5, k]
    for s in c.workers:
        assert s.StartRun(pb.RunSetup(run_id=run_id, mode="delta", n_workers=2, settings=c.settings), timeout=30).ok
    results, calls = [], []

    def collect():
        call = c.workers[1].Results(pb.StreamRequest(run_id=run_id), timeout=120)
        calls.append(call)
        try:
            for r in call:
                results.append(r)
        except grpc.RpcError:
            pass

    t = threading.Thread(target=collect, daemon=True)
    t.start()
    frames = _frames(c.cfg, n, seed=5)
    sender = HopSender()
    for f, frame in enumerate(frames):
        data = sender.encode(frame[None], keyframe=(f == 0))
        task = pb.FrameTask(run_id=run_id, frame_id=f, cuts=plan, keyframe=[f == 0, False], epoch=[0, 0], hop=0,
                            seq=f, route=[0, 1], payload=pb.Tensor(cut=0, data=data, keyframe=(f == 0)))
        assert c.workers[0].Process(task, timeout=30).ok
    deadline = time.time() + 120
    while len(results) < n and time.time() < deadline:
        time.sleep(0.05)
    for call in calls:
        call.cancel()
    assert len(results) == n, open(c.logs["w0"]).read()[-2000:] + open(c.logs["w1"]).read()[-2000:]
    ex = TorchStage(graph, 0, k)
    rx = HopReceiver(64 << 20)
    for r, frame in zip(sorted(results, key=lambda r: r.seq), frames):
        got = np.array(rx.decode(r.output.data))
        assert np.allclose(got, ex.run(frame[None]), rtol=1e-4, atol=1e-5)
    for s in c.workers:
        s.EndRun(pb.StreamRequest(run_id=run_id), timeout=10)


def _code(fn, *args, **kw):
    """'OK' or the status code name of a call (with its deadline)."""
    try:
        out = fn(*args, timeout=TIMEOUT, **kw)
        if hasattr(out, "__iter__") and not isinstance(out, (bytes, str)) and not hasattr(out, "ListFields"):
            for _ in out:  # a stream: read it to the end (or the error)
                pass
        return "OK"
    except grpc.RpcError as exc:
        return exc.code().name


# ---------------------------------------------------------------------------------------------- payloads


def _cut_payload(c, draw, cut):
    """A valid hop payload of the tensor at `cut` (keyframe), random values."""
    from cnnvideo.wire.hop import HopSender

    info = c.cut_info[cut]
    seed = draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=info.shape).astype(np.uint8) if info.dtype == "uint8" else \
        np.maximum(rng.standard_normal(info.shape).astype(np.float32), 0)
    return HopSender().encode(x, keyframe=True)


@st.composite
def payloads(draw, c):
    """(payload bytes, whether its headers are surely wrong for cut 0)."""
    kind = draw(st.sampled_from(["valid", "truncated", "random", "hop+random", "flip", "oversize", "wrong-shape",
                                 "wrong-dtype", "field", "empty", "update-no-base"]))
    good = c.payload0
    if kind == "valid":
        return good, False
    if kind == "empty":
        return b"", True
    if kind == "truncated":
        return good[: draw(st.integers(0, len(good) - 1))], True
    if kind == "random":
        return draw(st.binary(max_size=300)), True
    if kind == "hop+random":
        return good[:8] + draw(st.binary(max_size=300)), True
    if kind == "flip":
        b = bytearray(good)
        i = draw(st.integers(0, min(len(b), 80) - 1))
        b[i] ^= 1 << draw(st.integers(0, 7))
        return bytes(b), None  # may or may not be caught by the headers
    if kind == "field":  # a declared size in the codec header
        b = bytearray(good)
        ndim = b[8 + 11]
        off = 8 + 12 + 8 * draw(st.integers(0, ndim + 2))
        struct.pack_into("<Q", b, off, draw(st.sampled_from([0, 1, 3, 96, 1 << 20, 1 << 32, (1 << 64) - 1])))
        return bytes(b), None
    if kind == "oversize":  # a header declaring more than the limit (body empty)
        from cnnvideo.wire import codec

        shape = draw(st.sampled_from([(1, 4096, 4096, 3), (1 << 20, 1 << 20), (1, 96, 128, 3 << 10)]))
        hdr = struct.pack("<4sBBBBBBBB%dQQQQ" % len(shape), codec.MAGIC, codec.VERSION, codec.DENSE, 0, 0, 0, 0, 0,
                          len(shape), *shape, int(np.prod(shape, dtype=object)) % (1 << 64), 0, 0)
        return good[:8] + hdr, True
    if kind == "wrong-shape":
        return _cut_payload(c, draw, draw(st.integers(1, len(c.cut_info) - 1))), True
    if kind == "wrong-dtype":
        from cnnvideo.wire.hop import HopSender

        return HopSender().encode(np.zeros(c.cut_info[0].shape, np.float32), keyframe=True), True
    # an update (ADD256) with no keyframe before it: headers fine, fails at decode (run fails, reported)
    b = bytearray(good)
    b[3] = 2
    return bytes(b), False


@st.composite
def tasks(draw, c):
    from cnnvideo.rpc import cnnvideo_pb2 as pb

    k = len(c.cut_info) - 1
    sure_bad = False
    run_id = draw(st.sampled_from(["fz", "fz", "fz", "", "other", "fz\x00", "x" * 300]))
    sure_bad |= run_id != "fz"
    if draw(st.booleans()):
        cuts = [0, draw(st.integers(0, k)), k]
    else:
        cuts = draw(st.lists(st.integers(-5, k + 5), max_size=5))
        sure_bad |= not (len(cuts) == 3 and cuts[0] == 0 and cuts[-1] == k and cuts[0] <= cuts[1] <= cuts[2])
    hop = draw(st.sampled_from([0, 0, 0, 1, 2, -1, 1 << 30]))
    sure_bad |= hop != 0
    route = draw(st.sampled_from([[0, 1], [0, 1], [0, 1], [], [1, 0], [0], [0, 0], [0, 7]]))
    sure_bad |= route != [0, 1]
    seq = draw(st.sampled_from([0, 0, 1, 2, 7, -1, 1 << 40, -(1 << 62)]))
    sure_bad |= seq < 0
    data, bad_payload = draw(payloads(c))
    pcut = draw(st.sampled_from([0, 0, 0, 1, k, -1, 1 << 20]))
    sure_bad |= pcut != 0 or bool(bad_payload)
    task = pb.FrameTask(run_id=run_id, frame_id=draw(st.integers(-(1 << 63), (1 << 63) - 1)), cuts=cuts,
                        keyframe=draw(st.lists(st.booleans(), max_size=4)),
                        epoch=draw(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=4)), hop=hop, seq=seq,
                        route=route,
                        payload=pb.Tensor(cut=pcut, data=data, keyframe=draw(st.booleans()),
                                          bytes_dense=draw(st.integers(-(1 << 63), (1 << 63) - 1))),
                        created_at=draw(st.floats(allow_nan=True)), sent_at=draw(st.floats(allow_nan=True)))
    return task, sure_bad


@pytest.fixture(scope="module")
def prepared(cluster):
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.wire.hop import HopSender

    info = cluster.workers[0].Info(pb.Empty(), timeout=30)
    cluster.cut_info = list(info.cuts)
    frame = _frames(cluster.cfg, 1)[0][None]
    cluster.payload0 = HopSender().encode(frame, keyframe=True)
    return cluster


# ---------------------------------------------------------------------------------------------- typed fuzz


def test_fuzz_process(prepared):
    """Malformed FrameTasks into worker 0 (a fresh run before each): errors, never a crash or a hang."""
    from cnnvideo.rpc import cnnvideo_pb2 as pb

    c = prepared
    w0 = c.workers[0]
    wrong = []

    @settings(max_examples=1500, **SETTINGS)
    @given(tasks(c))
    def run(case):
        task, sure_bad = case
        _count("Process")
        w0.StartRun(pb.RunSetup(run_id="fz", mode="delta", n_workers=2, settings=c.settings), timeout=TIMEOUT)
        code = _code(w0.Process, task)
        assert code not in BAD, (code, task.run_id, list(task.cuts), task.hop, task.seq, task.payload.cut)
        if sure_bad and code == "OK":
            wrong.append((task.run_id, list(task.cuts), task.hop, task.seq, task.payload.cut,
                          task.payload.data[:24]))

    run()
    assert not wrong, "bad tasks accepted: %r" % wrong[:5]


def test_fuzz_control_rpcs(prepared):
    """StartRun / EndRun / Info / Costs / Results / Stages with hostile fields: clean statuses only."""
    from cnnvideo.rpc import cnnvideo_pb2 as pb

    c = prepared
    w = c.workers

    @settings(max_examples=900, **SETTINGS)
    @given(st.sampled_from(["StartRun", "EndRun", "Info", "Costs", "Results", "Stages"]), st.integers(0, 1),
           st.text(max_size=40), st.text(max_size=12), st.integers(-(1 << 31), (1 << 31) - 1),
           st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-(1 << 31), (1 << 31) - 1))
    def run(method, wid, run_id, mode, n, thr, iters):
        _count(method)
        stub = w[wid]
        if method == "StartRun":
            req = pb.RunSetup(run_id=run_id, mode=mode, input_threshold=n, threshold=thr, n_workers=iters % 4,
                              settings=c.settings)
            code = _code(stub.StartRun, req)
            valid = mode in ("full", "delta") and iters % 4 == 2 and 0 <= n <= 255 and thr >= 0
            assert code != "OK" or valid, (req, code)
        elif method == "EndRun":
            code = _code(stub.EndRun, pb.StreamRequest(run_id=run_id))
        elif method == "Info":
            code = _code(stub.Info, pb.Empty())
            assert code == "OK"
        elif method == "Costs":  # refresh re-profiles the model: legitimate, slow, so only its fast path here
            code = _code(stub.Costs, pb.CostRequest(iters=iters, refresh=False, settings=c.settings))
            assert code == "OK"
        else:
            stub.StartRun(pb.RunSetup(run_id="ctl", mode="delta", n_workers=2, settings=c.settings),
                          timeout=TIMEOUT)
            code = _code(getattr(stub, method), pb.StreamRequest(run_id=run_id if run_id != "ctl" else "ctl2"))
            assert code == "FAILED_PRECONDITION", code
        assert code not in BAD, (method, code)

    run()


def test_fuzz_trainer(prepared):
    """GetPredictors / Status with random settings (a field changed, added or not; the digest right, stale or
    empty): the predictors exactly when the fields are the trainer's, else FAILED_PRECONDITION, never a crash."""
    import json

    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.wire.settings import digest_of

    c = prepared
    good = dict(master_settings(c.cfg, trainer=True).fields)

    @settings(max_examples=400, **SETTINGS)
    @given(st.sampled_from(sorted(good) + ["engine", "\u2603", ""]),
           st.sampled_from([None, "resnet50", "x" * 1000, "/etc/passwd", -1, 1 << 62, [0, 0], [1 << 30] * 5, 0.5]),
           st.sampled_from(["right", "stale", "empty"]), st.booleans())
    def run(key, value, digest, status):
        _count("trainer")
        if status:
            assert _code(c.trainer.Status, pb.Empty()) == "OK"
            return
        fields = dict(good)
        if value is not None:
            fields[key] = json.dumps(value)
        sent = {"right": digest_of(fields), "stale": digest_of(good), "empty": ""}[digest]
        req = pb.PredictorRequest(settings=pb.Settings(fields=fields, digest=sent, role="fuzz"))
        code = _code(c.trainer.GetPredictors, req)
        assert code == ("OK" if fields == good else "FAILED_PRECONDITION"), (key, value, digest, code)

    run()


# ---------------------------------------------------------------------------------------------- raw bytes

WORKER_UNARY = ["Info", "Costs", "StartRun", "Process", "EndRun", "Prepare"]
WORKER_STREAM = ["Results", "Stages"]


def test_fuzz_raw_bytes(prepared):
    """Random bytes as the request of every method (generic calls, no stub typing), plus unknown methods."""
    c = prepared
    targets = ([("w0", "/cnnvideo.Worker/" + m, False) for m in WORKER_UNARY]
               + [("w1", "/cnnvideo.Worker/" + m, False) for m in WORKER_UNARY]
               + [("w0", "/cnnvideo.Worker/" + m, True) for m in WORKER_STREAM]
               + [("trainer", "/cnnvideo.Trainer/" + m, False) for m in ("Status", "GetPredictors")]
               + [("trainer", "/cnnvideo.Trainer/PutFrames", "client")]  # a client stream of one message
               + [("w0", "/cnnvideo.Worker/PutStage", "client"), ("w1", "/cnnvideo.Worker/PutStage", "client")]
               + [("trainer", "/grpc.health.v1.Health/Check", False), ("w0", "/cnnvideo.Worker/Nope", False),
                  ("trainer", "/cnnvideo.Worker/Process", False), ("w1", "/x", False)])
    calls = {}
    for name, method, stream in targets:
        ch = c.chans[name]
        if stream == "client":
            calls[(name, method)] = (lambda call: lambda data, **kw: call(iter([data]), **kw))(ch.stream_unary(method))
        else:
            calls[(name, method)] = (ch.unary_stream(method) if stream else ch.unary_unary(method))

    @settings(max_examples=1200, **SETTINGS)
    @given(st.sampled_from(targets), st.one_of(st.binary(max_size=200), st.binary(min_size=1, max_size=8)
                                               .map(lambda b: b"\x0a\xff\xff\xff\xff\x0f" + b),
                                               st.binary(max_size=40).map(lambda b: b"\x42" + b)))
    def run(target, data):
        name, method, stream = target
        _count("raw")
        if method.endswith("/Costs") and len(data) > 1 and b"\x10" in data:
            data = data.replace(b"\x10", b"\x08")  # no refresh (re-profiling is legit but slow)
        code = _code(calls[(name, method)], data)
        assert code not in BAD, (method, data, code)
        if method.endswith("Nope") or method in ("/x",) or name == "trainer" and "Worker" in method:
            assert code == "UNIMPLEMENTED"

    run()
    for name, method in [("w0", "/cnnvideo.Worker/Process"), ("trainer", "/cnnvideo.Trainer/GetPredictors")]:
        _count("raw-oversize")
        assert _code(calls[(name, method)], b"\x0a" + b"\xff" * ((MAX_MB << 20) + 100)) == "RESOURCE_EXHAUSTED"


# ---------------------------------------------------------------------------------------------- afterwards


def test_servers_healthy_and_correct_after_fuzz(prepared):
    """Runs last in this module: every server SERVING, a valid run still exact, peak RSS bounded."""
    from cnnvideo.rpc import net

    c = prepared
    for name, addr in c.addrs.items():
        assert c.procs[name].poll() is None, open(c.logs[name]).read()[-3000:]
        assert net.check_health(addr, timeout=5), name
    _valid_frames(c, "after-fuzz", 4)
    _valid_frames(c, "after-fuzz-2", 3, plan=[0, 12, len(c.cut_info) - 1])
    growth = {n: _vmhwm_mb(p.pid) - c.hwm0[n] for n, p in c.procs.items()}
    print("\nVmHWM growth during fuzz (MB): %s" % {n: round(g, 1) for n, g in growth.items()})
    assert all(g <= RSS_GROWTH_MB for g in growth.values()), growth
    assert sum(COUNTS.values()) >= 4000, COUNTS
