"""Profile every segment's compute time of a LayerGraph (stages run on engines.torch_engine.TorchStage)."""
from __future__ import annotations

import logging

import numpy as np

from cnnvideo.model.graph import LayerGraph

log = logging.getLogger(__name__)


def profile_segments(graph: LayerGraph, iters: int = 3) -> np.ndarray:
    """Seconds per segment (length K) under this process's CPU share: median CPU time over `iters` timed passes
    of a random frame (after one warm-up), scaled by the passes' wall/CPU ratio (see cnnvideo.plan.profiling)."""
    from cnnvideo.plan.profiling import profile_compute

    return profile_compute(graph, iters)[0]
