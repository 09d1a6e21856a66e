"""The master's side of the measured per-frame overhead (cnnvideo.plan.overhead): at setup, the figures earlier runs
stored for each worker's device go into the plan; during the run, every stage report's CPU goes to the meter; at
the end, report.json's `overhead` and, from a long enough single-camera run that finished normally, the figures
stored for the next, when they agree with what earlier runs stored (overhead.store; else they are kept apart)."""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.artifacts import overhead_path
from cnnvideo.plan import overhead

log = logging.getLogger(__name__)

CODEC_STAGES = ("decode", "compute", "encode")


class Overheads:
    """One run's measured overhead: `plan_inputs` at setup, `stage_report` per report, `finish` at the end."""

    def __init__(self, cfg, devices: Sequence[str], seg_time: np.ndarray, wall_per_cpu: Sequence[float],
                 caps: Optional[Sequence[Tuple[float, float]]] = None,
                 codec: Tuple[Optional[np.ndarray], Optional[np.ndarray]] = (None, None)) -> None:
        """`caps`: each worker's CFS (quota, period) seconds (None: uncapped); `codec`: the [W, K+1] encode and
        decode seconds the cost model charges (checks.codec_times)."""
        self.cfg = cfg
        self.devices = list(devices)
        self.caps = list(caps) if caps is not None else [(0.0, 0.0)] * len(self.devices)
        self.keys = [overhead.store_key(d, q, p) for d, (q, p) in zip(self.devices, self.caps)]
        self.meter = overhead.OverheadMeter(overhead.profiled_cpu(seg_time, wall_per_cpu),
                                            overhead.profiled_codec_cpu(codec[0], codec[1], wall_per_cpu))
        self.used: List[Optional[overhead.Stored]] = [None] * len(self.devices)

    def plan_inputs(self, seg_time: np.ndarray) -> Tuple[np.ndarray, Any]:
        """(segment times, CPU us a message: a number, or one per worker) the plan is built with: the stored
        figures of each worker's device where cost_model.measured_overhead is on and a run stored them."""
        cm = self.cfg.cost_model
        if not cm.measured_overhead:
            return seg_time, cm.net_cpu_us_per_message
        found = {key: overhead.load_for(self.cfg, device, *cap)
                 for key, device, cap in set(zip(self.keys, self.devices, map(tuple, self.caps))) if key}
        self.used = [found.get(k) if k else None for k in self.keys]
        for k, s in found.items():
            if s is not None:
                log.info("planning %s with the overhead run %s measured: compute x%.3f of the profile, %.0f us a "
                         "message (configured %.0f)", k, s.run_id or "?", s.compute_ratio, s.message_us,
                         cm.net_cpu_us_per_message)
        if not any(s is not None for s in self.used):
            return seg_time, cm.net_cpu_us_per_message
        return overhead.apply(seg_time, cm.net_cpu_us_per_message, self.used)

    def stage_report(self, w: int, rep) -> None:
        """One StageReport of worker w (its process CPU and its stage threads'); a worker that joined after setup
        has no profile here and is not measured."""
        if w >= len(self.devices):
            return
        cpu = {st.stage: st.cpu for st in rep.stages if st.stage in CODEC_STAGES}
        self.meter.add(w, rep.process_cpu, sum(cpu.values()), cpu.get("compute", 0.0), rep.start_cut, rep.end_cut,
                       not rep.skipped, rep.bytes_in + rep.bytes_out)

    def finish(self, run_id: str, unfinished: Optional[str] = None) -> Dict[str, Any]:
        """report.json's `overhead`: per worker what this run measured and whether the plan used stored figures;
        stores the medians per device and cap for the next run, and the device's largest group's as the device's
        figures for a cap no run has measured (a run of MIN_FRAMES or more, one camera: with several, a worker's CPU
        between two of this camera's reports includes the others' frames). `unfinished`: why the run did not finish
        normally (finishing.exit_problem; None: it did), and then nothing is stored. `figures` says per store key what
        became of this run's figures: stored, or refused and why (overhead.store: kept apart, never planned with)."""
        ns = self.cfg.cost_model.net_cpu_ns_per_byte
        measured = self.meter.measured()
        out: Dict[str, Any] = {
            "workers": {"w%d" % w: o.summary(ns) for w, o in sorted(measured.items())},
            "used": {"w%d" % w: {"compute_ratio": round(s.compute_ratio, 4), "message_cpu_us": round(s.message_us, 1),
                                 "from_run": s.run_id} for w, s in enumerate(self.used) if s is not None},
            "finished_normally": unfinished is None,
            "stored": [], "figures": {}}
        if len(self.cfg.cameras) > 1 or not self.cfg.cost_model.measured_overhead:
            return out
        long_enough = {w: o for w, o in measured.items() if o.frames >= overhead.MIN_FRAMES}
        groups = overhead.grouped(long_enough, self.keys, ns, run_id)
        device_of = dict(zip(self.keys, self.devices))
        largest: Dict[str, overhead.Stored] = {}
        for key, stored in groups.items():
            why = self._store(key, stored, unfinished, True, out)
            device = device_of[key]
            if why is None and (device not in largest or stored.frames > largest[device].frames):
                largest[device] = stored
        for device, stored in largest.items():  # an accepted cap's figures: the device's for caps none measured
            self._store(device, stored, None, False, out)
        return out

    def _store(self, key: str, stored: overhead.Stored, unfinished: Optional[str], check: bool,
               out: Dict[str, Any]) -> Optional[str]:
        """Store one key's figures (overhead.store) and say so in `out`; the reason when they were not stored."""
        row: Dict[str, Any] = {"compute_ratio": round(stored.compute_ratio, 4),
                               "message_cpu_us": round(stored.message_us, 1)}
        try:
            why = overhead.store(overhead_path(self.cfg, key), stored, unfinished, check)
        except OSError as exc:
            log.warning("measured overhead not stored (%s)", exc)
            why = "not written (%s)" % exc
            row.update(status="not stored", why=why)
        else:
            if why is None:
                out["stored"].append(key)
                row["status"] = "stored"
            else:
                log.warning("measured overhead of %s not stored, kept apart: run %s measured compute x%.3f of the "
                            "profile, %.0f us a message; %s", key, stored.run_id or "?", stored.compute_ratio,
                            stored.message_us, why)
                row.update(status="not stored" if unfinished is not None else "refused", why=why)
        out["figures"][key] = row
        return why
