"""Model zoo: build torchvision classifiers and Faster R-CNN detectors (cnnvideo.model.detector splits them) with a
weights policy (random+seed, imagenet, file) and no in-place ops."""
from __future__ import annotations

import logging
import os
import re
from typing import Any, Dict, Tuple

import numpy as np
import torch
from torch import nn

from cnnvideo.errors import ConfigError
from cnnvideo.model.catalog import (  # noqa: F401 (what the zoo builds, without torch)
    DETECTOR_NAMES,
    MODEL_NAMES,
    PREBUILT_WEIGHTS,
    WeightsInfo,
    is_known_model,
    is_torchvision_model,
    sha256_of,
    torchvision_models,
)
from cnnvideo.model.vision import load_torchvision

log = logging.getLogger(__name__)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Builders whose random-init defaults must be pinned (no auxiliary heads, no input re-normalisation).
_RANDOM_KWARGS: Dict[str, Dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "transform_input": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "transform_input": False, "init_weights": True},
}


class ModelError(ConfigError):
    """Unknown model name or weights that cannot be loaded (a config error: the CLI prints one line, exit 2)."""


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


def _torchvision_version() -> Tuple[int, ...]:
    """Installed torchvision version as a tuple."""
    return _version(load_torchvision().__version__)


def disable_inplace(model: nn.Module) -> nn.Module:
    """Set `inplace = False` on every submodule that has the flag, so cached tensors are never overwritten."""
    for module in model.modules():
        if hasattr(module, "inplace"):
            module.inplace = False
    return model


def _builder(name: str):
    """The torchvision builder for `name`, or ModelError listing known names."""
    if name in DETECTOR_NAMES:
        return getattr(load_torchvision().models.detection, name)
    if not is_torchvision_model(name):
        raise ModelError(
            "unknown model %r; known: %s (or any torchvision classification model)"
            % (name, ", ".join(MODEL_NAMES + DETECTOR_NAMES)))
    return getattr(torchvision_models(), name)


def _build_random(name: str, seed: int) -> nn.Module:
    """Construct with torch's (and numpy's, used by old torchvision inits) RNG seeded; caller RNG state is kept."""
    builder = _builder(name)
    kwargs = dict(_RANDOM_KWARGS.get(name, {}))
    new_api = _torchvision_version() >= (0, 13)
    if new_api:
        kwargs["weights"] = None
    else:
        kwargs["pretrained"] = False
    if name in DETECTOR_NAMES:  # random everywhere: no ImageNet backbone download either
        kwargs["weights_backbone" if new_api else "pretrained_backbone"] = None if new_api else False
    np_state = np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            np.random.seed(int(seed) % (2 ** 32))
            return builder(**kwargs)
    finally:
        np.random.set_state(np_state)


# Full sha256 of checkpoints we know (torchvision only puts a prefix in the file name); the MobileNetV2 one is
# the file scripts/fetch_weights.sh places in the torch hub cache, so `weights: imagenet` works offline.
KNOWN_SHA256: Dict[str, str] = {
    "mobilenet_v2-b0353104.pth": "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889",
}
# models whose ImageNet checkpoint a script here fetches with no download from torchvision's servers
OFFLINE_FETCH: Dict[str, str] = {"mobilenet_v2": "scripts/fetch_weights.sh"}
_HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,64})\.")  # torchvision's naming: <name>-<sha256 prefix>.pth


def check_file_hash(path: str, what: str = "weights file") -> str:
    """The file's sha256 after checking it against a known full hash or the prefix its name carries."""
    try:
        digest = sha256_of(path)
    except OSError as exc:
        raise ModelError("%s %s cannot be read: %s" % (what, path, exc.strerror or exc)) from None
    name = os.path.basename(path)
    expected = KNOWN_SHA256.get(name)
    match = _HASH_IN_NAME.search(name)
    if expected is not None and digest != expected:
        raise ModelError("%s %s fails its hash check: sha256 %s, expected %s (delete it and fetch it again)"
                         % (what, path, digest, expected))
    if match is not None and not digest.startswith(match.group(1)):
        raise ModelError("%s %s fails its hash check: sha256 %s does not start with %s, the prefix in its name "
                         "(delete it and fetch it again)" % (what, path, digest, match.group(1)))
    return digest


def imagenet_weights(name: str):
    """torchvision's ImageNet weights enum for `name`: IMAGENET1K_V1 where it exists (the checkpoint the offline
    fetch provides for mobilenet_v2), else DEFAULT (a detector's COCO_V1); None on torchvision < 0.14 (no weights
    registry)."""
    getter = getattr(torchvision_models(), "get_model_weights", None)
    if getter is None:
        return None
    enum = getter(name)
    return getattr(enum, "IMAGENET1K_V1", None) or enum.DEFAULT


def hub_checkpoint(url: str) -> str:
    """Where torch.hub keeps the file downloaded from `url` ($TORCH_HOME/hub/checkpoints/<name>)."""
    from urllib.parse import urlparse

    return os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(urlparse(url).path))


def _imagenet_error(name: str, exc: Exception) -> ModelError:
    hint = OFFLINE_FETCH.get(name)
    how = ("run %s to place the checkpoint in the torch hub cache with no download from torchvision" % hint
           if hint else "torchvision downloads them on first use; is the network or the torch hub cache available?")
    return ModelError("cannot load ImageNet weights for %s (%s; or use weights: random or a state-dict file): %s"
                      % (name, how, exc))


def _build_imagenet(name: str) -> Tuple[nn.Module, WeightsInfo]:
    """torchvision's pretrained ImageNet weights through its weights API: the hub cache file is hash-checked here
    (torchvision checks only what it downloads), else torchvision downloads it (with its hash check)."""
    builder = _builder(name)
    weights = imagenet_weights(name) if _torchvision_version() >= (0, 13) else None
    if weights is None:  # old torchvision (the Pi images): pretrained=True, no registry
        try:
            return builder(pretrained=True), WeightsInfo(name, "imagenet", "pretrained=True")
        except Exception as exc:  # download/network/cache errors come in many types
            raise _imagenet_error(name, exc) from exc
    path = hub_checkpoint(weights.url)
    digest = check_file_hash(path, "ImageNet weights file") if os.path.isfile(path) else None
    try:
        model = builder(weights=weights)
    except Exception as exc:  # download/network/cache/unpickling errors come in many types
        raise _imagenet_error(name, exc) from exc
    if digest is None and os.path.isfile(path):  # just downloaded
        digest = sha256_of(path)
    return model, WeightsInfo(name, "imagenet", weights.name, path, digest)


def _load_state_dict(path: str) -> Dict[str, torch.Tensor]:
    """torch.load a state dict on the CPU, weights-only where this torch supports it."""
    try:
        if _version(torch.__version__) >= (1, 13):
            state = torch.load(path, map_location="cpu", weights_only=True)
        else:
            state = torch.load(path, map_location="cpu")
    except Exception as exc:  # a corrupted zip or pickle raises RuntimeError, EOFError, UnpicklingError, ...
        raise ModelError("weights file %s is not a readable torch state dict (corrupted or not a .pth?): %s"
                         % (path, _load_problem(exc))) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError("weights file %s does not hold a state dict of tensors (got %s)"
                         % (path, type(state).__name__))
    return state


def _load_problem(exc: Exception) -> str:
    """The informative part of torch.load's (often long, multi-line) message, on one short line."""
    text = str(exc).strip()
    if "WeightsUnpickler error:" in text:  # weights-only refusal: the reason follows this marker
        text = text.split("WeightsUnpickler error:", 1)[1].strip()
        text = "refused by weights-only loading: " + (text.splitlines() or [""])[0]
    lines = [line for line in text.splitlines() if line.strip()] or [type(exc).__name__]
    return lines[0].split(". This is an internal")[0][:200]


def _few(keys) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")


def check_state_dict(model: nn.Module, state: Dict[str, torch.Tensor], name: str, path: str) -> None:
    """ModelError naming the file if `state` does not fit `model` exactly (missing/unexpected keys, shapes)."""
    want = model.state_dict()
    missing, unexpected = set(want) - set(state), set(state) - set(want)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append("%d missing keys (%s)" % (len(missing), _few(missing)))
        if unexpected:
            parts.append("%d unexpected keys (%s)" % (len(unexpected), _few(unexpected)))
        raise ModelError("weights file %s does not fit %s (another architecture?): %s"
                         % (path, name, "; ".join(parts)))
    for key, tensor in want.items():
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise ModelError("weights file %s does not fit %s: %s has shape %s, the model needs %s"
                             % (path, name, key, tuple(state[key].shape), tuple(tensor.shape)))


def _build_from_file(name: str, path: str) -> Tuple[nn.Module, WeightsInfo]:
    """Random-init skeleton, then a strict load of the (hash-checked) state dict in `path`."""
    if not os.path.isfile(path):
        raise ModelError("weights must be 'random', 'imagenet' or a state-dict file; not found: %s" % path)
    digest = check_file_hash(path)
    model = _build_random(name, 0)
    state = _load_state_dict(path)
    check_state_dict(model, state, name, path)
    model.load_state_dict(state, strict=True)
    return model, WeightsInfo(name, path, "file", os.path.abspath(path), digest)


# Models built before a fork (tools/prefork.py): a role forked afterwards takes its model from here once instead of
# building it again (a random AlexNet is 0.4 s of CPU). The same name, weights and seed give the same model either way.
_PREBUILT: Dict[Tuple[str, str, int], Tuple[nn.Module, WeightsInfo]] = {}


def prebuild(name: str, weights: str = "random", seed: int = 0) -> None:
    """Build the model now and keep it for the next load_model of the same name, weights and seed (one taker: a
    later call builds again). Weights from a file are not kept."""
    if weights in PREBUILT_WEIGHTS:
        _PREBUILT[(name, weights, int(seed))] = load_model(name, weights, seed)


def load_model(name: str, weights: str = "random", seed: int = 0) -> Tuple[nn.Module, WeightsInfo]:
    """build_model plus which weights it used (source, file, sha256)."""
    if weights in PREBUILT_WEIGHTS and (name, weights, seed) in _PREBUILT:
        return _PREBUILT.pop((name, weights, seed))
    if weights == "random":
        model, info = _build_random(name, seed), WeightsInfo(name, "random", "random (seed %d)" % seed)
    elif weights == "imagenet":
        model, info = _build_imagenet(name)
    elif isinstance(weights, str) and weights:
        model, info = _build_from_file(name, weights)
    else:
        raise ModelError("weights must be 'random', 'imagenet' or a state-dict path, got %r" % (weights,))
    log.debug("built %s", info.describe())
    return disable_inplace(model).eval(), info


def imagenet_available(name: str = "mobilenet_v2") -> bool:
    """True if `weights: imagenet` for `name` would load from the torch hub cache with no download."""
    try:
        weights = imagenet_weights(name)
    except Exception:  # noqa: BLE001 - an unknown model or an old torchvision: not available
        return False
    return weights is not None and os.path.isfile(hub_checkpoint(weights.url))


def build_model(name: str, weights: str = "random", seed: int = 0) -> nn.Module:
    """Build model `name` in eval mode with in-place ops off; weights: 'random' (seeded), 'imagenet' or a file."""
    return load_model(name, weights, seed)[0]
