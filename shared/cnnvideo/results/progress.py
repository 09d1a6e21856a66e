"""A run's progress as the master sees it, published as `progress.json` in its output folder (rewritten atomically,
at most every MIN_INTERVAL_S and at once when the state changes), so tools that watch a run (the experiment runner)
never parse logs."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Optional

FILENAME = "progress.json"
VERSION = 1
# Rewritten after every frame sent and finished, the file cost the master 19% of a CPU at 30 fps (py-spy: makedirs,
# json, rename); an update within this many seconds of the last write is written when the interval ends. At 0.1 s
# the writes still took 0.35 ms of the master's CPU a frame at 14 fps (N = 4, person-ssdlite): 4 a second is enough
# for a watcher that polls.
MIN_INTERVAL_S = 0.25
FLUSHER_IDLE_S = 5.0  # the thread that writes held-back updates ends after this long with none

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Counters of one run: frames sent (first sends, in frame order), completed, dropped; state setup|running|
    done|failed."""

    frames: int
    run_id: str = ""
    state: str = "setup"
    sent: int = 0
    completed: int = 0
    dropped: int = 0
    generation: int = 0
    updated_at: float = 0.0
    version: int = VERSION


_FIELDS = tuple(f.name for f in dataclasses.fields(Progress))  # the file's keys, in this order


class ProgressFile:
    """The progress of one run in `folder`/progress.json; update() rewrites it (tmp file + rename, thread-safe): at
    once when the state changes or MIN_INTERVAL_S have passed since the last write, else when they have (one
    flusher thread, started on first need, writes what is pending), so the file never stays behind the last update
    for longer. (A threading.Timer per held-back update started a thread up to 10 times a second; a rewrite is one
    json.dumps and one write, 0.17 ms.)"""

    def __init__(self, folder: str, frames: int, run_id: str = "", min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = os.path.join(folder, FILENAME)
        self.progress = Progress(frames=int(frames), run_id=run_id)
        self.min_interval_s = float(min_interval_s)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._written_at = float("-inf")
        self._pending = False  # an update is held back until the interval ends
        self._flusher: Optional[threading.Thread] = None

    def publish(self, tracker, state: str = "running") -> None:
        """Rewrite progress.json from a run's frame tracker (its sent, completed, dropped and generation)."""
        self.update(state=state, sent=tracker.next_new, completed=tracker.completed, dropped=tracker.dropped,
                    generation=tracker.generation)

    def update(self, **fields) -> None:
        with self._lock:
            new_state = "state" in fields and fields["state"] != self.progress.state
            self.progress = dataclasses.replace(self.progress, updated_at=round(time.time(), 3), **fields)
            wait = self._written_at + self.min_interval_s - time.time()
            if new_state or wait <= 0:
                self._write()
            elif not self._pending:
                self._pending = True
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._flush_loop, name="progress", daemon=True)
                    self._flusher.start()
                else:
                    self._wake.notify()

    def _flush_loop(self) -> None:
        """Write a held-back update when its interval ends (the flusher thread; daemon; it ends once idle for
        FLUSHER_IDLE_S)."""
        with self._lock:
            while True:
                while not self._pending:
                    if not self._wake.wait(FLUSHER_IDLE_S):
                        self._flusher = None  # nothing held back for a while: the next one starts another
                        return
                wait = self._written_at + self.min_interval_s - time.time()
                if wait > 0:
                    self._wake.wait(wait)
                    continue  # written meanwhile (a new state), or the interval is over: check again
                try:
                    self._write()
                except OSError as exc:  # the folder went away after the run (a test's tmp folder): nothing to tell
                    log.debug("progress file not written: %s", exc)
                    self._pending = False

    def _write(self) -> None:
        if self._written_at == float("-inf"):
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        p = self.progress
        text = json.dumps({f: getattr(p, f) for f in _FIELDS})
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, self.path)
        self._written_at = time.time()
        self._pending = False


def read(folder: str) -> Optional[Progress]:
    """The progress published in `folder`, or None if there is none yet (or it is not a progress file)."""
    try:
        with open(os.path.join(folder, FILENAME)) as fh:
            data = json.load(fh)
        known = {f.name for f in dataclasses.fields(Progress)}
        return Progress(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None
