"""Results in frame order: the tracker, events, results.jsonl, the live view and the checker get each frame after
every earlier frame that is still on its way. With replicas, frames finish out of order (a slower replica's frame
comes after a later one); a bounded buffer holds the early ones. A frame that is lost or dropped stops holding
others once it leaves the in-flight set; and none waits more than `max_wait_s` or behind more than `max_held`
others: then it goes on out of order (counted as `forced`). Pure: the caller gives the oldest frame in flight."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple


class ReorderBuffer:
    """Completed frames waiting for the earlier ones."""

    def __init__(self, max_held: int = 64, max_wait_s: float = 5.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.max_held = int(max_held)
        self.max_wait_s = float(max_wait_s)
        self.clock = clock
        self.held: Dict[int, Tuple[float, Any]] = {}
        self.delivered = 0
        self.forced = 0  # frames handed on before an earlier one still in flight (the wait ran out)
        self.max_seen_held = 0

    def add(self, frame: int, item: Any) -> None:
        self.held[int(frame)] = (self.clock(), item)
        self.max_seen_held = max(self.max_seen_held, len(self.held))

    def pop_ready(self, oldest_pending: Optional[int]) -> List[Tuple[int, Any]]:
        """The held frames that may go on now, in frame order: those older than `oldest_pending` (the oldest frame
        still in flight or queued for a re-send; None: none is), then any that waited too long or overflow."""
        out = []
        now = self.clock()
        for f in sorted(self.held):
            waited = now - self.held[f][0]
            if oldest_pending is not None and f > oldest_pending and waited < self.max_wait_s \
                    and len(self.held) - len(out) <= self.max_held:
                break
            if oldest_pending is not None and f > oldest_pending:
                self.forced += 1
            out.append((f, self.held[f][1]))
        for f, _ in out:
            del self.held[f]
        self.delivered += len(out)
        return out

    def drain(self) -> List[Tuple[int, Any]]:
        """Everything held, in frame order (the end of the run)."""
        return self.pop_ready(None)

    def report(self) -> Dict[str, int]:
        return {"delivered": self.delivered, "forced_out_of_order": self.forced, "max_held": self.max_seen_held}
