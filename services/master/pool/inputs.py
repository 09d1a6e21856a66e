"""The input links: per first-stage worker the master sends frames to, its link (rpc.link.LinkOut: the closed-loop
delta sender of the uint8 frame, sequence number, epoch, whether its next frame must be whole), its pacer (`local.links:
paced`) and its transfer clock."""
from __future__ import annotations

import threading

from cnnvideo.rpc.link import LinksOut
from cnnvideo.wire.pacing import pacer_for
from cnnvideo.wire.protocol import HopSettings, OutputHop


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


class InputLinks:
    """The master's links to the workers it sends frames to (rpc.link.LinksOut), with each one's pacer and clock."""

    def __init__(self, cfg, n_workers: int) -> None:
        self.n = n_workers
        self.links = LinksOut(HopSettings.from_delta(cfg.delta, cfg.mode))
        self.pacers = [pacer_for(cfg, w) for w in range(n_workers)]
        self.clocks = [LinkClock() for _ in range(n_workers)]

    def sender(self, w: int) -> OutputHop:
        """The delta sender of the link to worker w (a fresh one sends a keyframe first)."""
        return self.links.get(w).sender

    def next_seq(self, w: int) -> int:
        """The sequence number of the next message to worker w."""
        return self.links.get(w).next_seq()

    def key_first(self, w: int) -> bool:
        """Whether the next frame to worker w must be whole (the camera came back); asked once per frame."""
        return self.links.get(w).key_first()

    def all_key_due(self) -> None:
        """Every link's next frame is whole (the source came back after an outage)."""
        self.links.key_due(range(self.n))

    def epoch(self, w: int) -> int:
        """How often the link to worker w alone started over."""
        return self.links.epoch(w)

    def reset(self) -> None:
        """A resync: every link starts over with a keyframe."""
        self.links.reset()

    def reset_link(self, w: int) -> None:
        """The link to worker w alone starts over (a replica left out or taken back): a fresh sender and sequence;
        frames already encoded for the old link are not sent."""
        self.links.restart(w)
