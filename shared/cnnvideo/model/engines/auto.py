"""`engine: auto`: one StageFactory per engine this worker has, and each stage on the engine its profile says is
fastest for that stage's segments.

The precision is the config's for every engine (it fixes what travels at inner cuts: uint8 with int8, so every
worker sends the same format whichever engine computes), and int8 compute is only a candidate with `precision:
int8`. The choice is per stage (start, end): the engine with the lowest sum of its profiled segment seconds over
the stage, ties to the first (torch), and it is stated with the times compared (`why`)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from cnnvideo.model.engines.base import EngineError, EngineSpec, QParams, Stage, ort_available
from cnnvideo.model.engines.factory import factory_for


class AutoStages:
    """The StageFactory interface (stage, built, qparams, precision, spec, notes, engines_used) over several
    factories, label (engine-precision) -> factory, each stage built on the one `choose` names."""

    def __init__(self, factories: Dict[str, object]) -> None:
        if not factories:
            raise EngineError("engine auto needs at least one engine")
        self.factories = dict(factories)
        first = next(iter(self.factories.values()))
        self.first = first
        self.graph = first.graph
        self.spec = EngineSpec("auto", first.spec.precision, first.spec.threads, first.spec.on_error)
        self.seconds: Dict[str, np.ndarray] = {}

    def set_costs(self, seconds: Dict[str, np.ndarray]) -> None:
        """The profiled seconds per segment [K] of each engine label; ValueError for a label with no factory."""
        unknown = sorted(set(seconds) - set(self.factories))
        if unknown:
            raise ValueError("engine auto: no factory for profiled engine %s" % ", ".join(unknown))
        self.seconds = {label: np.asarray(s, dtype=np.float64) for label, s in seconds.items()}

    def stage_seconds(self, start: int, end: int) -> Dict[str, float]:
        """Profiled seconds of the stage start..end on each engine (empty before set_costs)."""
        return {label: float(s[start:end].sum()) for label, s in self.seconds.items()}

    def choose(self, start: int, end: int) -> Tuple[str, str]:
        """(label of the engine stage start..end runs on, why: the times compared)."""
        times = self.stage_seconds(start, end)
        if not times or start == end:
            return next(iter(self.factories)), ""
        best = min(times, key=lambda label: (times[label], list(self.factories).index(label)))
        compared = ", ".join("%s %.4f s" % (label, t) for label, t in sorted(times.items(), key=lambda kv: kv[1]))
        return best, "auto: stage %d..%d on %s (profiled %s)" % (start, end, best, compared)

    def with_calibration(self, calibration) -> "AutoStages":
        """The same engines with another int8 calibration (StageFactory.with_calibration), the same profiles."""
        other = AutoStages({label: f.with_calibration(calibration) for label, f in self.factories.items()})
        other.seconds = dict(self.seconds)
        return other

    def stage(self, start: int, end: int) -> Stage:
        """The stage on the chosen engine (built on first use, once, by that engine's factory)."""
        return self.factories[self.choose(start, end)[0]].stage(start, end)

    def built(self, start: int, end: int) -> bool:
        return self.factories[self.choose(start, end)[0]].built(start, end)

    def qparams(self, cut: int) -> Optional[QParams]:
        """The cut's quantisation (one calibration, the same for every engine)."""
        return self.first.qparams(cut)

    @property
    def precision(self) -> str:
        return self.first.precision

    @property
    def int8_failed(self) -> str:
        return self.first.int8_failed

    @property
    def notes(self) -> List[str]:
        return [n for f in self.factories.values() for n in f.notes]

    def engines_used(self) -> List[str]:
        return sorted({label for f in self.factories.values() for label in f.engines_used()})


def auto_factories(cfg, graph) -> Dict[str, object]:
    """label -> StageFactory for every engine this host has (torch always, onnxruntime where it imports) at the
    config's precision, torch first; built as `factory_for` builds one."""
    import dataclasses

    out = {}
    for engine in ("torch", "onnxruntime"):
        if engine == "onnxruntime" and not ort_available()[0]:
            continue
        f = factory_for(dataclasses.replace(cfg, engine=engine), graph)
        out["%s-%s" % (engine, cfg.precision)] = f
    return out
