"""The end of a run: let the exactness check finish, write report.json, report.html and outputs.npy, and
decide the exit (`exit_problem`: the one line a failed run ends with, or None)."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Dict, Optional

from cnnvideo.results import report as rpt

from . import reporting
from .links import MasterError

log = logging.getLogger(__name__)


def exit_problem(failure: Optional[str], source_error: Optional[str], interrupted: Optional[int],
                 frames_asked: int, n_frames: int, completed: int, dropped_records, lost: int) -> Optional[str]:
    """Why the run failed, in one line, or None when every frame asked for completed. `dropped_records`: the
    records of dropped frames, in frame order."""
    if failure is not None:
        return "%s; %d/%d frames completed" % (failure, completed, n_frames)
    if source_error is not None:
        return "%s; %d/%d frames completed" % (source_error, completed, n_frames)
    if interrupted is not None and frames_asked > 0 and n_frames < frames_asked:
        return "interrupted by signal %d after %d of %d frames (%d completed)" % (interrupted, n_frames,
                                                                                  frames_asked, completed)
    if dropped_records:
        first = dropped_records[0]
        return "%d frames dropped (frame %d: %s)" % (len(dropped_records), first.frame, first.reason)
    if lost:
        return "%d frames lost" % lost
    return None


class Finisher:
    """Writes the report of the role `m` and raises MasterError with the exit problem, if any."""

    def __init__(self, m) -> None:
        self.m = m

    def check_results(self) -> Optional[float]:
        """Let the online checker finish what is queued; record each checked frame's error."""
        m = self.m
        if m.checker is None:
            return None
        m.checker.close()
        for f, err in m.checker.errors.items():
            rec = m.tracker.records.get(f)
            if rec is not None:
                rec.error = err
        s = m.checker.summary()
        log.info("checked %d of %d results online against the unsplit model (share %g, %d missed): max abs error "
                 "%s", s["checked"], m.tracker.completed, s["share"], s["missed"], s["max_abs_err"])
        if m.checker.problem:
            m.run.fail(m.checker.problem)
        return s["max_abs_err"]

    def finish(self, wall: float) -> int:
        m, cfg = self.m, self.m.cfg
        m.feed.close()  # the capture stops: frames still queued count as skipped (captured = taken + to_trainer
        # + skipped)
        max_err = self.check_results()
        cpu_now = time.process_time()  # the run's CPU ends with its check (writing the report is not counted)
        tr = m.tracker
        n_frames = tr.n_frames
        agreement = m.checker.agreement() if m.checker is not None else (None, None)
        main_plan = tr.main_plan(m.W)
        tel = m.telemetry
        records = tr.ordered()
        extra = {
            "run_id": m.run_id,
            "frame_size": list(cfg.frame_size),
            "weights": cfg.weights,
            "in_flight": cfg.in_flight,
            "group_size": cfg.group_size,
            "bandwidth_MBps": list(cfg.bandwidth),
            "cuts": main_plan,
            "cut_names": [m.infos[0].cuts[c].name for c in main_plan],
            "plan_decisions": [{"from_frame": f, "cuts": c} for f, c in m.scheduler.decisions],
            "plan_warming": m.warmer.report(),
            "engine": cfg.engine, "precision": cfg.precision, "camera": cfg.events.camera,
            "engines": tel.engines_report(m.infos, m.W),
            "predicted_period_s": m.scheduler.predicted_period(),
            "setup_s": {k: round(v, 3) for k, v in m.setup_s.items()},
            "start": rpt.start_figures(records, m.feed.first_read_at),
            "error": m.failure or m.source_error,
            "weights_used": m.weights_used,
            "int8_calibration": (m.recalibration.report(m.calibration_report) if m.recalibration is not None
                                 else m.calibration_report),
            "top1_agreement": agreement[0],
            "top5_overlap": agreement[1],
            "top1_labels": reporting.label_counts(records),
            "thresholds": {"input": cfg.delta.input_threshold, "later": cfg.delta.threshold},
            "skip_unchanged": cfg.delta.skip_unchanged,
            "retried": tr.retried,
            "dropped": tr.dropped,
            "restarts": m.restarts,
            "reliability": {"resyncs": tr.resyncs, "replica_resyncs": tr.replica_resyncs, "generation": tr.generation,
                            "worker_restarts": {"w%d" % w: n for w, n in enumerate(m.worker_restarts)},
                            "ignored_results": tr.ignored, "retries": cfg.reliability.retries,
                            "restart": cfg.reliability.restart},
            "per_frame": reporting.per_frame(records),
            "times": reporting.frame_times(records, m.t_run),
            "spans": reporting.span_rows(tel.spans, m.t_run),
        }
        if m.detecting is not None:  # detector, detections per label, agreement with the unsplit model, people
            extra.update(m.detecting.report())
        plan = reporting.main_plan(records, main_plan)
        extra["pool"] = reporting.pool_report(m, plan)
        extra["plan_decisions"] = [dict(d, groups=[list(g) for g in p.groups])
                                   for d, (_, p) in zip(extra["plan_decisions"], m.scheduler.plans)]
        extra.update(m.scheduler.report(n_frames, plan))
        extra.update(self.live_extra(wall))
        extra["master"] = self.master_cpu(cpu_now)
        unfinished = exit_problem(m.failure, m.source_error, m.interrupted, cfg.frames, n_frames, tr.completed,
                                  [r for r in records if r.status == "dropped"],
                                  n_frames - sum(1 for r in records if r.done_at is not None))  # lost, as in the report
        extra["overhead"] = tel.overheads.finish(m.run_id, unfinished) if tel.overheads is not None else None
        extra["events"] = m.events.close()  # None unless events.enabled: tracks, events by type, MQTT, snapshots
        m.events.sync()
        os.makedirs(m.out, exist_ok=True)
        if m.outputs:  # model outputs of completed frames, in frame order (for cross-run comparisons)
            order = m.outputs.frames()
            m.outputs.save_npy(os.path.join(m.out, "outputs.npy"))
            extra["outputs_frames"] = order if len(order) != n_frames else "all"
        report = rpt.build(frames_total=n_frames, records=records, hops=tel.chain_hops(m.W), spans=tel.spans,
                           model=cfg.model, mode=cfg.mode, scheduler=cfg.scheduler,
                           workers=m.addresses, plan_layers=reporting.plan_layers(m.infos[0], main_plan, m.W),
                           wall_s=wall,
                           max_abs_err=max_err, extra=extra, stages=tel.stage_totals.summary(),
                           stages_skipped=tel.skips_report(m.W))
        if m.results is not None:
            report["results"] = m.results.close()  # after build: set on the report, not on extra
        rpt.write_json(report, os.path.join(m.out, "report.json"))
        rpt.write_html(report, records, tel.spans, os.path.join(m.out, "report.html"),
                       ["m"] + ["w%d" % w for w in range(m.W)], thumbs=m.thumbs.pick(records))
        m.progress.publish(m.tracker, "failed" if m.failure is not None or tr.dropped or report["lost"] else "done")
        log.info("%d/%d frames completed in %.2f s (%.2f fps); report in %s", report["completed"], report["frames"],
                 wall, report["throughput_fps"] or 0.0, m.out)
        start = report.get("start") or {}
        if start.get("first_result_s") is not None:
            log.info("start: first result %.2f s after the first frame was read; %s fps over the first half of the "
                     "results, %s over the second", start["first_result_s"], start["fps_first_half"],
                     start["fps_second_half"])
        if report.get("detector"):  # the lines `cnnvideo local` prints: people per frame, boxes, F1 vs unsplit
            for line in reporting.detector_lines(report):
                log.info("%s", line)
        problem = exit_problem(m.failure, m.source_error, m.interrupted, cfg.frames, n_frames, tr.completed,
                               [r for r in records if r.status == "dropped"], report["lost"])
        if problem is not None:
            raise MasterError(problem)
        return 0

    def master_cpu(self, cpu_now: float) -> Dict[str, Any]:
        """report.json's `master`: this process's CPU seconds (all threads) from the run's start (results.jsonl
        opened, just before the first frame) to `cpu_now`, per completed frame; its setup's CPU before that."""
        m = self.m
        start = m.results.opened_cpu_s if m.results is not None else None
        return rpt.master_cpu(None if start is None else cpu_now - start, m.tracker.completed,
                              m.checker is not None, start)

    def live_extra(self, wall: float):
        """Report fields of the source and real-time figures."""
        m = self.m
        st = m.feed.stats(m.tracker.completed)
        done = m.tracker.completed
        return {
            "run_mode": "live" if m.live else "offline",
            "source": st,
            "skipped": st["skipped"],
            "capture_latency_s": rpt.latency_summary(list(m.capture_latency)),
            "processed_fps": round(done / wall, 4) if wall > 0 else None,
            "check": m.checker.summary() if m.checker is not None else None,
            "interrupted_by_signal": m.interrupted,
            "source_error": m.source_error,
            "live_view_port": m.page.port,
            "das_input_change": ("recent sent frames (running window)" if m.live else "the clip ahead (offline)")
            if m.cfg.scheduler == "das" else None,
        }
