"""torchvision's two-stage detectors (Faster R-CNN) as a splittable chain (issue 22 item 5).

GeneralizedRCNN cannot be traced by torch.fx (its transform and heads make data-dependent lists), and its outputs
have a data-dependent length. DetectorNet re-arranges the very same modules so LayerGraph can cut it:

  Preprocess (graph.py; the same ImageNet normalisation as the detector's transform)
  -> Resize (leaf): the transform's resize and batch padding, a fixed shape for a fixed frame size
  -> backbone body (traced: its blocks are the cut points, up to the first FPN tap)
  -> Head (leaf): FPN, RPN, ROI heads and the postprocess that maps boxes back to frame pixels, its detections
     packed into one fixed [max_detections, 6] float32 tensor (x1, y1, x2, y2, score, label; padded rows zero)

so the body is cut across workers and everything from the first tap on runs on the last worker. Every module is
the detector's own (the same weights); the only thing skipped is the transform's list plumbing.
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch
from torch import nn

from cnnvideo.model.vision import load_torchvision


def is_rcnn(model: nn.Module) -> bool:
    """True for a torchvision GeneralizedRCNN (Faster/Mask/Keypoint R-CNN) instance."""
    return isinstance(model, load_torchvision().models.detection.generalized_rcnn.GeneralizedRCNN)


class Resize(nn.Module):
    """The detector transform's resize (its min_size/max_size) and padding to its size_divisible, on a normalised
    (1, 3, H, W) frame; an fx leaf (its sizes come from Python arithmetic on shapes)."""

    fx_leaf = True

    def __init__(self, transform: nn.Module) -> None:
        super().__init__()
        self.transform = transform

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(1, 3, H, W) -> (1, 3, H', W') resized and zero-padded as GeneralizedRCNNTransform does it."""
        image, _ = self.transform.resize(x[0], None)
        return self.transform.batch_images([image], size_divisible=self.transform.size_divisible)


class Body(nn.ModuleDict):
    """The backbone body (torchvision's IntermediateLayerGetter: children run in turn, some outputs kept as taps)
    with the same children; flagged `fx_chain` so LayerGraph cuts between its children up to the first tap."""

    fx_chain = True

    def __init__(self, getter: nn.Module) -> None:
        super().__init__(list(getter.named_children()))
        self.return_layers = dict(getter.return_layers)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The taps {out name: tensor} in the getter's order, as IntermediateLayerGetter.forward."""
        from collections import OrderedDict

        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class Head(nn.Module):
    """FPN, RPN, ROI heads and postprocess of a GeneralizedRCNN for one fixed frame size, detections packed into
    [max_detections, 6] float32; an fx leaf (its outputs have data-dependent lengths inside) that always runs on
    torch: its traced ONNX export, run in ORT on the very input it was traced with, gave boxes 75 px off torch's
    (320 model, 60x80 frame, random weights, score threshold 0)."""

    fx_leaf = True
    onnx_export = False

    def __init__(self, model: nn.Module, image_size: Tuple[int, int], padded_size: Tuple[int, int],
                 frame_size: Tuple[int, int]) -> None:
        super().__init__()
        self.fpn = getattr(model.backbone, "fpn", None)
        self.rpn = model.rpn
        self.roi_heads = model.roi_heads
        self.transform = model.transform
        self.image_size = (int(image_size[0]), int(image_size[1]))  # resized, before padding
        self.padded_size = (int(padded_size[0]), int(padded_size[1]))
        self.frame_size = (int(frame_size[0]), int(frame_size[1]))

    @property
    def max_detections(self) -> int:
        """Rows of the packed output: the ROI heads' detections_per_img."""
        return int(self.roi_heads.detections_per_img)

    def forward(self, features: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Backbone body taps -> packed detections in frame pixels, as GeneralizedRCNN.forward computes them."""
        from collections import OrderedDict

        from torchvision.models.detection.image_list import ImageList

        feats = self.fpn(features) if self.fpn is not None else features
        if isinstance(feats, torch.Tensor):
            feats = OrderedDict([("0", feats)])
        first = next(iter(feats.values()))
        # the anchor generator reads only the padded batch's shape and the image sizes, never its pixels
        padded = first.new_zeros(()).expand(1, 3, *self.padded_size)
        images = ImageList(padded, [self.image_size])
        proposals, _ = self.rpn(images, feats)
        detections, _ = self.roi_heads(feats, proposals, images.image_sizes)
        det = self.transform.postprocess(detections, images.image_sizes, [self.frame_size])[0]
        return pack_detections(det["boxes"], det["scores"], det["labels"], self.max_detections)


class DetectorNet(nn.Module):
    """A GeneralizedRCNN as Resize -> backbone body -> Head for (H, W) frames, fed Preprocess's output."""

    def __init__(self, model: nn.Module, frame_size: Tuple[int, int]) -> None:
        super().__init__()
        height, width = (int(v) for v in frame_size)
        self.resize = Resize(model.transform)
        with torch.no_grad():  # the sizes the transform makes of this frame size
            image, _ = model.transform.resize(torch.zeros((3, height, width)), None)
            padded = model.transform.batch_images([image], size_divisible=model.transform.size_divisible)
        self.body = Body(model.backbone.body)
        self.head = Head(model, tuple(image.shape[-2:]), tuple(padded.shape[-2:]), (height, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised (1, 3, H, W) frame -> packed detections [max_detections, 6]."""
        return self.head(self.body(self.resize(x)))


def splittable(model: nn.Module, frame_size: Tuple[int, int]) -> nn.Module:
    """DetectorNet of a GeneralizedRCNN for (H, W) frames; any other model as it is."""
    return DetectorNet(model, frame_size) if is_rcnn(model) else model


def pack_detections(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, rows: int) -> torch.Tensor:
    """[rows, 6] float32 (results.detections.PACKED_COLUMNS; unpack_packed reads it): (x1, y1, x2, y2, score,
    label) per detection, best first as given, zero rows after them;
    detections beyond `rows` are dropped (the ROI heads never give more than detections_per_img)."""
    n = min(int(boxes.shape[0]), int(rows))
    out = boxes.new_zeros((int(rows), 6), dtype=torch.float32)
    out[:n, :4] = boxes[:n].to(torch.float32)
    out[:n, 4] = scores[:n].to(torch.float32)
    out[:n, 5] = labels[:n].to(torch.float32)
    return out
