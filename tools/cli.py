"""The one entry point: `cnnvideo <role|local|plan|bench> ...`; each sub-command lives in its own module."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import List, Optional

from cnnvideo.errors import ConfigError

# sub-command -> "module:function"; imported lazily so `cnnvideo plan` never loads gRPC
COMMANDS = {
    "master": "cnnvideo.master.main:run",
    "worker": "cnnvideo.worker.main:run",
    "trainer": "cnnvideo.trainer.main:run",
    "local": "cnnvideo.tools.launcher:run",
    "local-worker": "cnnvideo.tools.local_join:run",
    "plan": "cnnvideo.tools.planner:run",
    "bench codec": "cnnvideo.tools.bench.codec:run",
    "bench predict": "cnnvideo.tools.bench.predict:run",
    "bench plan": "cnnvideo.tools.bench.plan:run",
    "bench delta": "cnnvideo.tools.bench.delta:run",
    "bench soak": "cnnvideo.tools.bench.soak:run",
    "bench engine": "cnnvideo.tools.bench.engine:run",
    "bench tradeoff": "cnnvideo.tools.bench.tradeoff:run",
    "bench track": "cnnvideo.tools.bench.track:run",
    "bench capped-profile": "cnnvideo.tools.bench.capped_profile:run",
    "bench int8-scenes": "cnnvideo.tools.bench.int8_scenes:run",
    "bench join": "cnnvideo.tools.bench.join:run",
    "bench churn": "cnnvideo.tools.bench.churn:run",
    "bench intruder": "cnnvideo.tools.bench.intruder:run",
    "bench join-cameras": "cnnvideo.tools.bench.join_cameras:run",
    "experiment": "cnnvideo.tools.experiment:run",
}


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer >= 1, got %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be an integer >= 1, got %r" % text)
    return value


def _bench_run_args(p, config: str, result: str) -> None:
    """The arguments every bench that runs a cluster shares: its config, the time a run may take, the work folder."""
    p.add_argument("-c", "--config", required=True, help=config)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    p.add_argument("--out", required=True, help="work folder: the runs' outputs and %s" % result)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cnnvideo", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for role in ("master", "worker", "trainer"):
        p = sub.add_parser(role, help="run the %s role" % role)
        p.add_argument("-c", "--config", required=True, help="cluster config YAML")
        p.add_argument("-i", "--id", type=int, default=0, help="worker index in cluster.workers")
        p.add_argument("--out", default=None, help="output folder (master)")
        p.add_argument("--frames", type=int, default=None, help="override config 'frames'")
        p.add_argument("--run-id", default=None, help=argparse.SUPPRESS)
        if role == "master":
            p.add_argument("--camera", default="", help="the camera this master runs, of several under 'cameras:'")
            p.add_argument("--min-workers", type=positive_int, default=None, metavar="N",
                           help="override cluster.min_workers: with no cluster.workers, start once N have joined")
        if role == "worker":
            p.add_argument("--join", default=None, metavar="HOST:PORT",
                           help="join the running pool of the master at HOST:PORT (its cluster.join; several "
                                "cameras: the first's, the next ones at the next ports, or HOST:PORT,HOST:PORT,... "
                                "one per camera's master); no -i")
            p.add_argument("--listen", default="0.0.0.0:50060", metavar="ADDR",
                           help="with --join: serve on ADDR (host:port; 0.0.0.0 = every interface, reached at this "
                                "host's address on the route to the master)")
            p.add_argument("--advertise", default=None, metavar="ADDR",
                           help="with --join: the address the pool reaches this worker at (default: from --listen)")
    p = sub.add_parser("local", help="run trainer, workers and master as local processes")
    p.add_argument("-c", "--config", default=None, help="config YAML (default: the demo, configs/local.yml)")
    p.add_argument("--frames", type=int, default=None, help="override config 'frames'")
    p.add_argument("--out", default=None, help="output folder (default: config 'out')")
    p = sub.add_parser("local-worker", help="add a worker to a running `cnnvideo local` cluster (Ctrl-C: it leaves)")
    p.add_argument("out", help="the running cluster's output folder (its config.yml names the join address)")
    p = sub.add_parser("plan", help="print every scheduler's split and predicted time (no network)")
    p.add_argument("-c", "--config", default=None, help="config YAML (default: the demo, configs/local.yml)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p = sub.add_parser("experiment", help="run a matrix of runs (compose cluster or local) and write results")
    p.add_argument("-c", "--config", required=True, help="experiment YAML (see tools/experiment/spec.py)")
    p.add_argument("--backend", choices=("compose", "local"), default=None, help="override the file's backend")
    p.add_argument("--out", default=None, help="override the results folder (default: docs/results)")
    p.add_argument("--frames", type=int, default=None, help="override frames per run")
    p.add_argument("--only", default=None, help="run only the runs whose id contains this text")
    p.add_argument("--limit", type=int, default=0, help="run only the first N runs")
    p.add_argument("--resume", action="store_true", help="keep runs that already have a report.json")
    p.add_argument("--report-only", action="store_true", help="rebuild tables and plots from earlier runs")
    bench = sub.add_parser("bench", help="benchmarks that print figures").add_subparsers(dest="bench", required=True)
    p = bench.add_parser("codec", help="our codec vs the original's pickled CSR, per hop")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--video", default=None, help="video file (default: media/vtest.avi or synthetic)")
    p.add_argument("--model", default="alexnet")
    p.add_argument("--frames", type=int, default=30)
    p.add_argument("--threshold", type=float, default=0.0, help="delta threshold on later hops")
    p.add_argument("--input-threshold", type=int, default=0, help="delta threshold on the input hop")
    p.add_argument("--frame-size", type=int, nargs=2, default=[480, 720], metavar=("H", "W"))
    p = bench.add_parser("predict", help="predicted vs actual bytes per cut on held-out frames")
    p.add_argument("--json", action="store_true")
    p.add_argument("--video", default=None)
    p.add_argument("--model", default="alexnet")
    p.add_argument("--frames", type=int, default=120)
    p.add_argument("--frame-size", type=int, nargs=2, default=[240, 360], metavar=("H", "W"))
    p = bench.add_parser("delta", help="3-stage delta run over a video: exactness, drift, bytes per hop")
    p.add_argument("--json", action="store_true")
    p.add_argument("--video", default=None, help="video file (default: media/vtest.avi; 'none' = synthetic)")
    p.add_argument("--model", default="alexnet")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--threshold", type=float, default=0.02)
    p.add_argument("--input-threshold", type=int, default=2)
    p.add_argument("--frame-size", type=int, nargs=2, default=[240, 360], metavar=("H", "W"))
    p = bench.add_parser("soak", help="long local run: each process's peak RSS at frame --at and at the end")
    p.add_argument("--json", action="store_true")
    p.add_argument("--frames", type=int, default=5000)
    p.add_argument("--at", type=int, default=500, help="frame at which the first peak RSS is taken")
    p.add_argument("--model", default="alexnet")
    p.add_argument("--frame-size", type=int, nargs=2, default=[64, 64], metavar=("H", "W"))
    p.add_argument("--in-flight", type=int, default=3)
    p.add_argument("--no-check", action="store_true", help="skip the master's exactness check")
    p.add_argument("--out", default=None, help="work folder (default: a new temp folder)")
    p.add_argument("--verbose-children", action="store_true", help="echo the cluster's log lines")
    p.add_argument("--realtime", action="store_true",
                   help="play --video as if live (looped, frames skipped by policy) until --seconds, then SIGTERM")
    p.add_argument("--video", default=None, help="with --realtime: video file (default: media/vtest.avi)")
    p.add_argument("--seconds", type=float, default=1800.0, help="with --realtime: run length")
    p.add_argument("--warmup-s", type=float, default=120.0,
                   help="with --realtime: seconds after the first frame at which the first peak RSS is taken")
    p.add_argument("--check-share", type=float, default=0.1, help="with --realtime: share of frames checked")
    p = bench.add_parser("engine", help="torch vs ONNX Runtime fp32/int8: whole model and a 2-worker split, one core")
    p.add_argument("--json", action="store_true")
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--weights", default="random", help="random, imagenet or a state-dict file")
    p.add_argument("--frame-size", type=int, nargs=2, default=[480, 720], metavar=("H", "W"))
    p.add_argument("--video", default=None, help="video (default media/vtest.avi; synthetic frames if missing)")
    p.add_argument("--frames", type=int, default=30, help="evaluation frames (from the start of the video)")
    p.add_argument("--repeat", type=int, default=5, help="timed rounds (median)")
    p.add_argument("--calibration-start", type=int, default=400, help="first int8 calibration frame")
    p.add_argument("--calibration-frames", type=int, default=16)
    p.add_argument("--engines", default=None, help="comma list (default torch-fp32,onnxruntime-fp32,onnxruntime-int8)")
    p.add_argument("--cache-dir", default=None, help="ONNX cache (default: a new temp folder)")
    p.add_argument("--heldout", default="", metavar="START:STRIDE:COUNT",
                   help="also top-1 agreement on these frames (e.g. 560:5:47: after the calibration frames)")
    p.add_argument("--split-cut", type=int, default=0, help="cut of the 2-worker split (default: halve torch's time)")
    p.add_argument("--score-threshold", type=float, default=0.5, help="a detector's boxes kept for F1 (0..1)")
    p = bench.add_parser("tradeoff", help="bytes per hop vs top-1 agreement: input/later thresholds and fp16")
    p.add_argument("--json", action="store_true", help="print one JSON object (else a table of the answers)")
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--weights", default="imagenet", help="random | imagenet | a state-dict file")
    p.add_argument("--video", default=None, help="video file (default: media/vtest.avi)")
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--frame-size", type=int, nargs=2, default=[480, 720], metavar=("H", "W"))
    p.add_argument("--cuts", default="blocks", help="later-hop cuts: blocks | all | comma-separated names")
    p.add_argument("--input-thresholds", default=None, help="comma list of input thresholds (default 0,1,2,3,4,6,8)")
    p.add_argument("--thresholds", default=None,
                   help="comma list of later-hop thresholds, 'h' suffix = fp16 (default 0h,0.03,0.1,0.3,1)")
    p.add_argument("--out", default=None, help="also write tradeoff.json, tradeoff.svg, results.md into this folder")
    p = bench.add_parser("track", help="the tracker tuned on one MOT sequence, scored on the other: IDF1, ID switches")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trackers", default="iou,kalman",
                   help="comma list: iou, kalman (ours); norfair, sort, bytetrack when installed")
    p.add_argument("--sequences", default="TUD-Campus,TUD-Stadtmitte", help="comma list of motmetrics' sequences")
    p.add_argument("--seeds", default="0,1,2", help="comma list of noise seeds")
    p.add_argument("--keep-every", default="1,2", help="comma list: 1 = every frame, 2 = every other frame dropped")
    p.add_argument("--miss", type=float, default=0.15, help="share of true boxes missed")
    p.add_argument("--jitter", type=float, default=0.06, help="corner noise std, share of the box's width/height")
    p.add_argument("--false-per-frame", type=float, default=0.3, help="mean false boxes a frame")
    p.add_argument("--heavy", default="0.25,0.10,1.0", metavar="MISS,JITTER,FALSE",
                   help="the heavier noise, scored held out only")
    p.add_argument("--burst", type=float, default=5.0,
                   help="frames: mean run of misses and life of a false box in the bursty noise (held out only)")
    p.add_argument("--out", default=None, help="also write results.md and track.json into this folder")
    p.add_argument("--before", default=None, metavar="TRACK_JSON",
                   help="an earlier run's track.json: results.md shows its held-out cells beside the new ones")
    p = bench.add_parser("capped-profile", help="an ORT profile under a real CFS cap vs uncapped, at every cut")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--frame-size", type=int, nargs=2, default=[480, 720], metavar=("H", "W"))
    p.add_argument("--precision", default="fp32", choices=("fp32", "int8"))
    p.add_argument("--cap", type=float, default=0.1, help="CPU cap of the profiling child (share of one core)")
    p.add_argument("--profiles", type=int, default=3, help="profiles taken each way (each cut's median)")
    p.add_argument("--alone-cuts", default="9,18", help="comma list of cuts whose two stages are also timed alone")
    p.add_argument("--cache-dir", default=None, help="ONNX cache (default: a new temp folder)")
    p.add_argument("--out", default=None, help="also write results.md and capped-profile.json into this folder")
    p = bench.add_parser("join", help="a pool that grows by joins mid-run against one started at its final size")
    _bench_run_args(p, "the cluster config both runs use (its frames, caps, links)", "join.json")
    p.add_argument("--workers", type=int, default=4, help="the final size N (the first run starts with N)")
    p.add_argument("--joins", type=int, default=2, help="workers that join the second run (it starts with N - J)")
    p.add_argument("--join-at", type=int, default=100, help="the joiners start once the master sent this frame")
    p.add_argument("--leave-at", type=int, default=0, help="one joined worker gets SIGTERM at this frame (0: none)")
    p.add_argument("--compose", action="store_true",
                   help="on the compose cluster: `--scale worker=N`, and `--scale ... --no-recreate` for the joins "
                        "(the config is the roles'; its video must be in the image)")
    p.add_argument("--edge", action="store_true", help="with --compose: also a run of one worker, the reference")
    p = bench.add_parser("join-cameras", help="several cameras on a pool that grows by joins while they run")
    _bench_run_args(p, "a `cnnvideo local` config listing the cameras", "join-cameras.json")
    p.add_argument("--joins", type=int, default=2, help="workers that join (each joins every camera's pool)")
    p.add_argument("--join-at", type=int, default=150, help="the joiners start once the first camera sent this frame")
    p = bench.add_parser("intruder", help="the pool's fps while an intruder keeps asking to join with a wrong token")
    _bench_run_args(p, "a `cnnvideo local` config (joins are turned on)", "intruder.json")
    p.add_argument("--start", type=int, default=150, help="the first intruder window starts at this frame")
    p.add_argument("--window", type=int, default=100, help="frames per window (the intruder on, then off, ...)")
    p.add_argument("--every", type=float, default=0.05, help="seconds between the intruder's attempts")
    p = bench.add_parser("churn", help="workers joining and leaving a running pool, one event every few seconds")
    _bench_run_args(p, "the cluster config (its frames, workers, caps, links)", "churn.json")
    p.add_argument("--cycles", type=int, default=5, help="joins, each followed by its leave")
    p.add_argument("--start-at", type=int, default=40, help="the first join once the master sent this frame")
    p.add_argument("--serve-s", type=float, default=2.0, help="seconds a joined worker serves before SIGTERM")
    p = bench.add_parser("int8-scenes", help="int8 detector F1 vs fp32 on vtest and unseen scenes, before and after")
    p.add_argument("--json", action="store_true", help="print one JSON object (else a table)")
    p.add_argument("--frames", type=int, default=100, help="frames a scene")
    p.add_argument("--frame-size", type=int, nargs=2, default=[480, 720], metavar=("H", "W"))
    p.add_argument("--scenes", default="beach,walkers,person", help="comma list of tools/bench/scenes.py's scenes")
    p.add_argument("--video", default="media/vtest.avi", help="the trainer's video (and the vtest scene)")
    p.add_argument("--photos", default="media/photos", help="folder of darknet's photos")
    p.add_argument("--no-study", action="store_true", help="only the before and after rows")
    p.add_argument("--split", action="store_true", help="also a 2-stage split at the cut that halves compute")
    p.add_argument("--rows", default="", help="row names to run, split at ';' (or at ',' when there is no ';'; "
                   "default: all)")
    p.add_argument("--score-threshold", type=float, default=0.5)
    p.add_argument("--cache-dir", default=None, help="ONNX and calibration cache (default: a new temp folder)")
    p.add_argument("--out", default=None, help="also write int8-scenes.json into this folder")
    p = bench.add_parser("plan", help="time the schedulers (optimal: 8 workers x 150 cuts)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--cuts", type=int, default=150)
    p.add_argument("--repeat", type=int, default=20)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    key = args.command if args.command != "bench" else "bench " + args.bench
    module_name, func_name = COMMANDS[key].split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(args) or 0)
    except ConfigError as exc:
        print("cnnvideo: error: %s" % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
