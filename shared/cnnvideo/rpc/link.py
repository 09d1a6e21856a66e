"""A sender's links, the same for the master (its input links to the first stage's replicas) and for a worker (its
links to the next stage's replicas): per receiver a closed-loop delta sender, the sequence number of the next
message, an epoch bumped each time the link alone starts over (a message encoded for an older epoch is not sent),
and whether the next message must be whole. `send_with_retry` is the one way both send a message over a link."""
from __future__ import annotations

import logging
from typing import Callable, Dict

import grpc

from cnnvideo.rpc import net
from cnnvideo.wire.protocol import HopSettings, OutputHop

log = logging.getLogger(__name__)

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class LinkOut:
    """One link to one receiver."""

    def __init__(self, hops: HopSettings, epoch: int = 0) -> None:
        self.sender = OutputHop(hops)  # a fresh sender sends its first tensor whole
        self.seq = 0
        self.epoch = epoch
        self.key_due = False  # the next message goes whole whatever the hop plan says

    def next_seq(self) -> int:
        """The sequence number of the next message on this link."""
        seq = self.seq
        self.seq += 1
        return seq

    def key_first(self) -> bool:
        """Whether the next message must be whole (asked once per message)."""
        due, self.key_due = self.key_due, False
        return due


class LinksOut:
    """A sender's links, by receiver, made on first use."""

    def __init__(self, hops: HopSettings) -> None:
        self.hops = hops
        self.links: Dict[int, LinkOut] = {}
        self.epochs: Dict[int, int] = {}  # receiver -> times its link alone started over

    def get(self, w: int) -> LinkOut:
        """The link to receiver w."""
        link = self.links.get(w)
        if link is None:
            link = self.links[w] = LinkOut(self.hops, self.epochs.get(w, 0))
        return link

    def epoch(self, w: int) -> int:
        return self.epochs.get(w, 0)

    def restart(self, w: int) -> None:
        """The link to w alone starts over (a replica left out or taken back): a fresh sender and sequence in a new
        epoch; messages encoded for the old one are not sent."""
        self.epochs[w] = self.epochs.get(w, 0) + 1
        self.links.pop(w, None)

    def reset(self) -> None:
        """Every link starts over (a resync of a new generation, which drops older messages by itself)."""
        self.links.clear()

    def key_due(self, receivers) -> None:
        """The next message to each of `receivers` goes whole (the camera came back after an outage)."""
        for w in receivers:
            self.get(w).key_due = True


def send_with_retry(stub_for: Callable[[], object], msg, timeout: float, backoff: net.Backoff,
                    still_current: Callable[[], bool], renew: Callable[[object], None], describe: Callable[[str], str]):
    """`Process(msg)` on the stub `stub_for()` gives; while the receiver is unreachable (UNAVAILABLE or
    DEADLINE_EXCEEDED), the message still current and `backoff` not spent, try again on a renewed channel.
    Returns the answer; raises LinkError naming the problem (`describe(code name)`) otherwise."""
    while True:
        stub = stub_for()
        try:
            return stub.Process(msg, timeout=timeout)
        except grpc.RpcError as exc:
            problem = describe(net.code_name(exc))
            if exc.code() not in RETRYABLE or not still_current() or not backoff.wait():
                raise LinkError(problem) from None
            renew(stub)  # a fresh channel: no reconnect backoff from the dead connection
            log.warning("%s; trying again", problem)


class LinkError(RuntimeError):
    """A message could not be sent over a link (the receiver is down, or refused it)."""
