"""A whole split run in one process: stages chained through real hop encoders, for tests and benchmarks.

Each hop (master -> w0, w_i -> w_i+1, last -> master) goes through a HopSender -> bytes ->
HopReceiver pair exactly as on the wire, so byte counts and reconstruction are the real ones.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.wire.hop import HopReceiver
from cnnvideo.wire.protocol import HopSettings


@dataclasses.dataclass
class HopStats:
    """Bytes a hop carried so far and the float32-dense bytes of what crossed it."""

    name: str
    bytes_sent: int = 0
    bytes_dense: int = 0
    frames: int = 0


class LocalChain:
    """Stages between consecutive `cuts` of `graph`, linked by closed-loop (delta) or full hops."""

    def __init__(
        self,
        graph: LayerGraph,
        cuts: Sequence[int],
        mode: str = "delta",
        input_threshold: int = 0,
        threshold: float = 0.0,
        fp16: bool = False,
        max_bytes: int = 256 << 20,
    ) -> None:
        if mode not in ("full", "delta"):
            raise ValueError("mode must be full or delta, got %r" % (mode,))
        self.cuts = list(cuts)
        self.mode = mode
        self.stages = [TorchStage(graph, a, b) for a, b in zip(self.cuts[:-1], self.cuts[1:])]
        hop_cuts = self.cuts[:-1] + [self.cuts[-1]]
        n = len(self.stages)
        names = ["m->w0"] + ["w%d->w%d" % (i, i + 1) for i in range(n - 1)] + ["w%d->m" % (n - 1)]
        self.senders = []  # type: List[object]
        settings = HopSettings(mode=mode, input_threshold=float(input_threshold), threshold=float(threshold),
                               fp16=bool(fp16))
        for cut in hop_cuts:
            self.senders.append(settings.sender(cut))
        self.receivers = [HopReceiver(max_bytes) for _ in hop_cuts]
        self.stats = [HopStats(name) for name in names]
        self._dense = [int(np.prod(graph.cuts[c].shape)) * 4 for c in hop_cuts]

    def _hop(self, i: int, x: np.ndarray) -> np.ndarray:
        buf = self.senders[i].encode(x, keyframe=self.mode == "full")
        st = self.stats[i]
        st.bytes_sent += len(buf)
        st.bytes_dense += self._dense[i]
        st.frames += 1
        return np.array(self.receivers[i].decode(buf))

    def run(self, frame: np.ndarray) -> np.ndarray:
        """Push one uint8 frame through every hop and stage; return the output the master receives."""
        x = frame if frame.ndim == 4 else frame[None]
        for i, stage in enumerate(self.stages):
            x = stage.run(self._hop(i, x))
        return self._hop(len(self.stages), x)

    def keyframe(self) -> None:
        """Make the next transfer on every hop a full one (both sides forget their base)."""
        for s, r in zip(self.senders, self.receivers):
            s.reset()
            r.reset()
