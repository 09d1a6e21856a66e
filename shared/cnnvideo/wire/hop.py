"""Closed-loop delta state on both sides of a hop: the sender mirrors exactly what the receiver holds.

Payload = 8-byte hop header ``"<2sBBI"`` (b"HP", version, kind, sequence number) + one codec buffer.
Kinds: FULL (the whole tensor: first frame, keyframe, shape/dtype change), UPDATE (mask + the new
values there; receiver sets ``held[mask] = values``) and ADD256 for uint8 tensors (the changed
positions' differences modulo 256, zero elsewhere; receiver adds them with uint8 wrap-around, which
gives exactly ``held[mask] = x[mask]``; measured about 2x smaller than new pixel values under zstd).
An update names its sequence number; the receiver applies it only on top of the previous one, so
a lost or reordered payload raises HopError instead of silently corrupting the state.

An update with nothing in it ("unchanged": no position past the threshold) is a bare codec header (nnz 0, about
76 bytes with the hop header); `is_unchanged` tells it from the headers alone, the receiver applies it without
decoding anything (`HopReceiver.last_unchanged`), and a sender whose input did not change since its last payload
makes one without comparing (`HopSender.encode_unchanged`).
"""
from __future__ import annotations

import logging
import math
import struct
import sys
from typing import NamedTuple, Optional

import numpy as np

from cnnvideo.wire import codec

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<2sBBI")
_MAGIC = b"HP"
_VERSION = 1
FULL, UPDATE, ADD256 = 0, 1, 2
KIND_NAMES = {FULL: "full", UPDATE: "update", ADD256: "add256"}
_SUPPORTED = (np.dtype(np.uint8), np.dtype(np.float16), np.dtype(np.float32))
_BITS = {2: np.uint16, 4: np.uint32}
_VIEW_MIN = 1 << 16  # full payloads of at least this many elements: the sender mirrors a view, not a copy
_LOOP_MIN = 2048  # channel_nz counts channel by channel when each has at least this many elements
_LAST_MAX = 16  # ... or, channels last and at most this many of them, by summing rows of bytes:
_ROW = 512  # positions a row
_U16_ROWS = 65535  # rows a uint16 sum holds exactly


HEADER_SIZE = _HEADER.size


class HopError(ValueError):
    """A hop payload cannot be applied (update without a matching base, bad header, ...)."""


class HopHeader(NamedTuple):
    """The hop header of a payload: kind (FULL, UPDATE, ADD256), its name, and the sender's sequence number."""

    kind: int
    name: str
    seq: int


def peek_header(buf) -> HopHeader:
    """The hop header of `buf` (bytes or memoryview) without decoding anything; HopError if it is not one.
    The codec buffer follows at offset HEADER_SIZE."""
    if len(buf) < _HEADER.size:
        raise HopError("hop payload too short (%d bytes)" % len(buf))
    magic, version, kind, seq = _HEADER.unpack_from(buf, 0)
    if magic != _MAGIC or version != _VERSION or kind not in KIND_NAMES:
        raise HopError("bad hop header (magic %r, version %d, kind %d)" % (magic, version, kind))
    return HopHeader(kind, KIND_NAMES[kind], seq)


def is_unchanged(buf) -> bool:
    """Whether a payload is an update that changes nothing the receiver holds (a non-FULL payload whose codec
    buffer has no value), from its headers alone; HopError/CodecError if they are malformed."""
    kind = peek_header(buf).kind
    return kind != FULL and codec.is_empty(memoryview(buf)[_HEADER.size:])


def channel_nz(mask: np.ndarray, axis: int = 1) -> np.ndarray:
    """Share of True per channel along `axis` (float64 vector)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim == 0:
        return np.array([float(mask)])
    axis = axis % mask.ndim
    other = tuple(i for i in range(mask.ndim) if i != axis)
    if not other:
        return mask.astype(np.float64)
    channels = mask.shape[axis]
    per = max(mask.size // max(channels, 1), 1)
    # count_nonzero(axis=...) casts the mask to intp and sums it: 4.9 ms for a 480x720x3 frame's mask (the master's
    # input change, every frame), where the ways below take 0.05 ms (channels last) or 0.35 ms (a loop)
    counts = None
    if axis == mask.ndim - 1 and channels <= _LAST_MAX and per >= _LOOP_MIN and mask.flags.c_contiguous:
        counts = _count_channels_last(mask, channels)
    if counts is None and per >= _LOOP_MIN:  # one count_nonzero per channel view
        lead = (slice(None),) * axis
        counts = np.array([np.count_nonzero(mask[lead + (c,)]) for c in range(channels)], dtype=np.intp)
    if counts is None:  # many small channels (a late activation): one reduction beats a Python loop
        counts = np.count_nonzero(mask, axis=other)
    return counts / float(per)


def _count_channels_last(mask: np.ndarray, channels: int) -> Optional[np.ndarray]:
    """True per channel of a C-contiguous mask whose last axis is the channel axis: its bytes summed down the rows
    of a (rows, _ROW * channels) view in uint16 (exact: at most 65535 rows of 0/1 bytes a block), then folded by
    channel. None if the mask holds bytes other than 0 and 1 (a bool view of other data): the total is checked
    against count_nonzero."""
    flat = mask.reshape(-1).view(np.uint8)
    width = _ROW * channels
    rows = flat.size // width
    counts = np.zeros(channels, dtype=np.intp)
    for start in range(0, rows, _U16_ROWS):
        stop = min(rows, start + _U16_ROWS)
        block = flat[start * width:stop * width].reshape(stop - start, width)
        counts += np.add.reduce(block, axis=0, dtype=np.uint16).reshape(_ROW, channels).sum(axis=0, dtype=np.intp)
    tail = flat[rows * width:]
    if tail.size:
        counts += tail.reshape(-1, channels).sum(axis=0, dtype=np.intp)
    if int(counts.sum()) != int(np.count_nonzero(flat)):
        return None
    return counts


def _changed(x: np.ndarray, held: np.ndarray, threshold: float) -> np.ndarray:
    """Mask of positions to send: bitwise change at threshold 0, else |x - held| > threshold (NaN counts)."""
    if x.dtype == np.uint8:
        if threshold <= 0:
            return x != held
        # |x - held| in uint8, no wrap-around. Not the smaller of the two wrapped differences: that is the distance
        # around 256, 1 for 0 -> 255, so such a jump was never sent
        level = _uint8_level(threshold)
        cv2 = sys.modules.get("cv2")  # loaded where frames are read (the master): one SIMD pass, 0.12 ms a 480x720
        if cv2 is not None and x.flags.c_contiguous and held.flags.c_contiguous and x.size < 1 << 31:
            return (cv2.absdiff(x.reshape(-1), held.reshape(-1)) > level).reshape(x.shape)
        diff = np.maximum(x, held)  # max - min: the same values, 0.36 ms (never imports cv2: 4.5 s on a capped worker)
        np.subtract(diff, np.minimum(x, held), out=diff)
        return diff > level
    if threshold <= 0:
        bits = _BITS[x.dtype.itemsize]
        return x.view(bits) != held.view(bits)
    with np.errstate(invalid="ignore", over="ignore"):
        return ~(np.abs(x - held) <= threshold)


def _uint8_level(threshold: float) -> np.uint8:
    """The uint8 a uint8 difference must exceed to exceed `threshold` (> 0): its floor, 255 at most. Compared with
    the float itself, numpy casts the whole difference to float64 first (0.55 ms of CPU a 480x720 frame in the
    master, 4 % of its CPU a frame); an integer d > t exactly when d > floor(t)."""
    if not threshold < 255:  # 255 or more (or NaN): no uint8 difference exceeds it
        return np.uint8(255)
    return np.uint8(math.floor(threshold))


class InputChange:
    """Per-channel share of each frame's values the input hop sends: those that differ by more than `threshold`
    from what its receiver holds (`_changed`, the hop's own rule), the held view updated as a HopSender updates it.
    A value drifting under the threshold frame by frame is sent once its drift passes it, so these rates are above
    the frame-to-frame ones: on vtest.avi at 480x720 and threshold 4, 0.046 against 0.031. The trainer fits the
    predictors on the hop's rates (predict.record_video's closed-loop senders), so the planner must give them the
    same: with frame-to-frame rates it predicted 39 kB a frame on the input hop where 67.5 kB went."""

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = float(threshold)
        self._held: Optional[np.ndarray] = None

    def rates(self, frame: np.ndarray) -> np.ndarray:
        """[C] share of the frame's values the hop would send now; all ones for the first frame (a keyframe)."""
        frame = np.asarray(frame)
        if self._held is None or self._held.shape != frame.shape or self._held.dtype != frame.dtype:
            self._held = np.array(frame, copy=True)
            return np.ones(frame.shape[-1], dtype=np.float64)
        mask = _changed(frame, self._held, self.threshold)
        if self.threshold > 0:
            np.copyto(self._held, frame, where=mask)
        else:  # every change is sent: the receiver then holds the frame (a plain copy, 20x faster than `where`)
            np.copyto(self._held, frame)
        return channel_nz(mask, axis=-1)


class HopSender:
    """Encodes successive tensors of one hop as full keyframes or closed-loop updates."""

    def __init__(self, threshold: float = 0.0, fp16: bool = False, compress: str = "auto") -> None:
        if not threshold >= 0:
            raise HopError("threshold must be >= 0, got %r" % (threshold,))
        self.threshold = float(threshold)
        self.fp16 = bool(fp16)
        self.compress = compress
        self.reset()

    def reset(self) -> None:
        """Forget the mirrored state: the next encode is a keyframe."""
        self._held = None  # type: Optional[np.ndarray]
        self._seq = 0
        self.last_kind = None  # type: Optional[str]
        self.last_mask = None  # type: Optional[np.ndarray]
        self.last_nnz = 0
        self.last_numel = 0

    @property
    def held(self) -> Optional[np.ndarray]:
        """A read-only view of what the receiver holds now (None before the first frame)."""
        if self._held is None:
            return None
        view = self._held.view()
        view.flags.writeable = False
        return view

    def last_channel_nz(self) -> Optional[np.ndarray]:
        """Per-channel share of sent positions in the last update (NHWC uint8: last axis, else axis 1)."""
        if self.last_mask is None:
            return None
        m = self.last_mask
        axis = -1 if (self._held is not None and self._held.dtype == np.uint8) else (1 if m.ndim >= 2 else 0)
        return channel_nz(m, axis)

    def encode(self, x: np.ndarray, keyframe: bool = False) -> bytes:
        """Bytes for the receiver: full on the first call / keyframe / shape or dtype change, else an update."""
        x = np.ascontiguousarray(x)
        if x.dtype not in _SUPPORTED:
            raise HopError("unsupported dtype %s (uint8, float16, float32)" % x.dtype)
        seq = (self._seq + 1) & 0xFFFFFFFF
        held = self._held
        if keyframe or held is None or held.shape != x.shape or held.dtype != x.dtype:
            out = self._full(x, seq)
            self._seq = seq
            return out
        if self.fp16 and x.dtype == np.float32:
            x = x.astype(np.float16).astype(np.float32)
        mask = _changed(x, held, self.threshold)
        self.last_mask = mask
        self.last_numel = x.size
        if x.dtype == np.uint8 and self.threshold > 0:
            return self._add256_at(x, mask, seq)
        nnz = int(np.count_nonzero(mask))
        self.last_nnz = nnz
        if x.dtype == np.uint8:  # lossless: the delta is non-zero exactly where x changed
            self.last_kind = "add256"
            delta = np.subtract(x, held, dtype=np.uint8)  # modulo 256
            out = codec.encode(delta, compress=self.compress, prefix=_HEADER.pack(_MAGIC, _VERSION, ADD256, seq))
            self._set_held(x)
            self._seq = seq
            return out
        itemsize = 2 if self.fp16 else x.dtype.itemsize
        if nnz * itemsize + x.size // 8 >= x.size * itemsize:
            # the mask would cost more than it saves: send the whole tensor (a FULL payload, seq continues)
            out = codec.encode(x, fp16=self.fp16, compress=self.compress,
                               prefix=_HEADER.pack(_MAGIC, _VERSION, FULL, seq))
            self._held = self._mirror(x, out)
            self._seq = seq
            self.last_kind = "full"
            return out
        self.last_kind = "update"
        out = codec.encode(x, mask=mask, fp16=self.fp16, compress=self.compress,
                           prefix=_HEADER.pack(_MAGIC, _VERSION, UPDATE, seq))
        if self.threshold <= 0:  # every difference was sent: the receiver now holds x exactly
            self._set_held(x)
        elif nnz:
            if not held.flags.writeable:
                held = self._held = held.copy()
            np.copyto(held, x, where=mask)
        self._seq = seq
        return out

    def _add256_at(self, x: np.ndarray, mask: np.ndarray, seq: int) -> bytes:
        """The ADD256 update of a uint8 tensor under a threshold, from the changed positions found once: their
        differences modulo 256 (never 0: each differs by more than the threshold) and the receiver's copy set there.
        The same bytes as encoding the masked dense delta, without its passes over the whole frame (a subtract, the
        mask multiply, the add into the held copy, and the codec counting and finding the non-zeros again): about
        0.3 of 2.8 ms a 480x720 vtest frame."""
        sel = mask.reshape(-1)
        idx = sel.nonzero()[0]
        flat = x.reshape(-1)
        held = self._held
        if not held.flags.writeable:
            held = self._held = held.copy()
        target = held.reshape(-1)
        new = flat.take(idx)
        delta = np.subtract(new, target.take(idx), dtype=np.uint8)  # modulo 256
        out = codec.encode_positions(x.shape, idx, delta, sel, compress=self.compress,
                                     prefix=_HEADER.pack(_MAGIC, _VERSION, ADD256, seq))
        target[idx] = new
        self.last_kind = "add256"
        self.last_nnz = int(idx.size)
        self._seq = seq
        return out

    def encode_unchanged(self) -> bytes:
        """The update for an input equal to the one of the last encode(): nothing passes the threshold (what the
        receiver holds stays; closed loop: every position is within the threshold of it), so this is the empty
        update that encode() would give, made from the shape alone. HopError before the first frame."""
        held = self._held
        if held is None:
            raise HopError("no frame sent yet: the first payload is a keyframe")
        seq = (self._seq + 1) & 0xFFFFFFFF
        if held.dtype == np.uint8:
            kind, masked, self.last_kind = ADD256, False, "add256"
        else:
            kind, masked, self.last_kind = UPDATE, True, "update"
        out = codec.encode_empty(held.shape, held.dtype, mask=masked, fp16=self.fp16 and held.dtype == np.float32,
                                 prefix=_HEADER.pack(_MAGIC, _VERSION, kind, seq))
        self.last_mask = None
        self.last_nnz = 0
        self.last_numel = held.size
        self._seq = seq
        return out

    def _set_held(self, x: np.ndarray) -> None:
        """held := x (a copy); held may be a read-only view of a sent buffer."""
        if self._held.flags.writeable:
            np.copyto(self._held, x)
        else:
            self._held = x.copy()

    def _mirror(self, x: np.ndarray, out: bytes) -> np.ndarray:
        """What the receiver of a full payload `out` holds: a read-only view of the values in `out` when
        they sit there raw (bytes are immutable: no copy of a big dense tensor), else a copy of x."""
        if x.size >= _VIEW_MIN and not self.fp16:
            h = codec.describe_header(memoryview(out)[_HEADER.size :])
            if h["layout"] == codec.DENSE and h["code"] == codec.NONE and h["wire"] == x.dtype:
                view = np.frombuffer(out, dtype=x.dtype, count=x.size, offset=len(out) - x.nbytes)
                return view.reshape(x.shape)
        if self.fp16 and x.dtype == np.float32:
            return x.astype(np.float16).astype(np.float32)
        return x.copy()

    def _full(self, x: np.ndarray, seq: int) -> bytes:
        """Keyframe: the whole tensor (codec picks dense or sparse), and mirror the receiver's copy."""
        out = codec.encode(x, fp16=self.fp16, compress=self.compress, prefix=_HEADER.pack(_MAGIC, _VERSION, FULL, seq))
        self._held = self._mirror(x, out)
        self.last_kind = "full"
        self.last_mask = None
        self.last_nnz = self.last_numel = x.size
        return out


class HopReceiver:
    """Applies a HopSender's payloads; holds the reconstructed tensor."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.reset()

    def reset(self) -> None:
        """Drop the held tensor: only a full payload is accepted next."""
        self._held = None  # type: Optional[np.ndarray]
        self._seq = None  # type: Optional[int]
        self.last_kind = None  # type: Optional[str]
        self.last_unchanged = False  # the last payload was an update that changed nothing

    def decode(self, buf: bytes) -> np.ndarray:
        """Apply one payload and return a read-only view of the held tensor (valid until the next call)."""
        kind, _name, seq = peek_header(buf)
        self.last_unchanged = False
        if kind != FULL:
            self._check_base(seq)
            if self._empty_update(kind, buf):
                self._seq = seq
                self.last_kind = KIND_NAMES[kind]
                self.last_unchanged = True
                view = self._held.view()
                view.flags.writeable = False
                return view
        # immutable bytes: values may stay a read-only view of buf until the next partial update
        dec = codec.decode_positions(memoryview(buf)[_HEADER.size :], self.max_bytes, copy=not isinstance(buf, bytes))
        if kind == FULL:
            self._held = dec.values.reshape(dec.shape) if dec.mask is None else self._expand(dec)
        else:
            self._apply(kind, dec)
        self._seq = seq
        self.last_kind = KIND_NAMES[kind]
        view = self._held.view()
        view.flags.writeable = False
        return view

    def _check_base(self, seq: int) -> None:
        """An update needs the state right before it."""
        if self._held is None:
            raise HopError("update #%d arrived with no base tensor (keyframe needed)" % seq)
        if seq != ((self._seq + 1) & 0xFFFFFFFF):
            raise HopError("update #%d does not follow the held state #%d (keyframe needed)" % (seq, self._seq))

    def _empty_update(self, kind: int, buf) -> bool:
        """Whether the update `buf` carries no value (checked against the held tensor like any update), from the
        codec header alone: it is applied by keeping the held tensor, no dense zeros are built."""
        h = codec.describe_header(memoryview(buf)[_HEADER.size:], self.max_bytes)
        if h["nnz"]:
            return False
        held = self._held
        if tuple(h["shape"]) != held.shape or h["out"] != held.dtype:
            raise HopError("update %s %s does not match held %s %s" % (h["shape"], h["out"], held.shape, held.dtype))
        if (kind == UPDATE) != bool(h["flags"] & codec.FLAG_MASK):
            raise HopError("%s payload %s a mask" % (KIND_NAMES[kind], "without" if kind == UPDATE else "with"))
        return True

    @staticmethod
    def _expand(dec: codec.Decoded) -> np.ndarray:
        """A full payload sent with a mask: zeros outside it."""
        full = np.zeros(dec.shape, dtype=dec.dtype)
        codec.scatter(full.reshape(-1), dec.mask, dec.values)
        return full

    def _apply(self, kind: int, dec: codec.Decoded) -> None:
        """Overwrite (UPDATE) or add modulo 256 (ADD256) into the held tensor."""
        held = self._held
        if tuple(dec.shape) != held.shape or dec.dtype != held.dtype:
            raise HopError("update %s %s does not match held %s %s" % (dec.shape, dec.dtype, held.shape, held.dtype))
        if kind == ADD256:
            if dec.dtype != np.uint8 or dec.mask is not None:
                raise HopError("add256 payload must be a uint8 tensor")
            if held.flags.writeable:
                np.add(held, dec.values, out=held)
            else:  # held is a read-only view of an old buffer
                self._held = np.add(held, dec.values)
            return
        if dec.mask is None:
            raise HopError("update payload has no mask")
        if dec.values.size == held.size:  # every element changed: take the values as they are
            self._held = dec.values.reshape(held.shape)
            return
        if dec.values.size:
            if not held.flags.writeable:
                held = self._held = held.copy()
            codec.scatter(held.reshape(-1), dec.mask, dec.values)
