"""Tensor <-> bytes without pickle: dense, bitmap-sparse or index-sparse values, optional fp16 and zstd/lz4.

Wire layout (little endian)::

    header  "<4sBBBBBBBB" magic b"CVTC", version, layout, wire dtype, out dtype, flags, compress,
            index width, ndim
            ndim x u64 shape, u64 nnz, u64 raw body length, u64 body length on the wire
    body    (compressed) [bitmap ceil(numel/8) bytes | index gaps nnz x width bytes] + values

`flags` bit 0: the caller gave a mask (decode returns it); bit 1: value bytes are shuffled into byte
planes (helps zstd/lz4 on floats). Without a mask, zeros are implicit (bit-exact: -0.0 is kept as a
value). Index gaps: first entry is the first flat index, later entries are `idx[i] - idx[i-1] - 1`.
"""
from __future__ import annotations

import logging
import struct
from typing import NamedTuple, Optional, Tuple

import numpy as np

log = logging.getLogger(__name__)

try:  # optional accelerators: the codec works without them
    import zstandard as _zstd
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None
try:
    import lz4.block as _lz4
except ImportError:  # pragma: no cover
    _lz4 = None

MAGIC = b"CVTC"
VERSION = 1
MAX_NDIM = 8

DENSE, BITMAP, INDEX = 0, 1, 2
LAYOUT_NAMES = {DENSE: "dense", BITMAP: "bitmap", INDEX: "index"}
NONE, ZSTD, LZ4 = 0, 1, 2
COMPRESS_CODES = {"none": NONE, "zstd": ZSTD, "lz4": LZ4}
COMPRESS_NAMES = {v: k for k, v in COMPRESS_CODES.items()}
FLAG_MASK, FLAG_SHUFFLE = 1, 2

_DTYPES = {0: np.dtype(np.uint8), 1: np.dtype(np.float16), 2: np.dtype(np.float32)}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}  # same-size unsigned views for bit-exact tests
_INDEX_WIDTHS = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}

_FIXED = struct.Struct("<4sBBBBBBBB")
_TAIL = struct.Struct("<QQQ")
AUTO_MIN_BYTES = 512  # bodies smaller than this are never compressed by "auto"
AUTO_SAMPLE = 1 << 16  # "auto" first tries the fast compressor on this many bytes
AUTO_GAIN = 0.95  # keep compression only if it saves more than 5 %
ZSTD_LEVEL = 1


class CodecError(ValueError):
    """A buffer is malformed, too large, or needs a library that is not installed."""


class Decoded(NamedTuple):
    """A decoded tensor: values is 1-D (length nnz) when mask is given, else the full array."""

    shape: Tuple[int, ...]
    dtype: np.dtype
    mask: Optional[np.ndarray]
    values: np.ndarray


# ---------------------------------------------------------------------------------------------- sizes


def _index_width(max_gap: int) -> int:
    """Smallest index width (bytes) that holds `max_gap`."""
    if max_gap < 1 << 8:
        return 1
    if max_gap < 1 << 16:
        return 2
    if max_gap < 1 << 32:
        return 4
    return 0  # not representable: bitmap only


def estimate_bytes(nnz, numel, itemsize):
    """Uncompressed size of the best layout for `nnz` values of `numel`; vectorised over numpy arrays."""
    nnz = np.asarray(nnz, dtype=np.float64)
    numel = np.asarray(numel, dtype=np.float64)
    header = _FIXED.size + _TAIL.size + 8 * 4
    dense = numel * itemsize
    bitmap = np.ceil(numel / 8.0) + nnz * itemsize
    # expected gap ~ numel/nnz: a 1-byte index needs gaps < 256, else 2 bytes, else 4 bytes
    gap = numel / np.maximum(nnz, 1.0)
    width = np.where(gap < 128, 1.0, np.where(gap < 32768, 2.0, 4.0))
    index = nnz * (width + itemsize)
    best = np.minimum(np.minimum(dense, bitmap), index) + header
    if best.ndim == 0:
        return int(best)
    return best.astype(np.int64)


# --------------------------------------------------------------------------------------------- encode


def _as_bits(a: np.ndarray) -> np.ndarray:
    """The same bytes as an unsigned integer array (bit-exact comparisons, -0.0 != 0.0)."""
    return a.view(_BITS[a.dtype.itemsize])


def _check_ndim(ndim: int) -> None:
    """At most MAX_NDIM dimensions."""
    if ndim > MAX_NDIM:
        raise CodecError("ndim %d > %d" % (ndim, MAX_NDIM))


def _prepare(values: np.ndarray, mask: Optional[np.ndarray], fp16: bool):
    """Validate inputs; return (shape, out dtype, wire dtype, flat mask or None, nnz, flat or packed wire values)."""
    values = np.asarray(values)
    out_dtype = values.dtype
    if out_dtype not in _DTYPE_CODES:
        raise CodecError("unsupported dtype %s (uint8, float16, float32)" % out_dtype)
    wire = np.dtype(np.float16) if (fp16 and out_dtype == np.float32) else out_dtype
    if mask is None:
        _check_ndim(values.ndim)
        flat = np.ascontiguousarray(values, dtype=wire).reshape(-1)
        flat_mask = _as_bits(flat) != 0
        return values.shape, out_dtype, wire, None, int(np.count_nonzero(flat_mask)), flat, flat_mask
    mask = np.asarray(mask, dtype=bool)
    _check_ndim(mask.ndim)
    flat_mask = mask.reshape(-1)
    nnz = int(np.count_nonzero(flat_mask))
    if values.shape == mask.shape:
        flat = values.reshape(-1)
        packed = flat if nnz == flat.size else np.compress(flat_mask, flat)
    elif values.ndim == 1 and values.size == nnz:
        packed = values
    else:
        raise CodecError("values shape %s does not match mask shape %s" % (values.shape, mask.shape))
    return mask.shape, out_dtype, wire, flat_mask, nnz, np.ascontiguousarray(packed, dtype=wire), None


def _gaps(flat_mask: np.ndarray) -> np.ndarray:
    """Gap code of the set positions: first index, then idx[i] - idx[i-1] - 1."""
    idx = np.flatnonzero(flat_mask)
    gaps = np.empty(idx.size, dtype=np.int64)
    if idx.size:
        gaps[0] = idx[0]
        np.subtract(idx[1:], idx[:-1] + 1, out=gaps[1:])
    return gaps


def _choose_layout(flat_mask: np.ndarray, nnz: int, numel: int, itemsize: int, has_mask: bool):
    """Pick dense / bitmap / index by exact uncompressed size; return (layout, index bytes or None, width)."""
    if nnz == numel:
        return DENSE, None, 0
    best = (numel + 7) // 8 + nnz * itemsize
    layout = BITMAP
    if not has_mask and numel * itemsize < best:
        best, layout = numel * itemsize, DENSE
    if nnz * (1 + itemsize) >= best:  # an index cannot win: skip computing it
        return layout, None, 0
    gaps = _gaps(flat_mask)
    width = _index_width(int(gaps.max())) if nnz else 1
    if width and nnz * (width + itemsize) < best:
        return INDEX, gaps.astype(_INDEX_WIDTHS[width]).tobytes(), width
    return layout, None, 0


def _shuffle(b, itemsize: int) -> bytes:
    """Byte-plane transpose (all first bytes, then all second bytes...)."""
    if itemsize == 1 or not len(b):
        return bytes(b)
    return np.frombuffer(b, dtype=np.uint8).reshape(-1, itemsize).T.tobytes()


def _unshuffle(b, itemsize: int) -> bytes:
    """Invert `_shuffle`."""
    if itemsize == 1 or not len(b):
        return b
    return np.frombuffer(b, dtype=np.uint8).reshape(itemsize, -1).T.tobytes()


def _compress(body, code: int) -> bytes:
    """Compress with zstd or lz4 (block, size kept in our header)."""
    if code == ZSTD:
        return _zstd.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True).compress(body)
    return _lz4.compress(body, store_size=False)


def _auto_code(itemsize: int) -> int:
    """What "auto" tries: zstd for bytes (pixels), lz4 for floats (fast); whichever is installed."""
    order = (ZSTD, LZ4) if itemsize == 1 else (LZ4, ZSTD)
    for code in order:
        if (_zstd if code == ZSTD else _lz4) is not None:
            return code
    return NONE


def _resolve(compress: str, itemsize: int) -> int:
    """Compression code for a request; "auto" maps to `_auto_code`."""
    if compress not in ("auto", "none", "zstd", "lz4"):
        raise CodecError("unknown compress %r (auto, none, zstd, lz4)" % (compress,))
    if compress == "auto":
        return _auto_code(itemsize)
    code = COMPRESS_CODES[compress]
    if (code == ZSTD and _zstd is None) or (code == LZ4 and _lz4 is None):
        raise CodecError("compress=%r needs the %s package, which is not installed" % (compress, _pkg(code)))
    return code


def _sample(head: bytes, vals: np.ndarray, shuffled: bool) -> bytes:
    """About AUTO_SAMPLE bytes from the middle of head and values (values byte-planed if `shuffled`)."""
    total = len(head) + vals.nbytes
    n_head = AUTO_SAMPLE * len(head) // max(total, 1)
    i = (len(head) - n_head) // 2
    n_vals = max((AUTO_SAMPLE - n_head) // vals.itemsize, 1)
    j = max((vals.size - n_vals) // 2, 0)
    part = vals[j : j + n_vals].tobytes()
    return head[i : i + n_head] + (_shuffle(part, vals.itemsize) if shuffled else part)


def _pick_compression(head: bytes, vals: np.ndarray, compress: str) -> Tuple[int, int, list]:
    """Return (code, shuffle flag, body parts); "auto" keeps compression only where it saves > 5 %.

    auto tries one fast pass on plain bytes (zstd for uint8, lz4 for floats), probing a sample first on
    big bodies; byte-plane shuffling is tried only for explicit zstd/lz4 (on floats it saves ~15 % for a
    CPU cost that exceeds the transfer time it saves on a Pi link).
    """
    itemsize = vals.itemsize
    code = _resolve(compress, itemsize)
    raw_len = len(head) + vals.nbytes
    auto = compress == "auto"
    plain_parts = [head, memoryview(vals).cast("B")] if vals.size else [head]
    if code == NONE or raw_len == 0 or (auto and raw_len < AUTO_MIN_BYTES):
        return NONE, 0, plain_parts
    flag = 0
    if not auto and itemsize > 1:  # choose plain vs byte planes on a sample
        ratios = [(len(_compress(_sample(head, vals, sh), code)), f) for sh, f in ((False, 0), (True, FLAG_SHUFFLE))]
        flag = min(ratios)[1]
    elif auto and raw_len > 2 * AUTO_SAMPLE:
        sample = _sample(head, vals, False)
        if len(_compress(sample, code)) > AUTO_GAIN * len(sample):
            return NONE, 0, plain_parts
    data = vals.tobytes()
    body = _compress(head + (_shuffle(data, itemsize) if flag else data), code)
    if auto and len(body) > AUTO_GAIN * raw_len:
        return NONE, 0, plain_parts
    return code, flag, [body]


def encode(values: np.ndarray, mask: Optional[np.ndarray] = None, fp16: bool = False, compress: str = "auto") -> bytes:
    """Encode a tensor (mask None: zeros implicit) or the values at `mask` positions (full-shape or packed)."""
    shape, out_dtype, wire, flat_mask, nnz, vals, nz_mask = _prepare(values, mask, fp16)
    has_mask = flat_mask is not None
    numel = 1
    for d in shape:
        numel *= int(d)
    sel = flat_mask if has_mask else nz_mask
    layout, head, width = _choose_layout(sel, nnz, numel, wire.itemsize, has_mask)
    if layout == DENSE:
        head, nnz = b"", numel
    else:
        if layout == BITMAP:
            head = np.packbits(sel).tobytes()
        if not has_mask:
            vals = np.compress(nz_mask, vals)
    vals = vals.astype(wire.newbyteorder("<"), copy=False)
    code, shuffle_flag, parts = _pick_compression(head, vals, compress)
    flags = (FLAG_MASK if has_mask else 0) | shuffle_flag
    body_len = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    header = _FIXED.pack(
        MAGIC, VERSION, layout, _DTYPE_CODES[wire], _DTYPE_CODES[out_dtype], flags, code, width, len(shape)
    )
    header += struct.pack("<%dQ" % len(shape), *shape) + _TAIL.pack(nnz, len(head) + vals.nbytes, body_len)
    return b"".join([header] + parts)


# --------------------------------------------------------------------------------------------- decode


def _pkg(code: int) -> str:
    """The package a compression code needs."""
    return "zstandard" if code == ZSTD else "lz4"


def _decompress(body: bytes, code: int, raw_len: int) -> bytes:
    """Decompress to exactly `raw_len` bytes (already checked against max_bytes); never allocate more."""
    if code == NONE:
        return body
    if code == ZSTD:
        if _zstd is None:
            raise CodecError("payload is zstd-compressed but the zstandard package is not installed")
        try:
            declared = _zstd.frame_content_size(body)
        except _zstd.ZstdError as exc:
            raise CodecError("bad zstd frame: %s" % exc) from None
        if declared != raw_len:
            raise CodecError("zstd frame declares %d bytes, header says %d" % (declared, raw_len))
        try:
            out = _zstd.ZstdDecompressor().decompress(body, max_output_size=raw_len)
        except _zstd.ZstdError as exc:
            raise CodecError("zstd decompression failed: %s" % exc) from None
    else:
        if _lz4 is None:
            raise CodecError("payload is lz4-compressed but the lz4 package is not installed")
        try:
            out = _lz4.decompress(body, uncompressed_size=raw_len) if raw_len else b""
        except Exception as exc:  # lz4 raises LZ4BlockError (a plain Exception subclass)
            raise CodecError("lz4 decompression failed: %s" % exc) from None
    if len(out) != raw_len:
        raise CodecError("decompressed %d bytes, header says %d" % (len(out), raw_len))
    return out


def _parse_header(buf: bytes, max_bytes: int):
    """Read and validate the header; return a dict of its fields."""
    if len(buf) < _FIXED.size:
        raise CodecError("buffer too short for a header (%d bytes)" % len(buf))
    magic, version, layout, wire_c, out_c, flags, code, width, ndim = _FIXED.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CodecError("bad magic %r" % (magic,))
    if version != VERSION:
        raise CodecError("unsupported codec version %d" % version)
    if layout not in LAYOUT_NAMES:
        raise CodecError("unknown layout %d" % layout)
    if wire_c not in _DTYPES or out_c not in _DTYPES:
        raise CodecError("unknown dtype code %d/%d" % (wire_c, out_c))
    wire, out = _DTYPES[wire_c], _DTYPES[out_c]
    if wire != out and not (wire == np.float16 and out == np.float32):
        raise CodecError("wire dtype %s cannot decode to %s" % (wire, out))
    if flags & ~(FLAG_MASK | FLAG_SHUFFLE):
        raise CodecError("unknown flags 0x%x" % flags)
    if code not in COMPRESS_NAMES:
        raise CodecError("unknown compression %d" % code)
    if ndim > MAX_NDIM:
        raise CodecError("ndim %d > %d" % (ndim, MAX_NDIM))
    if (layout == INDEX) != (width in _INDEX_WIDTHS) or (layout != INDEX and width != 0):
        raise CodecError("bad index width %d for layout %s" % (width, LAYOUT_NAMES[layout]))
    hlen = _FIXED.size + 8 * ndim + _TAIL.size
    if len(buf) < hlen:
        raise CodecError("buffer too short for the header (%d < %d bytes)" % (len(buf), hlen))
    shape = struct.unpack_from("<%dQ" % ndim, buf, _FIXED.size)
    nnz, raw_len, body_len = _TAIL.unpack_from(buf, _FIXED.size + 8 * ndim)
    numel = 1
    for d in shape:  # python ints: no overflow
        numel *= d
    if numel * out.itemsize > max_bytes:
        raise CodecError("tensor %s of %s needs %d bytes > max_bytes %d"
                         % (shape, out, numel * out.itemsize, max_bytes))
    if nnz > numel or (layout == DENSE and nnz != numel):
        raise CodecError("value count %d does not fit %d elements (%s)" % (nnz, numel, LAYOUT_NAMES[layout]))
    head = (numel + 7) // 8 if layout == BITMAP else (nnz * width if layout == INDEX else 0)
    expect = head + nnz * wire.itemsize
    if raw_len != expect:
        raise CodecError("declared body length %d, layout needs %d" % (raw_len, expect))
    if body_len != len(buf) - hlen:
        raise CodecError("declared payload length %d, got %d bytes" % (body_len, len(buf) - hlen))
    if code == NONE and body_len != raw_len:
        raise CodecError("uncompressed payload length %d != %d" % (body_len, raw_len))
    return dict(layout=layout, wire=wire, out=out, flags=flags, code=code, width=width, shape=tuple(shape),
                numel=numel, nnz=nnz, raw_len=raw_len, head=head, hlen=hlen)


def _mask_from_bitmap(head: bytes, numel: int, nnz: int) -> np.ndarray:
    """Unpack a bitmap; padding bits must be zero and the popcount must equal nnz."""
    bits = np.unpackbits(np.frombuffer(head, dtype=np.uint8))
    if bits[numel:].any():
        raise CodecError("bitmap padding bits are set")
    mask = bits[:numel].view(bool)
    count = int(np.count_nonzero(mask))
    if count != nnz:
        raise CodecError("bitmap popcount %d != value count %d" % (count, nnz))
    return mask


def _mask_from_index(head: bytes, width: int, numel: int, nnz: int) -> np.ndarray:
    """Rebuild the mask from gap-coded indices; check they stay inside the tensor (monotone by construction)."""
    mask = np.zeros(numel, dtype=bool)
    if nnz == 0:
        return mask
    gaps = np.frombuffer(head, dtype=_INDEX_WIDTHS[width]).astype(np.int64)
    gaps[1:] += 1
    idx = np.cumsum(gaps)
    if idx[-1] >= numel or idx[0] < 0:
        raise CodecError("index %d out of range for %d elements" % (int(idx[-1]), numel))
    if nnz >= 1 << 31 and not (np.diff(idx) > 0).all():  # only this many gaps could wrap int64
        raise CodecError("indices are not strictly increasing")
    mask[idx] = True
    return mask


def scatter(flat: np.ndarray, mask: np.ndarray, values: np.ndarray) -> None:
    """flat[mask] = values, using the fastest numpy route for the size (boolean scatter is branchy)."""
    if flat.size < 1 << 16:
        np.place(flat, mask.reshape(-1), values)
    else:
        np.put(flat, np.flatnonzero(mask), values)


def decode(buf: bytes, max_bytes: int, copy: bool = True) -> Decoded:
    """Decode and validate a buffer from `encode`; every problem raises CodecError.

    copy=False may return values as a read-only view into `buf` (no copy for uncompressed same-dtype data).
    """
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise CodecError("expected bytes, got %s" % type(buf).__name__)
    view = memoryview(buf).cast("B")
    h = _parse_header(view, max_bytes)
    raw = _decompress(view[h["hlen"] :], h["code"], h["raw_len"])
    head, val_bytes = raw[: h["head"]], raw[h["head"] :]
    wire, out, numel, nnz = h["wire"], h["out"], h["numel"], h["nnz"]
    if h["flags"] & FLAG_SHUFFLE:
        val_bytes = _unshuffle(val_bytes, wire.itemsize)
    vals = np.frombuffer(val_bytes, dtype=wire.newbyteorder("<"))
    if wire != out:
        vals = vals.astype(out)
    elif copy or not vals.flags.c_contiguous:
        vals = vals.copy()
    layout = h["layout"]
    if layout == DENSE:
        mask = np.ones(numel, dtype=bool) if h["flags"] & FLAG_MASK else None
    elif layout == BITMAP:
        mask = _mask_from_bitmap(head, numel, nnz)
    else:
        mask = _mask_from_index(head, h["width"], numel, nnz)
    shape = h["shape"]
    if h["flags"] & FLAG_MASK:
        return Decoded(shape, out, mask.reshape(shape), vals)
    if layout == DENSE:
        return Decoded(shape, out, None, vals.reshape(shape))
    full = np.zeros(numel, dtype=out)
    scatter(full, mask, vals)
    return Decoded(shape, out, None, full.reshape(shape))


def describe(buf: bytes) -> str:
    """One line about a buffer's header (layout, dtype, compression), for logs and benchmarks."""
    h = _parse_header(memoryview(buf).cast("B"), 1 << 62)
    return "%s %s->%s %s nnz=%d/%d%s" % (
        LAYOUT_NAMES[h["layout"]], h["wire"], h["out"], COMPRESS_NAMES[h["code"]], h["nnz"], h["numel"],
        " shuffled" if h["flags"] & FLAG_SHUFFLE else "",
    )
