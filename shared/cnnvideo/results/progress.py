"""A run's progress as the master sees it, published as `progress.json` in its output folder (rewritten atomically
after every frame sent or finished), so tools that watch a run (the experiment runner) never parse logs."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Optional

FILENAME = "progress.json"
VERSION = 1


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
    """The progress of one run in `folder`/progress.json; update() rewrites it (tmp file + rename, thread-safe)."""

    def __init__(self, folder: str, frames: int, run_id: str = "") -> None:
        self.path = os.path.join(folder, FILENAME)
        self.progress = Progress(frames=int(frames), run_id=run_id)
        self._lock = threading.Lock()

    def update(self, **fields) -> None:
        with self._lock:
            self.progress = dataclasses.replace(self.progress, updated_at=round(time.time(), 3), **fields)
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            tmp = "%s.%d.tmp" % (self.path, os.getpid())
            with open(tmp, "w") as fh:
                json.dump(dataclasses.asdict(self.progress), fh)
            os.replace(tmp, self.path)


def read(folder: str) -> Optional[Progress]:
    """The progress published in `folder`, or None if there is none yet (or it is not a progress file)."""
    try:
        with open(os.path.join(folder, FILENAME)) as fh:
            data = json.load(fh)
        known = {f.name for f in dataclasses.fields(Progress)}
        return Progress(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None
