"""torchvision models exported to ONNX for the tests that split ONNX files (unit and integration alike)."""
from __future__ import annotations

import inspect
import warnings
from typing import Tuple


def export_torchvision(name: str, path: str, size: Tuple[int, int]):
    """torchvision `name` with seeded random weights (seed 0), exported with the TorchScript exporter at `size`
    (H, W) with dynamic batch, H and W (input `image`, output `logits`); returns the torch model."""
    import torch
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
    kwargs = dict(input_names=["image"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"image": {0: "n", 2: "h", 3: "w"}, "logits": {0: "n"}})
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 3, *size),), str(path), **kwargs)
    return model
