"""Detections end to end (issue 22 items 3 and 4): what a detector's outputs mean, how the split run agrees with
the unsplit model, what the report counts, and the boxes drawn on thumbnails and the live frame.

  DetectorSpec   output names, box format, class-id -> label map, score threshold, label filter of one detector
  DETECTORS      the registry by short config name (`person-ssdlite`, torchvision's Faster R-CNN names);
                 is_detector(), spec_for()
  unpack_packed()  {boxes, scores, labels} of a torch detector's packed [rows, 6] output (cnnvideo.model.detector)
  decode()       {output name: array} -> [Detection] in frame pixels, clipped, best first (numpy, no per-box loops)
  match()        greedy same-label IoU matching; DetectionAgreement: precision/recall/F1 over frames
  DetectionCounts  report.json `detections`: per label total boxes, frames with one, most in a frame
  caption()      "3 people"; draw_boxes(): a copy of the frame with green boxes and label/score text (cv2)
  check_settings()  refuses the `detect:` section's settings (config.Detect) on a classifier and classifier
                 settings on a detector (ConfigError naming the key)

Detections are cnnvideo.events.types.Detection: label, score and box (x1, y1, x2, y2) in pixels of the frame the
master captured (the configured frame_size), so the events library takes them as they are.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.errors import ConfigError
from cnnvideo.events.types import Detection
from cnnvideo.results.labels import coco_categories

BOX_FORMATS = ("yxyx_norm", "xyxy_pixels")
BOX_COLOUR_RGB = (0, 255, 0)


@dataclass(frozen=True)
class DetectorSpec:
    """How to read one detector's outputs.

    `boxes`, `scores`, `classes` name the outputs ([N, K, 4], [N, K], [N, K] or without the batch axis);
    `count` the number of valid rows ([N] or a scalar; None = all K rows). `box_format`: `yxyx_norm` (y1, x1, y2,
    x2 in 0..1 of the image, TF object detection) or `xyxy_pixels` (x1, y1, x2, y2 in pixels of the image the
    model was fed, torchvision); `input_size` (height, width) is that image's size when it is not the frame's.
    `labels` maps class ids to names (other ids read as `class<id>`); `label_filter` keeps only those labels
    (empty = every label); `score_threshold` keeps scores >= it.
    """

    name: str
    boxes: str
    scores: str
    classes: str
    count: Optional[str] = None
    box_format: str = "yxyx_norm"
    labels: Mapping[int, str] = field(default_factory=dict)
    score_threshold: float = 0.5
    label_filter: Tuple[str, ...] = ()
    input_size: Optional[Tuple[int, int]] = None
    packed: bool = False  # the model gives one [rows, 6] tensor (x1, y1, x2, y2, score, label): unpack_packed

    def __post_init__(self):
        if self.box_format not in BOX_FORMATS:
            raise ValueError("detector %s: box_format must be one of %s, got %r"
                             % (self.name, "|".join(BOX_FORMATS), self.box_format))
        object.__setattr__(self, "label_filter", tuple(self.label_filter))

    @property
    def output_names(self) -> Tuple[str, ...]:
        """The outputs decode() reads."""
        names = (self.boxes, self.scores, self.classes)
        return names + ((self.count,) if self.count else ())

    def label_of(self, class_id: int) -> str:
        return self.labels.get(int(class_id), "class%d" % int(class_id))


# SSDLite-MobileNetV2 (TF object detection API, converted with tf2onnx; artifacts.person_detector_path()):
# uint8 NHWC RGB of any size in, always 100 rows out, class 1 = person.
PERSON_SSDLITE = DetectorSpec(
    name="person-ssdlite", boxes="detection_boxes:0", scores="detection_scores:0",
    classes="detection_classes:0", count="num_detections:0", box_format="yxyx_norm", labels={1: "person"})


class CocoLabels(Mapping):
    """COCO class id -> name of torchvision's detectors (their weights' meta, read on first use: no file, no
    network); the placeholder ids (`__background__`, `N/A`) are left out."""

    def __init__(self) -> None:
        self._names: Optional[Dict[int, str]] = None

    def _table(self) -> Dict[int, str]:
        if self._names is None:
            self._names = {i: n for i, n in enumerate(coco_categories()) if n not in ("__background__", "N/A")}
        return self._names

    def __getitem__(self, key: int) -> str:
        return self._table()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


COCO_LABELS = CocoLabels()
PACKED_COLUMNS = ("x1", "y1", "x2", "y2", "score", "label")
# torchvision's Faster R-CNN (cnnvideo.model.detector): one packed [100, 6] output, boxes in frame pixels
FASTER_RCNN = tuple(
    DetectorSpec(name=n, boxes="boxes", scores="scores", classes="labels", box_format="xyxy_pixels",
                 labels=COCO_LABELS, packed=True)
    for n in ("fasterrcnn_mobilenet_v3_large_fpn", "fasterrcnn_resnet50_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn"))

DETECTORS: Dict[str, DetectorSpec] = {s.name: s for s in (PERSON_SSDLITE,) + FASTER_RCNN}


def _short(model_name: str) -> str:
    """`person-ssdlite` of `person-ssdlite`, `person-ssdlite.onnx` or `/path/to/person-ssdlite.onnx`."""
    base = str(model_name).replace("\\", "/").rsplit("/", 1)[-1]
    return base[:-5] if base.endswith(".onnx") else base


def is_detector(model_name: str) -> bool:
    """True if `model_name` (a config name, or an ONNX file named after one) is a registered detector."""
    return _short(model_name) in DETECTORS


def detector_for_outputs(output_names: Sequence[str]) -> Optional[DetectorSpec]:
    """The registered spec whose outputs a model has (every name present), else None: tells an ONNX file that is
    a known detector from a classifier by its graph's output names (packed torch detectors are not ONNX files)."""
    have = set(output_names)
    for spec in DETECTORS.values():
        if not spec.packed and set(spec.output_names) <= have:
            return spec
    return None


DETECT_KEYS = ("score_threshold", "labels")  # the fields of config.Detect (the `detect:` section)
# settings that mean something only for an ImageNet classifier, with their defaults (the value a detector run
# may carry without having set it)
CLASSIFIER_DEFAULTS: Dict[str, Any] = {"weights": "random"}


def _given(cfg_detect: Any) -> Dict[str, Any]:
    """The detect keys the user set: every key of a mapping (the YAML section), the non-default fields of a
    Detect, nothing for None."""
    if cfg_detect is None:
        return {}
    if isinstance(cfg_detect, Mapping):
        unknown = [k for k in cfg_detect if k not in DETECT_KEYS]
        if unknown:
            raise ConfigError("unknown config key 'detect.%s' (known: %s)" % (unknown[0], ", ".join(DETECT_KEYS)))
        return dict(cfg_detect)
    default = type(cfg_detect)()  # a config.Detect: its defaults
    return {k: getattr(cfg_detect, k) for k in DETECT_KEYS if getattr(cfg_detect, k) != getattr(default, k)}


def check_settings(model_name: str, is_detector: bool, cfg_detect: Any,
                   classifier: Optional[Mapping[str, Any]] = None) -> None:
    """Refuse settings that do not fit the model, with a one-line ConfigError naming the key.

    On a classifier: any `detect.*` key that was set (`cfg_detect` is the YAML mapping, a Detect whose
    non-default fields count as set, or None). On a detector: a `detect.score_threshold` outside 0..1, a
    `detect.labels` entry the model does not have, and a classifier-only setting in `classifier` (e.g.
    {"weights": cfg.weights}) whose value is not its default.
    """
    given = _given(cfg_detect)
    if not is_detector:
        for key in DETECT_KEYS:
            if key in given:
                raise ConfigError("config key 'detect.%s' is a detector setting but model %r is a classifier"
                                  % (key, model_name))
        return
    for key, value in (classifier or {}).items():
        if key in CLASSIFIER_DEFAULTS and value != CLASSIFIER_DEFAULTS[key]:
            raise ConfigError("config key '%s' (%r) is a classifier setting but model %r is a detector"
                              % (key, value, model_name))
    if "score_threshold" in given:
        t = given["score_threshold"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= float(t) <= 1.0:
            raise ConfigError("config key 'detect.score_threshold' must be a number in 0..1, got %r" % (t,))
    if "labels" in given:
        labels = given["labels"]
        if isinstance(labels, str) or not isinstance(labels, (list, tuple)) or \
                not all(isinstance(x, str) and x for x in labels):
            raise ConfigError("config key 'detect.labels' must be a list of label names, got %r" % (labels,))
        spec = DETECTORS.get(_short(model_name))
        if spec is not None and spec.labels:
            known = set(spec.labels.values())
            bad = [x for x in labels if x not in known]
            if bad:
                raise ConfigError("config key 'detect.labels': model %r has no label %r (labels: %s)"
                                  % (model_name, bad[0], ", ".join(sorted(known))))


def spec_for(model_name: str, detect: Any = None) -> DetectorSpec:
    """The registered spec of `model_name` with the `detect:` settings (a Detect or a mapping) applied; KeyError
    for a model that is not a registered detector."""
    return with_settings(DETECTORS[_short(model_name)], detect)


def with_settings(spec: DetectorSpec, detect: Any = None) -> DetectorSpec:
    """`spec` with the `detect:` settings (a Detect, a mapping or None) applied."""
    given = _given(detect)
    changes: Dict[str, Any] = {}
    if "score_threshold" in given:
        changes["score_threshold"] = float(given["score_threshold"])
    if "labels" in given:
        changes["label_filter"] = tuple(given["labels"] or ())
    return dataclasses.replace(spec, **changes) if changes else spec


# ------------------------------------------------------------------------------------------------- decoding


def unpack_packed(packed: np.ndarray) -> Dict[str, np.ndarray]:
    """{"boxes" [n, 4], "scores" [n], "labels" [n] int64} of a packed [rows, 6] detector output (x1, y1, x2, y2,
    score, label): the rows with a score above 0 (the heads drop low scores, so padding rows are the zero ones).
    ValueError naming the shape when it is not [rows, 6] (or [1, rows, 6])."""
    a = np.asarray(packed)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or a.shape[1] != len(PACKED_COLUMNS):
        raise ValueError("packed detections must be [rows, %d] (%s), got shape %s"
                         % (len(PACKED_COLUMNS), ", ".join(PACKED_COLUMNS), a.shape))
    a = a[a[:, 4] > 0]
    return {"boxes": a[:, :4].astype(np.float32), "scores": a[:, 4].astype(np.float32),
            "labels": np.rint(a[:, 5]).astype(np.int64)}


def _rows(a: np.ndarray, ndim: int) -> np.ndarray:
    """The first image's rows of an output with or without its batch axis."""
    a = np.asarray(a)
    return a[0] if a.ndim == ndim + 1 else a


def _columns(outputs: Mapping[str, np.ndarray], spec: DetectorSpec) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes [K, 4] float64, scores [K] float64, classes [K]) of one frame, every row; ValueError naming a missing
    output or shapes that do not line up."""
    missing = [n for n in spec.output_names if n not in outputs]
    if missing:
        raise ValueError("detector %s: output %r missing (outputs: %s)"
                         % (spec.name, missing[0], ", ".join(sorted(outputs))))
    boxes = _rows(outputs[spec.boxes], 2).astype(np.float64, copy=False)
    scores = _rows(outputs[spec.scores], 1).astype(np.float64, copy=False).reshape(-1)
    classes = _rows(outputs[spec.classes], 1).reshape(-1)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or len(boxes) != len(scores) or len(classes) != len(scores):
        raise ValueError("detector %s: boxes %r, scores %r, classes %r do not line up"
                         % (spec.name, boxes.shape, scores.shape, classes.shape))
    return boxes, scores, classes


def decode(outputs: Mapping[str, np.ndarray], spec: DetectorSpec, frame_w: int, frame_h: int) -> List[Detection]:
    """The detections of one frame: rows with score >= spec.score_threshold and a kept label, boxes converted to
    pixels of the `frame_w` x `frame_h` frame and clipped to it (boxes left empty by clipping are dropped),
    best score first. ValueError naming a missing output or a bad shape."""
    boxes, scores, classes = _columns(outputs, spec)
    n = len(scores)
    if spec.count:
        n = min(int(np.asarray(outputs[spec.count]).reshape(-1)[0]), n)
    boxes, scores, classes = boxes[:n], scores[:n], np.rint(classes[:n]).astype(np.int64)
    keep = np.isfinite(scores) & (scores >= spec.score_threshold) & np.isfinite(boxes).all(axis=1)
    if spec.label_filter:
        ids = [i for i, lab in spec.labels.items() if lab in spec.label_filter]
        ids += [int(lab[5:]) for lab in spec.label_filter if lab.startswith("class") and lab[5:].isdigit()]
        keep &= np.isin(classes, np.asarray(ids, dtype=np.int64))
    boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
    if spec.box_format == "yxyx_norm":
        xyxy = boxes[:, [1, 0, 3, 2]] * np.array([frame_w, frame_h, frame_w, frame_h], dtype=np.float64)
    else:
        in_h, in_w = spec.input_size or (frame_h, frame_w)
        sx, sy = float(frame_w) / in_w, float(frame_h) / in_h
        xyxy = boxes * np.array([sx, sy, sx, sy], dtype=np.float64)
    lo = np.minimum(xyxy[:, :2], xyxy[:, 2:])
    hi = np.maximum(xyxy[:, :2], xyxy[:, 2:])
    limit = np.array([frame_w, frame_h], dtype=np.float64)
    lo = np.clip(lo, 0.0, limit)
    hi = np.clip(hi, 0.0, limit)
    inside = (hi > lo).all(axis=1)
    xyxy = np.concatenate([lo, hi], axis=1)[inside]
    scores, classes = scores[inside], classes[inside]
    order = np.argsort(-scores, kind="stable")
    names = {c: spec.label_of(c) for c in np.unique(classes).tolist()}
    return [Detection(names[c], s, tuple(b)) for c, s, b in
            zip(classes[order].tolist(), scores[order].tolist(), xyxy[order].tolist())]


def raw_rows(outputs: Any, spec: DetectorSpec) -> np.ndarray:
    """Every output row of one frame, thresholds ignored, as [K, 6] (box as the model gives it, score, class),
    plus a last row holding the count (0 without one): what `raw_error` compares."""
    if spec.packed:
        a = np.asarray(outputs, dtype=np.float64)
        rows = a[0] if a.ndim == 3 and a.shape[0] == 1 else a
        return np.concatenate([rows.reshape(-1, len(PACKED_COLUMNS)), np.zeros((1, len(PACKED_COLUMNS)))])
    boxes, scores, classes = _columns(outputs, spec)
    count = float(np.asarray(outputs[spec.count]).reshape(-1)[0]) if spec.count else 0.0
    tail = np.array([[count, 0.0, 0.0, 0.0, 0.0, 0.0]])
    rows = np.concatenate([boxes, scores[:, None], classes.astype(np.float64)[:, None]], axis=1)
    return np.concatenate([rows, tail])


def raw_error(split: Any, reference: Any, spec: DetectorSpec, in_place_tol: float = 1e-3) -> float:
    """Max abs error between two frames' raw detector outputs, blind to tied rows swapping places.

    NMS sorts by score, and two boxes whose scores tie to 1e-7 swap places when a split model's float sums
    differ in the last bit: an element-wise diff then reads 0.5 where every box is the same. So rows are
    compared in place where they agree to `in_place_tol`; the rows left over on each side are compared with
    their nearest left-over row on the other side (both ways). The count is compared exactly."""
    a, b = raw_rows(split, spec), raw_rows(reference, spec)
    if a.shape != b.shape:
        return float("inf")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    count_err = abs(a[-1, 0] - b[-1, 0])
    a, b = a[:-1], b[:-1]
    in_place = np.max(np.abs(a - b), axis=1)
    lined_up = in_place <= in_place_tol
    err = max(float(count_err), float(in_place[lined_up].max()) if lined_up.any() else 0.0)
    rest_a, rest_b = a[~lined_up], b[~lined_up]
    if len(rest_a):
        dist = np.max(np.abs(rest_a[:, None, :] - rest_b[None, :, :]), axis=2)
        err = max(err, float(dist.min(axis=1).max()), float(dist.min(axis=0).max()))
    return err


def to_json(detections: Sequence[Detection]) -> List[Dict[str, Any]]:
    """results.jsonl `boxes`: [{label, score, box: [x1, y1, x2, y2]}] (pixels to 0.1, score to 1e-4)."""
    return [{"label": d.label, "score": round(float(d.score), 4), "box": [round(float(v), 1) for v in d.box]}
            for d in detections]


# ------------------------------------------------------------------------------------------------ agreement


def _xyxy(dets: Sequence[Detection]) -> np.ndarray:
    return np.asarray([d.box for d in dets], dtype=np.float64).reshape(-1, 4)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [n, 4] with every box of `b` [m, 4] (x1, y1, x2, y2): [n, m]."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0.0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match(dets_a: Sequence[Detection], dets_b: Sequence[Detection], iou: float = 0.5) -> List[Tuple[int, int, float]]:
    """Pairs (i, j, IoU) of dets_a[i] with dets_b[j]: the same label and IoU >= `iou`, each box used once, taken
    greedily by dets_a's score (best first), each taking its best-IoU free partner (COCO-style)."""
    if not dets_a or not dets_b:
        return []
    m = iou_matrix(_xyxy(dets_a), _xyxy(dets_b))
    la = np.asarray([d.label for d in dets_a], dtype=object)
    lb = np.asarray([d.label for d in dets_b], dtype=object)
    m[la[:, None] != lb[None, :]] = -1.0
    m[m < iou] = -1.0
    pairs: List[Tuple[int, int, float]] = []
    order = np.argsort(-np.asarray([d.score for d in dets_a], dtype=np.float64), kind="stable")
    for i in order[(m[order] >= 0).any(axis=1)].tolist():  # only rows that can match at all
        j = int(np.argmax(m[i]))
        if m[i, j] >= 0:
            pairs.append((i, j, float(m[i, j])))
            m[:, j] = -1.0
    return pairs


def prf(matched: int, n_split: int, n_ref: int) -> Tuple[float, float, float]:
    """(precision, recall, F1) of `matched` boxes out of `n_split` found and `n_ref` expected; precision 1 with
    nothing found, recall 1 with nothing expected (so two empty frames agree fully)."""
    p = matched / float(n_split) if n_split else 1.0
    r = matched / float(n_ref) if n_ref else 1.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f1


class DetectionAgreement:
    """How the split run's detections agree with the unsplit model's, accumulated over checked frames."""

    def __init__(self, iou: float = 0.5) -> None:
        self.iou = float(iou)
        self.frames = 0
        self.frames_same = 0  # frames where every box of both sides matched
        self.n_split = self.n_ref = self.matched = 0
        self.iou_sum = 0.0
        self.max_score_diff = 0.0

    def add(self, frame_split: Sequence[Detection], frame_ref: Sequence[Detection]) -> Tuple[float, float, float]:
        """Add one frame (the split run's detections, the reference's); that frame's (precision, recall, F1)."""
        pairs = match(frame_split, frame_ref, self.iou)
        self.frames += 1
        self.n_split += len(frame_split)
        self.n_ref += len(frame_ref)
        self.matched += len(pairs)
        self.frames_same += int(len(pairs) == len(frame_split) == len(frame_ref))
        if pairs:
            self.iou_sum += sum(p[2] for p in pairs)
            diff = np.abs(np.asarray([frame_split[i].score - frame_ref[j].score for i, j, _ in pairs]))
            self.max_score_diff = max(self.max_score_diff, float(diff.max()))
        return prf(len(pairs), len(frame_split), len(frame_ref))

    def summary(self) -> Dict[str, Any]:
        """report.json `detection_agreement`: frames, boxes each side, matched, precision, recall, F1 (None before
        any frame), mean IoU and largest score difference of the matched boxes."""
        if not self.frames:
            p = r = f1 = None
        else:
            p, r, f1 = prf(self.matched, self.n_split, self.n_ref)
        return {"frames": self.frames, "frames_same": self.frames_same, "iou_threshold": self.iou,
                "split_boxes": self.n_split, "reference_boxes": self.n_ref, "matched": self.matched,
                "precision": None if p is None else round(p, 6), "recall": None if r is None else round(r, 6),
                "f1": None if f1 is None else round(f1, 6),
                "mean_iou": round(self.iou_sum / self.matched, 6) if self.matched else None,
                "max_score_diff": round(self.max_score_diff, 6) if self.matched else None}


# --------------------------------------------------------------------------------------------------- counts


def count(detections: Sequence[Detection], label: str = "person") -> int:
    """How many of the frame's detections have `label`."""
    return sum(1 for d in detections if d.label == label)


def label_counts(detections: Sequence[Detection]) -> Dict[str, int]:
    """{label: boxes} of one frame, in first-seen (best score) order."""
    out: Dict[str, int] = {}
    for d in detections:
        out[d.label] = out.get(d.label, 0) + 1
    return out


def _noun(label: str, n: int) -> str:
    if label == "person":
        return "person" if n == 1 else "people"
    return label if n == 1 else label + "s"


def caption(detections: Sequence[Detection], always: Sequence[str] = ("person",)) -> str:
    """"3 people", "1 person, 2 cars", "0 people": the labels in `always` even at 0, then the others found."""
    counts = label_counts(detections)
    parts = ["%d %s" % (counts.get(lab, 0), _noun(lab, counts.get(lab, 0))) for lab in always]
    parts += ["%d %s" % (n, _noun(lab, n)) for lab, n in counts.items() if lab not in always]
    return ", ".join(parts)


class DetectionCounts:
    """report.json `detections`: {label: {boxes, frames_with, max_per_frame}} over the run's frames (bounded
    memory: totals only)."""

    def __init__(self) -> None:
        self.frames = 0
        self.by_label: Dict[str, Dict[str, int]] = {}

    def add(self, detections: Sequence[Detection]) -> Dict[str, int]:
        """Count one frame's detections; its {label: boxes}."""
        self.frames += 1
        counts = label_counts(detections)
        for lab, n in counts.items():
            d = self.by_label.setdefault(lab, {"boxes": 0, "frames_with": 0, "max_per_frame": 0})
            d["boxes"] += n
            d["frames_with"] += 1
            d["max_per_frame"] = max(d["max_per_frame"], n)
        return counts

    def summary(self) -> Dict[str, Dict[str, int]]:
        return {lab: dict(d) for lab, d in sorted(self.by_label.items())}


# -------------------------------------------------------------------------------------------------- drawing


def draw_boxes(rgb: np.ndarray, detections: Sequence[Detection], scale: float = 1.0, text: bool = True,
               colour: Tuple[int, int, int] = BOX_COLOUR_RGB, thickness: int = 2) -> np.ndarray:
    """A copy of the RGB uint8 frame with each detection's box (coordinates times `scale`, for a resized frame)
    in `colour` and, with `text`, its "label score" above it (inside the frame)."""
    import cv2

    out = np.ascontiguousarray(np.array(rgb, dtype=np.uint8, copy=True))
    h, w = out.shape[:2]
    for d in detections:
        x1, y1, x2, y2 = (int(round(v * scale)) for v in d.box)
        x1, x2 = min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)
        y1, y2 = min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)
        cv2.rectangle(out, (x1, y1), (x2, y2), colour, thickness)
        if text:
            label = "%s %.2f" % (d.label, d.score)
            (tw, th), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
            ty = y1 - 4 if y1 - th - base - 4 >= 0 else min(y1 + th + 4, h - 1)
            cv2.rectangle(out, (x1, ty - th - 2), (min(x1 + tw + 2, w - 1), ty + base - 2), colour, -1)
            cv2.putText(out, label, (x1 + 1, ty - 1), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return out


def as_outputs(outputs: Any, names: Optional[Sequence[str]] = None) -> Mapping[str, np.ndarray]:
    """A stage's model outputs as {name: array}: a mapping as it is, a list/tuple zipped with `names` (the
    model's output names in order; ValueError when they do not line up)."""
    if isinstance(outputs, Mapping):
        return outputs
    outs = list(outputs)
    if names is None or len(names) != len(outs):
        raise ValueError("detector outputs: %d arrays need as many output names, got %r" % (len(outs), names))
    return dict(zip(names, outs))
