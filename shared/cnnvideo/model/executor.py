"""Run one stage of a LayerGraph (cut -> cut) on numpy arrays; profile every segment's compute time."""
from __future__ import annotations

import logging
from typing import Union

import numpy as np
import torch

from cnnvideo.model.graph import Cut, LayerGraph

log = logging.getLogger(__name__)


def _check_input(x: np.ndarray, cut: Cut) -> np.ndarray:
    """Return x (batch dim added to a (H,W,3) frame); a wrong shape/dtype raises ValueError naming expected vs got."""
    if not isinstance(x, np.ndarray):
        raise TypeError("stage input at cut %r must be a numpy array %s %s, got %s"
                         % (cut.name, cut.dtype, cut.shape, type(x).__name__))
    if cut.index == 0 and x.ndim == len(cut.shape) - 1 and tuple(x.shape) == tuple(cut.shape[1:]):
        x = x[np.newaxis]
    if tuple(x.shape) != tuple(cut.shape) or x.dtype != np.dtype(cut.dtype):
        raise ValueError("stage input at cut %r: expected %s %s, got %s %s"
                         % (cut.name, cut.dtype, tuple(cut.shape), x.dtype, tuple(x.shape)))
    return x


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy array of a CPU tensor result."""
    return np.ascontiguousarray(t.detach().cpu().numpy())


class StageExecutor:
    """Runs the layers between two cuts of a graph: numpy tensor at `start_cut` in, tensor at `end_cut` out."""

    def __init__(self, graph: LayerGraph, start_cut: Union[int, str], end_cut: Union[int, str]) -> None:
        self.graph = graph
        self.start = graph.cut_index(start_cut)
        self.end = graph.cut_index(end_cut)
        self.module = graph.stage_module(self.start, self.end)
        self.in_cut = graph.cuts[self.start]
        self.out_cut = graph.cuts[self.end]
        log.debug("stage cuts %d..%d (%s -> %s)", self.start, self.end, self.in_cut.name, self.out_cut.name)

    @property
    def empty(self) -> bool:
        """True when the stage runs no layers (it just forwards its input)."""
        return self.start == self.end

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run the stage on x (uint8 (1,H,W,3) or (H,W,3) frame at cut 0, float32 elsewhere)."""
        x = _check_input(x, self.in_cut)
        if self.empty:
            return x
        # Copy in: the model never sees (or aliases) the caller's buffer, which may be read-only held state.
        inp = torch.from_numpy(np.array(x, copy=True))
        with torch.no_grad():
            out = self.module(inp)
        return _to_numpy(out)


def profile_segments(graph: LayerGraph, iters: int = 3) -> np.ndarray:
    """Seconds per segment (length K) under this process's CPU share: median CPU time over `iters` timed passes
    of a random frame (after one warm-up), scaled by the passes' wall/CPU ratio (see cnnvideo.plan.profiling)."""
    from cnnvideo.plan.profiling import profile_compute

    return profile_compute(graph, iters)[0]
