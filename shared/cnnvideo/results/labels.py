"""ImageNet and COCO class names (torchvision's weights metadata) and top-k / agreement of classifier outputs."""
from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.model.vision import load_torchvision

TopK = List[Tuple[int, str, float]]  # (class index, name, softmax score)


@functools.lru_cache(maxsize=1)
def categories() -> Tuple[str, ...]:
    """The 1000 ImageNet-1k class names, from MobileNet_V2_Weights.IMAGENET1K_V1.meta (no file, no network);
    empty on torchvision < 0.13, which has no weights metadata."""
    weights = getattr(load_torchvision().models, "MobileNet_V2_Weights", None)
    return tuple(weights.IMAGENET1K_V1.meta["categories"]) if weights else ()


@functools.lru_cache(maxsize=1)
def coco_categories() -> Tuple[str, ...]:
    """The 91 COCO category names torchvision's detectors use, by label id (with its `__background__` and `N/A`
    placeholders), from FasterRCNN_ResNet50_FPN_Weights.COCO_V1.meta (no file, no network); empty on torchvision
    < 0.13."""
    weights = getattr(load_torchvision().models.detection, "FasterRCNN_ResNet50_FPN_Weights", None)
    return tuple(weights.COCO_V1.meta["categories"]) if weights else ()


def name(index: int) -> str:
    """Class name of `index` ('class N' when there are no names or the index is outside ImageNet-1k)."""
    cats = categories()
    return cats[index] if 0 <= index < len(cats) else "class %d" % index


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the flattened output of one frame, in float64."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    z = np.exp(z - z.max()) if z.size else z
    return z / z.sum() if z.size else z


def topk(logits: np.ndarray, k: int = 5) -> TopK:
    """The k best classes of one frame's output: (index, name, softmax score), best first."""
    p = softmax(logits)
    k = min(k, p.size)
    idx = np.argsort(-p, kind="stable")[:k]
    return [(int(i), name(int(i)), round(float(p[i]), 6)) for i in idx]


def top1(logits: np.ndarray) -> int:
    """Index of the best class of one frame's output."""
    return int(np.argmax(np.asarray(logits).reshape(-1)))


def top1_agreement(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> Optional[float]:
    """Share of frames whose top-1 equals the reference's (None when there are no frames)."""
    if not len(outputs):
        return None
    return float(np.mean([top1(a) == top1(b) for a, b in zip(outputs, references)]))


def top5_overlap(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> Optional[float]:
    """Mean share of the reference's top-5 classes that are also in the output's top-5."""
    if not len(outputs):
        return None
    shares = []
    for a, b in zip(outputs, references):
        sa = {i for i, _, _ in topk(a, 5)}
        sb = {i for i, _, _ in topk(b, 5)}
        shares.append(len(sa & sb) / float(max(len(sb), 1)))
    return float(np.mean(shares))


def top1_in_top5(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> Optional[float]:
    """Share of frames whose reference top-1 is among the output's top-5 classes."""
    if not len(outputs):
        return None
    return float(np.mean([top1(b) in {i for i, _, _ in topk(a, 5)} for a, b in zip(outputs, references)]))


def top2_margin(logits: np.ndarray) -> float:
    """Gap between the best and second-best logit of one frame (how easily its top-1 flips)."""
    v = np.sort(np.asarray(logits, dtype=np.float64).reshape(-1))
    return float(v[-1] - v[-2]) if v.size > 1 else float("inf")
