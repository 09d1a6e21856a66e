"""`cnnvideo master -c CONFIG [--out DIR] [--frames N] [--camera NAME]`: run the configured video through the cluster
once; with several cameras under `cameras:`, camera NAME's (one master per camera, the same config everywhere)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import uuid

from cnnvideo import config
from cnnvideo.rpc import tls

from .gathering import first_workers
from .role import MasterError, MasterRole

log = logging.getLogger(__name__)


def run(args) -> int:
    overrides = {"frames": args.frames} if args.frames is not None else None
    cfg = config.load(args.config, overrides=overrides)
    camera = getattr(args, "camera", "") or ""
    cfg = config.pick_camera(cfg, camera)  # several cameras: --camera names this master's (its folder <out>/<name>)
    out = os.path.join(args.out, camera) if camera and args.out else args.out or cfg.out
    if getattr(args, "min_workers", None):
        cfg.cluster.min_workers = args.min_workers
    tls.setup(cfg, "master")  # mutual TLS for every channel/server of this process, if configured
    run_id = args.run_id or uuid.uuid4().hex[:12]
    if not wait_for_workers(cfg, run_id):
        print("cnnvideo master: stopped while waiting for workers to join (%d needed)" % cfg.cluster.min_workers,
              file=sys.stderr, flush=True)
        return 1
    role = MasterRole(cfg, out, run_id=run_id)
    try:
        role.start()
        return role.serve()
    except MasterError as exc:
        print("cnnvideo master: error: %s" % exc, file=sys.stderr, flush=True)
        return 3
    finally:
        role.stop()


def wait_for_workers(cfg, run_id: str) -> bool:
    """A pool of joining workers only (no cluster.workers): wait for its first ones (gathering); SIGTERM/SIGINT stop
    the wait. False if stopped first."""
    if cfg.cluster.workers:
        return True
    stop = threading.Event()
    before = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return first_workers(cfg, run_id, stop)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
