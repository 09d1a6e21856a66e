"""`cnnvideo worker -c CONFIG -i ID`: run worker ID of the chain until SIGTERM/SIGINT."""
from __future__ import annotations

import logging

from cnnvideo import config
from cnnvideo.rpc import tls

from .role import WorkerRole

log = logging.getLogger(__name__)


def run(args) -> int:
    cfg = config.load(args.config, check_files=False)  # a worker needs no video
    tls.setup(cfg, "worker%d" % args.id)  # mutual TLS for every channel/server of this process, if configured
    role = WorkerRole(cfg, args.id)
    try:
        role.start()
        role.serve()
    finally:
        role.stop()
    return 0
