"""Routes: for each frame, one replica of each stage of its plan, the one with the fewest frames outstanding (not
round-robin: a slower or busier device has more frames outstanding and so gets fewer). Workers the membership left
out get none until they are taken back, and workers leaving get no new one. Pure bookkeeping: the master calls it
holding its condition."""
from __future__ import annotations

import collections
import time
from typing import Deque, List, Optional, Sequence

from cnnvideo.plan.plan import Plan

from .membership import Membership

ENDED_KEPT = 512  # end times kept per worker (its frames a second over the last seconds)


class NoReplica(LookupError):
    """A stage of the plan has no worker left to run it."""


class Dispatcher:
    """Frames outstanding per worker, and the route of each new send."""

    def __init__(self, n_workers: int, membership: Optional[Membership] = None) -> None:
        self.membership = membership if membership is not None else Membership(n_workers)
        self.outstanding = [0] * int(n_workers)
        self.sent = [0] * int(n_workers)  # frames each worker was given (the report's per-worker share)
        self._ticks = [0] * int(n_workers)  # when each worker was last picked: ties go to the longest idle
        self._clock = 0
        self.ended: List[Deque[float]] = [collections.deque(maxlen=ENDED_KEPT) for _ in range(int(n_workers))]

    def add(self) -> None:
        """A worker joined (the membership's next id): nothing outstanding on it, nothing sent yet."""
        self.outstanding.append(0)
        self.sent.append(0)
        self._ticks.append(0)
        self.ended.append(collections.deque(maxlen=ENDED_KEPT))

    def usable(self, plan: Plan) -> bool:
        """Whether every stage of `plan` keeps a worker that is not left out."""
        return all(set(g) - self.membership.unroutable() for g in plan.groups)

    def route(self, plan: Plan) -> List[int]:
        """The worker of each stage for the next frame of `plan`; NoReplica if a stage has none left."""
        out = []
        skip = self.membership.unroutable()
        for s, group in enumerate(plan.groups):
            live = [w for w in group if w not in skip]
            if not live:
                raise NoReplica("stage %d of plan %s has no worker left (out or leaving: %s)"
                                % (s, plan, ", ".join("w%d" % w for w in sorted(skip))))
            out.append(min(live, key=lambda w: (self.outstanding[w], self._ticks[w], w)))
        return out

    def take(self, route: Sequence[int]) -> None:
        """A frame went out on `route`."""
        self._clock += 1
        for w in route:
            self.outstanding[w] += 1
            self.sent[w] += 1
            self._ticks[w] = self._clock

    def release(self, route: Sequence[int]) -> None:
        """The frame on `route` ended (its result came, or it was dropped)."""
        now = time.time()
        for w in route:
            self.outstanding[w] = max(self.outstanding[w] - 1, 0)
            self.ended[w].append(now)

    def fps(self, w: int, now: float, window_s: float = 10.0) -> float:
        """Frames through worker w that ended over the last `window_s` seconds, a second."""
        return sum(1 for t in self.ended[w] if t >= now - window_s) / window_s

    def forget(self, workers: Sequence[int]) -> None:
        """Replicas `workers` left: none of their frames is outstanding (those in flight were queued again)."""
        for w in workers:
            self.outstanding[w] = 0

    def reset(self) -> None:
        """A resync: every frame in flight is queued again, none is outstanding."""
        self.outstanding = [0] * len(self.outstanding)
