"""Who may join the pool, and how often: the join token (compared in constant time) and a rate limit on attempts.
Pure: the clock is passed in, so it tests without a network."""
from __future__ import annotations

import collections
import hmac
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict

from cnnvideo.config_rules import is_host_port

JOINS_PER_MINUTE = 12  # attempts, accepted or not: a scaled service's workers arrive a few a second at most
BURST = 4  # attempts at once (a `--scale worker=4` starts four together)


class JoinRefused(Exception):
    """A join the master does not take: `code` is the gRPC status name, the message one line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Admission:
    """The token check and a token bucket of join attempts (BURST at once, JOINS_PER_MINUTE refilled)."""

    token: str = ""  # the cluster's join token; empty: none asked (loopback, or TLS identities)
    per_minute: float = JOINS_PER_MINUTE
    burst: float = BURST
    clock: Callable[[], float] = time.monotonic
    _level: float = field(default=-1.0, init=False)
    _at: float = field(default=0.0, init=False)
    # why the last refused attempts were refused (bounded: an intruder's attempts must not grow the master)
    refused: Deque[str] = field(default_factory=lambda: collections.deque(maxlen=100), init=False)
    counts: Dict[str, int] = field(default_factory=dict, init=False)  # refusals by gRPC status name
    _said: Dict[str, float] = field(default_factory=dict, init=False)  # when each code was last logged
    _unsaid: Dict[str, int] = field(default_factory=dict, init=False)  # refusals since, not logged

    def admit(self, token: str) -> None:
        """Take one attempt presenting `token`: JoinRefused when it is over the rate or the token is wrong (the rate
        is charged first, so guessing tokens is slowed down too)."""
        now = self.clock()
        if self._level < 0:
            self._level, self._at = self.burst, now
        self._level = min(self.burst, self._level + (now - self._at) * self.per_minute / 60.0)
        self._at = now
        if self._level < 1.0:
            self._refuse(JoinRefused("RESOURCE_EXHAUSTED", "joins are rate-limited (%d a minute): try again later"
                                     % self.per_minute))
        self._level -= 1.0
        if self.token and not hmac.compare_digest(token.encode(), self.token.encode()):
            self._refuse(JoinRefused("PERMISSION_DENIED", "wrong join token"))

    def admit_from(self, address: str, token: str) -> None:
        """admit(token) for a worker that says it serves at `address`; that must be host:port."""
        self.admit(token)
        if not is_host_port(address):
            raise JoinRefused("INVALID_ARGUMENT", "its address must be host:port, got %r" % address)

    def _refuse(self, exc: JoinRefused) -> None:
        self.refused.append(str(exc))
        raise exc

    def say(self, log: logging.Logger, exc: JoinRefused, address: str, peer: str, quiet_s: float = 10.0) -> None:
        """Log one line for a refused join; refusals of one kind (a rate-limited or wrong-token intruder trying
        again and again) are logged at most once every `quiet_s`, with how many were not."""
        self.counts[exc.code] = self.counts.get(exc.code, 0) + 1
        now = self.clock()
        if now - self._said.get(exc.code, -quiet_s) < quiet_s:
            self._unsaid[exc.code] = self._unsaid.get(exc.code, 0) + 1
            return
        more = self._unsaid.pop(exc.code, 0)
        self._said[exc.code] = now
        log.warning("join refused: worker at %s (from %s): %s%s", address or "?", peer or "?", exc,
                    " (and %d more like it in the last %.0f s)" % (more, quiet_s) if more else "")
