"""Proto <-> the engine's plain dataclasses (the only place the worker's run logic meets the wire types)."""
from __future__ import annotations

from typing import Optional

from cnnvideo.model.engines import EngineError
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc.convert import calibration_from_pb
from cnnvideo.wire.protocol import HopSettings

from .runloop import Payload, Result, RunSettings, StagePlan, StageReport, Task


def calibration_of(msg) -> Optional[object]:
    """The int8 calibration a RunSetup or PrepareRequest carries (None: unset); ValueError (one line) when its fields
    disagree."""
    if not msg.HasField("calibration"):
        return None
    try:
        return calibration_from_pb(msg.calibration)
    except EngineError as exc:
        raise ValueError(str(exc)) from None


def settings_from_pb(msg: pb.RunSetup) -> RunSettings:
    """RunSettings of a RunSetup; ValueError on a mode that is not full or delta, or a calibration whose fields
    disagree (one line)."""
    if msg.mode not in ("full", "delta"):
        raise ValueError("mode must be full or delta, got %r" % msg.mode)
    hops = HopSettings(mode=msg.mode, input_threshold=float(msg.input_threshold), threshold=float(msg.threshold),
                       fp16=bool(msg.fp16))
    calibration = calibration_of(msg)
    return RunSettings(run_id=msg.run_id, n_workers=int(msg.n_workers), hops=hops, generation=int(msg.generation),
                       warm=stage_plan_from_pb(msg.warm) if msg.HasField("warm") else None,
                       skip_unchanged=bool(msg.skip_unchanged), camera=str(msg.camera), calibration=calibration,
                       workers=tuple(str(a) for a in msg.workers),
                       worker_id=int(msg.worker_id) if msg.workers else -1)  # (0 is also an unset id's value)


def stage_plan_from_pb(msg: pb.StagePlan) -> StagePlan:
    """(cuts, stage of each worker) of a StagePlan."""
    return StagePlan(tuple(int(c) for c in msg.cuts), tuple(int(s) for s in msg.stage_of))


def task_from_pb(msg: pb.FrameTask) -> Task:
    p = msg.payload
    return Task(run_id=msg.run_id, frame_id=int(msg.frame_id), cuts=[int(c) for c in msg.cuts],
                payload=Payload(int(p.cut), p.data, bool(p.keyframe), int(p.bytes_dense), float(p.scale),
                                int(p.zero_point)), hop=int(msg.hop),
                seq=int(msg.seq), keyframe=[bool(k) for k in msg.keyframe], epoch=[int(e) for e in msg.epoch],
                generation=int(msg.generation), created_at=msg.created_at, sent_at=msg.sent_at,
                route=[int(w) for w in msg.route])


def _tensor(p: Payload) -> pb.Tensor:
    return pb.Tensor(cut=p.cut, data=p.data, keyframe=p.keyframe, bytes_dense=p.bytes_dense, scale=p.scale,
                     zero_point=p.zero_point)


def task_to_pb(t: Task) -> pb.FrameTask:
    return pb.FrameTask(run_id=t.run_id, frame_id=t.frame_id, cuts=t.cuts, keyframe=t.keyframe, epoch=t.epoch,
                        hop=t.hop, seq=t.seq, payload=_tensor(t.payload), created_at=t.created_at,
                        sent_at=t.sent_at, generation=t.generation, route=t.route)


def result_to_pb(r: Result) -> pb.FrameResult:
    return pb.FrameResult(run_id=r.run_id, generation=r.generation, frame_id=r.frame_id, worker_id=r.worker_id,
                          seq=r.seq, output=_tensor(r.output), sent_at=r.sent_at)


def report_to_pb(r: StageReport) -> pb.StageReport:
    return pb.StageReport(run_id=r.run_id, generation=r.generation, frame_id=r.frame_id, worker_id=r.worker_id,
                          start_cut=r.start_cut, end_cut=r.end_cut, error=r.error, hop_in=r.hop_in,
                          bytes_in=r.bytes_in, bytes_out=r.bytes_out, hop_out=r.hop_out,
                          keyframe_out=r.keyframe_out, dense_out=r.dense_out, engine=r.engine,
                          engine_note=r.engine_note, skipped=r.skipped, process_cpu=r.process_cpu, leaving=r.leaving,
                          stages=[pb.StageTiming(stage=s.stage, start=s.start, end=s.end, bytes=s.bytes, cpu=s.cpu)
                                  for s in r.stages])


def to_pb(item):
    """A Result or StageReport as its proto message."""
    return result_to_pb(item) if isinstance(item, Result) else report_to_pb(item)


def worker_info(role) -> pb.WorkerInfo:
    """What the master asks a worker first: its id, model, cuts, layers per segment, host, instance."""
    graph, cfg = role.graph, role.cfg
    cuts = [pb.CutInfo(index=c.index, name=c.name, shape=list(c.shape), dtype=c.dtype, bytes_dense=int(c.bytes_dense),
                       layer=c.layer) for c in graph.cuts]
    segs = [list(graph.segment_layers(k)) for k in range(len(graph.cuts) - 1)]
    return pb.WorkerInfo(device=role.device, cfs_quota_s=role.cfs[0], cfs_period_s=role.cfs[1],
                         worker_id=role.worker_id, model=cfg.model, weights=cfg.weights, seed=cfg.seed,
                         frame_size=list(cfg.frame_size), cuts=cuts, host=role.host, next=role.next_address,
                         segment_layers=[len(s) for s in segs], layer_names=[layer.name for layer in graph.layers],
                         segment_layer_ids=[i for s in segs for i in s], instance=role.instance,
                         engine=role.stages.spec.label, engine_available=role.engine_available)
