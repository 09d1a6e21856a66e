"""Model zoo: build torchvision classifiers with a weights policy (random+seed, imagenet, file) and no in-place ops."""
from __future__ import annotations

import logging
import os
import re
from typing import Any, Dict, Tuple

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

MODEL_NAMES: Tuple[str, ...] = ("alexnet", "vgg16", "resnet50", "googlenet", "mobilenet_v2")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Lower-case callables in torchvision.models that are helpers, not model builders (torchvision < 0.14 fallback).
_NOT_BUILDERS = frozenset(("get_model", "get_weight", "get_model_weights", "get_model_builder", "list_models"))
# Builders whose random-init defaults must be pinned (no auxiliary heads, no input re-normalisation).
_RANDOM_KWARGS: Dict[str, Dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "transform_input": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "transform_input": False, "init_weights": True},
}


class ModelError(ValueError):
    """Unknown model name or weights that cannot be loaded."""


class Preprocess(nn.Module):
    """uint8 (1,H,W,3) RGB frame -> float32 (1,3,H,W) scaled to [0,1] and ImageNet-normalised."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD, dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, frame: torch.Tensor) -> torch.Tensor:
        """Convert an NHWC uint8 frame to a normalised NCHW float tensor."""
        # contiguous(): a permuted (channels-last) tensor would make convs pick other kernels than they do on
        # the contiguous arrays that hops deliver, so split and unsplit runs would differ in the last bits.
        x = frame.permute(0, 3, 1, 2).contiguous().to(torch.float32) / 255.0
        return (x - self.mean) / self.std


def _version(text: str) -> Tuple[int, ...]:
    """'0.14.1+cpu' -> (0, 14, 1)."""
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def _tv_models():
    """The torchvision.models module (imported lazily: torchvision is heavy)."""
    import torchvision.models

    return torchvision.models


def _torchvision_version() -> Tuple[int, ...]:
    """Installed torchvision version as a tuple."""
    import torchvision

    return _version(torchvision.__version__)


def is_torchvision_model(name: str) -> bool:
    """True if `name` is a torchvision classification model builder."""
    if not isinstance(name, str) or not name or name.startswith("_"):
        return False
    tvm = _tv_models()
    lister = getattr(tvm, "list_models", None)
    if lister is not None:
        return name in lister(module=tvm)
    obj = getattr(tvm, name, None)
    return callable(obj) and name.islower() and name not in _NOT_BUILDERS and not isinstance(obj, type)


def disable_inplace(model: nn.Module) -> nn.Module:
    """Set `inplace = False` on every submodule that has the flag, so cached tensors are never overwritten."""
    for module in model.modules():
        if hasattr(module, "inplace"):
            module.inplace = False
    return model


def _builder(name: str):
    """The torchvision builder for `name`, or ModelError listing known names."""
    if not is_torchvision_model(name):
        raise ModelError(
            "unknown model %r; known: %s (or any torchvision classification model)" % (name, ", ".join(MODEL_NAMES))
        )
    return getattr(_tv_models(), name)


def _build_random(name: str, seed: int) -> nn.Module:
    """Construct with torch's (and numpy's, used by old torchvision inits) RNG seeded; caller RNG state is kept."""
    builder = _builder(name)
    kwargs = dict(_RANDOM_KWARGS.get(name, {}))
    if _torchvision_version() >= (0, 13):
        kwargs["weights"] = None
    else:
        kwargs["pretrained"] = False
    np_state = np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            np.random.seed(int(seed) % (2 ** 32))
            return builder(**kwargs)
    finally:
        np.random.set_state(np_state)


def _build_imagenet(name: str) -> nn.Module:
    """torchvision's pretrained ImageNet weights (downloads on first use)."""
    builder = _builder(name)
    try:
        if _torchvision_version() >= (0, 13):
            return builder(weights="DEFAULT")
        return builder(pretrained=True)
    except Exception as exc:  # download/network/cache errors come in many types
        raise ModelError(
            "cannot load ImageNet weights for %s (torchvision downloads them on first use; is the network or "
            "the torch hub cache available? use weights: random or a state-dict file instead): %s" % (name, exc)
        ) from exc


def _load_state_dict(path: str) -> Dict[str, torch.Tensor]:
    """torch.load a state dict on the CPU, weights-only where this torch supports it."""
    if _version(torch.__version__) >= (1, 13):
        state = torch.load(path, map_location="cpu", weights_only=True)
    else:
        state = torch.load(path, map_location="cpu")
    if not isinstance(state, dict):
        raise ModelError("weights file %s does not hold a state dict (got %s)" % (path, type(state).__name__))
    return state


def _build_from_file(name: str, path: str) -> nn.Module:
    """Random-init skeleton, then a strict load of the state dict in `path`."""
    if not os.path.isfile(path):
        raise ModelError("weights must be 'random', 'imagenet' or a state-dict file; not found: %s" % path)
    model = _build_random(name, 0)
    try:
        model.load_state_dict(_load_state_dict(path), strict=True)
    except (RuntimeError, OSError, ValueError) as exc:
        raise ModelError("cannot load weights for %s from %s: %s" % (name, path, exc)) from exc
    return model


def build_model(name: str, weights: str = "random", seed: int = 0) -> nn.Module:
    """Build model `name` in eval mode with in-place ops off; weights: 'random' (seeded), 'imagenet' or a file."""
    if weights == "random":
        model = _build_random(name, seed)
    elif weights == "imagenet":
        model = _build_imagenet(name)
    elif isinstance(weights, str) and weights:
        model = _build_from_file(name, weights)
    else:
        raise ModelError("weights must be 'random', 'imagenet' or a state-dict path, got %r" % (weights,))
    log.debug("built %s (weights=%s, seed=%s)", name, weights, seed)
    return disable_inplace(model).eval()
