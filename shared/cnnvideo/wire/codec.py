"""Tensor <-> bytes without pickle: dense, bitmap-sparse or index-sparse values, optional fp16 and zstd/lz4.

Wire layout (little endian)::

    header  "<4sBBBBBBBB" magic b"CVTC", version, layout, wire dtype, out dtype, flags, compress,
            index code, ndim
            ndim x u64 shape, u64 nnz, u64 raw body length, u64 body length on the wire
    body    (compressed) [bitmap ceil(numel/8) bytes | index gaps] + values

`flags` bit 0: the caller gave a mask (decode returns it); bit 1: value bytes are shuffled into byte
planes (helps zstd/lz4 on floats); bit 2: only the bitmap/index part is compressed and the body is
the raw values followed by the compressed bitmap/index part. Without a mask, zeros are implicit (bit-exact:
-0.0 is kept as a value). Index gaps: first entry is the first flat index, later entries are
`idx[i] - idx[i-1] - 1`. Index code 2 / 4: every gap is a fixed-width u16 / u32. Index code 1: gaps
are u8 with an escape: a gap g is written as g // 255 bytes of 255 then one byte g % 255, so the gap
list costs `nnz + sum(g // 255) <= nnz + (numel - nnz) / 255` bytes whatever the largest gap is
(clustered changes with a few long jumps stay at about one byte per index). The encoder takes the
smallest exact size (ties go to the fixed widths, which decode faster).
"""
from __future__ import annotations

import logging
import struct
import threading
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
VERSION = 2  # 2: escaped u8 index code, head-only compression flag
MAX_NDIM = 8

DENSE, BITMAP, INDEX = 0, 1, 2
LAYOUT_NAMES = {DENSE: "dense", BITMAP: "bitmap", INDEX: "index"}
NONE, ZSTD, LZ4 = 0, 1, 2
COMPRESS_CODES = {"none": NONE, "zstd": ZSTD, "lz4": LZ4}
COMPRESS_NAMES = {v: k for k, v in COMPRESS_CODES.items()}
FLAG_MASK, FLAG_SHUFFLE, FLAG_HEAD = 1, 2, 4
_FLAGS_ALL = FLAG_MASK | FLAG_SHUFFLE | FLAG_HEAD

_DTYPES = {0: np.dtype(np.uint8), 1: np.dtype(np.float16), 2: np.dtype(np.float32)}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_LE = {k: v.newbyteorder("<") for k, v in _DTYPES.items()}  # wire dtypes by code
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}  # same-size unsigned views for bit-exact tests
ESC8 = 1  # index code: escaped u8 gaps
_INDEX_WIDTHS = {ESC8: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}
_ESC = 255

_FIXED = struct.Struct("<4sBBBBBBBB")
_TAIL = struct.Struct("<QQQ")
_HEADERS = [struct.Struct("<4sBBBBBBBB%dQQQQ" % n) for n in range(MAX_NDIM + 1)]  # whole header per ndim
_REST = [struct.Struct("<%dQQQQ" % n) for n in range(MAX_NDIM + 1)]  # shape + tail per ndim
AUTO_MIN_BYTES = 512  # bodies (or bitmap/index parts) smaller than this are never compressed by "auto"
AUTO_SAMPLE = 1 << 16  # "auto" first tries the fast compressor on this many bytes
AUTO_GAIN = 0.95  # keep compression only if it saves more than 5 %
ZSTD_LEVEL = 1
_MID = 1.0 / 16  # masks denser than this and sparser than 1 - this: gather/scatter through an index list
_SMALL = 1 << 12  # below this many elements boolean gather/scatter is as cheap as anything else


class CodecError(ValueError):
    """A buffer is malformed, too large, or needs a library that is not installed."""


class Decoded(NamedTuple):
    """A decoded tensor: values is 1-D (length nnz) when mask is given, else the full array."""

    shape: Tuple[int, ...]
    dtype: np.dtype
    mask: Optional[np.ndarray]
    values: np.ndarray


# ---------------------------------------------------------------------------------------------- sizes


def estimate_bytes(nnz, numel, itemsize):
    """Uncompressed size of the best layout for `nnz` values of `numel`; vectorised over numpy arrays.

    Dense and bitmap sizes are exact. The index list is sized by what the codec can always reach: the
    escaped u8 code costs at most `nnz + (numel - nnz) / 255` bytes however the changes cluster (an
    upper bound, tight when gaps are long), fixed u32 costs 4 bytes each, and fixed u16 (2 bytes each)
    is counted when every gap must fit (numel <= 65536) or when, with the positions spread at random,
    the expected largest gap (mean gap x (ln(nnz) + 1)) stays below 65536.
    """
    nnz = np.asarray(nnz, dtype=np.float64)
    numel = np.asarray(numel, dtype=np.float64)
    header = _FIXED.size + _TAIL.size + 8 * 4
    dense = numel * itemsize
    bitmap = np.ceil(numel / 8.0) + nnz * itemsize
    safe = np.maximum(nnz, 1.0)
    esc8 = nnz + np.floor(np.maximum(numel - nnz, 0.0) / _ESC)
    max_gap = numel / safe * (np.log(safe) + 1.0)
    u16 = np.where((numel <= 1 << 16) | (max_gap < 1 << 16), 2.0 * nnz, np.inf)
    index = np.minimum(np.minimum(esc8, u16), 4.0 * nnz) + nnz * itemsize
    best = np.minimum(np.minimum(dense, bitmap), index) + header
    if best.ndim == 0:
        return int(best)
    return best.astype(np.int64)


# --------------------------------------------------------------------------------------------- encode


def _gather(flat: np.ndarray, mask: np.ndarray, nnz: int, idx: Optional[np.ndarray]) -> np.ndarray:
    """flat[mask] (length nnz); through an index list when the mask is mixed (boolean gathers branch)."""
    if nnz == flat.size:
        return flat
    if idx is None and flat.size >= _SMALL and _MID * flat.size < nnz < (1 - _MID) * flat.size:
        idx = mask.nonzero()[0]
    if idx is not None:
        return flat.take(idx)
    return np.compress(mask, flat)


def _gaps(idx: np.ndarray) -> np.ndarray:
    """Gap code of sorted positions: first index, then idx[i] - idx[i-1] - 1."""
    gaps = np.empty(idx.size, dtype=np.int64)
    if idx.size:
        gaps[0] = idx[0]
        np.subtract(idx[1:], idx[:-1], out=gaps[1:])
        gaps[1:] -= 1
    return gaps


def _esc8(gaps: np.ndarray, big: np.ndarray, q: np.ndarray) -> bytes:
    """Escaped u8 gap list (len(gaps) + q.sum() bytes): g // 255 bytes of 255, then g % 255. `big` are the positions
    of the gaps of 255 or more and `q` their g // 255 (_index_head has them): only those are divided, and their
    escapes are inserted before their last bytes in one pass (a divmod of every gap cost 3x more on a frame delta,
    and placing every byte by a running sum of the escapes before it 2x more than the insert)."""
    last = gaps.astype(np.uint8)  # g % 255 for the small gaps (g < 255); the big ones are set below
    last[big] = gaps[big] - q * _ESC
    return np.insert(last, np.repeat(big, q), np.uint8(_ESC)).tobytes()


def _index_head(idx: np.ndarray, limit: int) -> Tuple[Optional[bytes], int]:
    """The smallest index list (bytes, code) if it is smaller than `limit` bytes, else (None, 0).

    Ties go to the fixed widths (cheaper to decode)."""
    nnz = idx.size
    gaps = _gaps(idx)
    max_gap = int(gaps.max()) if nnz else 0
    options = []
    if max_gap < 1 << 32:
        options.append((4 * nnz, 0, 4))
    if max_gap < 1 << 16:
        options.append((2 * nnz, 1, 2))
    big = q = None
    if max_gap < _ESC:
        esc = nnz
    else:
        big = np.flatnonzero(gaps >= _ESC)
        q = gaps[big] // _ESC
        esc = nnz + int(q.sum())
    options.append((esc, 2, ESC8))
    size, _, code = min(options)
    if size >= limit:
        return None, 0
    if code == ESC8:
        return (gaps.astype(np.uint8).tobytes() if big is None else _esc8(gaps, big, q)), ESC8
    return gaps.astype(_INDEX_WIDTHS[code]).tobytes(), code


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


_LOCAL = threading.local()  # per thread: a zstd (de)compressor is not thread-safe


def _zstd_compressor():
    """This thread's zstd compressor, made once: one-shot compress() gives the same bytes from a reused compressor,
    and a new one per call cost 0.4 ms more a 1 MB frame delta (its context sized afresh each time)."""
    made = getattr(_LOCAL, "zc", None)
    if made is None or made[0] != ZSTD_LEVEL:
        made = _LOCAL.zc = (ZSTD_LEVEL, _zstd.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True))
    return made[1]


def _zstd_decompressor():
    """This thread's zstd decompressor, made once."""
    d = getattr(_LOCAL, "zd", None)
    if d is None:
        d = _LOCAL.zd = _zstd.ZstdDecompressor()
    return d


def _compress(body, code: int) -> bytes:
    """Compress with zstd or lz4 (block, size kept in our header)."""
    if code == ZSTD:
        return _zstd_compressor().compress(body)
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
    if compress == "auto":
        return _auto_code(itemsize)
    code = COMPRESS_CODES.get(compress) if isinstance(compress, str) else None
    if code is None:
        raise CodecError("unknown compress %r (auto, none, zstd, lz4)" % (compress,))
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


def _raw(vals: np.ndarray):
    """The value bytes without a copy."""
    return memoryview(vals).cast("B")


def _pick_compression(head: bytes, vals: np.ndarray, compress: str, code: int) -> Tuple[int, int, list]:
    """Return (code, flags, body parts); "auto" keeps compression only where it saves > 5 %.

    auto probes the values (a sample of big bodies, the whole of small ones) with one fast pass on plain
    bytes (zstd for uint8, lz4 for floats): if they compress the whole body is compressed, else only the
    bitmap/index part (masks of changes cluster, so it usually shrinks several-fold) and the values follow
    raw. Byte-plane shuffling is tried only for explicit zstd/lz4 (on floats it saves ~15 % for a CPU cost
    that exceeds the transfer time it saves on a Pi link).
    """
    itemsize = vals.itemsize
    raw_len = len(head) + vals.nbytes
    auto = compress == "auto"
    plain = [head, _raw(vals)] if vals.size else [head]
    if code == NONE or raw_len == 0 or (auto and raw_len < AUTO_MIN_BYTES):
        return NONE, 0, plain
    flag = 0
    if not auto:
        if itemsize > 1:  # choose plain vs byte planes on a sample
            ratios = [(len(_compress(_sample(head, vals, sh), code)), f)
                      for sh, f in ((False, 0), (True, FLAG_SHUFFLE))]
            flag = min(ratios)[1]
    elif vals.nbytes < AUTO_MIN_BYTES:
        return _head_only(head, vals, code, plain)
    elif vals.nbytes > 2 * AUTO_SAMPLE:  # probe the middle of the values first
        n = AUTO_SAMPLE // itemsize
        j = (vals.size - n) // 2
        probe = _raw(vals[j : j + n])
        if len(_compress(probe, code)) > AUTO_GAIN * probe.nbytes:
            return _head_only(head, vals, code, plain)
    data = _raw(vals) if not flag else _shuffle(_raw(vals), itemsize)
    body = _compress(b"".join([head, data]) if head else data, code)
    if auto and len(body) > AUTO_GAIN * raw_len:
        return _head_only(head, vals, code, plain)
    return code, flag, [body]


def _head_only(head: bytes, vals: np.ndarray, code: int, plain: list) -> Tuple[int, int, list]:
    """Compress only the bitmap/index part when that saves > 5 % of it; values stay raw."""
    if len(head) < AUTO_MIN_BYTES:
        return NONE, 0, plain
    small = _compress(head, code)
    if len(small) > AUTO_GAIN * len(head):
        return NONE, 0, plain
    return code, FLAG_HEAD, plain[1:] + [small]  # values first: they stay aligned in the buffer


def encode(values: np.ndarray, mask: Optional[np.ndarray] = None, fp16: bool = False, compress: str = "auto",
           prefix: bytes = b"") -> bytes:
    """Encode a tensor (mask None: zeros implicit) or the values at `mask` positions (full-shape or packed).

    `prefix` is put in front of the result (saves a copy for callers that frame the buffer).
    """
    values = np.asarray(values)
    out_dtype = values.dtype
    out_c = _DTYPE_CODES.get(out_dtype)
    if out_c is None:
        raise CodecError("unsupported dtype %s (uint8, float16, float32)" % out_dtype)
    wire_c = 1 if (fp16 and out_c == 2) else out_c
    wire = _LE[wire_c]
    isz = wire.itemsize
    code = _resolve(compress, isz)
    has_mask = mask is not None
    if not has_mask:
        shape = values.shape
        if len(shape) > MAX_NDIM:
            raise CodecError("ndim %d > %d" % (len(shape), MAX_NDIM))
        flat = values.reshape(-1) if values.flags.c_contiguous else np.ascontiguousarray(values).reshape(-1)
        if wire_c != out_c:
            flat = flat.astype(wire)
        numel = flat.size
        bits = flat.view(_BITS[isz])
        nnz = int(np.count_nonzero(bits))
        sel = None
    else:
        mask = np.asarray(mask, dtype=bool)
        shape = mask.shape
        if len(shape) > MAX_NDIM:
            raise CodecError("ndim %d > %d" % (len(shape), MAX_NDIM))
        sel = mask.reshape(-1)
        numel = sel.size
        nnz = int(np.count_nonzero(sel))
        if values.shape == shape:
            flat = values.reshape(-1)
        elif values.ndim == 1 and values.size == nnz:
            flat = None
        else:
            raise CodecError("values shape %s does not match mask shape %s" % (values.shape, mask.shape))
    layout, best = _layout(numel, nnz, isz, code, compress, has_mask)
    head, width = b"", 0
    if layout != DENSE:
        if sel is None:
            sel = bits != 0
        layout, head, width, idx = _sparse_head(sel, None, nnz, isz, best)
    if layout == DENSE:
        nnz = numel
        vals = flat
        if has_mask and flat is None:
            vals = values
    elif flat is None:  # packed values given
        vals = values
    else:
        vals = _gather(flat, sel, nnz, idx)
    return _finish(prefix, shape, layout, (wire_c, out_c), code, compress, has_mask, width, nnz, head, vals)


def encode_positions(shape, positions: np.ndarray, values: np.ndarray, sel: np.ndarray, compress: str = "auto",
                     prefix: bytes = b"") -> bytes:
    """The bytes `encode` gives for a tensor of `shape` that is zero but at the sorted flat `positions`, where it
    holds `values` (1-D, none of them zero, of its dtype), from those alone: a sender that found its changed
    positions once (the input hop's delta) saves encode's passes over the whole tensor to find them again (counting,
    comparing, a dense delta to gather from). `sel` is the flat boolean mask of the same positions (for a bitmap
    layout). No fp16."""
    values = np.asarray(values)
    out_c = _DTYPE_CODES.get(values.dtype)
    if out_c is None:
        raise CodecError("unsupported dtype %s (uint8, float16, float32)" % values.dtype)
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_NDIM:
        raise CodecError("ndim %d > %d" % (len(shape), MAX_NDIM))
    numel, nnz, isz = sel.size, int(positions.size), values.itemsize
    code = _resolve(compress, isz)
    layout, best = _layout(numel, nnz, isz, code, compress, False)
    head, width = b"", 0
    if layout == DENSE:
        vals = np.zeros(numel, dtype=values.dtype)
        vals[positions] = values
        nnz = numel
    else:
        layout, head, width, _ = _sparse_head(sel, positions, nnz, isz, best)
        vals = values
    return _finish(prefix, shape, layout, (out_c, out_c), code, compress, False, width, nnz, head, vals)


def _layout(numel: int, nnz: int, isz: int, code: int, compress: str, has_mask: bool) -> Tuple[int, int]:
    """(DENSE or BITMAP, its exact uncompressed size) for nnz values of numel: dense only without a mask (a mask
    must come back), when it is no bigger, or for bytes under auto zstd with more than 1 in 8 set (zeros cost next
    to nothing in a dense body, which skips gather/scatter). A bitmap's caller may still pick an index list."""
    dense = numel * isz
    if nnz == numel:
        return DENSE, dense
    best = (numel + 7) // 8 + nnz * isz
    if not has_mask and (dense < best or (isz == 1 and code == ZSTD and compress == "auto" and 8 * nnz > numel)):
        return DENSE, dense
    return BITMAP, best


def _sparse_head(sel: np.ndarray, idx: Optional[np.ndarray], nnz: int, isz: int,
                 best: int) -> Tuple[int, bytes, int, Optional[np.ndarray]]:
    """(layout, head, index code, positions) of a sparse body whose bitmap costs `best` bytes: an index list when it
    could win and does (idx: the positions of sel, found here if None), else the bitmap of sel."""
    if nnz * (1 + isz) < best:
        if idx is None:
            idx = sel.nonzero()[0]
        ihead, icode = _index_head(idx, best - nnz * isz)
        if ihead is not None:
            return INDEX, ihead, icode, idx
    return BITMAP, np.packbits(sel).tobytes(), 0, idx


def _finish(prefix: bytes, shape: tuple, layout: int, codes: Tuple[int, int], code: int, compress: str,
            has_mask: bool, width: int, nnz: int, head: bytes, vals: np.ndarray) -> bytes:
    """prefix + header + body of an encoded tensor, its values (`codes`: wire and out dtype codes) compressed as
    _pick_compression decides."""
    wire_c, out_c = codes
    wire = _LE[wire_c]
    if vals.dtype != wire:
        vals = vals.astype(wire)
    if not vals.flags.c_contiguous:
        vals = np.ascontiguousarray(vals)
    code, flags, parts = _pick_compression(head, vals, compress, code)
    if has_mask:
        flags |= FLAG_MASK
    body_len = 0
    for p in parts:
        body_len += len(p) if isinstance(p, bytes) else p.nbytes
    header = _HEADERS[len(shape)].pack(MAGIC, VERSION, layout, wire_c, out_c, flags, code, width, len(shape),
                                       *shape, nnz, len(head) + vals.nbytes, body_len)
    return b"".join([prefix, header] + parts) if prefix else b"".join([header] + parts)


def encode_empty(shape, dtype, mask: bool = False, fp16: bool = False, prefix: bytes = b"") -> bytes:
    """What `encode` gives for a tensor of `shape`/`dtype` with no non-zero value (mask=False: an all-zero tensor)
    or no position set (mask=True: an all-False mask), without building the tensor or the mask: a header with
    nnz 0 and an empty index list (no body)."""
    out_dtype = np.dtype(dtype)
    out_c = _DTYPE_CODES.get(out_dtype)
    if out_c is None:
        raise CodecError("unsupported dtype %s (uint8, float16, float32)" % out_dtype)
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_NDIM:
        raise CodecError("ndim %d > %d" % (len(shape), MAX_NDIM))
    numel = 1
    for d in shape:
        numel *= d
    wire_c = 1 if (fp16 and out_c == 2) else out_c
    if numel == 0:  # nothing to leave out: encode() sends the (empty) tensor dense
        return encode(np.zeros(shape, dtype=out_dtype), mask=np.zeros(shape, dtype=bool) if mask else None,
                      fp16=fp16, compress="none", prefix=prefix)
    header = _HEADERS[len(shape)].pack(MAGIC, VERSION, INDEX, wire_c, out_c, FLAG_MASK if mask else 0, NONE, 4,
                                       len(shape), *shape, 0, 0, 0)
    return prefix + header


def is_empty(buf) -> bool:
    """Whether a buffer from `encode` carries no value at all (nnz 0), read from its header alone (validated,
    nothing decoded)."""
    return _parse_header(memoryview(buf).cast("B"), 1 << 62)[8] == 0


# --------------------------------------------------------------------------------------------- decode


def _pkg(code: int) -> str:
    """The package a compression code needs."""
    return "zstandard" if code == ZSTD else "lz4"


def _decompress(body, code: int, raw_len: int):
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
            out = _zstd_decompressor().decompress(body, max_output_size=raw_len)
        except _zstd.ZstdError as exc:
            _LOCAL.zd = None  # a fresh one for the next payload
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


def _parse_header(buf, max_bytes: int):
    """Read and validate the header; return a tuple of its fields (see the unpacking in `_decode`)."""
    n = len(buf)
    if n < _FIXED.size:
        raise CodecError("buffer too short for a header (%d bytes)" % n)
    magic, version, layout, wire_c, out_c, flags, code, width, ndim = _FIXED.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CodecError("bad magic %r" % (magic,))
    if version != VERSION:
        raise CodecError("unsupported codec version %d" % version)
    if layout not in LAYOUT_NAMES:
        raise CodecError("unknown layout %d" % layout)
    if wire_c not in _DTYPES or out_c not in _DTYPES:
        raise CodecError("unknown dtype code %d/%d" % (wire_c, out_c))
    if wire_c != out_c and not (wire_c == 1 and out_c == 2):
        raise CodecError("wire dtype %s cannot decode to %s" % (_DTYPES[wire_c], _DTYPES[out_c]))
    if flags & ~_FLAGS_ALL:
        raise CodecError("unknown flags 0x%x" % flags)
    if code not in COMPRESS_NAMES:
        raise CodecError("unknown compression %d" % code)
    if ndim > MAX_NDIM:
        raise CodecError("ndim %d > %d" % (ndim, MAX_NDIM))
    if (layout == INDEX) != (width in _INDEX_WIDTHS) or (layout != INDEX and width != 0):
        raise CodecError("bad index width %d for layout %s" % (width, LAYOUT_NAMES[layout]))
    rest = _REST[ndim]
    hlen = _FIXED.size + rest.size
    if n < hlen:
        raise CodecError("buffer too short for the header (%d < %d bytes)" % (n, hlen))
    fields = rest.unpack_from(buf, _FIXED.size)
    shape = fields[:ndim]
    nnz, raw_len, body_len = fields[ndim:]
    wire, out = _LE[wire_c], _DTYPES[out_c]
    numel = 1
    for d in shape:  # python ints: no overflow
        numel *= d
    if numel * out.itemsize > max_bytes:
        raise CodecError("tensor %s of %s needs %d bytes > max_bytes %d"
                         % (shape, out, numel * out.itemsize, max_bytes))
    if nnz > numel or (layout == DENSE and nnz != numel):
        raise CodecError("value count %d does not fit %d elements (%s)" % (nnz, numel, LAYOUT_NAMES[layout]))
    val_len = nnz * wire.itemsize
    if layout == BITMAP:
        head = (numel + 7) // 8
    elif layout != INDEX:
        head = 0
    elif width == ESC8:  # variable: between one byte per index and the longest possible escape run
        head = raw_len - val_len
        if not nnz <= head <= nnz + (numel - nnz) // _ESC:
            raise CodecError("escaped index list of %d bytes cannot hold %d indices of %d" % (head, nnz, numel))
    else:
        head = nnz * width
    if raw_len != head + val_len:
        raise CodecError("declared body length %d, layout needs %d" % (raw_len, head + val_len))
    if body_len != n - hlen:
        raise CodecError("declared payload length %d, got %d bytes" % (body_len, n - hlen))
    if code == NONE and (body_len != raw_len or flags & FLAG_HEAD):
        raise CodecError("uncompressed payload length %d != %d" % (body_len, raw_len))
    if flags & FLAG_HEAD and (flags & FLAG_SHUFFLE or head == 0 or body_len <= val_len):
        raise CodecError("head-only compression needs a bitmap/index part and unshuffled values")
    return layout, wire, out, flags, code, width, shape, numel, nnz, raw_len, head, hlen


def describe_header(buf, max_bytes: int = 1 << 62):
    """The validated header fields as a dict (for tests, logs and benchmarks)."""
    keys = ("layout", "wire", "out", "flags", "code", "width", "shape", "numel", "nnz", "raw_len", "head", "hlen")
    return dict(zip(keys, _parse_header(memoryview(buf).cast("B"), max_bytes)))


def _bitmap_positions(head, numel: int, nnz: int, want_index: bool):
    """Unpack a bitmap (boolean mask, or flat positions if `want_index`); padding bits must be zero, popcount nnz."""
    packed = np.frombuffer(head, dtype=np.uint8)
    if numel % 8 and packed[-1] & ((1 << (8 - numel % 8)) - 1):
        raise CodecError("bitmap padding bits are set")
    mask = np.unpackbits(packed, count=numel).view(bool)
    if want_index and _MID * numel < nnz < (1 - _MID) * numel:
        idx = mask.nonzero()[0]
        count = idx.size
        mask = idx
    else:
        count = int(np.count_nonzero(mask))
    if count != nnz:
        raise CodecError("bitmap popcount %d != value count %d" % (count, nnz))
    return mask


def _index_positions(head, width: int, numel: int, nnz: int) -> np.ndarray:
    """Flat positions from gap-coded indices; check they stay inside the tensor (increasing by construction)."""
    if nnz == 0:
        return np.zeros(0, dtype=np.int64)
    b = np.frombuffer(head, dtype=_INDEX_WIDTHS[width])
    if width == ESC8:
        if b[-1] == _ESC:
            raise CodecError("escaped index list ends inside an escape")
        cs = np.cumsum(b, dtype=np.int64)
        if b.size == nnz:
            if b.max() == _ESC:
                raise CodecError("escaped index list holds fewer than %d indices" % nnz)
            idx = cs
        else:
            term = np.flatnonzero(b != _ESC)
            if term.size != nnz:
                raise CodecError("escaped index list holds %d indices, header says %d" % (term.size, nnz))
            idx = cs[term]
        idx += np.arange(nnz, dtype=np.int64)
    else:
        gaps = b.astype(np.int64)
        gaps[1:] += 1
        idx = np.cumsum(gaps)
    if idx[-1] >= numel or idx[0] < 0:
        raise CodecError("index %d out of range for %d elements" % (int(idx[-1]), numel))
    if nnz >= 1 << 31 and not (np.diff(idx) > 0).all():  # only this many gaps could wrap int64
        raise CodecError("indices are not strictly increasing")
    return idx


def _mask_from_index(head, width: int, numel: int, nnz: int) -> np.ndarray:
    """Boolean mask from gap-coded indices."""
    mask = np.zeros(numel, dtype=bool)
    mask[_index_positions(head, width, numel, nnz)] = True
    return mask


def scatter(flat: np.ndarray, where: np.ndarray, values: np.ndarray) -> None:
    """flat[where] = values for a boolean mask or flat positions, by the fastest numpy route.

    Boolean scatters branch per element: mixed masks go through an index list (about 3x faster).
    """
    if where.dtype != np.bool_:
        flat[where] = values
        return
    where = where.reshape(-1)
    n = values.size
    if flat.size >= _SMALL and _MID * flat.size < n < (1 - _MID) * flat.size:
        flat[where.nonzero()[0]] = values
    else:
        flat[where] = values


def _decode(buf, max_bytes: int, copy: bool, want_index: bool) -> Decoded:
    """Shared decode; with `want_index` a masked payload's mask may come back as int64 flat positions."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise CodecError("expected bytes, got %s" % type(buf).__name__)
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    layout, wire, out, flags, code, width, shape, numel, nnz, raw_len, head_len, hlen = _parse_header(view, max_bytes)
    body = view[hlen:]
    if flags & FLAG_HEAD:  # raw values, then the compressed bitmap/index part
        split = raw_len - head_len
        head = _decompress(body[split:], code, head_len)
        val_bytes = body[:split]
    else:
        raw = _decompress(body, code, raw_len)
        head, val_bytes = raw[:head_len], raw[head_len:]
    if flags & FLAG_SHUFFLE:
        val_bytes = _unshuffle(val_bytes, wire.itemsize)
    vals = np.frombuffer(val_bytes, dtype=wire)
    if wire != out:
        vals = vals.astype(out)
    elif copy or not vals.flags.aligned:  # misaligned values would make every later use slow
        vals = vals.copy()
    has_mask = flags & FLAG_MASK
    if layout == DENSE:
        if not has_mask:
            return Decoded(shape, out, None, vals.reshape(shape))
        mask = np.ones(numel, dtype=bool)
    elif layout == BITMAP:
        mask = _bitmap_positions(head, numel, nnz, want_index or not has_mask)
    elif want_index or not has_mask:
        mask = _index_positions(head, width, numel, nnz)
    else:
        mask = _mask_from_index(head, width, numel, nnz)
    if has_mask:
        return Decoded(shape, out, mask if mask.dtype != np.bool_ else mask.reshape(shape), vals)
    full = np.zeros(numel, dtype=out)
    scatter(full, mask, vals)
    return Decoded(shape, out, None, full.reshape(shape))


def decode(buf: bytes, max_bytes: int, copy: bool = True) -> Decoded:
    """Decode and validate a buffer from `encode`; every problem raises CodecError.

    copy=False may return values as a read-only view into `buf` (no copy for uncompressed same-dtype data).
    """
    return _decode(buf, max_bytes, copy, False)


def decode_positions(buf: bytes, max_bytes: int, copy: bool = True) -> Decoded:
    """Like `decode`, but a masked payload's `mask` may be int64 flat positions instead of a boolean array.

    For appliers (`scatter` takes either): skips building a boolean mask that would be turned back
    into positions. Validation is the same as `decode`.
    """
    return _decode(buf, max_bytes, copy, True)


def describe(buf: bytes) -> str:
    """One line about a buffer's header (layout, dtype, compression), for logs and benchmarks."""
    h = describe_header(buf)
    return "%s %s->%s %s nnz=%d/%d%s%s" % (
        LAYOUT_NAMES[h["layout"]], h["wire"], h["out"], COMPRESS_NAMES[h["code"]], h["nnz"], h["numel"],
        " shuffled" if h["flags"] & FLAG_SHUFFLE else "", " head-only" if h["flags"] & FLAG_HEAD else "",
    )
