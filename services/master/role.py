"""The master: reads the video, gets predictors and costs, schedules, sends frames, tracks them, reports."""
from __future__ import annotations

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

from .planning import Planner, check_options, cost_inputs

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0  # servers may still be loading models / profiling
SETUP_TIMEOUT_S = 1800.0  # trainer fitting on a slow machine


class MasterError(RuntimeError):
    """The run cannot go on (a worker is down, a server refused, a frame was lost)."""


def last_worker_with_work(cuts: List[int]) -> int:
    for w in range(len(cuts) - 2, -1, -1):
        if cuts[w] < cuts[w + 1]:
            return w
    return 0


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
        self.outputs: Dict[int, np.ndarray] = {}
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

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        from cnnvideo.video import read_frames

        check_options(self.cfg.scheduler, self.cfg.scheduler_options)
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
        seg_time = np.stack([convert.from_array(self._call(w, "Costs", pb.CostRequest(iters=self.cfg.profile_iters),
                                                           SETUP_TIMEOUT_S).seconds) for w in range(self.W)])
        self.setup_s["connect_info_costs"] = time.time() - t0
        t1 = time.time()
        self.frames = list(read_frames(self.cfg.video, tuple(self.cfg.frame_size), limit=self.cfg.frames))
        self.setup_s["read_video"] = time.time() - t1
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
        inputs = cost_inputs(seg_time, self.cfg.bandwidth_bytes(), dense, self.predictors, mean_nz)
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
        try:
            msg = self.trainer_stub.GetPredictors(req, timeout=SETUP_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise MasterError("trainer at %s: GetPredictors failed: %s" % (self.cfg.cluster.trainer,
                                                                           net.code_name(exc))) from None
        try:
            return Predictors.from_arrays(convert.from_arrays(msg.arrays))
        except ValueError as exc:
            raise MasterError("trainer sent unusable predictors: %s" % exc) from None

    # ------------------------------------------------------------------ the run
    def serve(self) -> int:
        net.on_signals(lambda signum: self.fail("interrupted by signal %d" % signum))
        setup = pb.RunSetup(run_id=self.run_id, mode=self.cfg.mode, input_threshold=self.cfg.delta.input_threshold,
                            threshold=self.cfg.delta.threshold, fp16=self.cfg.delta.fp16, n_workers=self.W)
        for w in range(self.W):
            self._call(w, "StartRun", setup, self.timeout)
        for w in range(self.W):
            self._open_streams(w)
        t0 = self.t_run = time.time()
        self._send_all()
        self._wait_done()
        wall = time.time() - t0
        if self.failure is not None:
            self._name_dead_worker()
        self._close_run()
        return self._finish(wall)

    def _open_streams(self, w: int) -> None:
        req = pb.StreamRequest(run_id=self.run_id)
        results = self.stubs[w].Results(req)
        stages = self.stubs[w].Stages(req)
        self.calls.extend([results, stages])
        for target, call in ((self._read_results, results), (self._read_stages, stages)):
            t = threading.Thread(target=target, args=(w, call), name="%s-w%d" % (target.__name__, w), daemon=True)
            t.start()
            self.threads.append(t)

    def _hop(self, name: str) -> rpt.HopStats:
        h = self.hops.get(name)
        if h is None:
            h = self.hops[name] = rpt.HopStats(name)
        return h

    def _read_results(self, w: int, call) -> None:
        receiver = HopReceiver(self.max_bytes)
        try:
            for res in call:
                now = time.time()
                try:
                    y = np.array(receiver.decode(res.output.data), copy=True)
                except ValueError as exc:
                    self.fail("worker w%d sent an undecodable result for frame %d: %s" % (w, res.frame_id, exc))
                    return
                t_dec = time.time()
                with self.cond:
                    rec = self.records.get(res.frame_id)
                    if rec is None or rec.done_at is not None:
                        log.warning("ignoring unexpected result for frame %d from w%d", res.frame_id, w)
                        continue
                    rec.done_at = t_dec
                    rec.worker = w
                    self.outputs[res.frame_id] = y
                    self.completed += 1
                    self.last_event = now
                    self._hop("w%d->m" % w).add(len(res.output.data), res.output.bytes_dense, now - res.sent_at,
                                                res.output.keyframe)
                    self.spans.append(rpt.StageSpan(res.frame_id, "m", "receive", res.sent_at, now,
                                                    len(res.output.data)))
                    self.spans.append(rpt.StageSpan(res.frame_id, "m", "decode", now, t_dec))
                    self.cond.notify_all()
                log.debug("frame %d done by w%d (%.3f s)", res.frame_id, w, rec.latency)
            if not self.closing:
                self.fail("worker w%d at %s ended its result stream" % (w, self.addresses[w]))
        except grpc.RpcError as exc:
            if not self.closing:
                self.fail("worker w%d at %s is down (result stream lost: %s)" % (w, self.addresses[w],
                                                                                 net.code_name(exc)))

    def _read_stages(self, w: int, call) -> None:
        actor = "w%d" % w
        try:
            for rep in call:
                if rep.error:
                    self.fail("worker w%d reports: %s" % (w, rep.error))
                    continue
                with self.cond:
                    self.last_event = time.time()
                    for st in rep.stages:
                        self.spans.append(rpt.StageSpan(rep.frame_id, actor, st.stage, st.start, st.end, st.bytes))
                        if st.stage == "compute":  # adaptive scheduler: measured compute per worker
                            self.planner.observe_compute(w, rep.start_cut, rep.end_cut, st.end - st.start)
                    if rep.hop_out < self.W:
                        send = [st for st in rep.stages if st.stage == "send"]
                        wire = (send[0].end - send[0].start) if send else 0.0
                        self._hop("w%d->w%d" % (w, rep.hop_out)).add(rep.bytes_out, rep.dense_out, wire,
                                                                     rep.keyframe_out)
                        self.planner.observe_transfer(rep.hop_out, rep.bytes_out, wire)
        except grpc.RpcError as exc:
            if not self.closing:
                self.fail("worker w%d at %s is down (stage stream lost: %s)" % (w, self.addresses[w],
                                                                                net.code_name(exc)))

    def fail(self, message: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = message
                log.debug("failure: %s", message)
            self.cond.notify_all()

    def _in_flight(self) -> int:
        return len(self.records) - self.completed

    def _wait(self, predicate) -> None:
        """Wait (holding cond) until predicate() or a failure; watch for silent workers."""
        stall_s = max(self.cfg.limits.worker_down_s, 1.0)
        next_probe = time.time() + stall_s
        while self.failure is None and not predicate():
            self.cond.wait(0.2)
            now = time.time()
            if self._in_flight() and now - self.last_event > stall_s and now >= next_probe:
                next_probe = now + stall_s
                self.cond.release()
                try:
                    dead = [w for w in range(self.W) if not net.check_health(self.addresses[w], timeout=2.0)]
                finally:
                    self.cond.acquire()
                if dead:
                    w = dead[0]
                    self.fail("worker w%d at %s does not answer (no progress for %.0f s)" % (w, self.addresses[w],
                                                                                            now - self.last_event))
                elif now - self.last_event > max(self.timeout, 6 * stall_s):
                    self.fail("no progress for %.0f s with %d frames in flight" % (now - self.last_event,
                                                                                   self._in_flight()))

    def _send_all(self) -> None:
        cfg = self.cfg
        full = cfg.mode == "full"
        sender = HopSender(threshold=cfg.delta.input_threshold)
        cut0_shape = tuple(self.infos[0].cuts[0].shape)
        last_cut: List[Optional[int]] = [None] * self.W
        epochs = [0] * self.W
        for f, frame in enumerate(self.frames):
            with self.cond:
                if cfg.in_flight > 0:
                    self._wait(lambda: self._in_flight() < cfg.in_flight)
                if self.failure is not None:
                    return
            if self.planner.needs_state(f):
                with self.cond:
                    now = time.time()
                    recs = [self.records[i] for i in sorted(self.records)]
                    flying = [(r.sent_at - self.t_run, r.cuts) for r in recs if r.done_at is None]
                    done = sorted(r.done_at - self.t_run for r in recs if r.done_at is not None)
                plan = self.planner.plan_for(f, flying, done, now - self.t_run)
            else:
                plan = self.planner.plan_for(f)
            cuts = list(plan.cuts)
            lw = last_worker_with_work(cuts)
            periodic = cfg.delta.keyframe_every > 0 and f % cfg.delta.keyframe_every == 0
            keyframe = [False] * self.W
            for w in range(lw + 1):
                changed = last_cut[w] != cuts[w]
                keyframe[w] = full or changed or periodic
                if changed and last_cut[w] is not None:
                    epochs[w] += 1
                last_cut[w] = cuts[w]
            t0 = time.time()
            x = np.ascontiguousarray(frame).reshape(cut0_shape)
            data = sender.encode(x, keyframe=keyframe[0])
            t1 = time.time()
            task = pb.FrameTask(run_id=self.run_id, frame_id=f, cuts=cuts, keyframe=keyframe, epoch=epochs, hop=0,
                                seq=f, created_at=t0, sent_at=t1,
                                payload=pb.Tensor(cut=0, data=data, keyframe=keyframe[0], bytes_dense=x.size * 4))
            with self.cond:
                self.records[f] = rpt.FrameRecord(f, cuts, sent_at=t0)
                if self.completed == 0 and f == 0:
                    self.last_event = t0
            try:
                self.stubs[0].Process(task, timeout=self.timeout)
            except grpc.RpcError as exc:
                self.fail("worker w0 at %s is down (cannot send frame %d: %s)" % (self.addresses[0], f,
                                                                                 net.code_name(exc)))
                return
            t2 = time.time()
            with self.cond:
                self.spans.append(rpt.StageSpan(f, "m", "encode", t0, t1, len(data)))
                self.spans.append(rpt.StageSpan(f, "m", "send", t1, t2, len(data)))
                self._hop("m->w0").add(len(data), x.size * 4, t2 - t1, keyframe[0])
                self.planner.observe_transfer(0, len(data), t2 - t1)
            if f % 10 == 0:
                log.info("sent frame %d/%d (plan %s, %d bytes, %d completed)", f + 1, len(self.frames), cuts,
                         len(data), self.completed)

    def _wait_done(self) -> None:
        with self.cond:
            self._wait(lambda: self.completed >= len(self.frames))

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
        graph = load_graph(self.cfg)
        ex = StageExecutor(graph, 0, len(graph.cuts) - 1)
        worst = 0.0
        for f, out in sorted(self.outputs.items()):
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
            "per_frame": [{"frame": r.frame, "latency_s": None if r.latency is None else round(r.latency, 6),
                           "worker": r.worker, "cuts": r.cuts,
                           "abs_err": None if r.error != r.error else r.error} for r in records],
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
                           max_abs_err=max_err, extra=extra)
        os.makedirs(self.out, exist_ok=True)
        if self.outputs:  # model outputs of completed frames, in frame order (for cross-run comparisons)
            order = sorted(self.outputs)
            np.save(os.path.join(self.out, "outputs.npy"), np.stack([self.outputs[f].reshape(-1) for f in order]),
                    allow_pickle=False)
            extra["outputs_frames"] = order if len(order) != len(self.frames) else "all"
        rpt.write_json(report, os.path.join(self.out, "report.json"))
        rpt.write_html(report, records, self.spans, os.path.join(self.out, "report.html"),
                       ["m"] + ["w%d" % w for w in range(self.W)])
        log.info("%d/%d frames completed in %.2f s (%.2f fps); report in %s", report["completed"], report["frames"],
                 wall, report["throughput_fps"] or 0.0, self.out)
        if self.failure is not None:
            raise MasterError("%s; %d/%d frames completed" % (self.failure, self.completed, len(self.frames)))
        if report["lost"]:
            raise MasterError("%d frames lost" % report["lost"])
        return 0

    def stop(self) -> None:
        with self.cond:
            self.closing = True
        for call in self.calls:
            call.cancel()
        for chan in self.channels:
            chan.close()
