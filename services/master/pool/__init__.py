"""The pool part of the master: membership (who is in, left out, or back), routes and dispatch to the least-loaded
replica, each input link's sender state, the reorder buffer, and a replica leaving and coming back
(`replicas.Replicas`), and a worker that joins at run time (`joins.Joins`)."""
from __future__ import annotations

from typing import Dict, List, Sequence

from .dispatch import Dispatcher, NoReplica
from .inputs import InputLinks
from .membership import Membership
from .ordering import ReorderBuffer

__all__ = ["Dispatcher", "InputLinks", "Membership", "NoReplica", "Pool", "ReorderBuffer"]


class Pool:
    """The pool's state for one run of `n_workers` workers (the master calls it holding its condition)."""

    def __init__(self, cfg, n_workers: int) -> None:
        self.membership = Membership(n_workers)
        self.dispatcher = Dispatcher(n_workers, self.membership)
        self.inputs = InputLinks(cfg, n_workers)
        self.ordering = ReorderBuffer(max_wait_s=max(cfg.limits.worker_down_s, 1.0))  # results in frame order

    def add_worker(self, cfg, gen: int, at_s: float, address: str) -> int:
        """A worker joined at `address`: its id, with its membership, dispatch and input link state."""
        w = self.membership.add(gen, at_s, address)
        self.dispatcher.add()
        self.inputs.add(cfg)
        return w

    def live(self):
        """The workers not left out."""
        return self.membership.live()

    def members(self, addresses: Sequence[str], devices: Sequence[str], stage_of: Sequence[int],
                now: float) -> List[Dict[str, object]]:
        """The pool's workers for the live page, /state.json and /metrics: each one's address, device, stage in the
        current plan (-1: none), state (serving, leaving, out), frames and frames a second, and when it joined or
        last left (seconds into the run; None: from the start, or never)."""
        ms = self.membership
        joined: Dict[int, float] = {}
        left: Dict[int, float] = {}
        for e in ms.events:
            for w in e.get("joined") or []:
                joined[w] = e["at_s"]
            for w in e["left_out"]:
                left[w] = e["at_s"]
        out = []
        for w in range(ms.n):
            state = "out" if w in ms.out else "leaving" if w in ms.draining else "serving"
            out.append({"worker": "w%d" % w, "address": addresses[w] if w < len(addresses) else "",
                        "device": devices[w] if w < len(devices) else "",
                        "stage": int(stage_of[w]) if w < len(stage_of) else -1, "state": state,
                        "frames": self.dispatcher.sent[w], "fps": round(self.dispatcher.fps(w, now), 2),
                        "joined_at_s": joined.get(w), "left_at_s": left.get(w)})
        return out

    def report(self) -> Dict[str, object]:
        """report.json `pool`'s share of it: the frames each worker got, every leave and return, the ordering."""
        return {"frames_sent_per_worker": {"w%d" % w: n for w, n in enumerate(self.dispatcher.sent)},
                "left_out": list(self.membership.events), "ordering": self.ordering.report()}
