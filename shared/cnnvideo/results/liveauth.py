"""The live view's auth (issue 36): the bearer token, browser sessions and a limit on wrong tokens.

A browser cannot send `Authorization: Bearer` when it opens a page, so the page has a login form: the token is
posted once and the server answers with a session cookie. The cookie holds a random session id (256 bits, never
the token); the server keeps only its SHA-256 with an expiry, so a leaked session ends by itself and the token
never has to be stored by the browser. Scripts and scrapers keep sending the bearer header.

Wrong tokens (from the form or a bearer header) are counted per client address over a sliding window; past
`fail_limit` in `fail_window_s` that address gets 429 for any token until the window has moved on (a correct
token too: otherwise the answer would still tell a right guess from a wrong one). A valid session cookie is
not affected. Every wrong token is logged with the client address and how it came, never with the token.
Tokens are compared with hmac.compare_digest. Behind a proxy every client has the proxy's address: they share
one limit.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import secrets
import threading
import time
from typing import Callable, Deque, Dict

log = logging.getLogger(__name__)

SESSION_COOKIE = "cnnvideo_session"
SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 256  # past this the session nearest its end is dropped
FAIL_LIMIT = 5  # wrong tokens a client address may send per window ...
FAIL_WINDOW_S = 60.0  # ... of this many seconds; then 429
MAX_CLIENTS = 4096  # client addresses whose failures are remembered

OK, WRONG, LIMITED = "ok", "wrong", "limited"


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


def cookie_value(header: str, name: str = SESSION_COOKIE) -> str:
    """The value of cookie `name` in a Cookie request header ("" when absent); other cookies of the host (cookies
    are shared across ports) may be malformed without harm."""
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key.strip() == name:
            return value.strip().strip('"')
    return ""


class ViewAuth:
    """Token checks, sessions and the wrong-token limit of one live view (thread-safe). `clock` is monotonic
    seconds (time.monotonic; tests pass their own)."""

    def __init__(self, token: str, ttl_s: float = SESSION_TTL_S, fail_limit: int = FAIL_LIMIT,
                 fail_window_s: float = FAIL_WINDOW_S, max_sessions: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not token:
            raise ValueError("ViewAuth needs a token")
        self.token = token.encode("utf-8")
        self.ttl_s = float(ttl_s)
        self.fail_limit = int(fail_limit)
        self.fail_window_s = float(fail_window_s)
        self.max_sessions = int(max_sessions)
        self.clock = clock
        self.sessions: Dict[str, float] = {}  # sha256(session id) -> expiry on `clock`
        self.failures: Dict[str, Deque[float]] = collections.OrderedDict()  # address -> times of wrong tokens
        self.lock = threading.Lock()
        self.wrong = 0  # wrong tokens seen
        self.limited = 0  # tries refused with 429

    # --- the token

    def token_ok(self, given: str) -> bool:
        """`given` is the token (constant-time comparison; False when empty)."""
        if not given:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token)

    def retry_after(self, client: str) -> int:
        """Seconds until `client` may try a token again (0: now)."""
        with self.lock:
            return self._retry_after(client, self.clock())

    def _retry_after(self, client: str, now: float) -> int:
        times = self.failures.get(client)
        if times is None:
            return 0
        while times and times[0] <= now - self.fail_window_s:
            times.popleft()
        if not times:
            del self.failures[client]
            return 0
        if len(times) < self.fail_limit:
            return 0
        return max(1, int(times[0] + self.fail_window_s - now + 0.999))

    def attempt(self, client: str, given: str, how: str) -> str:
        """One try of the token by `client` (an address) through `how` ("login form", "bearer header"): OK,
        WRONG (counted and logged, without the token) or LIMITED (too many wrong ones lately; not compared)."""
        with self.lock:
            now = self.clock()
            if self._retry_after(client, now):
                self.limited += 1
                return LIMITED
            if self.token_ok(given):
                return OK
            self.wrong += 1
            times = self.failures.pop(client, None) or collections.deque()
            times.append(now)
            self.failures[client] = times  # most recent last
            while len(self.failures) > MAX_CLIENTS:
                self.failures.popitem(last=False)  # type: ignore[call-arg]
            n = len(times)
        log.warning("live view: wrong token from %s (%s), %d in the last %.0f s%s", client, how, n,
                    self.fail_window_s, "; it now gets 429 for a while" if n >= self.fail_limit else "")
        return WRONG

    # --- sessions

    def new_session(self) -> str:
        """A fresh random session id, valid for `ttl_s` (only its digest is kept)."""
        sid = secrets.token_urlsafe(32)
        with self.lock:
            now = self.clock()
            self._prune(now)
            while len(self.sessions) >= self.max_sessions:
                del self.sessions[min(self.sessions, key=self.sessions.get)]
            self.sessions[_digest(sid)] = now + self.ttl_s
        return sid

    def session_ok(self, session_id: str) -> bool:
        """True while `session_id` is a live session (an expired one is forgotten)."""
        if not session_id:
            return False
        key = _digest(session_id)
        with self.lock:
            expiry = self.sessions.get(key)
            if expiry is None:
                return False
            if expiry <= self.clock():
                del self.sessions[key]
                return False
            return True

    def end_session(self, session_id: str) -> None:
        with self.lock:
            self.sessions.pop(_digest(session_id), None)

    def _prune(self, now: float) -> None:
        for key in [k for k, exp in self.sessions.items() if exp <= now]:
            del self.sessions[key]

    # --- the cookie

    def set_cookie(self, session_id: str, secure: bool = False) -> str:
        """The Set-Cookie value of a new session: HttpOnly, SameSite=Strict, Path=/, Max-Age the session's
        lifetime, Secure when served over TLS."""
        return "%s=%s; Max-Age=%d; Path=/; HttpOnly; SameSite=Strict%s" % (
            SESSION_COOKIE, session_id, int(self.ttl_s), "; Secure" if secure else "")

    @staticmethod
    def clear_cookie(secure: bool = False) -> str:
        """The Set-Cookie value that makes the browser drop the session cookie (logout)."""
        return "%s=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict%s" % (SESSION_COOKIE, "; Secure" if secure else "")
