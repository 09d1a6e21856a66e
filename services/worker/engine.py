"""One run on a worker: ordered intake, decode, compute, encode and forward/report, with stage timings."""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import grpc
import numpy as np

from cnnvideo.hop import HopError, HopReceiver, HopSender
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net

log = logging.getLogger(__name__)

_STOP = object()
QUEUE_LIMIT = 256  # results / stage reports / forwards waiting: beyond this the compute loop waits (backpressure)
PENDING_LIMIT = 1024  # out-of-order tasks buffered on the input hop


class TaskError(ValueError):
    """A FrameTask does not fit this worker's graph or run."""


class StaleError(LookupError):
    """A task or stream of another generation of the run (before or after a resync)."""


def last_worker_with_work(cuts: List[int]) -> int:
    """Index of the last worker whose segment range is non-empty (the one that reports the result)."""
    for w in range(len(cuts) - 2, -1, -1):
        if cuts[w] < cuts[w + 1]:
            return w
    return 0


def check_plan(cuts: List[int], n_workers: int, num_segments: int) -> None:
    if len(cuts) != n_workers + 1:
        raise TaskError("plan has %d cuts, expected %d (workers + 1)" % (len(cuts), n_workers + 1))
    if cuts[0] != 0 or cuts[-1] != num_segments:
        raise TaskError("plan must start at cut 0 and end at cut %d, got %r" % (num_segments, list(cuts)))
    if any(a > b for a, b in zip(cuts, cuts[1:])):
        raise TaskError("plan cuts must be non-decreasing, got %r" % list(cuts))


class Run:
    """State of one master run on one worker: hop state on both sides, frame order, outgoing streams."""

    def __init__(
        self,
        setup: pb.RunSetup,
        worker_id: int,
        graph,
        executor_for: Callable[[int, int], object],
        next_stub: Optional[pb_grpc.WorkerStub],
        next_address: str,
        max_bytes: int,
        rpc_timeout: float,
        pacer=None,
    ) -> None:
        self.run_id = setup.run_id
        self.generation = int(setup.generation)
        self.mode = setup.mode
        self.worker_id = worker_id
        self.n_workers = setup.n_workers
        self.graph = graph
        self.num_segments = len(graph.cuts) - 1
        self.executor_for = executor_for
        self.next_stub = next_stub
        self.next_address = next_address
        self.rpc_timeout = rpc_timeout
        self.pacer = pacer  # `local.links: paced`: the hop out waits bytes / rate, like a shaped link
        later = dict(threshold=float(setup.threshold), fp16=bool(setup.fp16))
        self.receiver = HopReceiver(max_bytes)
        # the hop out of this worker: uint8 frame only if it forwards the raw input (cut 0)
        self.next_sender = HopSender(**later)
        self.next_sender_input = HopSender(threshold=float(setup.input_threshold))
        self.result_sender = HopSender(**later)
        self.last_cut_out = -1  # cut sent on the hop to worker i+1 by the previous frame
        self.in_epoch: Optional[int] = None  # plan epoch of the input hop seen last
        self.result_count = 0
        self.next_seq = 0
        self.out_seq = 0
        self.pending: Dict[int, Tuple[pb.FrameTask, float]] = {}
        self.cond = threading.Condition()
        self.results: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.stages: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.forward_q: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.failed = ""
        self.closed = threading.Event()
        self.threads = [
            threading.Thread(target=self._compute_loop, name="compute-%s" % self.run_id, daemon=True),
            threading.Thread(target=self._forward_loop, name="forward-%s" % self.run_id, daemon=True),
        ]
        for t in self.threads:
            t.start()

    # ------------------------------------------------------------------ intake
    def accept(self, task: pb.FrameTask) -> None:
        """Queue a task by its hop sequence number; raise TaskError on duplicates or a failed run."""
        now = time.time()
        if task.generation != self.generation:
            raise StaleError("task of generation %d, run %s on worker %d is at generation %d"
                             % (task.generation, self.run_id, self.worker_id, self.generation))
        if self.failed:
            raise TaskError("run %s failed on worker %d: %s" % (self.run_id, self.worker_id, self.failed))
        if task.hop != self.worker_id:
            raise TaskError("task for hop %d sent to worker %d" % (task.hop, self.worker_id))
        check_plan(list(task.cuts), self.n_workers, self.num_segments)
        if task.payload.cut != task.cuts[self.worker_id]:
            raise TaskError("payload is at cut %d but the plan starts worker %d at cut %d"
                            % (task.payload.cut, self.worker_id, task.cuts[self.worker_id]))
        with self.cond:
            if task.seq < self.next_seq or task.seq in self.pending:
                raise TaskError("duplicate sequence number %d on hop %d" % (task.seq, task.hop))
            if len(self.pending) >= PENDING_LIMIT:
                raise TaskError("too many out-of-order tasks buffered")
            self.pending[task.seq] = (task, now)
            self.cond.notify_all()

    def _next_task(self) -> Optional[Tuple[pb.FrameTask, float]]:
        with self.cond:
            while not self.closed.is_set() and self.next_seq not in self.pending:
                self.cond.wait(0.5)
            if self.closed.is_set():
                return None
            item = self.pending.pop(self.next_seq)
            self.next_seq += 1
            return item

    # ------------------------------------------------------------------ work
    def _compute_loop(self) -> None:
        while True:
            item = self._next_task()
            if item is None:
                return
            task, arrived = item
            try:
                self._process(task, arrived)
            except Exception as exc:  # noqa: BLE001 - report any failure to the master, keep serving
                log.exception("frame %d failed", task.frame_id)
                self.fail("frame %d: %s" % (task.frame_id, exc), task.frame_id)
                return

    def _process(self, task: pb.FrameTask, arrived: float) -> None:
        w = self.worker_id
        cuts = list(task.cuts)
        stages = [pb.StageTiming(stage="receive", start=task.sent_at or arrived, end=arrived,
                                 bytes=len(task.payload.data))]
        t0 = time.time()
        epoch = int(task.epoch[w]) if len(task.epoch) > w else 0
        if self.in_epoch is not None and epoch != self.in_epoch and not task.payload.keyframe:
            # the plan changed the cut of this hop: only a whole tensor may follow (never a delta on a wrong base)
            raise HopError("hop %d moved to epoch %d without a keyframe (resync needed)" % (w, epoch))
        self.in_epoch = epoch
        x = self.receiver.decode(task.payload.data)
        expect = tuple(self.graph.cuts[cuts[w]].shape)
        if tuple(x.shape) != expect:
            raise TaskError("payload shape %r does not match cut %d shape %r" % (tuple(x.shape), cuts[w], expect))
        t1 = time.time()
        stages.append(pb.StageTiming(stage="decode", start=t0, end=t1))
        start, end = cuts[w], cuts[w + 1]
        y = self.executor_for(start, end).run(x) if start < end else x
        t2 = time.time()
        stages.append(pb.StageTiming(stage="compute", start=t1, end=t2))
        report = pb.StageReport(run_id=self.run_id, generation=self.generation, frame_id=task.frame_id,
                                worker_id=w, start_cut=start,
                                end_cut=end, hop_in=w, bytes_in=len(task.payload.data))
        full = self.mode == "full"
        if w >= last_worker_with_work(cuts) or w == self.n_workers - 1:
            keyframe = full or self.result_count == 0
            data = self.result_sender.encode(np.ascontiguousarray(y), keyframe=keyframe)
            t3 = time.time()
            stages.append(pb.StageTiming(stage="encode", start=t2, end=t3, bytes=len(data)))
            result = pb.FrameResult(run_id=self.run_id, generation=self.generation, frame_id=task.frame_id,
                                    worker_id=w, seq=self.result_count,
                                    output=pb.Tensor(cut=end, data=data, keyframe=keyframe,
                                                     bytes_dense=_dense_bytes(y)), sent_at=t3)
            self.result_count += 1
            stages.append(pb.StageTiming(stage="send", start=t3, end=t3, bytes=len(data)))
            report.hop_out = self.n_workers
            report.bytes_out = len(data)
            report.keyframe_out = keyframe
            report.dense_out = _dense_bytes(y)
            report.stages.extend(stages)
            self.put(self.results, result)
            self.put(self.stages, report)
            return
        nxt = w + 1
        keyframe = full or (len(task.keyframe) > nxt and bool(task.keyframe[nxt]))
        if end != self.last_cut_out:
            keyframe = True
        self.last_cut_out = end
        sender = self.next_sender_input if end == 0 else self.next_sender  # uint8 frame: pixel threshold
        data = sender.encode(np.ascontiguousarray(y), keyframe=keyframe)
        t3 = time.time()
        stages.append(pb.StageTiming(stage="encode", start=t2, end=t3, bytes=len(data)))
        out = pb.FrameTask(run_id=self.run_id, generation=self.generation, frame_id=task.frame_id, cuts=cuts,
                           keyframe=list(task.keyframe),
                           epoch=list(task.epoch), hop=nxt, created_at=task.created_at,
                           payload=pb.Tensor(cut=end, data=data, keyframe=keyframe, bytes_dense=_dense_bytes(y)))
        report.hop_out = nxt
        report.bytes_out = len(data)
        report.keyframe_out = keyframe
        report.dense_out = _dense_bytes(y)
        report.stages.extend(stages)
        self.put(self.forward_q, (out, report))

    def put(self, q: queue.Queue, item) -> bool:
        """Queue `item`, waiting while the queue is full (backpressure); False if the run closed meanwhile."""
        while not self.closed.is_set():
            try:
                q.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _forward_loop(self) -> None:
        while True:
            try:
                item = self.forward_q.get(timeout=0.5)
            except queue.Empty:
                if self.closed.is_set():
                    return
                continue
            if item is _STOP or self.closed.is_set():
                return
            out, report = item
            if self.failed:
                continue
            out.seq = self.out_seq
            self.out_seq += 1
            t0 = time.time()
            out.sent_at = t0
            if self.pacer is not None:
                self.pacer.wait(out.ByteSize())
            try:
                ack = self.next_stub.Process(out, timeout=self.rpc_timeout)
            except grpc.RpcError as exc:
                self.fail("cannot forward frame %d to worker w%d at %s: %s"
                          % (out.frame_id, self.worker_id + 1, self.next_address, net.code_name(exc)), out.frame_id)
                continue
            if not ack.ok:
                self.fail("worker w%d refused frame %d: %s" % (self.worker_id + 1, out.frame_id, ack.message),
                          out.frame_id)
                continue
            report.stages.add(stage="send", start=t0, end=time.time(), bytes=len(out.payload.data))
            self.put(self.stages, report)

    # ------------------------------------------------------------------ lifecycle
    def fail(self, message: str, frame_id: int = -1) -> None:
        if self.failed:
            return
        self.failed = message
        log.error("run %s: %s", self.run_id, message)
        self.put(self.stages, pb.StageReport(run_id=self.run_id, generation=self.generation, frame_id=frame_id,
                                             worker_id=self.worker_id, error=message))

    def close(self) -> None:
        self.closed.set()
        with self.cond:
            self.cond.notify_all()
        for q in (self.forward_q, self.results, self.stages):  # consumers also watch `closed`
            try:
                q.put_nowait(_STOP)
            except queue.Full:
                pass


def _dense_bytes(y: np.ndarray) -> int:
    """float32 dense size of a tensor (uint8 frames are counted as the float32 input they become)."""
    return int(y.size) * 4
