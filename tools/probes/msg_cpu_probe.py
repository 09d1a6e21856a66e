"""The per-message CPU probe (`cost_model.net_cpu_us_per_message`): what one gRPC message costs a worker in
CPU time, apart from its bytes. Two OS processes on 127.0.0.1 with the project's proto and cnnvideo.rpc.net
channel and server: the server serves Worker.Process (a bare Ack) and Worker.Results / Worker.Stages (streams of
FrameResult / StageReport); the client, per payload size, (a) sends N FrameTask messages through Process and
(b) drains N FrameResult and N StageReport messages the server pushes on its streams. Each side reads its own
process CPU time (time.process_time: every thread, user + system) around each batch (the server's is read by
a marker Process call that answers it in Ack.message) and subtracts its idle CPU rate over the same wall time.
A least-squares line cpu = fixed + per_byte x bytes per role reads off the fixed part per message. Only gRPC and
protobuf are timed (handlers do nothing else): a lower bound for a worker, whose handlers also convert and check.

    .venv/bin/python tools/probes/msg_cpu_probe.py [N] [repeats]     # defaults 1000 and 3; prints one JSON object
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net

MAX_BYTES = 64 << 20
SIZES = (256, 1024, 4096, 16384, 65536, 102400)
MARK = "mark"  # a Process call with this run_id answers the server's process CPU seconds


def task(size: int, i: int) -> pb.FrameTask:
    """A FrameTask like a worker's forward: a plan, per-hop flags, a payload of `size` bytes."""
    return pb.FrameTask(run_id="probe", frame_id=i, cuts=[0, 40, 74], keyframe=[False, False], epoch=[0, 0], hop=1,
                        seq=i, payload=pb.Tensor(cut=40, data=b"\x01" * size, bytes_dense=4 * size),
                        created_at=time.time(), sent_at=time.time(), generation=0)


def report(i: int) -> pb.StageReport:
    """A StageReport like a worker's (five timed stages)."""
    t = time.time()
    return pb.StageReport(run_id="probe", frame_id=i, worker_id=1, start_cut=40, end_cut=74, hop_in=1,
                          bytes_in=60000, bytes_out=4000, hop_out=2, dense_out=4000,
                          stages=[pb.StageTiming(stage=s, start=t, end=t, bytes=100)
                                  for s in ("receive", "decode", "compute", "encode", "send")])


class Servicer(pb_grpc.WorkerServicer):
    """Process: Ack (a marker call answers the CPU clock); Results / Stages: run_id = 'count:size' messages."""

    def Process(self, request, context):
        if request.run_id == MARK:
            return pb.Ack(ok=True, message=repr(time.process_time()))
        return pb.Ack(ok=True)

    def Results(self, request, context):
        n, size = (int(x) for x in request.run_id.split(":"))
        data = b"\x02" * size
        for i in range(n):
            yield pb.FrameResult(run_id="probe", frame_id=i, worker_id=1, seq=i, sent_at=time.time(),
                                 output=pb.Tensor(cut=74, data=data, bytes_dense=4 * size))

    def Stages(self, request, context):
        for i in range(int(request.run_id.split(":")[0])):
            yield report(i)


def serve() -> None:
    server = net.Server("127.0.0.1:0", MAX_BYTES, threads=8)
    pb_grpc.add_WorkerServicer_to_server(Servicer(), server.grpc)
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the client closes our stdin
    server.stop(0.5)


def timed(stub, fn):
    """(client CPU s, server CPU s, wall s) of fn(); the idle rate is subtracted by the caller."""
    s0 = float(stub.Process(pb.FrameTask(run_id=MARK)).message)
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    c1, w1 = time.process_time(), time.perf_counter()
    s1 = float(stub.Process(pb.FrameTask(run_id=MARK)).message)
    return c1 - c0, s1 - s0, w1 - w0


def fit(sizes, cpu) -> dict:
    """Least squares cpu = fixed + per_byte x size: fixed in us per message, per_byte in ns."""
    a = np.stack([np.ones(len(sizes)), np.asarray(sizes, dtype=np.float64)], axis=1)
    (fixed, per_byte), *_ = np.linalg.lstsq(a, np.asarray(cpu), rcond=None)
    return {"fixed_us": round(fixed * 1e6, 1), "per_byte_ns": round(per_byte * 1e9, 3)}


def probe(n: int, repeats: int) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        chan = net.channel("127.0.0.1:%s" % proc.stdout.readline().strip(), MAX_BYTES)
        net.wait_ready(chan, 10.0)
        stub = pb_grpc.WorkerStub(chan)
        for _ in range(3):  # warm up the connection, the server's thread pool, protobuf, both streams
            [stub.Process(task(1024, i)) for i in range(300)]
            list(stub.Results(pb.StreamRequest(run_id="300:1024")))
            list(stub.Stages(pb.StreamRequest(run_id="300:0")))
        idle_c, idle_s, idle_w = timed(stub, lambda: time.sleep(2.0))
        rate_c, rate_s = idle_c / idle_w, idle_s / idle_w

        def per_msg(fn):
            c, s, w = timed(stub, fn)
            return (c - rate_c * w) / n, (s - rate_s * w) / n

        runs = {size: [] for size in SIZES}
        for _ in range(repeats):  # sizes interleaved: the host's drift spreads over all of them
            for size in SIZES:
                msgs = [task(size, i) for i in range(n)]  # built beforehand: the wire path only
                send_c, recv_s = per_msg(lambda msgs=msgs: [stub.Process(m) for m in msgs])
                ask = pb.StreamRequest(run_id="%d:%d" % (n, size))
                _, push_s = per_msg(lambda ask=ask: list(stub.Results(ask)))
                runs[size].append((send_c, recv_s, push_s))
        rows = []
        for size in SIZES:
            med = np.median(np.array(runs[size]), axis=0)
            rows.append({"bytes": size, "process_sender_us": round(med[0] * 1e6, 1),
                         "process_receiver_us": round(med[1] * 1e6, 1), "results_push_us": round(med[2] * 1e6, 1)})
        stages = [per_msg(lambda: list(stub.Stages(pb.StreamRequest(run_id="%d:0" % n))))[1] for _ in range(repeats)]
        chan.close()
    finally:
        proc.stdin.close()
        proc.wait(10)
    sizes = [r["bytes"] for r in rows]
    fits = {k: fit(sizes, [r[k] * 1e-6 for r in rows])
            for k in ("process_sender_us", "process_receiver_us", "results_push_us")}
    stage_us = round(float(np.median(stages)) * 1e6, 1)
    # a worker per frame: serves one Process (receiver), makes one (sender) or pushes the result, pushes a report
    fixed = {k: v["fixed_us"] for k, v in fits.items()}
    middle = fixed["process_receiver_us"] + fixed["process_sender_us"] + stage_us
    last = fixed["process_receiver_us"] + fixed["results_push_us"] + stage_us
    return {"messages": n, "repeats": repeats, "idle_cpu_share": {"client": round(rate_c, 4),
                                                                  "server": round(rate_s, 4)},
            "per_size": rows, "fit": fits, "stage_report_push_us": stage_us,
            "worker_us_per_frame": {"forwarding": round(middle, 1), "reporting": round(last, 1)},
            "us_per_message": {"forwarding": round(middle / 3, 1), "reporting": round(last / 3, 1)}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    else:
        print(json.dumps(probe(int(sys.argv[1]) if len(sys.argv) > 1 else 1000,
                               int(sys.argv[2]) if len(sys.argv) > 2 else 3), indent=1))
