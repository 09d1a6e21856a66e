"""Switch to a new plan only once every worker has built its stage of it.

A re-plan (adaptive, das) may pick cuts no worker has run: an ONNX export, or an int8 calibration and
quantisation, then happens on the frame path and stalls the pipeline (8 s at worker caps 0.1 in
costmodel480-c01-smooth). The warmer asks the workers to build such a plan in the background (the Prepare call)
and keeps the frames on the plan they use until every worker answers ready; the switch then costs nothing.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from cnnvideo.plan.plan import Plan

log = logging.getLogger(__name__)

# (ready, error) of every worker's stage of a Plan; raises when a worker cannot be asked (down, no Prepare call)
Prepare = Callable[[Plan], List[Tuple[bool, str]]]


def _plan(plan) -> Plan:
    """A Plan, or the chain of a list of cuts."""
    return plan if isinstance(plan, Plan) else Plan(tuple(int(c) for c in plan))


def _key(plan) -> Tuple:
    """A hashable plan: its cuts and groups."""
    plan = _plan(plan)
    return plan.cuts, plan.groups


def _cuts(plan) -> List[int]:
    return list(_plan(plan).cuts)

POLL_S = 0.25  # at most one round of Prepare calls per wanted plan this often (a frame is sent meanwhile)


@dataclass
class Switch:
    """One plan a scheduler asked for that was not built yet: when, and when (or why not) frames took it."""

    cuts: List[int]
    asked_frame: int
    asked_at: float
    switched_frame: Optional[int] = None
    wait_s: Optional[float] = None
    polls: int = 0
    refused: str = ""  # a worker cannot build its stage: frames stay on the plan they use
    groups: List[List[int]] = field(default_factory=list)  # the workers of each stage

    def to_dict(self) -> Dict[str, object]:
        return {"cuts": self.cuts, "asked_frame": self.asked_frame, "switched_frame": self.switched_frame,
                "wait_s": None if self.wait_s is None else round(self.wait_s, 3), "polls": self.polls,
                "refused": self.refused or None, "groups": self.groups}


@dataclass
class StageWarmer:
    """Decides each frame's plan from the one the scheduler wants and the one frames use now (see module doc)."""

    prepare: Prepare
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.monotonic
    ready: set = field(default_factory=set)  # plans (tuples) every worker has built
    switches: List[Switch] = field(default_factory=list)
    _pending: Dict[Tuple[int, ...], Switch] = field(default_factory=dict)
    _last_poll: Dict[Tuple[int, ...], float] = field(default_factory=dict)

    def mark_ready(self, plan) -> None:
        """`plan` is built everywhere (the run's first plan: StartRun's warm plan built it)."""
        self.ready.add(_key(plan))

    def choose(self, frame: int, wanted, current):
        """The plan frame `frame` takes: `wanted` if it is built on every worker (or nothing runs yet, or a worker
        cannot be asked: then the frame path builds it, as without warming), else `current` while the workers
        build `wanted` in the background. Plans are costmodel.Plan objects or a chain's cuts (then lists come
        back)."""
        plain = not hasattr(wanted, "cuts")
        out = (lambda p: _cuts(p)) if plain else (lambda p: p)
        key = _key(wanted)
        if current is None or key == _key(current) or key in self.ready:
            return out(wanted)
        sw = self._pending.get(key)
        if sw is None:
            sw = self._pending[key] = Switch(_cuts(wanted), frame, self.clock(),
                                             groups=[list(g) for g in _plan(wanted).groups])
            self.switches.append(sw)
            log.info("plan %s asked at frame %d: workers build its stages, frames stay on %s meanwhile",
                     wanted, frame, current)
        if sw.refused:
            return out(current)
        now = self.clock()
        if now - self._last_poll.get(key, -float("inf")) < self.poll_s:
            return out(current)
        self._last_poll[key] = now
        sw.polls += 1
        try:
            answers = self.prepare(_plan(wanted))
        except Exception as exc:  # noqa: BLE001 - any failure to ask: no warming, the frame path decides
            log.warning("cannot ask the workers to build plan %s (%s); switching now", wanted, exc)
            return out(self._switch(sw, frame, now, key, wanted))
        errors = [e for _, e in answers if e]
        if errors:
            sw.refused = errors[0]
            log.warning("plan %s not taken: %s; frames stay on %s", wanted, errors[0], current)
            return out(current)
        if all(ok for ok, _ in answers):
            return out(self._switch(sw, frame, now, key, wanted))
        return out(current)

    def _switch(self, sw: Switch, frame: int, now: float, key: Tuple, plan):
        self.ready.add(key)
        del self._pending[key]
        sw.switched_frame, sw.wait_s = frame, now - sw.asked_at
        log.info("plan %s built on every worker after %.2f s: frames %d.. take it", plan, sw.wait_s, frame)
        return plan

    def forget(self) -> None:
        """Workers restarted: the stages they had built are gone from memory (their disk cache stays)."""
        self.ready.clear()
        self._last_poll.clear()

    def report(self) -> List[Dict[str, object]]:
        """One entry per plan that had to be built first (report.json `plan_warming`)."""
        return [sw.to_dict() for sw in self.switches]
