"""Non-zero-rate predictors per cut: the share of elements a delta hop sends, predicted from the input hop.

Per cut k (the only tensors that travel) and output channel c, the delta mask's non-zero rate is a
ridge fit on features of the input hop's per-channel rates x (3 channels of the uint8 frame):
  "sqrt":     [1, mean(x), sqrt(mean(x))]
  "channels": [1, x_0, x_1, x_2, sqrt(mean(x))]
clipped to [0, 1]. Cut 0 (the frame) passes x through. The full (keyframe) size of a cut uses the
mean non-zero rate of its raw activations, observed to be nearly constant. Bytes come from the
codec's size model over the whole tensor (codec.estimate_bytes), times a per-cut compression ratio
(bytes the hop really sent with the codec's compression / the size model's bytes for the same
non-zeros, over the training frames; separately for keyframes). Stored as plain float arrays.

`p_unchanged` is the share of the video's delta frames whose input delta is empty at the input threshold: on those
every stage skips its compute (delta.skip_unchanged), which the cost model counts (CostInputs.p_unchanged).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.wire.codec import estimate_bytes as codec_estimate
from cnnvideo.wire.protocol import HopSettings

log = logging.getLogger(__name__)

FEATURES = ("sqrt", "channels")
FORMAT_VERSION = 2


def estimate_bytes(nnz, numel, itemsize) -> np.ndarray:
    """The codec's size model (min of dense, bitmap+values, index list + header), as float64."""
    return np.asarray(codec_estimate(nnz, numel, itemsize), dtype=np.float64)


def features(input_nz: np.ndarray, kind: str = "sqrt") -> np.ndarray:
    """[N, d] design matrix from input per-channel rates [N, C_in] (or [C_in])."""
    x = np.clip(np.atleast_2d(np.asarray(input_nz, dtype=np.float64)), 0.0, 1.0)
    mean = x.mean(axis=1, keepdims=True)
    ones = np.ones_like(mean)
    if kind == "sqrt":
        return np.concatenate([ones, mean, np.sqrt(mean)], axis=1)
    if kind == "channels":
        return np.concatenate([ones, x, np.sqrt(mean)], axis=1)
    raise ValueError("unknown predictor features %r (known: %s)" % (kind, ", ".join(FEATURES)))


def channel_axis(shape: Sequence[int], dtype: str) -> Optional[int]:
    """Channel axis of a cut tensor: last for the NHWC uint8 frame, 1 for NCHW/NC tensors, None if 1-D."""
    if len(shape) < 2:
        return None
    if str(dtype) == "uint8" and len(shape) == 4:
        return 3
    return 1


def channel_rates(mask: np.ndarray, shape: Sequence[int], dtype: str) -> np.ndarray:
    """Per-channel share of True in a mask of a cut tensor."""
    mask = np.asarray(mask, dtype=bool).reshape(shape)
    axis = channel_axis(shape, dtype)
    if axis is None:
        return np.array([mask.mean()])
    moved = np.moveaxis(mask, axis, 0).reshape(mask.shape[axis], -1)
    return np.count_nonzero(moved, axis=1) / float(max(moved.shape[1], 1))


class Recorder:
    """Collects per-frame, per-cut, per-channel delta rates (and raw rates / actual bytes) over N frames."""

    def __init__(self) -> None:
        self._delta = {}  # type: Dict[int, List[np.ndarray]]
        self._raw = {}  # type: Dict[int, List[float]]
        self._bytes = {}  # type: Dict[int, List[float]]
        self._model = {}  # type: Dict[int, List[float]]
        self._key = {}  # type: Dict[int, Tuple[float, float]]
        self._unchanged = []  # type: List[bool]
        self.frames = 0

    def add_unchanged(self, unchanged: bool) -> None:
        """One delta frame: whether its input delta was empty (nothing past the input threshold)."""
        self._unchanged.append(bool(unchanged))

    def p_unchanged(self) -> float:
        """Share of the recorded delta frames whose input delta was empty (0 if none recorded)."""
        return unchanged_share(self._unchanged)

    def add(
        self,
        delta_nz: Dict[int, np.ndarray],
        raw_nz: Optional[Dict[int, float]] = None,
        sizes: Optional[Dict[int, float]] = None,
        model: Optional[Dict[int, float]] = None,
    ) -> None:
        """One frame: {cut: per-channel delta rate}, optional {cut: raw rate}, {cut: actual bytes} and
        {cut: the size model's bytes for the same non-zeros}."""
        for k, v in delta_nz.items():
            self._delta.setdefault(int(k), []).append(np.asarray(v, dtype=np.float64).reshape(-1))
        for k, r in (raw_nz or {}).items():
            self._raw.setdefault(int(k), []).append(float(r))
        for k, b in (sizes or {}).items():
            self._bytes.setdefault(int(k), []).append(float(b))
        for k, b in (model or {}).items():
            self._model.setdefault(int(k), []).append(float(b))
        if delta_nz:
            self.frames += 1

    def arrays(self) -> Dict[int, np.ndarray]:
        """{cut: [N, C] delta rates} (cut 0 = the input hop)."""
        return {k: np.stack(v) for k, v in sorted(self._delta.items())}

    def raw_means(self) -> Dict[int, float]:
        """{cut: mean raw non-zero rate}."""
        return {k: float(np.mean(v)) for k, v in sorted(self._raw.items())}

    def add_keyframe(self, sizes: Dict[int, float], model: Dict[int, float]) -> None:
        """The keyframe's actual and size-model bytes per cut."""
        for k, b in sizes.items():
            self._key[int(k)] = (float(b), float(model[k]))

    def ratios(self, n_cuts: int) -> Tuple[np.ndarray, np.ndarray]:
        """(delta, keyframe) compression ratio per cut: actual bytes / size-model bytes (1 where not recorded)."""
        delta, key = np.ones(n_cuts), np.ones(n_cuts)
        for k in range(n_cuts):
            actual, model = sum(self._bytes.get(k, [])), sum(self._model.get(k, []))
            if actual > 0 and model > 0:
                delta[k] = actual / model
            if k in self._key and self._key[k][1] > 0:
                key[k] = self._key[k][0] / self._key[k][1]
        return np.clip(delta, 0.01, 2.0), np.clip(key, 0.01, 2.0)

    def split(self, n: int) -> Tuple["Recorder", "Recorder"]:
        """(the keyframe and the first n delta frames, the delta frames after them): fit on one, validate on
        the other (trainer.fit_fraction)."""
        head, tail = Recorder(), Recorder()
        for mine, a, b, cut in ((self._delta, head._delta, tail._delta, n), (self._bytes, head._bytes, tail._bytes, n),
                                (self._model, head._model, tail._model, n), (self._raw, head._raw, tail._raw, n + 1)):
            for k, v in mine.items():
                a[k], b[k] = list(v[:cut]), list(v[cut:])
        head._key = dict(self._key)
        head._unchanged = tail._unchanged = list(self._unchanged)  # a share of the whole video, not a fitted value
        head.frames, tail.frames = min(n, self.frames), max(self.frames - n, 0)
        return head, tail

    def sizes(self) -> Dict[int, np.ndarray]:
        """{cut: [N] actual bytes per frame} (if recorded)."""
        return {k: np.asarray(v) for k, v in sorted(self._bytes.items())}

    def to_arrays(self) -> Dict[str, np.ndarray]:
        """Plain arrays: delta_<k> [N, C], raw_<k> [N], bytes_<k> [N], model_<k> [N], key_<k> [2]."""
        out = {"delta_%d" % k: v for k, v in self.arrays().items()}
        out.update({"raw_%d" % k: np.asarray(v) for k, v in self._raw.items()})
        out.update({"bytes_%d" % k: np.asarray(v) for k, v in self._bytes.items()})
        out.update({"model_%d" % k: np.asarray(v) for k, v in self._model.items()})
        out.update({"key_%d" % k: np.asarray(v) for k, v in self._key.items()})
        out["unchanged"] = np.asarray(self._unchanged, dtype=np.float64)
        return out

    @classmethod
    def from_arrays(cls, d: Dict[str, np.ndarray]) -> "Recorder":
        """Inverse of to_arrays."""
        rec = cls()
        rec._unchanged = [bool(v) for v in np.asarray(d.get("unchanged", []), dtype=np.float64).reshape(-1)]
        for key, value in d.items():
            kind, _, k = key.partition("_")
            target = {"delta": rec._delta, "raw": rec._raw, "bytes": rec._bytes, "model": rec._model}.get(kind)
            arr = np.asarray(value, dtype=np.float64)
            if kind == "key" and k.isdigit() and arr.size == 2:
                rec._key[int(k)] = (float(arr[0]), float(arr[1]))
            if target is None or not k.isdigit():
                continue
            target[int(k)] = list(arr) if kind == "delta" else [float(a) for a in arr.reshape(-1)]
        rec.frames = max([len(v) for v in rec._delta.values()] or [0])
        return rec


@dataclass
class Predictors:
    """Per-cut linear predictors of delta rates plus per-cut sizes, as plain arrays."""

    numel: np.ndarray  # [K+1] elements per cut tensor
    itemsize: np.ndarray  # [K+1] bytes per element on the wire
    raw_nz: np.ndarray  # [K+1] mean non-zero rate of raw activations
    coefs: List[np.ndarray] = field(default_factory=list)  # [K+1] of [d, C_k]; coefs[0] unused (pass-through)
    kind: str = "sqrt"
    input_nz: np.ndarray = field(default_factory=lambda: np.full(3, 0.1))  # mean input rates seen when fitting
    ratio: Optional[np.ndarray] = None  # [K+1] compression ratio of delta updates (None: 1)
    full_ratio: Optional[np.ndarray] = None  # [K+1] compression ratio of keyframes (None: 1)
    p_unchanged: float = 0.0  # share of frames whose input delta is empty at the input threshold

    def __post_init__(self) -> None:
        n = self.numel.size
        self.ratio = np.ones(n) if self.ratio is None else np.asarray(self.ratio, dtype=np.float64).reshape(-1)
        self.full_ratio = (np.ones(n) if self.full_ratio is None
                           else np.asarray(self.full_ratio, dtype=np.float64).reshape(-1))

    @property
    def n_cuts(self) -> int:
        """K+1."""
        return int(self.numel.size)

    def predict_nz(self, input_nz: np.ndarray) -> List[np.ndarray]:
        """Per cut [N, C_k] predicted delta rates for input rates [N, 3] (or [3])."""
        x = np.atleast_2d(np.asarray(input_nz, dtype=np.float64))
        phi = features(x, self.kind)
        out = [np.clip(x, 0.0, 1.0)]
        out.extend(np.clip(phi @ c, 0.0, 1.0) for c in self.coefs[1:])
        return out

    def predict_mean_nz(self, input_nz: np.ndarray) -> np.ndarray:
        """[N, K+1] predicted share of elements sent per cut (channels are equal-sized)."""
        return np.stack([p.mean(axis=1) for p in self.predict_nz(input_nz)], axis=1)

    def predict_bytes(self, input_nz: np.ndarray) -> np.ndarray:
        """Predicted delta bytes per cut: [K+1] for one input vector, [N, K+1] for [N, 3]."""
        x = np.asarray(input_nz, dtype=np.float64)
        nz = self.predict_mean_nz(x)
        out = estimate_bytes(np.round(nz * self.numel[None, :]), self.numel[None, :], self.itemsize[None, :])
        out = out * self.ratio[None, :]
        return out[0] if x.ndim == 1 else out

    def full_bytes(self) -> np.ndarray:
        """[K+1] bytes of a keyframe (whole tensor, zeros implicit) from the raw non-zero rates."""
        size = np.asarray(estimate_bytes(np.round(self.raw_nz * self.numel), self.numel, self.itemsize), dtype=float)
        return size * self.full_ratio

    def to_arrays(self) -> Dict[str, np.ndarray]:
        """Plain float arrays (np.savez with allow_pickle=False, proto float arrays)."""
        out = {
            "version": np.array([FORMAT_VERSION], dtype=np.float64),
            "kind": np.array([FEATURES.index(self.kind)], dtype=np.float64),
            "numel": self.numel.astype(np.float64),
            "itemsize": self.itemsize.astype(np.float64),
            "raw_nz": self.raw_nz.astype(np.float64),
            "input_nz": np.asarray(self.input_nz, dtype=np.float64),
            "ratio": self.ratio.astype(np.float64),
            "full_ratio": self.full_ratio.astype(np.float64),
            "p_unchanged": np.array([self.p_unchanged], dtype=np.float64),
        }
        for k, c in enumerate(self.coefs):
            out["coef_%d" % k] = np.asarray(c, dtype=np.float64)
        return out

    @classmethod
    def from_arrays(cls, d: Dict[str, np.ndarray]) -> "Predictors":
        """Inverse of to_arrays; ValueError on a malformed set."""
        try:
            version = int(np.asarray(d["version"]).reshape(-1)[0])
            kind = FEATURES[int(np.asarray(d["kind"]).reshape(-1)[0])]
            numel = np.asarray(d["numel"], dtype=np.float64).reshape(-1)
            itemsize = np.asarray(d["itemsize"], dtype=np.float64).reshape(-1)
            raw = np.asarray(d["raw_nz"], dtype=np.float64).reshape(-1)
            n_feat = features(np.zeros((1, 3)), kind).shape[1]
            coefs = [np.asarray(d["coef_%d" % k], dtype=np.float64).reshape(n_feat, -1) for k in range(numel.size)]
            input_nz = np.asarray(d["input_nz"], dtype=np.float64).reshape(-1)
            ratio = np.asarray(d["ratio"], dtype=np.float64).reshape(-1)
            full_ratio = np.asarray(d["full_ratio"], dtype=np.float64).reshape(-1)
            # absent from predictors fitted before it was measured: no frame counted as unchanged
            p_unchanged = float(np.asarray(d.get("p_unchanged", [0.0]), dtype=np.float64).reshape(-1)[0])
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError("malformed predictor arrays (version %d expected): %s" % (FORMAT_VERSION, exc)) from None
        sizes = {a.size for a in (itemsize, raw, ratio, full_ratio)}
        if version != FORMAT_VERSION or sizes != {numel.size}:
            raise ValueError("predictor arrays: version %d (expected %d) or sizes do not match" % (version,
                                                                                                  FORMAT_VERSION))
        if not (np.all(np.isfinite(ratio)) and np.all(ratio > 0) and np.all(np.isfinite(full_ratio))
                and np.all(full_ratio > 0)):
            raise ValueError("predictor arrays: compression ratios must be finite and positive")
        if not 0.0 <= p_unchanged <= 1.0:
            raise ValueError("predictor arrays: p_unchanged must be in [0, 1], got %r" % p_unchanged)
        return cls(numel=numel, itemsize=itemsize, raw_nz=raw, coefs=coefs, kind=kind, input_nz=input_nz,
                   ratio=ratio, full_ratio=full_ratio, p_unchanged=p_unchanged)

    def save(self, path: str) -> None:
        """np.savez without pickle."""
        with open(path, "wb") as fh:
            np.savez(fh, **self.to_arrays())

    @classmethod
    def load(cls, path: str) -> "Predictors":
        """Load a file written by save (no pickle); ValueError naming the file if it is truncated, corrupted
        (the zip CRC of every array is checked) or not predictors at all."""
        import zipfile

        try:
            with np.load(path, allow_pickle=False) as data:
                return cls.from_arrays({k: data[k] for k in data.files})
        except (EOFError, KeyError, zipfile.BadZipFile, ValueError) as exc:
            raise ValueError("predictor file %s is damaged (%s: %s)" % (path, type(exc).__name__, exc)) from None


def unchanged_share(flags: Sequence[bool]) -> float:
    """Share of True in per-frame "input delta was empty" flags (0 for none)."""
    flags = list(flags)
    return float(sum(bool(f) for f in flags)) / len(flags) if flags else 0.0


def ridge(x: np.ndarray, y: np.ndarray, lam: float = 1e-6) -> np.ndarray:
    """[d, C] least squares with a small ridge on all but the first (intercept) column."""
    penalty = np.eye(x.shape[1]) * lam * max(x.shape[0], 1)
    penalty[0, 0] = 0.0
    return np.linalg.solve(x.T @ x + penalty, x.T @ y)


def fit(
    records: Dict[int, np.ndarray],
    numel: Sequence[float],
    itemsize: Sequence[float],
    raw_nz: Optional[Dict[int, float]] = None,
    kind: str = "sqrt",
    lam: float = 1e-6,
    ratio: Optional[np.ndarray] = None,
    full_ratio: Optional[np.ndarray] = None,
    p_unchanged: float = 0.0,
) -> Predictors:
    """Fit per-cut predictors from {cut: [N, C_k] delta rates} (cut 0 = input hop [N, 3]); compression
    ratios per cut and the share of unchanged frames pass through (None: 1)."""
    numel = np.asarray(numel, dtype=np.float64)
    n_cuts = numel.size
    if 0 not in records:
        raise ValueError("records must include cut 0 (the input hop)")
    x = records[0]
    phi = features(x, kind)
    coefs = [np.zeros((phi.shape[1], x.shape[1]))]
    for k in range(1, n_cuts):
        y = records.get(k)
        if y is None or y.shape[0] != x.shape[0]:
            raise ValueError("records for cut %d missing or of another frame count" % k)
        coefs.append(ridge(phi, y, lam))
    raw = np.ones(n_cuts)
    for k, v in (raw_nz or {}).items():
        raw[int(k)] = v
    log.debug("fitted %d cut predictors (%s) on %d frames", n_cuts, kind, x.shape[0])
    return Predictors(numel=numel, itemsize=np.asarray(itemsize, dtype=np.float64), raw_nz=raw, coefs=coefs,
                      kind=kind, input_nz=x.mean(axis=0), ratio=ratio, full_ratio=full_ratio,
                      p_unchanged=float(p_unchanged))


def cut_meta(graph, fp16: bool = False, int8=False) -> Tuple[np.ndarray, np.ndarray]:
    """(numel [K+1], wire itemsize [K+1]) of a LayerGraph's cuts (float16 on later hops when fp16; with int8 the
    inner cuts travel as uint8, the model output stays float). `int8`: True (every inner cut) or the inner cuts
    that travel uint8 (the calibration's qparams keys: the others it keeps float)."""
    numel = np.array([c.numel for c in graph.cuts], dtype=np.float64)
    items = np.array([np.dtype(c.dtype).itemsize for c in graph.cuts], dtype=np.float64)
    if fp16:
        items = np.where(items == 4, 2.0, items)
    if int8 is True:
        items[1:-1] = 1.0
    elif int8:
        inner = [c for c in int8 if 0 < c < len(items) - 1]
        items[inner] = 1.0
    return numel, items


def record_video(
    graph,
    frames: Iterable[np.ndarray],
    threshold: float = 0.0,
    input_threshold: float = 0.0,
    fp16: bool = False,
    compress: str = "auto",
    measure_bytes: bool = True,
    quant=None,
) -> Recorder:
    """Play frames through the whole graph, one closed-loop HopSender per cut (compressing as the hops do);
    record rates, and with measure_bytes the bytes sent next to the size model's bytes. `quant` (cut ->
    engines.QParams, int8): inner-cut tensors are sent as their uint8 quantised values, as int8 workers send them."""
    import torch

    n_cuts = len(graph.cuts)
    items = cut_meta(graph, fp16, int8=sorted(quant) if quant else False)[1]
    stages = [graph.stage_module(k, k + 1) for k in range(n_cuts - 1)]
    settings = HopSettings(input_threshold=float(input_threshold), threshold=float(threshold), fp16=bool(fp16),
                           compress=compress)
    senders = [settings.sender(k) for k in range(n_cuts)]
    rec = Recorder()
    with torch.no_grad():
        for index, frame in enumerate(frames):
            x = torch.from_numpy(np.ascontiguousarray(frame)[None])
            tensors = [x]
            for stage in stages:
                x = stage(x)
                tensors.append(x)
            delta, raw, sizes, model = {}, {}, {}, {}
            for k, t in enumerate(tensors):
                arr = t.numpy()
                if quant and k in quant:
                    arr = quant[k].quantize(arr)
                buf = senders[k].encode(arr)
                nnz = np.count_nonzero(arr)
                raw[k] = nnz / float(arr.size)
                sizes[k] = float(len(buf))
                if index > 0 and k == 0:
                    rec.add_unchanged(senders[0].last_nnz == 0)  # the input delta is empty: every stage skips
                if index > 0 and senders[k].last_mask is not None:  # a dense "full" update still has a mask
                    cut = graph.cuts[k]
                    delta[k] = channel_rates(senders[k].last_mask, cut.shape, cut.dtype)
                    nnz = senders[k].last_nnz
                model[k] = float(estimate_bytes(nnz, arr.size, items[k]))
            # the keyframe (first frame) contributes raw rates and keyframe sizes only
            if measure_bytes and index == 0:
                rec.add_keyframe(sizes, model)
            keep = measure_bytes and bool(delta)
            rec.add(delta, raw, sizes if keep else None, model if keep else None)
    return rec


def validate(preds: "Predictors", held: Recorder) -> Dict[str, float]:
    """Predicted vs actual bytes on frames the predictors were not fitted on: mean |pred - actual| / actual over
    frames and cuts (`mape`) and of the per-frame total (`mape_total`), and the frame count."""
    rates, sizes = held.arrays(), held.sizes()
    if not held.frames or 0 not in rates or not sizes:
        raise ValueError("no held-out frames with recorded bytes")
    pred = np.atleast_2d(preds.predict_bytes(rates[0]))
    actual = np.stack([sizes[k] for k in sorted(sizes)], axis=1)
    err = np.abs(pred - actual) / np.maximum(actual, 1.0)
    total = np.abs(pred.sum(axis=1) - actual.sum(axis=1)) / np.maximum(actual.sum(axis=1), 1.0)
    return {"mape": float(err.mean()), "mape_total": float(total.mean()), "frames": float(held.frames)}


def fit_recorder(rec: Recorder, graph, kind: str = "sqrt", fp16: bool = False, lam: float = 1e-6,
                 int8=False) -> Predictors:
    """fit() from a Recorder and the graph's cut sizes (int8: uint8 inner cuts, all or those listed: cut_meta)."""
    numel, items = cut_meta(graph, fp16, int8)
    ratio, full_ratio = rec.ratios(numel.size)
    return fit(rec.arrays(), numel, items, rec.raw_means(), kind=kind, lam=lam, ratio=ratio, full_ratio=full_ratio,
               p_unchanged=rec.p_unchanged())
