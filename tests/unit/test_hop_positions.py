"""The input hop's sparse path: a uint8 update under a threshold is encoded from its changed positions
(codec.encode_positions, HopSender._add256_at) and must give the very bytes of the dense masked delta, and the
same held copy, frame after frame; the uint8 threshold compares as an integer with the same mask."""
import numpy as np
import pytest

from cnnvideo.wire import codec, hop
from cnnvideo.wire.hop import HopReceiver, HopSender

MAX = 1 << 28


def _dense_add256(x, held, threshold, seq, compress):
    """The ADD256 payload as the dense path makes it: (x - held) mod 256 zeroed where the change is within the
    threshold, encoded whole."""
    mask = np.abs(x.astype(np.int16) - held.astype(np.int16)) > threshold
    delta = np.subtract(x, held, dtype=np.uint8) * mask
    prefix = hop._HEADER.pack(hop._MAGIC, hop._VERSION, hop.ADD256, seq)
    return codec.encode(delta.astype(np.uint8), compress=compress, prefix=prefix), np.where(mask, x, held)


@pytest.mark.parametrize("compress", ["auto", "none", "zstd", "lz4"])
@pytest.mark.parametrize("share", [0.0, 0.001, 0.03, 0.2, 0.9, 1.0])
def test_positions_give_the_bytes_of_the_dense_tensor(compress, share):
    """encode_positions of a zero tensor's non-zeros is encode of the tensor, byte for byte, at every density (the
    layouts: index lists, bitmap, dense, none set, all set)."""
    rng = np.random.default_rng(int(share * 1000))
    for shape in [(1, 48, 72, 3), (5, 7), (300,)]:
        dense = np.zeros(shape, dtype=np.uint8)
        sel = rng.random(shape) < share
        dense[sel] = rng.integers(1, 256, int(sel.sum()), dtype=np.uint8)
        flat = dense.reshape(-1)
        idx = np.flatnonzero(flat)
        got = codec.encode_positions(shape, idx, flat[idx], flat != 0, compress=compress, prefix=b"P")
        assert got == codec.encode(dense, compress=compress, prefix=b"P")


@pytest.mark.parametrize("threshold", [0.5, 1, 4, 4.5, 30])
def test_add256_updates_are_the_dense_paths_bytes_frame_after_frame(threshold):
    """60 frames of a clip with moving blocks and noise: every update is the dense masked delta's bytes, the
    sender's held copy is what the receiver decodes, and that stays within the threshold of the frame."""
    from cnnvideo.video.frames import synthetic_frames

    sender, receiver = HopSender(threshold), HopReceiver(MAX)
    held = None
    for i, frame in enumerate(synthetic_frames(60, (48, 72), seed=2, noise=6)):
        x = frame[None]
        payload = sender.encode(x)
        if i:
            want, held = _dense_add256(x, held, threshold, i + 1, "auto")
            assert payload == want and sender.last_kind == "add256"
        else:
            held = x.copy()
        out = receiver.decode(payload)
        assert np.array_equal(out, held) and np.array_equal(sender.held, held)
        assert np.abs(out.astype(np.int16) - x).max() <= threshold


def test_add256_on_a_read_only_held_copy():
    """After a keyframe the held copy may be a read-only view of the sent bytes: the update writes a copy."""
    sender = HopSender(4, compress="none")
    a = np.random.default_rng(0).integers(1, 256, (1, 200, 200, 3), dtype=np.uint8)  # big, dense and raw: the
    # keyframe's held copy is a view of its bytes
    sender.encode(a)
    assert not sender._held.flags.writeable
    b = a.copy()
    b[0, 10:20, 10:20] = a[0, 10:20, 10:20] // 2 + 128 * (a[0, 10:20, 10:20] < 128)  # 64 or more away
    sender.encode(b)
    assert np.array_equal(sender.held, b) and sender.last_nnz == 300


def test_uint8_level_is_the_float_threshold():
    """Every uint8 difference exceeds _uint8_level(t) exactly when it exceeds t (fractions, 255 and more, inf,
    NaN: nothing exceeds those)."""
    d = np.arange(256, dtype=np.uint8)
    for t in (0.5, 1, 3.99, 4, 4.5, 254, 254.5, 255, 255.5, 1e9, float("inf"), float("nan")):
        assert np.array_equal(d > t, d > hop._uint8_level(t)), t
