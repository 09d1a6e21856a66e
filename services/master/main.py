"""`cnnvideo master -c CONFIG [--out DIR] [--frames N] [--camera NAME]`: run the configured video through the cluster
once; with several cameras under `cameras:`, camera NAME's (one master per camera, the same config everywhere)."""
from __future__ import annotations

import logging
import os
import sys

from cnnvideo import config
from cnnvideo.rpc import tls

from .role import MasterError, MasterRole

log = logging.getLogger(__name__)


def run(args) -> int:
    overrides = {"frames": args.frames} if args.frames is not None else None
    cfg = config.load(args.config, overrides=overrides)
    camera = getattr(args, "camera", "") or ""
    cfg = config.pick_camera(cfg, camera)  # several cameras: --camera names this master's (its folder <out>/<name>)
    out = os.path.join(args.out, camera) if camera and args.out else args.out or cfg.out
    tls.setup(cfg, "master")  # mutual TLS for every channel/server of this process, if configured
    role = MasterRole(cfg, out, run_id=args.run_id)
    try:
        role.start()
        return role.serve()
    except MasterError as exc:
        print("cnnvideo master: error: %s" % exc, file=sys.stderr, flush=True)
        return 3
    finally:
        role.stop()
