"""Thin gRPC servicer for the worker: proto in, plain calls, proto out; bad input -> error status."""
from __future__ import annotations

import logging
import queue

import grpc

from cnnvideo.plan.profiling import rescale
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert, payload_checks
from cnnvideo.wire import settings

from . import messages
from .runloop import Result, StageReport, StaleError, TaskError

log = logging.getLogger(__name__)


class WorkerServicer(pb_grpc.WorkerServicer):
    """Maps the Worker service onto a WorkerRole."""

    def __init__(self, role) -> None:
        self.role = role

    def Info(self, request, context):
        return messages.worker_info(self.role)

    def _refuse_other_settings(self, request, context) -> None:
        """FAILED_PRECONDITION naming the first key where the request's settings differ from this worker's."""
        why = convert.refusal(self.role.cfg, settings.WORKER_KEYS, "w%d" % self.role.worker_id, request.settings)
        if why:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)

    def Costs(self, request, context):
        self._refuse_other_settings(request, context)
        role = self.role
        if request.refresh:
            role.refresh_costs()
        prof = role.profiled()
        if request.rescale:
            prof, _ = rescale(prof, role.graph, passes=min(max(int(request.iters or 3), 1), 10), stages=role.stages)
        return pb.SegmentCosts(worker_id=role.worker_id, host=role.host, seconds=convert.to_array(prof.seconds,
                               "seconds"), cached=role.costs_cached, encode=convert.to_array(prof.encode, "encode"),
                               decode=convert.to_array(prof.decode, "decode"), wall_per_cpu=prof.wall_per_cpu,
                               cfs_quota_s=role.cfs[0], cfs_period_s=role.cfs[1], device=role.device)

    def StartRun(self, request, context):
        self._refuse_other_settings(request, context)
        try:
            self.role.start_run(messages.settings_from_pb(request))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.Ack(ok=True)

    def PutStage(self, request_iterator, context):
        try:
            label = self.role.put_stage(request_iterator)
        except ValueError as exc:  # StageFileError
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.Ack(ok=True, message=label)

    def Process(self, request, context):
        try:
            run = self.role.current(request.run_id)
        except LookupError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        problem = self._check_payload(request)
        if problem:  # headers only: nothing is queued or allocated for a payload that cannot be right
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            run.accept(messages.task_from_pb(request))
        except (LookupError, StaleError) as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except TaskError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.Ack(ok=True)

    def _check_payload(self, task) -> str:
        """'' if the payload's hop and codec headers fit the cut it claims, else what is wrong."""
        cuts = self.role.graph.cuts
        c = task.payload.cut
        if not 0 <= c < len(cuts):
            return "payload cut %d is not a cut of the model (0..%d)" % (c, len(cuts) - 1)
        # an int8 tensor (scale > 0) at an inner cut travels as its uint8 values
        dtype = "uint8" if task.payload.scale > 0 and 0 < c < len(cuts) - 1 else cuts[c].dtype
        try:
            payload_checks.check_hop_payload(task.payload.data, cuts[c].shape, dtype, self.role.cfg.max_message_bytes)
        except ValueError as exc:  # HopError, CodecError
            return "bad payload at cut %d: %s" % (c, exc)
        return ""

    def _stream(self, request, context, attr):
        try:
            run = self.role.current(request.run_id)
        except LookupError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if request.generation != run.generation:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stream for generation %d, run is at generation %d"
                          % (request.generation, run.generation))
        q = getattr(run, attr)
        run.stream_opened(1)
        try:
            while context.is_active() and not self.role.stopping.is_set() and not run.closed.is_set():
                try:
                    item = q.get(timeout=0.5)
                except queue.Empty:
                    continue
                if not isinstance(item, (Result, StageReport)):  # the run was closed
                    return
                yield messages.to_pb(item)
        finally:
            run.stream_opened(-1)

    def Results(self, request, context):
        return self._stream(request, context, "results")

    def Stages(self, request, context):
        return self._stream(request, context, "stages")

    def Prepare(self, request, context):
        try:
            ready, error = self.role.prepare(messages.stage_plan_from_pb(request.plan), str(request.camera),
                                             messages.calibration_of(request))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.PrepareReply(ready=ready, error=error)

    def Peer(self, request, context):
        try:
            self.role.peer(request.run_id, int(request.generation), int(request.worker), bool(request.out),
                           str(request.address))
        except (LookupError, StaleError) as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.Ack(ok=True)

    def EndRun(self, request, context):
        self.role.end_run(request.run_id)
        return pb.Ack(ok=True)
