"""`cnnvideo master -c CONFIG [--out DIR] [--frames N]`: run the configured video through the cluster once."""
from __future__ import annotations

import logging
import sys

from cnnvideo import config
from cnnvideo.master.role import MasterError, MasterRole
from cnnvideo.wire import tls

log = logging.getLogger(__name__)


def run(args) -> int:
    overrides = {"frames": args.frames} if args.frames is not None else None
    cfg = config.load(args.config, overrides=overrides)
    config.require_one_camera(cfg)
    tls.setup(cfg, "master")  # mutual TLS for every channel/server of this process, if configured
    role = MasterRole(cfg, args.out or cfg.out, run_id=args.run_id)
    try:
        role.start()
        return role.serve()
    except MasterError as exc:
        print("cnnvideo master: error: %s" % exc, file=sys.stderr, flush=True)
        return 3
    finally:
        role.stop()
