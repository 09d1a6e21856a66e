"""How the master's setup is going: the step it is in, for how long, and which workers it still waits for. A step
that takes longer than LOG_AFTER_S is logged every LOG_EVERY_S (a worker quantizing a model under a 0.1 CPU cap can
take minutes, and a silent master looks hung); the live page shows the same."""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

log = logging.getLogger(__name__)

LOG_AFTER_S = 5.0
LOG_EVERY_S = 10.0


class SetupProgress:
    """The setup's steps as they go (thread-safe: steps run on the main thread, answers come from call threads)."""

    def __init__(self, log_after_s: float = LOG_AFTER_S, log_every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.log_after_s = log_after_s
        self.log_every_s = log_every_s
        self.clock = clock
        self.lock = threading.Lock()
        self.step_name: Optional[str] = None
        self.step_at = 0.0
        self.waiting: List[int] = []
        self.finished: List[Dict[str, object]] = []  # every step done: name and seconds
        self.logged_at = 0.0
        self.done_at: Optional[float] = None
        self.t0 = clock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @contextlib.contextmanager
    def step(self, name: str, waiting: Sequence[int] = ()) -> Iterator["SetupProgress"]:
        """A setup step; `waiting`: the workers it waits for (each answered() as it answers)."""
        with self.lock:
            self.step_name, self.step_at, self.waiting = name, self.clock(), list(waiting)
            self.logged_at = self.step_at
        try:
            yield self
        finally:
            with self.lock:
                took = self.clock() - self.step_at
                self.finished.append({"step": name, "s": round(took, 3)})
                self.step_name, self.waiting = None, []
            if took >= self.log_after_s:
                log.info("setup: %s took %.1f s", name, took)

    def answered(self, w: int) -> None:
        """Worker w answered the current step."""
        with self.lock:
            if w in self.waiting:
                self.waiting.remove(w)

    def done(self) -> None:
        """Setup is over: the run starts."""
        with self.lock:
            self.done_at = self.clock()
        self._stop.set()

    def line(self) -> Optional[str]:
        """The current step as one line ("profiling the workers for 12 s, waiting for w0, w2"), None between
        steps."""
        with self.lock:
            if self.step_name is None:
                return None
            s = "%s for %.0f s" % (self.step_name, self.clock() - self.step_at)
            if self.waiting:
                s += ", waiting for %s" % ", ".join("w%d" % w for w in self.waiting)
            return s

    def tick(self) -> Optional[str]:
        """The line to log now, if the current step has run past log_after_s and was not logged for log_every_s."""
        now = self.clock()
        with self.lock:
            if self.step_name is None or now - self.step_at < self.log_after_s:
                return None
            if self.logged_at > self.step_at and now - self.logged_at < self.log_every_s:
                return None
            self.logged_at = now
        return self.line()

    def snapshot(self) -> Dict[str, object]:
        """The live page's and /state.json's `setup`: the current step (None when done), the steps done, and the
        seconds setup took (None while it runs)."""
        with self.lock:
            steps = list(self.finished)
            done = None if self.done_at is None else round(self.done_at - self.t0, 3)
        return {"current": self.line(), "steps": steps, "done_s": done}

    def start(self) -> None:
        """Log the current step every log_every_s while it runs past log_after_s."""
        def run() -> None:
            while not self._stop.wait(1.0):
                text = self.tick()
                if text:
                    log.info("setup: %s", text)
        self._thread = threading.Thread(target=run, name="setup-progress", daemon=True)
        self._thread.start()
