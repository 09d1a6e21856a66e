"""The master's Join service (`cluster.join`): the gRPC face of pool.joins, served from the end of setup to the end
of the run. A refusal is a gRPC status with one line (the worker logs it and exits); the master logs one line too."""
from __future__ import annotations

import logging
from typing import Optional

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net

from .pool.admission import JoinRefused
from .pool.joins import Joins

log = logging.getLogger(__name__)


class MasterServicer(pb_grpc.MasterServicer):
    def __init__(self, joins: Joins, run_id: str, camera: str) -> None:
        self.joins = joins
        self.run_id = run_id
        self.camera = camera

    def Join(self, request, context):
        try:
            w = self.joins.join(str(request.address), str(request.token), context.peer())
        except JoinRefused as exc:
            context.abort(getattr(grpc.StatusCode, exc.code), str(exc))
        return pb.JoinReply(worker_id=w, run_id=self.run_id, camera=self.camera)


class JoinServer:
    """Serves Join on `cluster.join` (none when it is empty)."""

    def __init__(self, m, joins: Joins) -> None:
        self.m = m
        self.joins = joins
        self.server: Optional[net.Server] = None

    def start(self) -> None:
        cfg = self.m.cfg
        if not cfg.cluster.join:
            return
        self.server = net.Server(cfg.cluster.join, cfg.max_message_bytes, threads=4, service_name="cnnvideo.Master")
        pb_grpc.add_MasterServicer_to_server(MasterServicer(self.joins, self.m.run_id, cfg.events.camera),
                                             self.server.grpc)
        self.server.start()
        log.info("workers may join the pool on %s%s", cfg.cluster.join,
                 " (with the join token)" if self.joins.admission.token else "")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=1.0)
            self.server = None
