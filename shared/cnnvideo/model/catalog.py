"""What the zoo builds, without torch: the model names a config may give, which weights a model was built with
(WeightsInfo) and a file's hash. Config validation and the weights check run in every process, the launcher's too,
where importing torch would cost 1-2 s of CPU for nothing. cnnvideo.model.zoo builds the models."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Tuple

from cnnvideo.model.vision import load_torchvision

MODEL_NAMES: Tuple[str, ...] = ("alexnet", "vgg16", "resnet50", "googlenet", "mobilenet_v2")
# torchvision detectors (cnnvideo.model.detector splits them)
DETECTOR_NAMES: Tuple[str, ...] = ("fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_resnet50_fpn",
                                   "fasterrcnn_mobilenet_v3_large_320_fpn")
# the weights a process that forks roles may build ahead for them (zoo.prebuild): not a file's path, which may
# change before a role starts
PREBUILT_WEIGHTS: Tuple[str, ...] = ("random", "imagenet")


@dataclass(frozen=True)
class WeightsInfo:
    """Which weights a model was built with: 'random (seed 0)', a torchvision weights enum, or a file."""

    model: str
    weights: str  # the config value: random | imagenet | a path
    source: str  # e.g. "random (seed 0)", "IMAGENET1K_V1", "file"
    path: Optional[str] = None  # the file loaded (imagenet: the torch hub cache entry)
    sha256: Optional[str] = None

    @property
    def trained(self) -> bool:
        return self.weights != "random"

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.path is None:
            return "%s, %s" % (self.model, self.source)
        return "%s, %s from %s (sha256 %s)" % (self.model, self.source, self.path, (self.sha256 or "?")[:16])


def sha256_of(path: str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# Lower-case callables in torchvision.models that are helpers, not model builders (torchvision < 0.14 fallback).
_NOT_BUILDERS = frozenset(("get_model", "get_weight", "get_model_weights", "get_model_builder", "list_models"))


def torchvision_models():
    """The torchvision.models module (imported lazily: torchvision is heavy)."""
    return load_torchvision().models


def is_torchvision_model(name: str) -> bool:
    """True if `name` is a torchvision classification model builder."""
    if not isinstance(name, str) or not name or name.startswith("_"):
        return False
    tvm = torchvision_models()
    lister = getattr(tvm, "list_models", None)
    if lister is not None:
        return name in lister(module=tvm)
    obj = getattr(tvm, name, None)
    return callable(obj) and name.islower() and name not in _NOT_BUILDERS and not isinstance(obj, type)


def is_known_model(name: str) -> bool:
    """True if the zoo builds `name`: one of MODEL_NAMES or DETECTOR_NAMES, or another torchvision classifier (only
    then is torchvision imported, to ask it)."""
    return name in DETECTOR_NAMES or name in MODEL_NAMES or is_torchvision_model(name)


__all__ = ["DETECTOR_NAMES", "MODEL_NAMES", "WeightsInfo", "is_known_model", "is_torchvision_model", "sha256_of",
           "torchvision_models"]
