"""`cnnvideo worker -c CONFIG -i ID`: run worker ID of the pool until SIGTERM/SIGINT (the first drains its frames).
`cnnvideo worker -c CONFIG --join HOST:PORT [--listen ADDR]`: serve on ADDR and join the running pool of the master
at HOST:PORT (which assigns the id)."""
from __future__ import annotations

import logging
import socket

from cnnvideo import config
from cnnvideo.config_rules import join_token
from cnnvideo.rpc import tls

from .joining import JoinError, join_pool
from .role import WorkerRole

log = logging.getLogger(__name__)

JOIN_WAIT_S = 900.0  # a joining worker waits this long for a master that is not up yet or still setting up


def advertised(listen: str) -> str:
    """The address the master and the other workers reach this worker at: `listen`, or this host's name with its
    port when it listens on every interface."""
    host, _, port = listen.rpartition(":")
    return "%s:%s" % (socket.gethostname(), port) if host in ("", "0.0.0.0", "[::]", "::") else listen


def run(args) -> int:
    cfg = config.load(args.config, check_files=False)  # a worker needs no video
    joining = bool(getattr(args, "join", None))
    tls.setup(cfg, "worker" if joining else "worker%d" % args.id)  # mutual TLS for every channel/server, if set
    if joining:
        address = advertised(args.listen)
        role = WorkerRole(cfg, -1, listen=args.listen, address=address)
    else:
        role = WorkerRole(cfg, args.id)
    try:
        role.start()
        if joining:
            try:
                reply = join_pool(args.join, address, join_token(cfg), role.instance, cfg.max_message_bytes,
                                  JOIN_WAIT_S)
            except JoinError as exc:
                log.error("%s", exc)
                return 1
            role.joined(int(reply.worker_id))
            log.info("joined the pool of the master at %s as w%d (run %s)", args.join, reply.worker_id, reply.run_id)
        role.serve()
    finally:
        role.stop()
    return 0
