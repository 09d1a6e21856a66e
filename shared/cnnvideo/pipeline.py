"""In-process helpers shared by the roles: build the layer graph from a config, per-channel input change rates."""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np

log = logging.getLogger(__name__)


def load_graph(cfg):
    """The configured model as a LayerGraph; identical weights in every process for the same model/weights/seed."""
    from .graph import LayerGraph
    from .models import build_model

    model = build_model(cfg.model, cfg.weights, cfg.seed)
    return LayerGraph.from_model(model, tuple(cfg.frame_size))


def input_rates(frame: np.ndarray, prev: Optional[np.ndarray], threshold: int = 0) -> np.ndarray:
    """Per-channel share of pixels of an RGB uint8 frame that differ from `prev` by more than `threshold`."""
    if prev is None:
        return np.ones(frame.shape[-1], dtype=np.float64)
    diff = np.abs(frame.astype(np.int16) - prev.astype(np.int16)) > threshold
    return diff.reshape(-1, frame.shape[-1]).mean(axis=0)
