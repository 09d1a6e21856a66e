"""`cnnvideo worker -c CONFIG -i ID`: run worker ID of the pool until SIGTERM/SIGINT (the first drains its frames).
`cnnvideo worker -c CONFIG --join HOST:PORT[,HOST:PORT...] [--listen ADDR]`: serve on ADDR and join the running pool
of the master at HOST:PORT (which assigns the id), of every camera's master (camera_join_addresses)."""
from __future__ import annotations

import logging
import socket
import threading
import time

from cnnvideo import config
from cnnvideo.config_cameras import camera_join_addresses
from cnnvideo.config_rules import join_token
from cnnvideo.rpc import tls

from .joining import JoinError, join_pool
from .role import WorkerRole

log = logging.getLogger(__name__)

JOIN_WAIT_S = 900.0  # a joining worker waits this long for a master that is not up yet or still setting up


def advertised(listen: str, master: str, wait_s: float = 0.0) -> str:
    """The address the master and the other workers reach this worker at: `listen`, or, when it listens on every
    interface, this host's address on the route to the master (a container's or a Pi's own IP: its host name may
    resolve nowhere else), with the port. Waits up to `wait_s` for the master's name to resolve (a container
    started beside the master's), so that the address is the same one every time this worker (re)starts; this
    host's name if it never does."""
    host, _, port = listen.rpartition(":")
    if host not in ("", "0.0.0.0", "[::]", "::"):
        return listen
    deadline = time.time() + wait_s
    said = 0.0
    while True:
        ip = route_address(master.rpartition(":")[0])
        if ip or time.time() >= deadline:
            return "%s:%s" % (ip or socket.gethostname(), port)
        if time.time() - said >= 10.0:
            log.info("waiting for the master's address %s to resolve (to tell it where this worker is)", master)
            said = time.time()
        time.sleep(1.0)


def route_address(host: str) -> str:
    """This host's IPv4 address on the route to `host` ("" if there is none): a UDP socket's local end after
    connect (which sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host.strip("[]"), 9))
            return sock.getsockname()[0]
    except OSError:
        return ""


def join_every_camera(role: WorkerRole, cfg, join: str, address: str) -> bool:
    """Join the pool of every camera's master (`join`: the first's, the next ones at the next ports, or one each:
    camera_join_addresses), at once: a worker joins the cluster, not one camera. False (one line each) if any
    refused it."""
    masters = camera_join_addresses(join, len(cfg.cameras))
    replies, errors = {}, {}

    def one(master: str) -> None:
        try:
            replies[master] = join_pool(master, address, join_token(cfg), role.instance, cfg.max_message_bytes,
                                        JOIN_WAIT_S)
        except JoinError as exc:
            errors[master] = exc

    threads = [threading.Thread(target=one, args=(m,), name="join-" + m) for m in masters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for master in masters:
        if master in errors:
            log.error("%s", errors[master])
        else:
            reply = replies[master]
            role.joined(int(reply.worker_id))
            log.info("joined the pool of the master at %s as w%d (run %s%s)", master, reply.worker_id, reply.run_id,
                     ", camera %s" % reply.camera if len(masters) > 1 else "")
    return not errors


def run(args) -> int:
    cfg = config.load(args.config, check_files=False)  # a worker needs no video
    joining = bool(getattr(args, "join", None))
    tls.setup(cfg, "worker" if joining else "worker%d" % args.id)  # mutual TLS for every channel/server, if set
    if joining:
        first = camera_join_addresses(args.join, len(cfg.cameras))[0]  # a bad --join: one line, before serving
        address = getattr(args, "advertise", None) or advertised(args.listen, first, JOIN_WAIT_S)
        role = WorkerRole(cfg, -1, listen=args.listen, address=address)
    else:
        role = WorkerRole(cfg, args.id)
    try:
        try:
            role.start()
        except RuntimeError as exc:
            if "Failed to bind" not in str(exc):
                raise
            log.error("cannot listen on %s: the port is in use, or the address is not this host's", role.listen)
            return 1
        if joining and not join_every_camera(role, cfg, args.join, address):
            return 1
        role.serve()
    finally:
        role.stop()
    return 0
