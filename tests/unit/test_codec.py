"""Codec: exact round trips for every dtype x layout x compression, and hostile input only ever raises CodecError."""
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cnnvideo.wire import codec
from cnnvideo.wire.codec import CodecError, decode, encode, estimate_bytes

DTYPES = [np.uint8, np.float16, np.float32]
COMPRESS = ["none", "zstd", "lz4", "auto"]
# density -> the layout the codec should pick for a masked float32 tensor of 4000 elements
DENSITIES = {0.0: "index", 0.01: "index", 0.4: "bitmap", 1.0: "dense"}
BIG = 1 << 30


def _tensor(dtype, shape=(2, 5, 20, 20), seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return (rng.standard_normal(shape) * 10).astype(dtype)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _layout(buf):
    return codec.LAYOUT_NAMES[buf[5]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("density", sorted(DENSITIES))
@pytest.mark.parametrize("compress", COMPRESS)
def test_masked_round_trip_exact(dtype, density, compress):
    """Masked values round-trip bit-exactly for each dtype, layout and compression; the mask comes back."""
    x = _tensor(dtype)
    mask = np.random.default_rng(1).random(x.shape) < density
    buf = encode(x, mask, compress=compress)
    if dtype == np.float32:
        assert _layout(buf) == DENSITIES[density]
    d = decode(buf, BIG)
    assert d.shape == x.shape and d.dtype == x.dtype
    assert np.array_equal(d.mask, mask)
    assert _bits_equal(d.values, x[mask])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("density", sorted(DENSITIES))
@pytest.mark.parametrize("compress", COMPRESS)
def test_unmasked_round_trip_exact(dtype, density, compress):
    """A whole tensor with implicit zeros round-trips bit-exactly (mask None on decode)."""
    x = _tensor(dtype)
    x = np.where(np.random.default_rng(2).random(x.shape) < density, x, 0).astype(dtype)
    d = decode(encode(x, compress=compress), BIG)
    assert d.mask is None
    assert _bits_equal(d.values, x)


def test_packed_values_equal_full_values():
    """Passing the packed values (length nnz) or the full-shape tensor with a mask gives the same bytes."""
    x = _tensor(np.float32)
    mask = x > 5
    assert encode(x, mask) == encode(x[mask], mask)


def test_negative_zero_and_nan_are_kept():
    """Implicit zeros are bitwise: -0.0 and NaN payloads survive an unmasked round trip."""
    x = np.zeros((3, 50), np.float32)
    x[0, 1] = -0.0
    x[1, 2] = np.nan
    x[2, 3] = np.inf
    assert _bits_equal(decode(encode(x), BIG).values, x)


@pytest.mark.parametrize("compress", COMPRESS)
def test_fp16_error_bound(compress):
    """fp16 wire values decode to float32 within half-precision rounding (relative 2^-11)."""
    x = _tensor(np.float32)
    d = decode(encode(x, fp16=True, compress=compress), BIG)
    assert d.dtype == np.float32
    assert np.all(np.abs(d.values - x) <= np.abs(x) * 2.0 ** -11 + 1e-7)
    mask = x > 0
    d = decode(encode(x, mask, fp16=True, compress=compress), BIG)
    assert np.array_equal(d.values, x[mask].astype(np.float16).astype(np.float32))


def test_fp16_halves_dense_size():
    """fp16 makes a dense float32 tensor about half as big on the wire."""
    x = _tensor(np.float32, (1, 8, 64, 64))
    assert len(encode(x, fp16=True, compress="none")) < 0.51 * len(encode(x, compress="none"))


@pytest.mark.parametrize("shape", [(), (0,), (7,), (1, 0, 3), (1, 2, 3, 4, 5, 1, 1, 2)])
def test_edge_shapes(shape):
    """Scalars, empty tensors and 8-D tensors round-trip."""
    x = _tensor(np.float32, shape)
    assert _bits_equal(decode(encode(x), BIG).values, x)
    m = np.ones(shape, bool)
    assert _bits_equal(decode(encode(x, m), BIG).values, x.reshape(-1))


def test_large_gaps_use_wider_indices():
    """A few far-apart indices use 2- or 4-byte gaps and still round-trip."""
    x = np.zeros(200000, np.float32)
    x[[3, 70000, 199999]] = 1.0
    buf = encode(x, compress="none")
    assert _layout(buf) == "index" and buf[10] == 4
    assert _bits_equal(decode(buf, BIG).values, x)


def test_auto_compression_pays_or_is_off():
    """auto compresses a redundant tensor and leaves random float32 bits uncompressed."""
    zeros_then_ramp = np.repeat(np.arange(100, dtype=np.uint8), 1000)
    assert codec.COMPRESS_NAMES[encode(zeros_then_ramp)[9]] != "none"
    noise = np.random.default_rng(0).integers(0, 2 ** 32, size=100000, dtype=np.uint32) | 1
    assert codec.COMPRESS_NAMES[encode(noise.view(np.float32))[9]] == "none"


def test_estimate_bytes_matches_uncompressed_choice():
    """estimate_bytes tracks the real uncompressed size and works on numpy arrays."""
    rng = np.random.default_rng(3)
    numel = 64 * 50 * 50
    for density in (0.001, 0.05, 0.3, 0.9):
        mask = rng.random(numel) < density
        real = len(encode(np.ones(numel, np.float32), mask, compress="none"))
        est = estimate_bytes(int(mask.sum()), numel, 4)
        assert abs(est - real) <= 0.1 * real + 100
    vec = estimate_bytes(np.array([0, 100, numel]), np.full(3, numel), 4)
    assert vec.shape == (3,) and vec[0] < vec[1] < vec[2]


def test_bad_arguments():
    """Unsupported dtypes, a wrong compressor name and mismatched mask shapes raise CodecError."""
    with pytest.raises(CodecError):
        encode(np.zeros(3, np.int64))
    with pytest.raises(CodecError):
        encode(np.zeros(3, np.float32), compress="gzip")
    with pytest.raises(CodecError):
        encode(np.zeros(3, np.float32), np.ones(4, bool))


# ------------------------------------------------------------------------------------------ malformed


def _header_offsets(buf):
    ndim = buf[11]
    tail = 12 + 8 * ndim
    return tail  # nnz at tail, raw_len at tail+8, body_len at tail+16


def _set_u64(buf, offset, value):
    b = bytearray(buf)
    struct.pack_into("<Q", b, offset, value)
    return bytes(b)


def test_truncated_buffers_raise():
    """Every truncation of a valid buffer raises CodecError."""
    x = _tensor(np.float32, (1, 3, 8, 8))
    for compress in COMPRESS:
        buf = encode(np.where(x > 0, x, 0), compress=compress)
        for n in range(len(buf)):
            with pytest.raises(CodecError):
                decode(buf[:n], BIG)


def test_flipped_header_bytes_raise_or_decode_cleanly():
    """Flipping any header byte either raises CodecError or still gives a well-formed result."""
    x = _tensor(np.float32, (1, 3, 8, 8))
    for compress in ("none", "zstd"):
        buf = encode(np.where(x > 0, x, 0), compress=compress)
        for i in range(_header_offsets(buf) + 24):
            for bit in (0x01, 0x80):
                b = bytearray(buf)
                b[i] ^= bit
                try:
                    d = decode(bytes(b), BIG)
                except CodecError:
                    continue
                assert int(np.prod(d.shape)) * d.dtype.itemsize <= BIG


def test_huge_declared_tensor_rejected_before_allocation():
    """A header declaring a 10^12-element tensor fails on max_bytes before anything is allocated."""
    buf = encode(np.zeros(4, np.float32), compress="none")
    b = bytearray(buf)
    struct.pack_into("<Q", b, 12, 10 ** 12)
    with pytest.raises(CodecError, match="max_bytes"):
        decode(bytes(b), 1000)
    with pytest.raises(CodecError, match="max_bytes"):
        decode(encode(np.zeros((100, 100), np.float32)), 100 * 100 * 4 - 1)


def test_zstd_bomb_rejected():
    """A zstd body whose frame declares more than the header allows is rejected before decompressing."""
    x = np.zeros(1000, np.uint8)
    x[::2] = 7
    buf = encode(x, compress="zstd")
    tail = _header_offsets(buf)
    bomb = codec._zstd.ZstdCompressor().compress(b"\0" * 10 ** 6)
    b = buf[: tail + 16] + struct.pack("<Q", len(bomb)) + bomb
    with pytest.raises(CodecError):
        decode(b, BIG)


def test_wrong_popcount_raises():
    """A bitmap whose popcount disagrees with the declared value count raises."""
    x = _tensor(np.float32, (1, 4, 10, 10))
    mask = np.random.default_rng(0).random(x.shape) < 0.4
    buf = encode(x, mask, compress="none")
    assert _layout(buf) == "bitmap"
    hlen = _header_offsets(buf) + 24
    b = bytearray(buf)
    b[hlen] ^= 0xFF  # flip 8 mask bits; value count unchanged
    if bin(buf[hlen]).count("1") == 4:
        b[hlen] ^= 0x0F
    with pytest.raises(CodecError, match="popcount"):
        decode(bytes(b), BIG)


def test_bitmap_padding_bits_raise():
    """Set padding bits after the last element are rejected."""
    x = np.arange(1, 11, dtype=np.float32)
    mask = np.zeros(10, bool)
    mask[:4] = True
    buf = encode(x, mask, compress="none")
    hlen = _header_offsets(buf) + 24
    if _layout(buf) != "bitmap":
        pytest.skip("index layout chosen")
    b = bytearray(buf)
    b[hlen + 1] |= 0x01
    with pytest.raises(CodecError):
        decode(bytes(b), BIG)


def test_out_of_range_index_raises():
    """An index gap pointing past the end of the tensor raises."""
    x = np.zeros(1000, np.float32)
    x[[1, 5, 990]] = 1.0
    buf = encode(x, compress="none")
    assert _layout(buf) == "index"
    hlen = _header_offsets(buf) + 24
    b = bytearray(buf)
    b[hlen + 2] = 0xFF  # last gap too big (width 2 bytes -> low byte)
    b[hlen + 5] = 0xFF
    with pytest.raises(CodecError, match="out of range"):
        decode(bytes(b), BIG)


def test_length_mismatch_raises():
    """Extra trailing bytes and wrong declared lengths raise."""
    buf = encode(_tensor(np.float32, (10,)), compress="none")
    with pytest.raises(CodecError):
        decode(buf + b"\0", BIG)
    tail = _header_offsets(buf)
    with pytest.raises(CodecError):
        decode(_set_u64(buf, tail + 8, 41), BIG)
    with pytest.raises(CodecError):
        decode(_set_u64(buf, tail, 9), BIG)


def test_missing_library_gives_clear_error(monkeypatch):
    """Decoding a zstd payload without zstandard names the missing package."""
    x = np.repeat(np.arange(50, dtype=np.uint8), 100)
    buf = encode(x, compress="zstd")
    monkeypatch.setattr(codec, "_zstd", None)
    with pytest.raises(CodecError, match="zstandard"):
        decode(buf, BIG)
    with pytest.raises(CodecError, match="zstandard"):
        encode(x, compress="zstd")
    monkeypatch.setattr(codec, "_lz4", None)
    assert decode(encode(x), BIG).values.tobytes() == x.tobytes()  # auto falls back to none


# ------------------------------------------------------------------------------------------ properties


@st.composite
def _tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=0, max_size=4)))
    density = draw(st.sampled_from([0.0, 0.01, 0.1, 0.5, 0.9, 1.0]))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    x = _tensor(dtype, shape, seed)
    mask = rng.random(shape) < density
    return x, np.asarray(mask, bool)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tensors(), st.sampled_from(COMPRESS), st.booleans())
def test_property_round_trip(xm, compress, with_mask):
    """Random shapes, densities, dtypes and compressions round-trip bit-exactly."""
    x, mask = xm
    if with_mask:
        d = decode(encode(x, mask, compress=compress), BIG)
        assert np.array_equal(d.mask, mask) and _bits_equal(d.values, x[mask])
    else:
        y = np.where(mask, x, 0).astype(x.dtype)
        assert _bits_equal(decode(encode(y, compress=compress), BIG).values, y)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_property_garbage_raises_codec_error_only(data):
    """Random bytes (with and without a valid magic/version prefix) raise nothing but CodecError."""
    for buf in (data, codec.MAGIC + bytes([codec.VERSION]) + data):
        try:
            decode(buf, 1 << 20)
        except CodecError:
            pass


_VALID = [
    encode(_tensor(np.float32, (1, 3, 6, 6)), compress="none"),
    encode(np.where(_tensor(np.float32, (1, 3, 6, 6)) > 5, 1.0, 0.0).astype(np.float32), compress="zstd"),
    encode(np.repeat(np.arange(30, dtype=np.uint8), 30), compress="lz4"),
    encode(_tensor(np.float32, (2, 40)), _tensor(np.float32, (2, 40)) > 12, compress="none"),
]


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(range(len(_VALID))), st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)),
                                                     min_size=1, max_size=4))
def test_property_mutated_buffers(which, edits):
    """Valid buffers with random byte edits either decode within max_bytes or raise CodecError."""
    b = bytearray(_VALID[which])
    for pos, val in edits:
        b[pos % len(b)] = val
    try:
        d = decode(bytes(b), 1 << 16)
    except CodecError:
        return
    assert int(np.prod(d.shape)) * d.dtype.itemsize <= 1 << 16


def test_clustered_changes_escaped_index_and_estimate():
    """Clustered changes with long jumps use the escaped u8 index code; estimate_bytes bounds it from above."""
    rng = np.random.default_rng(5)
    numel = 64 * 50 * 50
    for density in (0.005, 0.02, 0.1):
        starts = rng.choice(numel // 32, size=int(density * numel / 32), replace=False) * 32
        mask = np.zeros(numel, bool)
        for s in starts:
            mask[s : s + 32] = True
        x = rng.standard_normal(numel).astype(np.float32)
        buf = encode(x, mask, compress="none")
        assert _layout(buf) == "index" and buf[10] == codec.ESC8
        d = decode(buf, BIG)
        assert np.array_equal(d.mask, mask) and _bits_equal(d.values, x[mask])
        est = estimate_bytes(int(mask.sum()), numel, 4)
        assert len(buf) <= est <= 1.05 * len(buf)


def test_escaped_index_bytes_are_the_plain_divmod_code():
    """The escaped u8 list (only the gaps of 255 or more divided) is byte for byte the textbook code: each gap g as
    g // 255 bytes of 255, then g % 255; gaps of 254, 255, 509, 510 and far ones included."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(1, 3000))
        gaps = rng.integers(0, 250, size=n)
        pick = rng.random(n) < rng.choice([0.0, 0.01, 0.3])
        gaps[pick] = rng.choice([254, 255, 256, 509, 510, 511, 70000, 1 << 20], size=int(pick.sum()))
        idx = np.cumsum(gaps + 1) - 1
        want = b"".join(bytes([255] * (g // 255) + [g % 255]) for g in gaps.tolist())
        head, code = codec._index_head(idx, 1 << 40)
        if code == codec.ESC8:
            assert head == want, trial
        else:  # a fixed width was smaller: then the escaped code was not (ties go to the fixed widths)
            assert len(want) >= len(head), trial


def test_malformed_escaped_index_raises():
    """An escaped index list that ends inside an escape or holds the wrong number of indices raises."""
    x = np.zeros(5000, np.float32)
    x[:50] = 1.0
    x[3000] = 1.0
    buf = encode(x, compress="none")
    assert _layout(buf) == "index" and buf[10] == codec.ESC8
    hlen = _header_offsets(buf) + 24
    nidx = len(buf) - hlen - 51 * 4
    for pos, val in ((hlen + nidx - 1, 255), (hlen, 255), (hlen + 1, 255)):
        b = bytearray(buf)
        b[pos] = val
        with pytest.raises(CodecError):
            decode(bytes(b), BIG)


def test_head_only_compression_round_trip():
    """auto compresses only a clustered bitmap when the values do not compress; values stay exact."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 16, 128, 128)).astype(np.float32)
    mask = np.zeros(x.shape, bool)
    mask[:, :, 8:80, :] = True
    buf = encode(x, mask)
    assert buf[8] & codec.FLAG_HEAD and len(buf) < len(encode(x, mask, compress="none"))
    d = decode(buf, BIG)
    assert np.array_equal(d.mask, mask) and _bits_equal(d.values, x[mask])
    assert "head-only" in codec.describe(buf)  # the one-line description names the flag


@pytest.mark.skipif(codec._zstd is None, reason="zstandard not installed")
def test_reused_zstd_compressor_gives_the_bytes_of_a_fresh_one():
    """Each thread keeps one zstd compressor (a new one per call cost 0.4 ms a 1 MB frame delta): its output is
    byte for byte a fresh compressor's, whatever the sizes compressed before."""
    import zstandard

    rng = np.random.default_rng(7)
    for n in (10 ** 6, 700, 65536, 3 * 10 ** 5):
        body = (rng.random(n) < 0.3).astype(np.uint8) * rng.integers(0, 256, n, dtype=np.uint8)
        fresh = zstandard.ZstdCompressor(level=codec.ZSTD_LEVEL, write_content_size=True).compress(body.tobytes())
        assert codec._compress(memoryview(body), codec.ZSTD) == fresh


@pytest.mark.skipif(codec._zstd is None, reason="zstandard not installed")
def test_threads_encode_and_decode_at_once():
    """Threads that encode and decode zstd payloads at the same time each get exact round trips (every thread has
    its own compressor and decompressor)."""
    import threading

    rng = np.random.default_rng(8)
    tensors = [(rng.random((64, 96, 3)) < 0.3).astype(np.uint8) * rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
               for _ in range(6)]
    want = [encode(t, compress="zstd") for t in tensors]
    errors = []

    def work(k):
        try:
            for _ in range(30):
                i = k % len(tensors)
                buf = encode(tensors[i], compress="zstd")
                assert buf == want[i]
                assert np.array_equal(decode(buf, BIG).values.reshape(tensors[i].shape), tensors[i])
                k += 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
