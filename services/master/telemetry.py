"""What the workers and the master's own sends report during a run: stage spans (kept up to SPAN_LIMIT, counted
all), per-hop totals and the engines each worker's stages ran on. Callers hold the master's lock."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from cnnvideo.results import report as rpt

SPAN_LIMIT = 20000  # stage spans kept for the report's Gantt chart/spans (totals count all): bounded memory


def hop_order(n_workers: int) -> List[str]:
    """Report order of the hop names: input, worker to worker, then every worker's result hop."""
    return (["m->w0"] + ["w%d->w%d" % (w, w + 1) for w in range(n_workers - 1)]
            + ["w%d->m" % w for w in range(n_workers)])


class Telemetry:
    """Spans, hop totals and engines of one run; `on_span` (the live view's hook) sees every span."""

    def __init__(self, limit: int = SPAN_LIMIT) -> None:
        self.limit = limit
        self.spans: List[rpt.StageSpan] = []
        self.hops: Dict[str, rpt.HopStats] = {}
        self.stage_totals = rpt.StageTotals()
        self.engines_ran: Dict[int, Dict[str, str]] = {}  # worker -> engine-precision that ran stages -> why
        self.on_span: Optional[Callable[[rpt.StageSpan], None]] = None

    def span(self, span: rpt.StageSpan) -> None:
        """Count a stage span; keep the span itself only up to the limit."""
        self.stage_totals.add(span)
        if len(self.spans) < self.limit:
            self.spans.append(span)
        if self.on_span is not None:
            self.on_span(span)

    def hop(self, name: str) -> rpt.HopStats:
        """The totals of hop `name` ('m->w0', 'w0->w1', 'w1->m'), created on first use."""
        h = self.hops.get(name)
        if h is None:
            h = self.hops[name] = rpt.HopStats(name)
        return h

    def engine(self, worker: int, label: str, note: str) -> None:
        """Worker `worker` ran a stage on `label` (e.g. 'onnxruntime-int8'), `note` saying why if not as asked."""
        self.engines_ran.setdefault(worker, {}).setdefault(label, note)

    def chain_hops(self, n_workers: int) -> List[rpt.HopStats]:
        """The hops that carried something, in report order; the chain's own end hop is always listed."""
        hops = [self.hops[n] for n in hop_order(n_workers) if n in self.hops]
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
