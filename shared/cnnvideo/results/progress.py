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
# json, rename); an update within this many seconds of the last write is written when the interval ends.
MIN_INTERVAL_S = 0.1

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


class ProgressFile:
    """The progress of one run in `folder`/progress.json; update() rewrites it (tmp file + rename, thread-safe): at
    once when the state changes or MIN_INTERVAL_S have passed since the last write, else when they have (a timer),
    so the file never stays behind the last update for longer."""

    def __init__(self, folder: str, frames: int, run_id: str = "", min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.path = os.path.join(folder, FILENAME)
        self.progress = Progress(frames=int(frames), run_id=run_id)
        self.min_interval_s = float(min_interval_s)
        self._lock = threading.Lock()
        self._written_at = float("-inf")
        self._timer: Optional[threading.Timer] = None

    def update(self, **fields) -> None:
        with self._lock:
            new_state = "state" in fields and fields["state"] != self.progress.state
            self.progress = dataclasses.replace(self.progress, updated_at=round(time.time(), 3), **fields)
            wait = self._written_at + self.min_interval_s - time.time()
            if new_state or wait <= 0:
                self._write()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            try:
                self._write()
            except OSError as exc:  # the folder went away after the run (a test's tmp folder): nothing to tell
                log.debug("progress file not written: %s", exc)

    def _write(self) -> None:
        if self._written_at == float("-inf"):
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        with open(tmp, "w") as fh:
            json.dump(dataclasses.asdict(self.progress), fh)
        os.replace(tmp, self.path)
        self._written_at = time.time()


def read(folder: str) -> Optional[Progress]:
    """The progress published in `folder`, or None if there is none yet (or it is not a progress file)."""
    try:
        with open(os.path.join(folder, FILENAME)) as fh:
            data = json.load(fh)
        known = {f.name for f in dataclasses.fields(Progress)}
        return Progress(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None
