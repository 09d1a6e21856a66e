"""Thin gRPC servicer for the trainer: status and the fitted predictors as typed arrays."""
from __future__ import annotations

import logging

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert

log = logging.getLogger(__name__)


class TrainerServicer(pb_grpc.TrainerServicer):
    """Maps the Trainer service onto a TrainerRole."""

    def __init__(self, role) -> None:
        self.role = role

    def Status(self, request, context):
        return self.role.status()

    def GetPredictors(self, request, context):
        problem = self.role.matches(request)
        if problem:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        remaining = context.time_remaining()
        if not self.role.ready.wait(remaining if remaining is not None else None):
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "predictors are still being fitted")
        if self.role.error:
            context.abort(grpc.StatusCode.INTERNAL, "fitting failed: %s" % self.role.error)
        p = self.role.predictors
        meta = {"kind": p.kind, "frames": str(self.role.cfg.trainer.frames)}
        meta.update({"validation_" + k: "%.6g" % v for k, v in self.role.validation.items()})
        return pb.Predictors(model=self.role.cfg.model, arrays=convert.to_arrays(p.to_arrays()), meta=meta,
                             cached=self.role.cached, fit_s=self.role.fit_s)
