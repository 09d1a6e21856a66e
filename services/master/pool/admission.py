"""Who may join the pool, and how often: the join token (compared in constant time) and a rate limit on attempts.
Pure: the clock is passed in, so it tests without a network."""
from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Callable, List

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
    refused: List[str] = field(default_factory=list, init=False)  # why each refused attempt was refused

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

    def _refuse(self, exc: JoinRefused) -> None:
        self.refused.append(str(exc))
        raise exc
