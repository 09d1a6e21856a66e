"""The input links: per first-stage worker the master sends frames to, its link (rpc.link.LinkOut: the closed-loop
delta sender of the uint8 frame, sequence number, epoch, whether its next frame must be whole), its pacer (`local.links:
paced`) and its transfer clock."""
from __future__ import annotations

import threading

from cnnvideo.rpc.link import LinksOut
from cnnvideo.wire.pacing import pacer_for
from cnnvideo.wire.protocol import HopSettings


class LinkClock:
    """When each transfer on a link with overlapping calls began, for honest transfer times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free_at = 0.0  # when the link finished its newest transfer

    def busy_start(self, sent_at: float, done_at: float) -> float:
        """A finished call's transfer began when it was sent, or when the link finished the transfer before it if
        that was later: counted from the send, an overlapped message would carry the other's wire time and the
        scheduler would see a slower link."""
        with self.lock:
            start = max(sent_at, min(self.free_at, done_at))
            self.free_at = max(self.free_at, done_at)
        return start


class InputLinks(LinksOut):
    """The master's links to the workers it sends frames to (rpc.link.LinksOut), with each one's pacer and clock."""

    def __init__(self, cfg, n_workers: int) -> None:
        super().__init__(HopSettings.from_delta(cfg.delta, cfg.mode))
        self.n = n_workers  # grows as workers join (add)
        self.pacers = [pacer_for(cfg, w) for w in range(n_workers)]
        self.clocks = [LinkClock() for _ in range(n_workers)]

    def add(self, cfg) -> None:
        """A worker joined: its input link's pacer and clock (its sender is made on its first frame)."""
        self.pacers.append(pacer_for(cfg, self.n))
        self.clocks.append(LinkClock())
        self.n += 1

    def all_key_due(self) -> None:
        """Every link's next frame is whole (the source came back after an outage)."""
        self.key_due(range(self.n))
