"""Who is in the pool: the workers left out after a fault, when each left or came back, and each worker's stream
epoch (a result stream opened before the newest opening is stale). Pure bookkeeping: the master calls it holding
its condition. A worker that joins at run time is added here (`add`: the next id)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set


class Membership:
    """The workers of the pool, those left out, and the record of every leave and return."""

    def __init__(self, n_workers: int) -> None:
        self.n = int(n_workers)
        self.out: Set[int] = set()  # left out: routed no frame until taken back
        self.draining: Set[int] = set()  # leaving (SIGTERM): routed no new frame, their frames still finish
        self.events: List[Dict[str, object]] = []  # report.json pool.left_out: every leave and return
        self.stream_epochs = [0] * self.n  # per worker: bumped by each opening of its streams
        self.planned_without: Set[int] = set()  # workers left out that the current plan was made without

    def add(self, gen: int, at_s: float, address: str) -> int:
        """A worker joined the pool at `address`: its id (the next one), in no stage until a plan gives it one."""
        w = self.n
        self.n += 1
        self.stream_epochs.append(0)
        self.events.append({"generation": gen, "left_out": [], "back": [], "joined": [w], "address": address,
                            "scope": "joined", "at_s": round(at_s, 3)})
        return w

    def planned(self, without: Sequence[int]) -> None:
        """The current plan was made without the workers `without` (they had left)."""
        self.planned_without = set(without)

    def live(self) -> List[int]:
        """The workers not left out, in order."""
        return [w for w in range(self.n) if w not in self.out]

    def unroutable(self) -> Set[int]:
        """The workers no new frame may go to: those left out and those leaving."""
        return self.out | self.draining

    def leave_out(self, workers: Sequence[int], gen: int, at_s: float, scope: str = "replica") -> None:
        """Replicas `workers` leave by themselves: after a fault (`replica`: their frames in flight go to the other
        replicas) or drained (`left`: they asked to leave and their frames finished first)."""
        self.out |= set(workers)
        self.draining -= set(workers)
        self.events.append({"generation": gen, "left_out": list(workers), "back": [], "scope": scope,
                            "at_s": round(at_s, 3)})

    def take_back(self, w: int, gen: int, at_s: float) -> None:
        """Replica w serves again and is back by itself."""
        self.out.discard(w)
        self.events.append({"generation": gen, "left_out": [], "back": [w], "scope": "replica",
                            "at_s": round(at_s, 3)})

    def resync(self, leave_out: Sequence[int], gen: int, at_s: float) -> List[int]:
        """A resync of every link in generation `gen` runs without `leave_out`: the workers it takes back."""
        back = sorted(self.out - set(leave_out))
        self.out = set(leave_out)
        if leave_out or back:
            self.events.append({"generation": gen, "left_out": list(leave_out), "back": back,
                                "at_s": round(at_s, 3)})
        return back

    def stale(self, w: int, epoch: Optional[int] = None) -> bool:
        """Whether a fault of worker w is stale: it is left out, or its streams were opened again since `epoch`."""
        return w in self.out or (epoch is not None and epoch != self.stream_epochs[w])

    def opened_streams(self, workers: Sequence[int]) -> None:
        """The streams of `workers` were opened again: older ones are stale."""
        for w in workers:
            self.stream_epochs[w] += 1
