"""The master: reads the video, gets predictors and costs, schedules, sends frames, tracks them, reports."""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
from typing import Dict, List, Optional

import grpc
import numpy as np

from cnnvideo import report as rpt
from cnnvideo.config import Config
from cnnvideo.hop import HopReceiver, HopSender
from cnnvideo.pipeline import input_rates
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import convert, net

from .planning import Planner, cost_inputs, cpu_model

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0  # servers may still be loading models / profiling
SETUP_TIMEOUT_S = 1800.0  # trainer fitting on a slow machine
SPAN_LIMIT = 20000  # stage spans kept for the report's Gantt chart/spans (totals count all): bounded memory


class MasterError(RuntimeError):
    """The run cannot go on (a worker is down, a server refused, a frame was lost)."""


def last_worker_with_work(cuts: List[int]) -> int:
    for w in range(len(cuts) - 2, -1, -1):
        if cuts[w] < cuts[w + 1]:
            return w
    return 0


class OutputStore:
    """Model outputs of completed frames, one row each in a scratch file: memory does not grow with the run."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh = None
        self.shape: tuple = ()
        self.dtype = np.dtype(np.float32)
        self.rows: Dict[int, int] = {}

    def put(self, f: int, y: np.ndarray) -> None:
        if self.fh is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.fh = open(self.path, "w+b")
            self.shape, self.dtype = y.shape, y.dtype
        if y.shape != self.shape or y.dtype != self.dtype:
            raise MasterError("frame %d: output %r %s differs from earlier outputs %r %s" % (f, y.shape, y.dtype,
                                                                                           self.shape, self.dtype))
        self.fh.seek(0, os.SEEK_END)
        self.rows[f] = self.fh.tell() // max(y.nbytes, 1)
        self.fh.write(np.ascontiguousarray(y).tobytes())

    def get(self, f: int) -> np.ndarray:
        n = int(np.prod(self.shape)) * self.dtype.itemsize
        self.fh.seek(self.rows[f] * n)
        return np.frombuffer(self.fh.read(n), dtype=self.dtype).reshape(self.shape)

    def frames(self) -> List[int]:
        return sorted(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def save_npy(self, path: str) -> None:
        """outputs.npy: a (frames, numel) array in frame order, written row by row."""
        numel = int(np.prod(self.shape))
        with open(path, "wb") as out:
            np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                       "fortran_order": False, "shape": (len(self.rows), numel)})
            for f in self.frames():
                out.write(self.get(f).tobytes())

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
            try:
                os.remove(self.path)
            except OSError:
                pass


class MasterRole:
    """Owns the connections to trainer and workers and one run over the configured video."""

    def __init__(self, cfg: Config, out_dir: str, run_id: Optional[str] = None) -> None:
        self.cfg = cfg
        self.out = out_dir
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.W = cfg.n_workers
        self.addresses = list(cfg.cluster.workers)
        self.max_bytes = cfg.max_message_bytes
        self.timeout = cfg.limits.rpc_timeout_s
        self.channels: List[grpc.Channel] = []
        self.stubs: List[pb_grpc.WorkerStub] = []
        self.trainer_stub: Optional[pb_grpc.TrainerStub] = None
        self.cond = threading.Condition()
        self.failure: Optional[str] = None
        self.closing = False
        self.records: Dict[int, rpt.FrameRecord] = {}
        self.outputs = OutputStore(os.path.join(out_dir, ".outputs-%s.raw" % self.run_id))
        self.spans: List[rpt.StageSpan] = []
        self.hops: Dict[str, rpt.HopStats] = {}
        self.completed = 0
        self.last_event = time.time()
        self.calls: List[grpc.Future] = []
        self.threads: List[threading.Thread] = []
        self.infos: List[pb.WorkerInfo] = []
        self.frames: List[np.ndarray] = []
        self.planner: Optional[Planner] = None
        self.predictors = None
        self.setup_s: Dict[str, float] = {}
        self.t_run = 0.0
        self.reference = None  # whole-model executor for the exactness check
        # reliability: generation of the run (bumped by every resync), frames in flight / to re-send, counters
        self.generation = 0
        self.pending_fault: Optional[str] = None
        self.flying: set = set()
        self.retry_q: collections.deque = collections.deque()
        self.next_new = 0
        self.ended = 0  # frames completed or dropped
        self.retried = self.dropped = self.restarts = self.resyncs = self.ignored = 0
        self.worker_restarts = [0] * self.W
        self.stage_totals = rpt.StageTotals()
        self.sender = HopSender(threshold=cfg.delta.input_threshold)
        self.seq0 = 0
        self.last_cut: List[Optional[int]] = [None] * self.W
        self.epochs = [0] * self.W
        self.cut0_shape: tuple = ()
        self.finish_times: collections.deque = collections.deque(maxlen=256)  # recent, seconds since run start

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        from cnnvideo.video import read_frames

        t0 = time.time()
        for addr in self.addresses:
            chan = net.channel(addr, self.max_bytes)
            self.channels.append(chan)
            self.stubs.append(pb_grpc.WorkerStub(chan))
        tchan = net.channel(self.cfg.cluster.trainer, self.max_bytes)
        self.channels.append(tchan)
        self.trainer_stub = pb_grpc.TrainerStub(tchan)
        for name, addr in [("w%d" % i, a) for i, a in enumerate(self.addresses)] + [("trainer",
                                                                                      self.cfg.cluster.trainer)]:
            if not net.wait_healthy(addr, STARTUP_TIMEOUT_S):
                raise MasterError("%s at %s is not serving (no healthy answer in %.0f s)" % (name, addr,
                                                                                            STARTUP_TIMEOUT_S))
        self.infos = [self._call(w, "Info", pb.Empty(), self.timeout) for w in range(self.W)]
        self._check_infos()
        self.cut0_shape = tuple(self.infos[0].cuts[0].shape)
        request = pb.CostRequest(iters=self.cfg.profile_iters, rescale=self.cfg.profile_rescale)
        costs = [self._call(w, "Costs", request, SETUP_TIMEOUT_S) for w in range(self.W)]
        seg_time = np.stack([convert.from_array(c.seconds) for c in costs])
        codec_time = self._codec_times(costs, seg_time.shape[1] + 1)
        self.setup_s["connect_info_costs"] = time.time() - t0
        t1 = time.time()
        self.frames = list(read_frames(self.cfg.video, tuple(self.cfg.frame_size), limit=self.cfg.frames))
        self.setup_s["read_video"] = time.time() - t1
        if self.cfg.check:  # the reference model is loaded up front: memory does not jump at the end of the run
            from cnnvideo.executor import StageExecutor
            from cnnvideo.pipeline import load_graph

            graph = load_graph(self.cfg)
            self.reference = StageExecutor(graph, 0, len(graph.cuts) - 1)
        t2 = time.time()
        self.predictors = self._get_predictors()
        self.setup_s["predictors"] = time.time() - t2
        dense = np.array([c.bytes_dense for c in self.infos[0].cuts], dtype=np.float64)
        prev = None
        nz = []
        for f in self.frames:
            nz.append(input_rates(f, prev, self.cfg.delta.input_threshold))
            prev = f
        frame_nz = np.array(nz)
        delta = self.cfg.mode == "delta"
        mean_nz = frame_nz[1:].mean(axis=0) if len(frame_nz) > 1 else None
        inputs = cost_inputs(seg_time, self.cfg.bandwidth_bytes(), dense, self.predictors, mean_nz, *codec_time,
                             delta_mode=delta, **cpu_model(costs, self.cfg.in_flight, self.cfg.net_cpu_ns_per_byte))
        self.planner = Planner(self.cfg.scheduler, inputs, self.cfg.in_flight, delta, self.cfg.group_size,
                               self.cfg.scheduler_options, self.predictors, frame_nz)
        log.info("setup done in %.1f s: %d frames, %d cuts, scheduler %s", time.time() - t0, len(self.frames),
                 len(dense), self.cfg.scheduler)

    def _call(self, w: int, method: str, request, timeout: float):
        try:
            return getattr(self.stubs[w], method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise MasterError("worker w%d at %s: %s failed: %s" % (w, self.addresses[w], method,
                                                                   net.code_name(exc))) from None

    def _codec_times(self, costs, n_cuts: int):
        """([W, K+1] encode, [W, K+1] decode) seconds from the workers' profiles; (None, None) if any worker
        did not send them (the cost model then charges compute only)."""
        enc, dec = [], []
        for c in costs:
            try:
                e, d = convert.from_array(c.encode), convert.from_array(c.decode)
            except ValueError:
                e = d = np.zeros(0)
            if e.shape != (n_cuts,) or d.shape != (n_cuts,) or not (np.all(np.isfinite(e)) and np.all(np.isfinite(d))):
                log.warning("worker %d sent no usable codec profile: the cost model charges compute only", c.worker_id)
                return None, None
            enc.append(e)
            dec.append(d)
        return np.stack(enc), np.stack(dec)

    def _check_infos(self) -> None:
        first = self.infos[0]
        for w, info in enumerate(self.infos):
            if info.worker_id != w:
                raise MasterError("worker at %s says it is w%d, the config puts it at w%d" % (self.addresses[w],
                                                                                             info.worker_id, w))
            same = (info.model == self.cfg.model and list(info.frame_size) == list(self.cfg.frame_size)
                    and [tuple(c.shape) for c in info.cuts] == [tuple(c.shape) for c in first.cuts])
            if not same:
                raise MasterError("worker w%d at %s runs %s at %s with %d cuts; the master expects %s at %s"
                                  % (w, self.addresses[w], info.model, list(info.frame_size), len(info.cuts),
                                     self.cfg.model, list(self.cfg.frame_size)))

    def _get_predictors(self):
        from cnnvideo.predict import Predictors

        req = pb.PredictorRequest(model=self.cfg.model, weights=self.cfg.weights, seed=self.cfg.seed,
                                  frame_size=list(self.cfg.frame_size))
        deadline = time.time() + self.cfg.reliability.reconnect_s
        delay = 0.2
        while True:
            try:
                msg = self.trainer_stub.GetPredictors(req, timeout=SETUP_TIMEOUT_S)
                break
            except grpc.RpcError as exc:
                retry = self.cfg.reliability.restart and exc.code() == grpc.StatusCode.UNAVAILABLE
                if not retry or time.time() + delay > deadline:
                    raise MasterError("trainer at %s: GetPredictors failed: %s" % (self.cfg.cluster.trainer,
                                                                                   net.code_name(exc))) from None
                log.warning("trainer at %s unavailable (%s); retrying in %.1f s", self.cfg.cluster.trainer,
                            net.code_name(exc), delay)  # a restarted trainer serves its cached predictors
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            return Predictors.from_arrays(convert.from_arrays(msg.arrays))
        except ValueError as exc:
            raise MasterError("trainer sent unusable predictors: %s" % exc) from None

    # ------------------------------------------------------------------ the run
    def serve(self) -> int:
        net.on_signals(lambda signum: self.fail("interrupted by signal %d" % signum))
        for w in range(self.W):
            self._call(w, "StartRun", self._setup_msg(), self.timeout)
        for w in range(self.W):
            self._open_streams(w, self.generation)
        t0 = self.t_run = time.time()
        self._run_loop()
        wall = time.time() - t0
        if self.failure is not None:
            self._name_dead_worker()
        self._close_run()
        return self._finish(wall)

    def _setup_msg(self) -> pb.RunSetup:
        return pb.RunSetup(run_id=self.run_id, mode=self.cfg.mode, input_threshold=self.cfg.delta.input_threshold,
                           threshold=self.cfg.delta.threshold, fp16=self.cfg.delta.fp16, n_workers=self.W,
                           generation=self.generation)

    def _open_streams(self, w: int, gen: int) -> None:
        req = pb.StreamRequest(run_id=self.run_id, generation=gen)
        results = self.stubs[w].Results(req)
        stages = self.stubs[w].Stages(req)
        self.calls.extend([results, stages])
        self.threads = [t for t in self.threads if t.is_alive()]
        for target, call in ((self._read_results, results), (self._read_stages, stages)):
            t = threading.Thread(target=target, args=(w, call, gen), name="%s-w%d-g%d" % (target.__name__, w, gen),
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def _hop(self, name: str) -> rpt.HopStats:
        h = self.hops.get(name)
        if h is None:
            h = self.hops[name] = rpt.HopStats(name)
        return h

    def _span(self, span: rpt.StageSpan) -> None:
        """Count a stage span (holding cond); keep the span itself only up to SPAN_LIMIT (bounded memory)."""
        self.stage_totals.add(span)
        if len(self.spans) < SPAN_LIMIT:
            self.spans.append(span)

    def _read_results(self, w: int, call, gen: int) -> None:
        receiver = HopReceiver(self.max_bytes)  # one per stream: the worker's result sender starts with a keyframe
        try:
            for res in call:
                now = time.time()
                if res.run_id != self.run_id or res.generation != gen:
                    log.warning("ignoring a result of run %s generation %d from w%d", res.run_id, res.generation, w)
                    continue
                try:
                    y = np.array(receiver.decode(res.output.data), copy=True)
                except ValueError as exc:
                    self.fault("worker w%d sent an undecodable result for frame %d: %s" % (w, res.frame_id, exc), gen)
                    return
                t_dec = time.time()
                with self.cond:
                    if gen != self.generation:
                        return  # a resync started: this stream's results are stale
                    rec = self.records.get(res.frame_id)
                    if rec is None or rec.status != "pending" or res.frame_id not in self.flying:
                        self.ignored += 1
                        log.warning("ignoring duplicate/unexpected result for frame %d from w%d", res.frame_id, w)
                        continue
                    rec.done_at = t_dec
                    rec.worker = w
                    rec.status = "completed"
                    self.finish_times.append(t_dec - self.t_run)
                    self.flying.discard(res.frame_id)
                    self.outputs.put(res.frame_id, y)
                    self.completed += 1
                    self.ended += 1
                    self.last_event = now
                    self._hop("w%d->m" % w).add(len(res.output.data), res.output.bytes_dense, now - res.sent_at,
                                                res.output.keyframe)
                    self._span(rpt.StageSpan(res.frame_id, "m", "receive", res.sent_at, now, len(res.output.data)))
                    self._span(rpt.StageSpan(res.frame_id, "m", "decode", now, t_dec))
                    self.cond.notify_all()
                log.debug("frame %d done by w%d (%.3f s)", res.frame_id, w, rec.latency)
            if not self.closing:
                self.fault("worker w%d at %s ended its result stream" % (w, self.addresses[w]), gen)
        except grpc.RpcError as exc:
            if not self.closing:
                self.fault("worker w%d at %s is down (result stream lost: %s)" % (w, self.addresses[w],
                                                                                  net.code_name(exc)), gen)

    def _read_stages(self, w: int, call, gen: int) -> None:
        actor = "w%d" % w
        try:
            for rep in call:
                if rep.run_id != self.run_id or rep.generation != gen:
                    continue
                if rep.error:
                    self.fault("worker w%d reports: %s" % (w, rep.error), gen)
                    continue
                with self.cond:
                    if gen != self.generation:
                        return
                    self.last_event = time.time()
                    for st in rep.stages:
                        self._span(rpt.StageSpan(rep.frame_id, actor, st.stage, st.start, st.end, st.bytes))
                        if st.stage == "compute":  # adaptive scheduler: measured compute per worker
                            self.planner.observe_compute(w, rep.start_cut, rep.end_cut, st.end - st.start)
                    if rep.hop_out < self.W:
                        send = [st for st in rep.stages if st.stage == "send"]
                        wire = (send[0].end - send[0].start) if send else 0.0
                        self._hop("w%d->w%d" % (w, rep.hop_out)).add(rep.bytes_out, rep.dense_out, wire,
                                                                     rep.keyframe_out)
                        self.planner.observe_transfer(rep.hop_out, rep.bytes_out, wire)
            if not self.closing:
                self.fault("worker w%d at %s ended its stage stream" % (w, self.addresses[w]), gen)
        except grpc.RpcError as exc:
            if not self.closing:
                self.fault("worker w%d at %s is down (stage stream lost: %s)" % (w, self.addresses[w],
                                                                                 net.code_name(exc)), gen)

    def fail(self, message: str) -> None:
        """The run cannot go on: stop with `message`."""
        with self.cond:
            if self.failure is None:
                self.failure = message
                log.debug("failure: %s", message)
            self.cond.notify_all()

    def fault(self, message: str, gen: Optional[int] = None) -> None:
        """Something broke in generation `gen` (None = the current one): resync and re-send the frames in flight
        if roles are restarted (reliability.restart), else stop like fail(). Faults of older generations are
        stale (the resync that followed them already re-sent their frames)."""
        with self.cond:
            if gen is not None and gen != self.generation:
                log.debug("stale fault of generation %d: %s", gen, message)
                return
            if not self.cfg.reliability.restart:
                if self.failure is None:
                    self.failure = message
            elif self.pending_fault is None:
                self.pending_fault = message
                log.warning("fault: %s", message)
            self.cond.notify_all()

    def _in_flight(self) -> int:
        return len(self.flying)

    def _wait(self, predicate) -> None:
        """Wait (holding cond) until predicate() or a failure; watch for silent workers."""
        stall_s = max(self.cfg.limits.worker_down_s, 1.0)
        next_probe = time.time() + stall_s
        while self.failure is None and not predicate():
            self.cond.wait(0.2)
            now = time.time()
            if self._in_flight() and now - self.last_event > stall_s and now >= next_probe:
                next_probe = now + stall_s
                gen = self.generation
                self.cond.release()
                try:
                    dead = [w for w in range(self.W) if not net.check_health(self.addresses[w], timeout=2.0)]
                finally:
                    self.cond.acquire()
                if dead:
                    w = dead[0]
                    self.cond.release()
                    try:
                        self.fault("worker w%d at %s does not answer (no progress for %.0f s)"
                                   % (w, self.addresses[w], now - self.last_event), gen)
                    finally:
                        self.cond.acquire()
                elif now - self.last_event > max(self.timeout, 6 * stall_s):
                    self.cond.release()
                    try:
                        self.fault("no progress for %.0f s with %d frames in flight" % (now - self.last_event,
                                                                                        self._in_flight()), gen)
                    finally:
                        self.cond.acquire()

    def _run_loop(self) -> None:
        """Send new frames and re-sends in order, within the in-flight cap; resync after every fault."""
        n = len(self.frames)
        cap = self.cfg.in_flight

        def ready() -> bool:
            if self.pending_fault is not None or self.ended >= n:
                return True
            has_work = bool(self.retry_q) or self.next_new < n
            return has_work and (cap <= 0 or len(self.flying) < cap)

        while True:
            with self.cond:
                self._wait(ready)
                if self.failure is not None or (self.ended >= n and self.pending_fault is None):
                    return
                fault = self.pending_fault
                f, retry = -1, False
                if fault is None:
                    if self.retry_q:
                        f, retry = self.retry_q.popleft(), True
                    else:
                        f = self.next_new
                        self.next_new += 1
            if fault is not None:
                self._recover(fault)
            else:
                self._send_frame(f, retry)

    def _plan(self, f: int, retry: bool) -> List[int]:
        if retry:  # a re-send keeps the frame's plan
            return list(self.records[f].cuts)
        if self.planner.needs_state(f):
            with self.cond:
                now = time.time()
                recs = [self.records[i] for i in sorted(self.flying)]
                flying = [(r.sent_at - self.t_run, r.cuts) for r in recs]
                done = sorted(self.finish_times)
            plan = self.planner.plan_for(f, flying, done, now - self.t_run)
        else:
            plan = self.planner.plan_for(f)
        return list(plan.cuts)

    def _send_frame(self, f: int, retry: bool) -> None:
        cfg = self.cfg
        cuts = self._plan(f, retry)
        lw = last_worker_with_work(cuts)
        periodic = cfg.delta.keyframe_every > 0 and f % cfg.delta.keyframe_every == 0
        keyframe = [False] * self.W
        for w in range(lw + 1):
            changed = self.last_cut[w] != cuts[w]
            keyframe[w] = cfg.mode == "full" or changed or periodic
            if changed and self.last_cut[w] is not None:
                self.epochs[w] += 1
            self.last_cut[w] = cuts[w]
        t0 = time.time()
        x = np.ascontiguousarray(self.frames[f]).reshape(self.cut0_shape)
        data = self.sender.encode(x, keyframe=keyframe[0])
        t1 = time.time()
        gen = self.generation
        task = pb.FrameTask(run_id=self.run_id, generation=gen, frame_id=f, cuts=cuts, keyframe=keyframe,
                            epoch=self.epochs, hop=0, seq=self.seq0, created_at=t0, sent_at=t1,
                            payload=pb.Tensor(cut=0, data=data, keyframe=keyframe[0], bytes_dense=x.size * 4))
        self.seq0 += 1
        with self.cond:
            rec = self.records.get(f)
            if rec is None:
                rec = self.records[f] = rpt.FrameRecord(f, cuts, sent_at=t0)
            rec.attempts += 1
            if retry:
                self.retried += 1
            self.flying.add(f)
            if self.completed == 0 and f == 0:
                self.last_event = t0
        try:
            self.stubs[0].Process(task, timeout=self.timeout)
        except grpc.RpcError as exc:
            self.fault("worker w0 at %s is down (cannot send frame %d: %s)" % (self.addresses[0], f,
                                                                              net.code_name(exc)), gen)
            return
        t2 = time.time()
        with self.cond:
            self._span(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
            self._span(rpt.StageSpan(f, "m", "send", t1, t2, len(data)))
            self._hop("m->w0").add(len(data), x.size * 4, t2 - t1, keyframe[0])
            self.planner.observe_transfer(0, len(data), t2 - t1)
        if f % 10 == 0 and not retry:
            log.info("sent frame %d/%d (plan %s, %d bytes, %d completed)", f + 1, len(self.frames), cuts,
                     len(data), self.completed)

    # ------------------------------------------------------------------ faults: resync and re-send
    def _recover(self, fault: str) -> None:
        """After `fault`: start a new generation, wait (with backoff, up to reliability.reconnect_s) until every
        worker serves, detect restarted ones, reset every hop state on both sides (all hops keyframe) and queue
        the frames that were in flight for re-sending (or drop those out of retries)."""
        rel = self.cfg.reliability
        with self.cond:
            self.generation += 1  # from here on, results, reports and faults of older generations are stale
            gen = self.generation
            self.pending_fault = None
            self.resyncs += 1
            again = []
            for f in sorted(self.flying):
                rec = self.records[f]
                if rec.attempts > rel.retries:
                    rec.status = "dropped"
                    rec.reason = "no result after %d sends; last fault: %s" % (rec.attempts, fault)
                    self.dropped += 1
                    self.ended += 1
                    log.error("frame %d dropped: %s", f, rec.reason)
                else:
                    again.append(f)
            self.flying.clear()
            self.retry_q = collections.deque(sorted(set(again) | set(self.retry_q)))
        log.warning("resync %d (generation %d): %s; %d frames to re-send", self.resyncs, gen, fault, len(again))
        old_calls, self.calls = self.calls, []
        for call in old_calls:
            call.cancel()
        deadline = time.time() + rel.reconnect_s
        delay = 0.2
        while self.failure is None:
            down = [w for w in range(self.W) if not net.check_health(self.addresses[w], timeout=1.0)]
            if not down:
                try:
                    self._resync(gen)
                    break
                except (MasterError, grpc.RpcError) as exc:
                    problem = str(exc) if isinstance(exc, MasterError) else net.code_name(exc)
            else:
                problem = "worker w%d at %s is down" % (down[0], self.addresses[down[0]])
            if time.time() + delay > deadline:
                self.fail("%s and did not come back within %.0f s (fault: %s)" % (problem, rel.reconnect_s, fault))
                return
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        with self.cond:
            self.last_event = time.time()

    def _resync(self, gen: int) -> None:
        """Fresh channels (no reconnect backoff), restart detection, StartRun(gen) everywhere, new streams."""
        for w, addr in enumerate(self.addresses):
            self.channels[w].close()
            self.channels[w] = net.channel(addr, self.max_bytes)
            self.stubs[w] = pb_grpc.WorkerStub(self.channels[w])
        infos = [self._call(w, "Info", pb.Empty(), self.timeout) for w in range(self.W)]
        for w, info in enumerate(infos):
            if info.instance != self.infos[w].instance:
                self.restarts += 1
                self.worker_restarts[w] += 1
                log.warning("worker w%d at %s restarted (instance %s -> %s)", w, self.addresses[w],
                            self.infos[w].instance, info.instance)
        self.infos = infos
        self._check_infos()
        setup = self._setup_msg()
        setup.generation = gen
        for w in range(self.W):
            self._call(w, "StartRun", setup, self.timeout)
        for w in range(self.W):
            self._open_streams(w, gen)
        self.sender.reset()  # the input hop keyframes; so does every later hop (fresh runs on the workers)
        self.seq0 = 0
        self.last_cut = [None] * self.W
        self.epochs = [e + 1 for e in self.epochs]
        log.info("resynchronised at generation %d: every hop starts with a keyframe", gen)

    def _name_dead_worker(self) -> None:
        """Make the failure line name the worker that is down, if one is."""
        for w in range(self.W):
            if not net.check_health(self.addresses[w], timeout=1.0):
                tag = "worker w%d at %s is down" % (w, self.addresses[w])
                if not self.failure.startswith(tag):
                    self.failure = "%s: %s" % (tag, self.failure)
                return

    def _close_run(self) -> None:
        with self.cond:
            self.closing = True
        for w in range(self.W):
            try:
                self.stubs[w].EndRun(pb.StreamRequest(run_id=self.run_id), timeout=2.0)
            except grpc.RpcError:
                pass
        for call in self.calls:
            call.cancel()
        for t in self.threads:
            t.join(2.0)

    # ------------------------------------------------------------------ results
    def _check(self) -> Optional[float]:
        from cnnvideo.executor import StageExecutor
        from cnnvideo.pipeline import load_graph

        t0 = time.time()
        ex = self.reference
        if ex is None:
            graph = load_graph(self.cfg)
            ex = StageExecutor(graph, 0, len(graph.cuts) - 1)
        worst = 0.0
        for f in self.outputs.frames():
            out = self.outputs.get(f)
            ref = ex.run(self.frames[f])
            if ref.shape != out.shape:
                raise MasterError("frame %d: result shape %r differs from the master's %r" % (f, out.shape,
                                                                                             ref.shape))
            err = float(np.max(np.abs(ref.astype(np.float64) - out.astype(np.float64)))) if out.size else 0.0
            self.records[f].error = err
            worst = max(worst, err)
        log.info("checked %d results against the master's own full execution in %.1f s: max abs error %.3g",
                 len(self.outputs), time.time() - t0, worst)
        return worst

    def _plan_layers(self, cuts: List[int]) -> List[List[str]]:
        info = self.infos[0]
        counts = list(info.segment_layers)
        ids = list(info.segment_layer_ids)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        names = list(info.layer_names)
        out = []
        for w in range(self.W):
            layer_ids = ids[starts[cuts[w]]:starts[cuts[w + 1]]]
            out.append([names[i] if 0 <= i < len(names) else str(i) for i in layer_ids])
        return out

    def _finish(self, wall: float) -> int:
        max_err = None
        if self.cfg.check and self.outputs and self.failure is None:
            max_err = self._check()
        counts: Dict[tuple, int] = {}
        for r in self.records.values():
            counts[tuple(r.cuts)] = counts.get(tuple(r.cuts), 0) + 1
        main_plan = list(max(counts.items(), key=lambda kv: kv[1])[0]) if counts else [0] * (self.W + 1)
        hop_order = ["m->w0"] + ["w%d->w%d" % (w, w + 1) for w in range(self.W - 1)] + ["w%d->m" % w
                                                                                       for w in range(self.W)]
        hops = [self.hops[n] for n in hop_order if n in self.hops]
        if "w%d->m" % (self.W - 1) not in self.hops:  # always list the chain's own end hop
            hops.append(rpt.HopStats("w%d->m" % (self.W - 1)))
        records = [self.records[f] for f in sorted(self.records)]
        extra = {
            "run_id": self.run_id,
            "frame_size": list(self.cfg.frame_size),
            "weights": self.cfg.weights,
            "in_flight": self.cfg.in_flight,
            "group_size": self.cfg.group_size,
            "bandwidth_MBps": list(self.cfg.bandwidth),
            "cuts": main_plan,
            "cut_names": [self.infos[0].cuts[c].name for c in main_plan],
            "plan_decisions": [{"from_frame": f, "cuts": c} for f, c in self.planner.decisions],
            "predicted_period_s": self.planner.predicted_period(),
            "setup_s": {k: round(v, 3) for k, v in self.setup_s.items()},
            "error": self.failure,
            "thresholds": {"input": self.cfg.delta.input_threshold, "later": self.cfg.delta.threshold},
            "retried": self.retried,
            "dropped": self.dropped,
            "restarts": self.restarts,
            "reliability": {"resyncs": self.resyncs, "generation": self.generation,
                            "worker_restarts": {"w%d" % w: n for w, n in enumerate(self.worker_restarts)},
                            "ignored_results": self.ignored, "retries": self.cfg.reliability.retries,
                            "restart": self.cfg.reliability.restart},
            "per_frame": [{"frame": r.frame, "status": r.status, "sends": r.attempts,
                           "latency_s": None if r.latency is None else round(r.latency, 6),
                           "worker": r.worker, "cuts": r.cuts,
                           "abs_err": None if r.error != r.error else r.error}
                          if not r.reason else
                          {"frame": r.frame, "status": r.status, "sends": r.attempts, "reason": r.reason,
                           "cuts": r.cuts} for r in records],
        }
        t_run = self.t_run
        extra["times"] = [{"frame": r.frame, "sent_s": round(r.sent_at - t_run, 6),
                           "done_s": None if r.done_at is None else round(r.done_at - t_run, 6)} for r in records]
        extra["spans"] = [[s.frame, s.actor, s.stage, round(s.start - t_run, 6), round(s.end - t_run, 6), s.nbytes]
                          for s in self.spans]
        extra.update(self.planner.report_extra(len(self.frames), main_plan))
        report = rpt.build(frames_total=len(self.frames), records=records, hops=hops, spans=self.spans,
                           model=self.cfg.model, mode=self.cfg.mode, scheduler=self.cfg.scheduler,
                           workers=self.addresses, plan_layers=self._plan_layers(main_plan), wall_s=wall,
                           max_abs_err=max_err, extra=extra, stages=self.stage_totals.summary())
        os.makedirs(self.out, exist_ok=True)
        if self.outputs:  # model outputs of completed frames, in frame order (for cross-run comparisons)
            order = self.outputs.frames()
            self.outputs.save_npy(os.path.join(self.out, "outputs.npy"))
            report["outputs_frames"] = order if len(order) != len(self.frames) else "all"
        rpt.write_json(report, os.path.join(self.out, "report.json"))
        rpt.write_html(report, records, self.spans, os.path.join(self.out, "report.html"),
                       ["m"] + ["w%d" % w for w in range(self.W)])
        log.info("%d/%d frames completed in %.2f s (%.2f fps); report in %s", report["completed"], report["frames"],
                 wall, report["throughput_fps"] or 0.0, self.out)
        if self.failure is not None:
            raise MasterError("%s; %d/%d frames completed" % (self.failure, self.completed, len(self.frames)))
        if self.dropped:
            first = next(r for r in records if r.status == "dropped")
            raise MasterError("%d frames dropped (frame %d: %s)" % (self.dropped, first.frame, first.reason))
        if report["lost"]:
            raise MasterError("%d frames lost" % report["lost"])
        return 0

    def stop(self) -> None:
        with self.cond:
            self.closing = True
        self.outputs.close()
        for call in self.calls:
            call.cancel()
        for chan in self.channels:
            chan.close()
