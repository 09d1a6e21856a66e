"""A worker's channels to the other workers it sends to: opened on first use (a chain dials only its next worker,
a pool's replica the replicas of the next stage), paced per receiver under `local.links: paced`, and renewed
when a receiver restarts (a dead peer leaves its channel in reconnect backoff)."""
from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
from cnnvideo.rpc import net
from cnnvideo.wire.pacing import Pacer, pacer_for


class Peers:
    """Stubs to the workers this one sends to, by address (a run's roster names them: a worker that joined at run
    time is in no config), one channel each, made when first asked for."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.lock = threading.Lock()
        self.links: Dict[str, Tuple[object, pb_grpc.WorkerStub]] = {}  # address -> (channel, stub)
        self.pacers: Dict[int, Optional[Pacer]] = {}

    def stub(self, address: str) -> pb_grpc.WorkerStub:
        """The stub of the worker at `address` (a channel is opened on first use)."""
        with self.lock:
            link = self.links.get(address)
            if link is None:
                chan = net.channel(address, self.cfg.max_message_bytes)
                link = self.links[address] = (chan, pb_grpc.WorkerStub(chan))
            return link[1]

    def pacer(self, w: int) -> Optional[Pacer]:
        """The pacer of the link into worker w (`local.links: paced`), else None."""
        with self.lock:
            if w not in self.pacers:
                self.pacers[w] = pacer_for(self.cfg, w)
            return self.pacers[w]

    def renew(self, address: str, stub=None) -> None:
        """A fresh channel to the worker at `address` on next use (if `stub` is given: only if it is still the
        current one)."""
        with self.lock:
            link = self.links.get(address)
            if link is not None and (stub is None or link[1] is stub):
                link[0].close()
                del self.links[address]

    def renew_all(self) -> None:
        with self.lock:
            old, self.links = self.links, {}
        for chan, _ in old.values():
            chan.close()

    close = renew_all
