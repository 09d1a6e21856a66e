"""What the workers and the master's own sends report during a run: stage spans (kept up to SPAN_LIMIT, counted
all), per-hop totals, the engines each worker's stages ran on and the stages it skipped on an unchanged input.
Callers hold the master's lock."""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

from cnnvideo.results import report as rpt

SPAN_LIMIT = 20000  # stage spans kept for the report's Gantt chart/spans (totals count all): bounded memory


def hop_order(n_workers: int) -> List[str]:
    """Report order of the hop names: input, worker to worker, then every worker's result hop."""
    return (["m->w0"] + ["w%d->w%d" % (w, w + 1) for w in range(n_workers - 1)]
            + ["w%d->m" % w for w in range(n_workers)])


class Telemetry:
    """Spans, hop totals and engines of one run; each of `span_listeners` (the live page) sees every span."""

    def __init__(self, limit: int = SPAN_LIMIT) -> None:
        self.limit = limit
        self.spans: List[rpt.StageSpan] = []
        self.hops: Dict[str, rpt.HopStats] = {}
        self.stage_totals = rpt.StageTotals()
        self.engines_ran: Dict[int, Dict[str, str]] = {}  # worker -> engine-precision that ran stages -> why
        self.span_listeners: List[Callable[[rpt.StageSpan], None]] = []  # the live page's, when it is on
        # (worker, start cut, end cut) -> [frames computed, their compute seconds, frames skipped, their seconds]
        self.computes: Dict[Tuple[int, int, int], List[float]] = {}
        # the run's measured per-frame overhead (master.overhead_meter.Overheads; set up at setup)
        self.overheads = None

    def span(self, span: rpt.StageSpan) -> None:
        """Count a stage span; keep the span itself only up to the limit."""
        self.stage_totals.add(span)
        if len(self.spans) < self.limit:
            self.spans.append(span)
        for listen in self.span_listeners:
            listen(span)

    def hop(self, name: str) -> rpt.HopStats:
        """The totals of hop `name` ('m->w0', 'w0->w1', 'w1->m'), created on first use."""
        h = self.hops.get(name)
        if h is None:
            h = self.hops[name] = rpt.HopStats(name)
        return h

    def engine(self, worker: int, label: str, note: str) -> None:
        """Worker `worker` ran a stage on `label` (e.g. 'onnxruntime-int8'), `note` saying why if not as asked."""
        self.engines_ran.setdefault(worker, {}).setdefault(label, note)

    def compute(self, worker: int, start: int, end: int, seconds: float, skipped: bool) -> None:
        """Worker `worker` computed (or, `skipped`, reused the output of) segments start..end-1 of a frame."""
        if end <= start:
            return  # an empty stage forwards: nothing to compute or to skip
        c = self.computes.setdefault((worker, start, end), [0, 0.0, 0, 0.0])
        i = 2 if skipped else 0
        c[i] += 1
        c[i + 1] += max(float(seconds), 0.0)

    def skips_report(self, n_workers: int) -> Dict[str, Dict[str, object]]:
        """Per worker: stages computed and skipped, mean compute seconds of a computed frame, the seconds the skips
        took and the seconds they saved (estimate: per stage, skipped x its mean compute time on computed frames;
        a stage never computed in the run saves an unknown time, counted 0)."""
        return skip_summary(self.computes, n_workers)

    def chain_hops(self, n_workers: int) -> List[rpt.HopStats]:
        """The hops that carried something, in report order (a pool's other links after the chain's, by name); the
        chain's own end hop is always listed."""
        order = hop_order(n_workers)
        hops = [self.hops[n] for n in order if n in self.hops]
        hops += [self.hops[n] for n in sorted(set(self.hops) - set(order))]
        last = "w%d->m" % (n_workers - 1)
        if last not in self.hops:
            hops.append(rpt.HopStats(last))
        return hops

    def engines_report(self, infos, n_workers: int) -> List[Dict[str, object]]:
        """Per worker: the engine asked for, whether it can run there, the engines its stages really ran on (with
        the reason where that is not the one asked for)."""
        out = []
        for w in range(n_workers):
            info = infos[w] if infos and w < len(infos) else None
            ran = self.engines_ran.get(w, {})
            out.append({"worker": "w%d" % w, "asked": info.engine if info is not None else "",
                        "available": bool(info.engine_available) if info is not None else None,
                        "ran": sorted(ran), "notes": sorted({n for n in ran.values() if n})})
        return out


def skip_summary(computes: Dict[Tuple[int, int, int], List[float]], n_workers: int) -> Dict[str, Dict[str, object]]:
    """Telemetry.skips_report from its (worker, start, end) -> [computed, seconds, skipped, seconds] counts."""
    out = {}
    for w in range(n_workers):
        rows = [c for (worker, _s, _e), c in computes.items() if worker == w]
        computed, comp_s = sum(int(c[0]) for c in rows), sum(c[1] for c in rows)
        skipped, skip_s = sum(int(c[2]) for c in rows), sum(c[3] for c in rows)
        saved = sum(c[2] * c[1] / c[0] for c in rows if c[0])
        out["w%d" % w] = {"computed": computed, "skipped": skipped,
                          "compute_mean_s": round(comp_s / computed, 6) if computed else None,
                          "skipped_s": round(skip_s, 6), "saved_s": round(saved, 6)}
    return out
