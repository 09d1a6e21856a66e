"""When a camera's int8 calibration has gone stale (issue 46 item 1): the scene changed so much that the ranges
measured on its calibration frames no longer hold, and the split run's boxes stop agreeing with the unsplit fp32
model's. A calibration made at dusk, used in daylight, gave F1 0.17-0.33 on vtest and 0.0 on the beach scene
(docs/results/int8-scenes); the camera's own calibration of either scene gives 0.98. The watch reads the online
check's per-frame box counts, so it needs `check_share` > 0 and checks while the run goes on (not `check_defer`)."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Deque, Optional, Tuple

MIN_BOXES = 10  # reference boxes a window needs before it can say anything (a near-empty scene agrees trivially)


@dataclass
class CalibrationWatch:
    """F1 of the last `window` checked frames against the unsplit model; stale when the window is full, holds at least
    MIN_BOXES reference boxes and its F1 is under `floor`. `restart(skip)` after a new calibration took over: the
    next `skip` checks are of frames computed before it and are not counted."""

    floor: float
    window: int
    rows: Deque[Tuple[int, int, int]] = field(default_factory=collections.deque)  # (matched, found, expected)
    skip: int = 0

    def add(self, matched: int, found: int, expected: int) -> None:
        """One checked frame: boxes matched, boxes the split run found, boxes the unsplit model found."""
        if self.skip > 0:
            self.skip -= 1
            return
        self.rows.append((int(matched), int(found), int(expected)))
        while len(self.rows) > self.window:
            self.rows.popleft()

    def f1(self) -> Optional[float]:
        """F1 over the window (None before any frame or without a box on either side)."""
        matched, found, expected = (sum(col) for col in zip(*self.rows)) if self.rows else (0, 0, 0)
        if found + expected == 0:
            return None
        return 2.0 * matched / (found + expected)

    def full(self) -> bool:
        """The window holds `window` checked frames."""
        return len(self.rows) >= self.window

    def stale(self) -> Optional[float]:
        """The window's F1 when the calibration is stale, else None."""
        if self.floor <= 0 or not self.full() or sum(r[2] for r in self.rows) < MIN_BOXES:
            return None
        f1 = self.f1()
        return f1 if f1 is not None and f1 < self.floor else None

    def restart(self, skip: int = 0) -> None:
        """A new calibration took over: forget the window, and ignore the next `skip` checks (of older frames)."""
        self.rows.clear()
        self.skip = max(0, int(skip))
