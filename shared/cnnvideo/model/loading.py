"""In-process helpers shared by the roles: build the layer graph from a config, describe its weights."""
from __future__ import annotations

import logging
import os

from cnnvideo.artifacts import onnx_model_path
from cnnvideo.model.catalog import WeightsInfo, sha256_of
from cnnvideo.model.onnx_graph import load_graph as load_onnx_graph
from cnnvideo.model.onnx_graph import load_model as load_onnx

log = logging.getLogger(__name__)


def load_graph(cfg):
    """The configured model as a LayerGraph; identical weights in every process for the same model/weights/seed."""
    path = onnx_model_path(cfg.model)
    if path:
        return load_onnx_graph(path, cfg.frame_size)
    # the torch model's modules load torch: not at the top, since an ONNX-file model runs without torch
    from cnnvideo.model.graph import LayerGraph
    from cnnvideo.model.zoo import load_model

    model, info = load_model(cfg.model, cfg.weights, cfg.seed)
    log.info("weights: %s", info.describe())
    return LayerGraph.from_model(model, tuple(cfg.frame_size))


def check_weights(cfg):
    """Load the configured weights once (hash, keys, shapes checked) and say which they are; a ModelError (a
    ConfigError: one line, exit 2) before a role serves anything. Random weights need no check; an ONNX file is
    read and checked (onnx_graph.load_model: readable, valid, every op available in ONNX Runtime)."""
    path = onnx_model_path(cfg.model)
    if path:  # the weights are in the file; `weights` is not used
        load_onnx(path)  # unreadable, invalid or with an op ONNX Runtime lacks: one line (OnnxModelError)
        return WeightsInfo(cfg.model, "file", "ONNX file", os.path.abspath(path), sha256_of(path))
    if cfg.weights == "random":
        return WeightsInfo(cfg.model, "random", "random (seed %d)" % cfg.seed)
    from cnnvideo.model.zoo import load_model  # local import: the zoo pulls in torch

    return load_model(cfg.model, cfg.weights, cfg.seed)[1]
