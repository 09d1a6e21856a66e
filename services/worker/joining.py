"""`cnnvideo worker --join HOST:PORT`: ask a running master to take this worker into its pool. A master still setting
up (or not up yet) is waited for; a refusal is one line and the worker exits."""
from __future__ import annotations

import logging
import time

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 300.0  # one Join call: the master profiles the joining worker (Costs) and starts its run
RATE_LIMITED_WAIT_S = 5.0


class JoinError(RuntimeError):
    """This worker cannot join the pool (one line)."""


def join_pool(master: str, address: str, token: str, instance: str, max_bytes: int, wait_s: float) -> pb.JoinReply:
    """Join the pool of the master at `master` as the worker reachable at `address`: the master's reply (the id it
    gave this worker). Waits up to `wait_s` for a master that is not serving yet or still setting up."""
    chan = net.channel(master, max_bytes)
    stub = pb_grpc.MasterStub(chan)
    request = pb.JoinRequest(address=address, token=token, instance=instance)
    deadline = time.time() + wait_s
    said = 0.0
    try:
        while True:
            try:
                return stub.Join(request, timeout=JOIN_TIMEOUT_S)
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details() or ""
                if code == grpc.StatusCode.UNIMPLEMENTED or "http" in details.lower():
                    raise JoinError("%s is not a cnnvideo master (it has no Join service)" % master) from None
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise JoinError("the master at %s refused this worker: %s" % (master, details or code.name)) \
                        from None
                if time.time() >= deadline:
                    raise JoinError("no master took this worker at %s within %.0f s (%s)"
                                    % (master, wait_s, details or code.name)) from None
                if time.time() - said >= 10.0:
                    log.info("waiting to join the pool of the master at %s: %s", master, details or code.name)
                    said = time.time()
                time.sleep(RATE_LIMITED_WAIT_S if code == grpc.StatusCode.RESOURCE_EXHAUSTED else 1.0)
                chan.close()
                chan = net.channel(master, max_bytes)  # (no reconnect backoff left over)
                stub = pb_grpc.MasterStub(chan)
    finally:
        chan.close()
