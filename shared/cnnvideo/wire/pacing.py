"""User-space link pacing (`cnnvideo local` with `local.links: paced`): a sender waits as if its message crossed a
link of the configured rate, messages one after another, so the hop's wire time is bytes / rate."""
from __future__ import annotations

import threading
import time
from typing import Optional


class Pacer:
    """A link of `rate` bytes/s: wait(n) returns when an n-byte message sent now would have fully arrived."""

    def __init__(self, rate: float) -> None:
        if not rate > 0:
            raise ValueError("pacing rate must be > 0 bytes/s, got %r" % rate)
        self.rate = float(rate)
        self.free_at = 0.0  # when the link has finished the messages before
        self.lock = threading.Lock()
        self.waited_s = 0.0

    def wait(self, nbytes: int) -> float:
        """Sleep until the message would be through; returns the seconds slept."""
        with self.lock:
            now = time.time()
            done = max(now, self.free_at) + nbytes / self.rate
            self.free_at = done
        wait = done - time.time()
        if wait > 0:
            time.sleep(wait)
            self.waited_s += wait
            return wait
        return 0.0


def pacer_for(cfg, hop: int) -> Optional[Pacer]:
    """The pacer of hop `hop` (into worker `hop`) when the config asks for paced links, else None."""
    if cfg.local.links != "paced":
        return None
    rates = cfg.bandwidth_bytes(max(hop + 1, cfg.n_workers))  # (a worker that joined: the last link's rate)
    return Pacer(rates[hop]) if 0 <= hop < len(rates) else None
