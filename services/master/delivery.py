"""Where a completed frame goes: the consumers that registered for results (the live page, the thumbnails,
results.jsonl, the exactness check, the events), each called once per frame in frame order. The reader builds one
`Completed` per frame and hands it to `ResultConsumers.deliver`; nothing else lists the consumers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np


@dataclass
class Completed:
    """One frame's result as its consumers see it."""

    frame: int
    output: np.ndarray  # the model's output (packed outputs of a multi-output ONNX model)
    reused: bool  # an unchanged result: the previous output as it was
    captured: float  # epoch seconds the frame was captured
    t_result: float  # epoch seconds its result was decoded
    hop: str  # the result's hop ("w3->m")
    nbytes: int  # the result message's size
    rgb: Optional[np.ndarray] = None  # the frame's pixels, if still held
    detections: Optional[list] = None  # a detector's boxes in frame pixels, None for a classifier
    top5: List[list] = field(default_factory=list)  # a classifier's top-5 (index, name, score)


Consumer = Callable[[Completed], None]


class ResultConsumers:
    """The consumers of completed frames. `locked` ones are called holding the master's lock (quick, in-memory);
    the others after it is released (they may block: an offline check waits for room, a track's end writes a
    snapshot)."""

    def __init__(self) -> None:
        self.locked: List[Consumer] = []
        self.unlocked: List[Consumer] = []

    def register(self, consumer: Consumer, holding_lock: bool) -> None:
        (self.locked if holding_lock else self.unlocked).append(consumer)

    def deliver_locked(self, item: Completed) -> None:
        for consume in self.locked:
            consume(item)

    def deliver_unlocked(self, item: Completed) -> None:
        for consume in self.unlocked:
            consume(item)
