"""One run on a worker: ordered intake, decode, compute, encode and forward/report, with stage timings.

Plain data in and out, no gRPC: the servicer converts proto to the dataclasses here and back, the role
passes two callables, `forward(start_cut, end_cut, x) -> y` (the stage's compute; any backend) and
`emit(task)` (hand a task to the worker its route names next; raises EmitError if it cannot). Results and stage
reports wait in bounded queues that the servicer's streams drain. The hop rules (routes, reporter, senders,
keyframes) are cnnvideo.wire.protocol's.

Links: in a pool a worker may get frames from several senders (the replicas of the stage before it, or the master)
and send to several receivers (the replicas of the next stage). Each link keeps its own state: per sender a
`LinkIn` (decoder reference, cut check, sequence order, the stage it fed last), per receiver an
`OutputHop`. Tasks are decoded in each link's sequence order; among links, the lowest frame id goes first.

A replica the master leaves out after a fault (`Run.peer`, the Peer call) takes only its own links down: this worker
drops its sender state and sequence to it (frames encoded for it are not sent, a forward to it that fails is no
fault: the master sends those frames again on other routes) and its receive state from it, with the tasks of it
still waiting; while it is out nothing goes to it and nothing from it is taken. When it is back, the links start
over on both sides (its next payload either way is a keyframe with sequence number 0).

An unchanged input skips the stage (`RunSettings.skip_unchanged`): when a frame's input payload is an update that
changes nothing (empty after the sender's threshold) and this worker ran the same stage (start and end cut) on the
previous frame, the input it holds is the one it computed then, so the output is the one it holds: the compute is
skipped, and if that output goes over the same hop at the same cut as last time the empty update is forwarded
without comparing (a stage report with `skipped`). A keyframe input is always computed. Exact with respect to what
the receiver holds, and it composes: the empty output lets the next worker skip too.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.model.engines import QParams
from cnnvideo.rpc.link import LinksOut
from cnnvideo.wire import protocol
from cnnvideo.wire.hop import HopReceiver
from cnnvideo.wire.protocol import HopSettings, InputHop, OutputHop

MASTER = -1  # the sender id of the input hop

log = logging.getLogger(__name__)

_STOP = object()
QUEUE_LIMIT = 256  # results / stage reports / forwards waiting: beyond this the compute loop waits (backpressure)
PENDING_LIMIT = 1024  # out-of-order tasks buffered on the input hop


class TaskError(ValueError):
    """A task does not fit this worker's graph or run."""


class StaleError(LookupError):
    """A task or stream of another generation of the run (before or after a resync)."""


class EmitError(RuntimeError):
    """The next worker could not take a task (unreachable, or it refused)."""


@dataclass(frozen=True)
class StagePlan:
    """A plan as a worker gets it: the cuts, and the stage of each worker (-1: left out)."""

    cuts: Tuple[int, ...]
    stage_of: Tuple[int, ...]


@dataclass
class RunSettings:
    """A run as the master started it on this worker."""

    run_id: str
    n_workers: int
    hops: HopSettings = field(default_factory=HopSettings)
    generation: int = 0
    warm: Optional[StagePlan] = None  # the plan of the first frames: the role builds its stage before it answers
    skip_unchanged: bool = False  # an unchanged input reuses the held output instead of computing the stage again
    camera: str = ""  # the camera the run serves: a worker holds one run per camera
    calibration: Optional[object] = None  # int8: the camera's calibration (camera_calibration.CameraCalibration)
    workers: Tuple[str, ...] = ()  # the pool's addresses by id (empty: the worker's config lists them)
    worker_id: int = -1  # this worker's id in the run (-1: the id it was started with)


@dataclass
class Payload:
    """A tensor crossing a hop: hop bytes at `cut`, whether they are whole, float32 dense size (for reports)."""

    cut: int
    data: bytes
    keyframe: bool = False
    bytes_dense: int = 0
    scale: float = 0.0  # > 0: uint8 values of the int8 model, real = scale * (q - zero_point)
    zero_point: int = 0


@dataclass
class Task:
    """One frame's plan with the payload for the worker at `hop`."""

    run_id: str
    frame_id: int
    cuts: List[int]
    payload: Payload
    hop: int = 0
    seq: int = 0
    keyframe: List[bool] = field(default_factory=list)
    epoch: List[int] = field(default_factory=list)
    generation: int = 0
    created_at: float = 0.0
    sent_at: float = 0.0
    route: List[int] = field(default_factory=list)  # the worker of each stage
    link: int = 0  # (not on the wire) how often the link to the receiver had started over when this was encoded

    def workers(self) -> List[int]:
        """The worker of each stage of this frame."""
        return list(self.route)

    def sender(self) -> int:
        """Who sent this task over its hop: MASTER for hop 0, else the worker of the stage before."""
        return MASTER if self.hop == 0 else self.workers()[self.hop - 1]

    def receiver(self) -> int:
        """The worker this task is for."""
        return self.workers()[self.hop]


class LinkIn:
    """One sender's link into this worker: the decoder's reference, the cut check, the order of its tasks,
    and what this worker last computed from it (for skip_unchanged)."""

    def __init__(self, hop: int, max_bytes: int) -> None:
        self.receiver = HopReceiver(max_bytes)
        self.check = InputHop(hop)
        self.next_seq = 0
        self.pending: Dict[int, Tuple[Task, float]] = {}
        # the previous frame's stage from this link: (start, end) cuts, its output, the output's quantisation, the
        # OutputHop it went over, and the tag that message got there
        self.held_out: Optional[Tuple[Tuple[int, int], np.ndarray, Optional[QParams], Optional[OutputHop], int]] = None


@dataclass
class Timing:
    """One timed stage (receive | decode | compute | encode | send) of one frame, unix seconds; `cpu`: the CPU
    seconds of the thread that ran it (decode, compute, encode), which under a CPU cap leaves out the throttled
    wait that wall time holds (ORT's own pool threads, when a stage runs on more than one, are not in it)."""

    stage: str
    start: float
    end: float
    bytes: int = 0
    cpu: float = 0.0


@dataclass
class Result:
    """A finished frame, from the worker that reports it."""

    run_id: str
    generation: int
    frame_id: int
    worker_id: int
    seq: int
    output: Payload
    sent_at: float


@dataclass
class StageReport:
    """What a worker did with one frame (or, with `error`, why it failed)."""

    run_id: str
    generation: int
    frame_id: int
    worker_id: int
    start_cut: int = 0
    end_cut: int = 0
    stages: List[Timing] = field(default_factory=list)
    error: str = ""
    hop_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    hop_out: int = 0
    keyframe_out: bool = False
    dense_out: int = 0
    engine: str = ""  # engine-precision that ran the stage ('' = empty stage)
    engine_note: str = ""  # why it is not the engine asked for
    skipped: bool = False  # the input was unchanged: the stage was not computed, its held output went on
    process_cpu: float = 0.0  # the process's CPU seconds (every thread) as the frame's compute ended (0 = not taken)
    leaving: bool = False  # the worker is leaving: no new frames (frame_id -1)


Forward = Callable[[int, int, np.ndarray], np.ndarray]
Emit = Callable[[Task], None]
# quantisation of the tensor at a cut (None: it travels unquantised) and what runs a stage (label, note)
Quant = Callable[[int], Optional[QParams]]
Describe = Callable[[int, int], Tuple[str, str]]


class Run:
    """State of one master run on one worker: hop state on both sides, frame order, outgoing queues."""

    def __init__(self, settings: RunSettings, worker_id: int, cut_shapes: Sequence[Tuple[int, ...]],
                 forward: Forward, emit: Optional[Emit], max_bytes: int, quant: Optional[Quant] = None,
                 describe: Optional[Describe] = None) -> None:
        self.settings = settings
        self.quant = quant or (lambda cut: None)
        self.describe = describe or (lambda start, end: ("", ""))
        self.run_id = settings.run_id
        self.generation = int(settings.generation)
        self.worker_id = settings.worker_id if settings.worker_id >= 0 else worker_id
        self.workers: List[str] = list(settings.workers)  # the pool's addresses by id (empty: the config's)
        self.n_workers = max(settings.n_workers, len(self.workers))
        self.cut_shapes = [tuple(s) for s in cut_shapes]
        self.num_segments = len(self.cut_shapes) - 1
        self.forward = forward
        self.emit = emit
        self.max_bytes = max_bytes
        self.links_in: Dict[int, LinkIn] = {}  # sender (MASTER or a worker id) -> its link into this worker
        # receiving worker -> this worker's link to it (sender, sequence, and its epoch: how often the master made
        # it start over, Run.peer)
        self.links_out = LinksOut(settings.hops)
        self.result_hop = OutputHop(settings.hops)  # to the master
        self.n_pending = 0
        self.tags: Dict[int, int] = {}  # id(OutputHop) -> tag of the last message encoded on it
        self.out: set = set()  # replicas the master left out: nothing goes to them, nothing from them is taken
        self.n_tags = 0
        self.cond = threading.Condition()
        self.results: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.stages: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.forward_q: queue.Queue = queue.Queue(QUEUE_LIMIT)
        self.failed = ""
        self.closed = threading.Event()
        self.streams = 0  # result and stage streams a master reads now (a leaving worker waits while any is open)
        self.threads = [
            threading.Thread(target=self._compute_loop, name="compute-%s" % self.run_id, daemon=True),
            threading.Thread(target=self._forward_loop, name="forward-%s" % self.run_id, daemon=True),
        ]
        for t in self.threads:
            t.start()

    # ------------------------------------------------------------------ intake
    def accept(self, task: Task) -> None:
        """Queue a task by its hop sequence number; StaleError for another generation, TaskError if it does not
        fit (wrong hop, bad plan, duplicate) or the run failed."""
        now = time.time()
        if task.generation != self.generation:
            raise StaleError("task of generation %d, run %s on worker %d is at generation %d"
                             % (task.generation, self.run_id, self.worker_id, self.generation))
        if self.failed:
            raise TaskError("run %s failed on worker %d: %s" % (self.run_id, self.worker_id, self.failed))
        try:
            protocol.check_route(task.cuts, task.route, self.n_workers, self.num_segments)
        except ValueError as exc:
            raise TaskError(str(exc)) from None
        if not 0 <= task.hop < len(task.cuts) - 1 or task.receiver() != self.worker_id:
            raise TaskError("task for hop %d sent to worker %d, not the worker its route names there"
                            % (task.hop, self.worker_id))
        if task.payload.cut != task.cuts[task.hop]:
            raise TaskError("payload is at cut %d but the plan starts stage %d at cut %d"
                            % (task.payload.cut, task.hop, task.cuts[task.hop]))
        with self.cond:
            if task.sender() in self.out:
                raise StaleError("worker %d was left out of run %s: its tasks are not taken"
                                 % (task.sender(), self.run_id))
            link = self.links_in.get(task.sender())
            if link is None:
                link = self.links_in[task.sender()] = LinkIn(task.hop, self.max_bytes)
            if task.seq < link.next_seq or task.seq in link.pending:
                raise TaskError("duplicate sequence number %d on the link from %s" % (task.seq, _name(task.sender())))
            if self.n_pending >= PENDING_LIMIT:
                raise TaskError("too many out-of-order tasks buffered")
            link.pending[task.seq] = (task, now)
            self.n_pending += 1
            self.cond.notify_all()

    def _ready_link(self) -> Optional[LinkIn]:
        """The link whose next task in sequence has arrived, lowest frame id first (None if none has)."""
        ready = [link for link in self.links_in.values() if link.next_seq in link.pending]
        return min(ready, key=lambda link: link.pending[link.next_seq][0].frame_id) if ready else None

    def _next_task(self) -> Optional[Tuple[Task, float, LinkIn]]:
        with self.cond:
            link = self._ready_link()
            while not self.closed.is_set() and link is None:
                self.cond.wait(0.5)
                link = self._ready_link()
            if self.closed.is_set():
                return None
            task, arrived = link.pending.pop(link.next_seq)
            link.next_seq += 1
            self.n_pending -= 1
            return task, arrived, link

    # ------------------------------------------------------------------ work
    def _compute_loop(self) -> None:
        while True:
            item = self._next_task()
            if item is None:
                return
            task, arrived, link = item
            try:
                self._process(task, arrived, link)
            except Exception as exc:  # noqa: BLE001 - report any failure to the master, keep serving
                log.exception("frame %d failed", task.frame_id)
                self.fail("frame %d: %s" % (task.frame_id, exc), task.frame_id)
                return

    def _process(self, task: Task, arrived: float, link: LinkIn) -> None:
        w, s = self.worker_id, task.hop
        cuts = list(task.cuts)
        stages = [Timing("receive", task.sent_at or arrived, arrived, len(task.payload.data))]
        t0, c0 = time.time(), time.thread_time()
        link.check.admit(task.payload.keyframe, task.payload.cut)
        x = link.receiver.decode(task.payload.data)
        expect = self.cut_shapes[cuts[s]]
        if tuple(x.shape) != expect:
            raise TaskError("payload shape %r does not match cut %d shape %r" % (tuple(x.shape), cuts[s], expect))
        start, end = cuts[s], cuts[s + 1]
        q_out = self._check_quant(task.payload, start)
        t1, c1 = time.time(), time.thread_time()
        stages.append(Timing("decode", t0, t1, cpu=c1 - c0))
        held = link.held_out
        skip = (self.settings.skip_unchanged and link.receiver.last_unchanged and not task.payload.keyframe
                and held is not None and held[0] == (start, end))
        if skip:
            y, q_out = held[1], held[2]
        elif start < end:
            y = np.ascontiguousarray(self.forward(start, end, x))  # a fresh array per call (torch, onnxruntime)
            q_out = self.quant(end)
        else:
            y = np.ascontiguousarray(x)
        t2, c2 = time.time(), time.thread_time()
        stages.append(Timing("compute", t1, t2, cpu=c2 - c1))
        label, note = self.describe(start, end) if start < end else ("", "")
        report = StageReport(self.run_id, self.generation, task.frame_id, w, start_cut=start, end_cut=end,
                             hop_in=s, bytes_in=len(task.payload.data), dense_out=_dense_bytes(y), engine=label,
                             engine_note=note, skipped=bool(skip and start < end), process_cpu=time.process_time())
        qs = (q_out.scale, q_out.zero_point) if q_out is not None and y.dtype == np.uint8 and end > 0 else (0.0, 0)
        if s >= protocol.reporter(cuts):
            data, keyframe = self._encode(self.result_hop, end, y, False, skip, (start, end), q_out, link)
            t3 = time.time()
            stages += [Timing("encode", t2, t3, len(data), time.thread_time() - c2), Timing("send", t3, t3, len(data))]
            result = Result(self.run_id, self.generation, task.frame_id, w, self.result_hop.sent - 1,
                            Payload(end, data, keyframe, _dense_bytes(y), *qs), sent_at=t3)
            report.hop_out, report.bytes_out, report.keyframe_out = self.n_workers, len(data), keyframe
            report.stages = stages
            self.put(self.results, result)
            self.put(self.stages, report)
            return
        nxt = s + 1
        dest = task.workers()[nxt]
        with self.cond:  # Run.peer may start the link over meanwhile: the task then carries the old `link`
            if dest in self.out:  # left out: the master sends this frame again on a route without it
                # (y is still the output of this input link's latest frame: an unchanged next input reuses it)
                link.held_out = ((start, end), y, q_out, None, 0) if start < end else None
                log.info("frame %d not sent to worker %d: the master left it out", task.frame_id, dest)
                return
            hop = self.links_out.get(dest).sender
            restarts = self.links_out.epoch(dest)
        planned = len(task.keyframe) > nxt and bool(task.keyframe[nxt])
        data, keyframe = self._encode(hop, end, y, planned, skip, (start, end), q_out, link)
        t3 = time.time()
        stages.append(Timing("encode", t2, t3, len(data), time.thread_time() - c2))
        out = Task(self.run_id, task.frame_id, cuts, Payload(end, data, keyframe, _dense_bytes(y), *qs), hop=nxt,
                   keyframe=list(task.keyframe), epoch=list(task.epoch), generation=self.generation,
                   created_at=task.created_at, route=list(task.route), link=restarts)
        report.hop_out, report.bytes_out, report.keyframe_out = dest, len(data), keyframe
        report.stages = stages
        self.put(self.forward_q, (out, report))

    def _encode(self, hop: OutputHop, cut: int, y: np.ndarray, planned: bool, skip: bool, stage: Tuple[int, int],
                q_out: Optional[QParams], link: LinkIn) -> Tuple[bytes, bool]:
        """(payload, keyframe) of the output y over `hop`; a skipped stage whose held output was the last message on
        this same hop sends the empty update without comparing (unless the hop must send it whole). Holds y as the
        output of `stage` from `link` for its next frame (only a computed stage's: an empty stage's y is the
        receiver's view)."""
        sent = None
        held = link.held_out
        if skip and held is not None and held[3] is hop and self.tags.get(id(hop)) == held[4]:
            sent = hop.encode_unchanged(cut, planned)
        if sent is None:
            sent = hop.encode(cut, y, planned)
        self.n_tags += 1
        self.tags[id(hop)] = self.n_tags
        link.held_out = (stage, y, q_out, hop, self.n_tags) if stage[0] < stage[1] else None
        return sent

    def _check_quant(self, payload: Payload, cut: int) -> Optional[QParams]:
        """The quantisation the input arrived with (None if float); TaskError if it is not this worker's for the
        cut (another calibration, or int8 against fp32)."""
        mine = self.quant(cut) if cut > 0 else None
        if payload.scale <= 0:
            if mine is not None:
                raise TaskError("cut %d arrived unquantised, this worker runs it int8 (scale %g, zero point %d)"
                                % (cut, mine.scale, mine.zero_point))
            return None
        got = QParams(float(payload.scale), int(payload.zero_point))
        if mine is None or not mine.matches(got.scale, got.zero_point):
            raise TaskError("cut %d arrived int8 with scale %g, zero point %d; this worker's calibration has %s"
                            % (cut, got.scale, got.zero_point,
                               "none (fp32)" if mine is None else "%g, %d" % (mine.scale, mine.zero_point)))
        return got

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
            dest = out.receiver()
            with self.cond:
                dropped = self.link_dropped(out)
                if not dropped:
                    out.seq = self.links_out.get(dest).next_seq()
            if dropped:
                log.info("frame %d not sent to worker %d: the master left it out (or its link started over)",
                         out.frame_id, dest)
                continue
            t0 = time.time()
            out.sent_at = t0
            try:
                if self.emit is None:
                    raise EmitError("worker %d cannot send to other workers" % self.worker_id)
                self.emit(out)
            except EmitError as exc:
                if self.link_dropped(out):  # the master sends the frame again on a route without that replica
                    log.info("frame %d not sent to worker %d, left out meanwhile: %s", out.frame_id, dest, exc)
                    continue
                self.fail(str(exc), out.frame_id)
                continue
            report.stages.append(Timing("send", t0, time.time(), len(out.payload.data)))
            self.put(self.stages, report)

    # ------------------------------------------------------------------ replicas left out and taken back
    def peer(self, worker: int, out: bool, address: str = "") -> None:
        """The master left replica `worker` out (`out`) or took it back: the links between it and this worker start
        over on both sides. The sender state and sequence to it go (tasks encoded for it before are not sent), and so
        do the receive state from it and its tasks still waiting here; while it is out, tasks from it are refused
        (StaleError) and none go to it. With `address`, `worker` joined the pool: the next id of the run's (ValueError
        for any other id)."""
        with self.cond:
            if address:
                if worker != self.n_workers and not (worker < len(self.workers) and self.workers[worker] == address):
                    raise ValueError("worker %d joined at %s, but the run's next id is %d"
                                     % (worker, address, self.n_workers))
                if worker == self.n_workers:
                    self.workers += [""] * (worker - len(self.workers)) + [address]
                    self.n_workers = worker + 1
            elif not 0 <= worker < self.n_workers:
                raise ValueError("no worker %d in a pool of %d" % (worker, self.n_workers))
            self.links_out.restart(worker)
            link = self.links_in.pop(worker, None)
            if link is not None:
                self.n_pending -= len(link.pending)
            if out:
                self.out.add(worker)
            else:
                self.out.discard(worker)
            self.cond.notify_all()
        log.info("run %s: worker %d %s; the links with it start over (%d of its tasks dropped)", self.run_id, worker,
                 "left out" if out else "joined at %s" % address if address else "back",
                 len(link.pending) if link is not None else 0)

    def address_of(self, worker: int, configured: Sequence[str]) -> str:
        """Where worker `worker` of this run listens: the run's roster, else the config's list."""
        with self.cond:
            if worker < len(self.workers):
                return self.workers[worker]
        return configured[worker] if worker < len(configured) else ""


    def link_dropped(self, task: Task) -> bool:
        """Whether `task` (encoded here for its receiver) is not to be sent: the receiver is left out, or its link
        started over since the task was encoded."""
        dest = task.receiver()
        return dest in self.out or task.link != self.links_out.epoch(dest)

    # ------------------------------------------------------------------ lifecycle
    def fail(self, message: str, frame_id: int = -1) -> None:
        """The run cannot go on here: tell the master (a stage report with `error`), refuse further tasks."""
        if self.failed:
            return
        self.failed = message
        log.error("run %s: %s", self.run_id, message)
        self.put(self.stages, StageReport(self.run_id, self.generation, frame_id, self.worker_id, error=message))

    def stream_opened(self, change: int) -> None:
        """A master opened (+1) or left (-1) one of this run's streams."""
        with self.cond:
            self.streams += change

    def announce_leaving(self) -> None:
        """Tell the master this worker is leaving (a stage report with `leaving`): it routes no new frame here and
        ends this run once the frames routed here are done."""
        self.put(self.stages, StageReport(self.run_id, self.generation, -1, self.worker_id, leaving=True))

    def close(self) -> None:
        self.closed.set()
        with self.cond:
            self.cond.notify_all()
        for q in (self.forward_q, self.results, self.stages):  # consumers also watch `closed`
            try:
                q.put_nowait(_STOP)
            except queue.Full:
                pass


def _name(sender: int) -> str:
    return "the master" if sender == MASTER else "worker %d" % sender


def _dense_bytes(y: np.ndarray) -> int:
    """float32 dense size of a tensor (uint8 frames are counted as the float32 input they become)."""
    return int(y.size) * 4
