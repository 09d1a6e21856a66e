"""Thin gRPC servicer for the trainer: status and the fitted predictors as typed arrays."""
from __future__ import annotations

import logging

import grpc

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert

log = logging.getLogger(__name__)


NO_FRAMES = "no frames to fit on yet: the master sends them first (PutFrames)"


class TrainerServicer(pb_grpc.TrainerServicer):
    """Maps the Trainer service onto a TrainerRole."""

    def __init__(self, role) -> None:
        self.role = role

    def Status(self, request, context):
        return self.role.status()

    def PutFrames(self, request_iterator, context):
        """The master's captured frames to fit on (a live run): every frame of the call, then one answer."""
        import numpy as np

        frames = []
        want = self.role.cfg.trainer.frames
        for msg in request_iterator:
            if not frames:
                problem = self.role.matches(msg)
                if problem:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
            if len(frames) >= want:  # bounded memory: the trainer keeps trainer.frames frames
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "more than trainer.frames (%d) frames" % want)
            if msg.height <= 0 or msg.width <= 0 or len(msg.rgb) != msg.height * msg.width * 3:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "frame %d: %d bytes for %dx%d RGB"
                              % (len(frames), len(msg.rgb), msg.width, msg.height))
            frames.append(np.frombuffer(msg.rgb, dtype=np.uint8).reshape(msg.height, msg.width, 3))
        problem = self.role.put_frames(frames)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return self.role.status()

    def GetPredictors(self, request, context):
        problem = self.role.matches(request)
        if problem:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        if self.role.from_master and not self.role.frames_in.is_set():  # e.g. it restarted after PutFrames
            context.abort(grpc.StatusCode.NOT_FOUND, NO_FRAMES)
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
