"""`cnnvideo bench intruder`: the pool's fps while an intruder keeps asking to join with a wrong token (issue 45).

One `cnnvideo local` run of the config with joins on (`cluster.join` on a free loopback port, a join token). From
frame `--start` on, every `--window` frames the intruder is switched on or off: while on, a gRPC client in this
process calls Join with a wrong token every `--every` seconds (the master refuses each: the rate limit, then the
token). From results.jsonl it prints, as JSON: the fps of the frames completed in the intruder's windows against the
windows between them (interleaved, so that the host's drift hits both), the ratio, what the intruder was told, and
that every frame completed.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List

import grpc
import yaml

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc

from .join import LocalCluster, _fps, _lines, _report, write_join_config, write_results

TOKEN = "bench-intruder-join-token-0123"


class Intruder:
    """Calls Join with a wrong token while `on` is set; counts the answers by status code."""

    def __init__(self, master: str, every_s: float) -> None:
        self.master = master
        self.every_s = every_s
        self.on = threading.Event()
        self.stop = threading.Event()
        self.answers: Dict[str, int] = {}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        chan = grpc.insecure_channel(self.master)
        stub = pb_grpc.MasterStub(chan)
        request = pb.JoinRequest(address="10.255.0.9:50060", token="not-the-token-0123456789", instance="intruder")
        while not self.stop.is_set():
            if not self.on.wait(0.2):
                continue
            try:
                stub.Join(request, timeout=5)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            self.answers[code] = self.answers.get(code, 0) + 1
            time.sleep(self.every_s)
        chan.close()


def _window_fps(lines: List[Dict[str, Any]], windows: List[range]) -> float:
    """Frames completed per second within each frame window, pooled: frames over the sum of the windows' spans."""
    frames = spans = 0.0
    for w in windows:
        times = sorted(e["result_time"] for e in lines if e["frame"] in w)
        if len(times) >= 2:
            frames += len(times) - 1
            spans += times[-1] - times[0]
    return frames / spans if spans > 0 else 0.0


def run(args) -> int:
    with open(args.config) as fh:
        cfg = yaml.safe_load(fh)
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    path, join = write_join_config(work, "intruder", cfg, join_token=TOKEN)
    out = os.path.join(work, "run")
    pool = LocalCluster(path, out)
    intruder = Intruder(join, args.every)
    bounds = list(range(args.start, int(cfg.get("frames") or 0), args.window))
    on_windows, off_windows = [], []
    try:
        for i, at in enumerate(bounds):
            pool.wait_sent(at, args.timeout)
            (intruder.on.set if i % 2 == 0 else intruder.on.clear)()
            (on_windows if i % 2 == 0 else off_windows).append(range(at, at + args.window))
        intruder.on.clear()
        code = pool.wait(args.timeout)
    finally:
        intruder.stop.set()
        intruder.on.set()
        intruder.thread.join(10)
    if code != 0:
        print("".join(pool.lines[-40:]))
        return 1
    report, lines = _report(out), _lines(out)
    off_windows = [w for w in off_windows if w.stop <= report["completed"]]
    fps_on, fps_off = _window_fps(lines, on_windows), _window_fps(lines, off_windows)
    said = [ln.strip() for ln in pool.lines if "join refused" in ln]
    results = {"config": args.config, "every_s": args.every, "windows_on": [[w.start, w.stop] for w in on_windows],
               "windows_off": [[w.start, w.stop] for w in off_windows], "intruder_answers": intruder.answers,
               "master_refusal_lines": len(said), "first_refusal_lines": said[:3],
               "completed": report["completed"], "frames": report["frames"], "lost": report["lost"],
               "retried": report["retried"], "throughput_fps": report["throughput_fps"],
               "fps_intruder_on": round(fps_on, 3), "fps_intruder_off": round(fps_off, 3),
               "ratio": round(fps_on / fps_off, 3) if fps_off else None, "fps_overall": _fps(
                   [e["result_time"] for e in lines])}
    return write_results(work, "intruder.json", results)
