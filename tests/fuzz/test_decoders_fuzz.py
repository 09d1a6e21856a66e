"""Hostile bytes into the decoders of received data: codec, hop and proto Array.

Every malformed buffer must raise the decoder's own error (CodecError / HopError / WireError) - never another
exception - and decoding must never allocate more than a fixed multiple of `max_bytes`, whatever sizes a
header declares (tracemalloc peak, in process). A HopReceiver fed garbage keeps working: the next keyframe
decodes exactly.
"""
from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.rpc.convert import WireError, from_array, to_array
from cnnvideo.wire import codec
from cnnvideo.wire.codec import CodecError
from cnnvideo.wire.hop import HopError, HopReceiver, HopSender

MAX = 64 * 1024  # the receivers' limit in these tests: small, so any over-allocation stands out
# Legitimate decoding of a <= MAX tensor needs the values, the output array, a mask / int64 positions
# (8 bytes per element of a uint8 tensor) and the decompressed body: a fixed multiple of MAX.
ALLOC_BOUND = 24 * MAX
SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
COUNTS = {}

INTERESTING = [0, 1, 2, 7, 8, 255, 256, MAX // 4, MAX, MAX + 1, 1 << 31, 1 << 32, (1 << 32) + 1, 1 << 40,
               (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def _count(name):
    COUNTS[name] = COUNTS.get(name, 0) + 1


def _array(seed, ndim, dtype, density):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 9, size=ndim))
    if dtype == "uint8":
        x = rng.integers(0, 256, size=shape).astype(np.uint8)
    else:
        x = rng.standard_normal(shape).astype(dtype)
    x[rng.random(shape) >= density] = 0
    return x


@st.composite
def encoded(draw):
    """A valid codec buffer of a small random tensor (any layout, dtype, compression, with or without mask)."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    x = _array(seed, draw(st.integers(0, 4)), draw(st.sampled_from(["uint8", "float16", "float32"])),
               draw(st.sampled_from([0.0, 0.05, 0.5, 1.0])))
    mask = None
    if draw(st.booleans()):
        mask = np.random.default_rng(seed + 1).random(x.shape) < draw(st.sampled_from([0.0, 0.1, 0.9, 1.0]))
    fp16 = draw(st.booleans()) and x.dtype == np.float32
    comp = draw(st.sampled_from(["auto", "none", "zstd", "lz4"]))
    return codec.encode(x, mask=mask, fp16=fp16, compress=comp)


def _field_offsets(buf):
    """Byte offsets of the u64 header fields (shape..., nnz, raw length, body length) of a codec buffer."""
    ndim = buf[11] if len(buf) > 11 else 0
    return [12 + 8 * i for i in range(min(ndim, codec.MAX_NDIM) + 3)]


@st.composite
def mutated(draw):
    """A codec buffer damaged one of several ways (or random bytes)."""
    op = draw(st.sampled_from(["truncate", "flip", "field", "byte-field", "append", "body", "random", "splice"]))
    if op == "random":
        return op, draw(st.binary(max_size=512))
    buf = bytearray(draw(encoded()))
    if op == "truncate":
        return op, bytes(buf[: draw(st.integers(0, max(len(buf) - 1, 0)))])
    if op == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        return op, bytes(buf)
    if op == "field":  # a declared size: shape dims, nnz, raw or body length
        offs = _field_offsets(buf)
        off = draw(st.sampled_from(offs))
        if off + 8 <= len(buf):
            struct.pack_into("<Q", buf, off, draw(st.sampled_from(INTERESTING)))
        return op, bytes(buf)
    if op == "byte-field":  # version, layout, dtypes, flags, compression, index code, ndim
        buf[draw(st.integers(4, 11))] = draw(st.integers(0, 255))
        return op, bytes(buf)
    if op == "append":
        return op, bytes(buf) + draw(st.binary(min_size=1, max_size=64))
    if op == "body":  # header kept, body replaced by garbage of the same length
        n = len(buf) - _field_offsets(buf)[-1] - 8
        return op, bytes(buf[: len(buf) - max(n, 0)]) + draw(st.binary(min_size=max(n, 0), max_size=max(n, 0)))
    other = draw(encoded())  # splice: header of one buffer, body of another
    cut = draw(st.integers(0, len(buf)))
    return op, bytes(buf[:cut]) + other[cut:]


def _peak(fn, *args):
    """(result or exception, peak bytes allocated while running fn); traced only around the call (fast)."""
    tracemalloc.start()
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        out = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, peak


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\ndecoder fuzz cases: %s (total %d)" % (COUNTS, sum(COUNTS.values())))


@settings(max_examples=3000, **SETTINGS)
@given(mutated())
def test_codec_rejects_malformed_buffers(case):
    op, buf = case
    _count("codec")
    out, peak = _peak(codec.decode, buf, MAX)
    if isinstance(out, Exception):
        assert isinstance(out, CodecError), (op, repr(out))
    else:  # some mutations leave a valid buffer: it must respect the limit
        assert int(np.prod(out.shape)) * out.dtype.itemsize <= MAX
        assert out.values.size <= int(np.prod(out.shape))
    assert peak <= ALLOC_BOUND + 4 * len(buf), (op, peak)
    out2, _ = _peak(codec.decode_positions, buf, MAX)
    assert isinstance(out2, CodecError) == isinstance(out, CodecError), op


@settings(max_examples=600, **SETTINGS)
@given(st.lists(st.sampled_from(INTERESTING[3:]), min_size=1, max_size=codec.MAX_NDIM),
       st.sampled_from([0, 1, 2]), st.sampled_from([0, 1, 2]), st.sampled_from([0, 1, 2]),
       st.binary(max_size=64))
def test_codec_oversize_declarations_rejected_before_allocating(shape, layout, dtype_code, comp, body):
    """Headers declaring tensors above max_bytes are refused from the header alone: no allocation of that size."""
    _count("codec-oversize")
    numel = int(np.prod([int(s) for s in shape], dtype=object))
    itemsize = [1, 2, 4][dtype_code]
    nnz = numel if layout == 0 else 1
    hdr = struct.pack("<4sBBBBBBBB%dQQQQ" % len(shape), codec.MAGIC, codec.VERSION, layout, dtype_code, dtype_code,
                      0, comp, 4 if layout == 2 else 0, len(shape), *shape, nnz % (1 << 64),
                      (nnz * itemsize) % (1 << 64), len(body))
    out, peak = _peak(codec.decode, hdr + body, MAX)
    if numel * itemsize > MAX:
        assert isinstance(out, CodecError) and "max_bytes" in str(out), repr(out)
    else:
        assert isinstance(out, (CodecError, codec.Decoded)), repr(out)
    assert peak <= 64 * 1024 + ALLOC_BOUND * (numel * itemsize <= MAX), peak


def _stream(seed, n, dtype):
    rng = np.random.default_rng(seed)
    shape = (1, 3, 6, 5) if dtype != "uint8" else (1, 6, 5, 3)
    x = (rng.standard_normal(shape) * 3).astype(np.float32) if dtype != "uint8" else \
        rng.integers(0, 256, size=shape).astype(np.uint8)
    for _ in range(n):
        m = rng.random(shape) < 0.2
        x = x.copy()
        x[m] = (rng.standard_normal(int(m.sum())) * 3).astype(x.dtype) if dtype != "uint8" else \
            rng.integers(0, 256, size=int(m.sum())).astype(np.uint8)
        yield x


@st.composite
def hop_payloads(draw):
    """A sequence of hop payloads: valid ones from a sender, with some dropped, reordered, damaged or forged."""
    dtype = draw(st.sampled_from(["uint8", "float32"]))
    seed = draw(st.integers(0, 2 ** 16))
    sender = HopSender(threshold=draw(st.sampled_from([0.0, 0.5])), fp16=draw(st.booleans()) and dtype != "uint8")
    good = [sender.encode(x, keyframe=(i == 0)) for i, x in enumerate(_stream(seed, 6, dtype))]
    out = []
    for p in good:
        op = draw(st.sampled_from(["keep", "keep", "drop", "dup", "truncate", "header", "kind", "seq", "garbage",
                                   "codec"]))
        if op == "keep":
            out.append(p)
        elif op == "dup":
            out += [p, p]
        elif op == "truncate":
            out.append(p[: draw(st.integers(0, len(p) - 1))])
        elif op == "header":
            out.append(draw(st.binary(min_size=8, max_size=8)) + p[8:])
        elif op == "kind":
            out.append(p[:3] + bytes([draw(st.integers(0, 255))]) + p[4:])
        elif op == "seq":
            out.append(p[:4] + struct.pack("<I", draw(st.integers(0, 2 ** 32 - 1))) + p[8:])
        elif op == "garbage":
            out.append(draw(st.binary(max_size=256)))
        elif op == "codec":  # a well-formed hop header around a mutated codec buffer
            out.append(p[:8] + draw(mutated())[1])
    return dtype, seed, out


@settings(max_examples=700, **SETTINGS)
@given(hop_payloads())
def test_hop_receiver_survives_bad_payloads(case):
    dtype, seed, payloads = case
    rx = HopReceiver(MAX)
    for p in payloads:
        _count("hop")
        out, peak = _peak(rx.decode, p)
        if isinstance(out, Exception):
            assert isinstance(out, (HopError, CodecError)), repr(out)
        else:
            assert out.nbytes <= MAX
        assert peak <= ALLOC_BOUND + 4 * len(p), peak
    x = next(iter(_stream(seed + 7, 1, dtype)))  # a keyframe always resynchronises the receiver
    y = rx.decode(HopSender().encode(x, keyframe=True))
    assert y.dtype == x.dtype and y.tobytes() == x.tobytes()


@st.composite
def arrays(draw):
    """proto Array messages: valid or with bad dtype / shape / byte counts (including shapes that overflow int64)."""
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64", "uint8", "bool", "", "object", "<f8",
                                  "float16", "V8", "U4", "complex64"]))
    shape = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, -1, (1 << 31) - 1, 1 << 31, 1 << 32, (1 << 62), -(1 << 63)]),
                          max_size=6))
    data = draw(st.binary(max_size=96))
    return pb.Array(name=draw(st.text(max_size=8)), dtype=dtype, shape=shape, data=data)


@settings(max_examples=1000, **SETTINGS)
@given(arrays(), st.sampled_from([None, 16, 1 << 20]))
def test_array_decoder_rejects_malformed(msg, limit):
    _count("array")
    out, peak = _peak(from_array, msg, limit)
    if isinstance(out, Exception):
        assert isinstance(out, WireError), repr(out)
    else:
        assert out.nbytes == len(msg.data) and out.shape == tuple(msg.shape)
        assert from_array(to_array(out, msg.name)).tobytes() == out.tobytes()
    assert peak <= 64 * 1024 + 4 * len(msg.data), peak


FUZZ_TESTS = {"codec": test_codec_rejects_malformed_buffers,
              "codec-oversize": test_codec_oversize_declarations_rejected_before_allocating,
              "hop": test_hop_receiver_survives_bad_payloads,
              "array": test_array_decoder_rejects_malformed}


def test_fuzz_case_count():
    """The decoder fuzz above really runs thousands of cases (hop cases count payloads). Self-contained: a fuzz test
    that has not run in this session (this test alone, or with -k) is run here first, so the count never depends
    on which other tests were selected."""
    for name, fuzz in FUZZ_TESTS.items():
        if name not in COUNTS:
            fuzz()
    assert set(COUNTS) == set(FUZZ_TESTS), COUNTS
    assert sum(COUNTS.values()) >= 5000, COUNTS
