"""What a gRPC message costs in CPU when messages come a few a second, as a capped worker's frames do: unary calls
against one open bidi stream, server and client, each less its idle CPU.

tools/probes/msg_cpu_probe.py times messages back to back (160-210 us each). Spaced out, each message wakes gRPC's idle
threads on cold caches and costs several times that, and an idle sync server spends CPU too (every thread blocked
in a completion queue wakes to check for signals). This probe shows both. Two OS processes on 127.0.0.1, generic
handlers (bytes in, b"ok" out, no proto), the project's channel options (cnnvideo.rpc.net). CPU is the sum of
every thread's run time from /proc/PID/task/TID/schedstat (nanoseconds); context switches from .../status.

    .venv/bin/python tools/probes/grpc_rate_probe.py [N] [RATE] [SIZE] [REPEATS]   # defaults 60 3 70000 2; prints JSON
    CNNVIDEO_PROBE_SERVER=aio ... serves with grpc.aio (asyncio) instead of the sync thread-pool server
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import time
from concurrent import futures

import grpc
from cpu_per_frame import thread_counts  # tools/probes/ is on the path when this runs as a script

from cnnvideo.rpc import net

MAX_BYTES = 64 << 20
SERVICE = "probe.Echo"


def _same(x: bytes) -> bytes:
    return x


def _handler(unary, stream):
    """The probe's two methods, bytes in and out, for a sync or an asyncio server."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, _same, _same),
        "Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same)})


def serve(port: int) -> None:
    def unary(request, context):
        return b"ok"

    def stream(requests, context):
        for _ in requests:
            yield b"ok"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=net.server_options(MAX_BYTES))
    server.add_generic_rpc_handlers((_handler(unary, stream),))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def serve_aio(port: int) -> None:
    import asyncio

    async def unary(request, context):
        return b"ok"

    async def stream(requests, context):
        async for _ in requests:
            yield b"ok"

    async def run() -> None:
        server = grpc.aio.server(options=net.server_options(MAX_BYTES))
        server.add_generic_rpc_handlers((_handler(unary, stream),))
        server.add_insecure_port("127.0.0.1:%d" % port)
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(run())


def usage(pid: int):
    """(CPU seconds, context switches) of every thread of `pid` so far."""
    threads = thread_counts(str(pid)).values()
    return sum(cpu for _, cpu in threads), sum(switches for switches, _ in threads)


class StreamSender:
    """Sends on one open bidi call and waits for each answer (the request iterator reads a queue)."""

    def __init__(self, method) -> None:
        self.q: queue.Queue = queue.Queue()
        self.answers = method(iter(self.q.get, None))

    def __call__(self, payload: bytes) -> None:
        self.q.put(payload)
        next(self.answers)

    def close(self) -> None:
        self.q.put(None)
        for _ in self.answers:
            pass


def main(n: int, rate: float, size: int, repeats: int) -> dict:
    port = net.free_port()
    server = os.environ.get("CNNVIDEO_PROBE_SERVER", "sync")
    srv = subprocess.Popen([sys.executable, __file__, "serve-" + server, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        chan = net.channel("127.0.0.1:%d" % port, MAX_BYTES)
        net.wait_ready(chan, 10)
        unary = chan.unary_unary("/%s/Unary" % SERVICE, request_serializer=_same, response_deserializer=_same)
        stream = StreamSender(chan.stream_stream("/%s/Stream" % SERVICE, request_serializer=_same,
                                                 response_deserializer=_same))
        payload = os.urandom(size)
        pids = {"server": srv.pid, "client": os.getpid()}
        before = {k: usage(p) for k, p in pids.items()}
        time.sleep(5)
        idle = {k: [(a - b) / 5 for a, b in zip(usage(p), before[k])] for k, p in pids.items()}
        send = {"unary": lambda: unary(payload, timeout=10), "stream": lambda: stream(payload)}
        rows = {kind: {"%s_%s" % (k, m): [] for k in pids for m in ("cpu_ms", "switches")} for kind in send}
        for _ in range(repeats):
            for kind, fn in send.items():
                fn()  # the stream's first message opens it
                before, t0 = {k: usage(p) for k, p in pids.items()}, time.time()
                for _ in range(n):
                    fn()
                    time.sleep(1.0 / rate)
                wall = time.time() - t0
                for k, p in pids.items():
                    cpu, sw = (a - b - i * wall for a, b, i in zip(usage(p), before[k], idle[k]))
                    rows[kind]["%s_cpu_ms" % k].append(cpu / n * 1e3)
                    rows[kind]["%s_switches" % k].append(sw / n)
        stream.close()
        chan.close()
    finally:
        srv.kill()
    out = {"server": server, "n": n, "rate_per_s": rate, "payload_bytes": size, "repeats": repeats,
           "grpcio": grpc.__version__,
           "idle": {k: {"cpu_ms_per_s": round(v[0] * 1e3, 3), "switches_per_s": round(v[1], 1)}
                    for k, v in idle.items()}}
    for kind, r in rows.items():
        out[kind] = {k: round(statistics.median(v), 3) for k, v in r.items()}  # each less the idle rate
    return out


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("serve-sync", "serve-aio"):
        (serve if sys.argv[1] == "serve-sync" else serve_aio)(int(sys.argv[2]))
    else:
        args = [float(a) for a in sys.argv[1:5]]
        n, rate, size, repeats = args + [60, 3, 70000, 2][len(args):]
        print(json.dumps(main(int(n), rate, int(size), int(repeats)), indent=1))
