"""Closed-loop hop: sender and receiver stay identical (threshold 0), bounded error (threshold t), resync rules."""
import numpy as np
import pytest

from cnnvideo.wire.codec import CodecError
from cnnvideo.wire.hop import HopError, HopReceiver, HopSender, InputChange, channel_nz

MAX = 1 << 28


def _float_stream(n, shape=(1, 8, 12, 16), seed=0):
    """A slowly changing float tensor: a few regions change each step, plus rare big jumps."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    for _ in range(n):
        m = rng.random(shape) < 0.1
        x = x.copy()
        x[m] += rng.standard_normal(int(m.sum())).astype(np.float32) * 0.5
        x[np.random.default_rng(1).random(shape) < 0.001] = rng.standard_normal() * 100
        yield np.maximum(x, 0)  # ReLU-like: many exact zeros


def _pixel_stream(n, seed=0):
    """uint8 NHWC frames from the synthetic static-camera clip."""
    from cnnvideo.video.frames import synthetic_frames

    for f in synthetic_frames(n, (24, 32), seed=seed, noise=3):
        yield f[None]


def test_float_lossless_300_frames():
    """300 changing float32 frames through sender -> bytes -> receiver stay bitwise equal at threshold 0."""
    s, r = HopSender(), HopReceiver(MAX)
    for i, x in enumerate(_float_stream(300)):
        y = r.decode(s.encode(x))
        assert y.tobytes() == x.tobytes()
        assert s.last_kind == ("full" if i == 0 else "update")


def test_uint8_lossless_300_frames():
    """300 synthetic uint8 frames are reconstructed bit-exactly (add-mod-256 updates)."""
    s, r = HopSender(), HopReceiver(MAX)
    for i, x in enumerate(_pixel_stream(300)):
        y = r.decode(s.encode(x))
        assert y.dtype == np.uint8 and np.array_equal(y, x)
        assert s.last_kind == ("full" if i == 0 else "add256")


@pytest.mark.parametrize("t", [0.05, 0.3])
def test_float_threshold_error_bounded_no_drift(t):
    """With threshold t the receiver's error stays <= t at every frame, and it equals the sender's copy."""
    s, r = HopSender(threshold=t), HopReceiver(MAX)
    sent = []
    for x in _float_stream(300, seed=2):
        y = r.decode(s.encode(x))
        assert np.max(np.abs(y - x)) <= t
        assert y.tobytes() == s.held.tobytes()
        sent.append(s.last_nnz / float(s.last_numel))
    assert np.mean(sent[1:]) < 0.1  # the threshold really suppresses small changes


@pytest.mark.parametrize("t", [1, 4])
def test_uint8_threshold_error_bounded(t):
    """uint8 input with a pixel-level threshold: |received - frame| <= t everywhere, every frame."""
    s, r = HopSender(threshold=t), HopReceiver(MAX)
    for x in _pixel_stream(300, seed=3):
        y = r.decode(s.encode(x))
        assert np.max(np.abs(y.astype(np.int16) - x)) <= t


def test_keyframe_resets_state():
    """keyframe=True sends a full payload that a fresh receiver can start from."""
    frames = list(_float_stream(5))
    s, r = HopSender(), HopReceiver(MAX)
    for x in frames[:3]:
        r.decode(s.encode(x))
    r2 = HopReceiver(MAX)
    y = r2.decode(s.encode(frames[3], keyframe=True))
    assert s.last_kind == "full" and y.tobytes() == frames[3].tobytes()
    assert r2.decode(s.encode(frames[4])).tobytes() == frames[4].tobytes()


def test_update_without_base_raises():
    """An update reaching a receiver with no base raises HopError; a later keyframe recovers."""
    frames = list(_float_stream(3))
    s = HopSender()
    s.encode(frames[0])
    update = s.encode(frames[1])
    r = HopReceiver(MAX)
    with pytest.raises(HopError, match="no base"):
        r.decode(update)
    assert r.decode(s.encode(frames[2], keyframe=True)).tobytes() == frames[2].tobytes()


def test_lost_update_detected():
    """Skipping one update (lost message) makes the next one raise HopError instead of corrupting state."""
    frames = list(_float_stream(4))
    s, r = HopSender(), HopReceiver(MAX)
    r.decode(s.encode(frames[0]))
    s.encode(frames[1])  # never delivered
    with pytest.raises(HopError, match="does not follow"):
        r.decode(s.encode(frames[2]))


def test_shape_change_sends_full():
    """A new shape or dtype makes the sender send a keyframe."""
    s, r = HopSender(), HopReceiver(MAX)
    r.decode(s.encode(np.ones((2, 3), np.float32)))
    y = r.decode(s.encode(np.ones((3, 3), np.float32)))
    assert s.last_kind == "full" and y.shape == (3, 3)
    y = r.decode(s.encode(np.ones((3, 3), np.uint8)))
    assert s.last_kind == "full" and y.dtype == np.uint8


def test_fp16_sides_identical():
    """fp16 mode: receiver equals the sender's held copy bitwise; error vs input within fp16 rounding."""
    s, r = HopSender(fp16=True), HopReceiver(MAX)
    for x in _float_stream(100, seed=4):
        y = r.decode(s.encode(x))
        assert y.dtype == np.float32 and y.tobytes() == s.held.tobytes()
        assert np.all(np.abs(y - x) <= np.abs(x) * 2.0 ** -11 + 1e-6)


def test_fp16_unchanged_tensor_sends_nothing():
    """fp16 compares rounded values, so an unchanged tensor yields an empty update."""
    x = next(_float_stream(1))
    s = HopSender(fp16=True)
    s.encode(x)
    s.encode(x.copy())
    assert s.last_nnz == 0


def test_receiver_view_is_read_only():
    """decode returns a read-only view of the held tensor."""
    s, r = HopSender(), HopReceiver(MAX)
    y = r.decode(s.encode(np.ones(4, np.float32)))
    with pytest.raises(ValueError):
        y[0] = 2


def test_bad_payloads():
    """Short or foreign payloads raise HopError; a tensor above max_bytes raises CodecError."""
    r = HopReceiver(100)
    with pytest.raises(HopError):
        r.decode(b"HP")
    with pytest.raises(HopError):
        r.decode(b"XX\x01\x00\x00\x00\x00\x00")
    with pytest.raises(CodecError):
        r.decode(HopSender().encode(np.ones(1000, np.float32)))


def test_update_with_wrong_shape_raises():
    """An update whose tensor shape differs from the held one raises HopError."""
    a, b = HopSender(), HopSender()
    r = HopReceiver(MAX)
    r.decode(a.encode(np.zeros((4, 4), np.float32)))
    x = np.zeros((8, 8), np.float32)
    b.encode(x)
    x[3, 3] = 1.0
    upd = bytearray(b.encode(x))
    assert b.last_kind == "update"
    upd[4:8] = (2).to_bytes(4, "little")  # make the sequence number fit the receiver's state
    with pytest.raises(HopError, match="does not match"):
        r.decode(bytes(upd))


def test_mostly_changed_tensor_sent_whole():
    """When nearly every element changes, the sender sends the whole tensor instead of a mask + values."""
    s, r = HopSender(), HopReceiver(MAX)
    x = np.ones((4, 64), np.float32)
    r.decode(s.encode(x))
    y = x * 2
    y[0, 0] = 1.0
    out = r.decode(s.encode(y))
    assert s.last_kind == "full" and s.last_nnz == y.size - 1 and out.tobytes() == y.tobytes()
    y2 = y.copy()
    y2[1, 1] = 7.0
    assert r.decode(s.encode(y2)).tobytes() == y2.tobytes() and s.last_kind == "update"


def test_channel_nz_and_stats():
    """last_nnz/last_numel and per-channel nz rates describe the last update's mask."""
    x = np.zeros((1, 3, 4, 4), np.float32)
    s = HopSender()
    s.encode(x)
    x2 = x.copy()
    x2[0, 1, :2] = 1.0
    s.encode(x2)
    assert (s.last_nnz, s.last_numel) == (8, 48)
    assert np.allclose(s.last_channel_nz(), [0.0, 0.5, 0.0])
    assert np.allclose(channel_nz(np.ones((2, 5), bool), axis=-1), np.ones(5))


@pytest.mark.parametrize("t", [0, 4])
def test_input_change_is_what_the_hop_sends(t):
    """InputChange's rates are the share of values a HopSender at the same threshold puts in each update (its
    mask, per channel), frame after frame: the planner's input rates are the hop's, as the trainer's are."""
    sender, change = HopSender(threshold=t), InputChange(t)
    for i, f in enumerate(_pixel_stream(30)):
        got = change.rates(f[0])
        sender.encode(f[0])
        if i == 0:
            assert np.array_equal(got, np.ones(3))
            continue
        assert np.allclose(got, sender.last_mask.reshape(-1, 3).mean(axis=0)), i


def test_input_change_counts_drift_frame_to_frame_misses():
    """A value that drifts by 2 a frame under threshold 4 never changes by more than 4 between two frames, but the
    hop sends it once it is 5 away from what the receiver holds (the third step): frame-to-frame rates miss it."""
    change = InputChange(4)
    frame = np.zeros((2, 2, 3), dtype=np.uint8)
    change.rates(frame)
    seen = []
    for _ in range(6):
        frame = frame.copy()
        frame[0, 0, 0] += 2
        seen.append(change.rates(frame)[0])
    assert seen == [0.0, 0.0, 0.25, 0.0, 0.0, 0.25]  # 6 > 4 from 0, then 12 > 4 from 6


def _channel_nz_reference(mask, axis):
    """channel_nz as numpy's count_nonzero over every other axis gives it."""
    mask = np.asarray(mask, dtype=bool)
    axis %= mask.ndim
    other = tuple(i for i in range(mask.ndim) if i != axis)
    return np.count_nonzero(mask, axis=other) / float(max(mask.size // mask.shape[axis], 1))


@pytest.mark.parametrize("shape", [(480, 720, 3), (37, 61, 3), (1, 64, 64, 16), (2, 3, 40, 50), (1, 1280, 3, 5),
                                   (3000, 1), (70, 90, 4)])
def test_channel_nz_counts_exactly_like_count_nonzero(shape):
    """Every way channel_nz counts (bytes summed by rows for few channels last, one count per channel view, one
    reduction for many small channels) gives numpy's counts to the bit, on every axis, a tail that does not fill
    a row included."""
    mask = np.random.default_rng(len(shape)).random(shape) < 0.3
    for axis in range(-1, mask.ndim):
        got, want = channel_nz(mask, axis), _channel_nz_reference(mask, axis)
        assert got.dtype == np.float64 and np.array_equal(got, want), (shape, axis)
    assert np.array_equal(channel_nz(mask[:, ::2], -1), _channel_nz_reference(mask[:, ::2], -1))  # not contiguous


def test_channel_nz_of_a_bool_view_of_other_bytes():
    """A bool view of bytes other than 0 and 1 counts each non-zero byte once, like count_nonzero."""
    raw = np.random.default_rng(3).integers(0, 4, (96, 128, 3), dtype=np.uint8)
    mask = raw.view(bool)
    assert np.array_equal(channel_nz(mask, -1), _channel_nz_reference(mask, -1))


@pytest.mark.parametrize("threshold", [0, 4])
def test_input_change_rates_and_held_view(threshold):
    """InputChange's rates are the per-channel share of values the hop sends, and what it holds is what a HopSender's
    receiver holds (at threshold 0 the frame itself), frame after frame."""
    rng = np.random.default_rng(5)
    frame = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    change, sender, receiver = InputChange(threshold), HopSender(threshold), HopReceiver(MAX)
    held = None
    for i in range(6):
        if i:
            frame = frame.copy()
            region = rng.random(frame.shape) < 0.2
            frame[region] = rng.integers(0, 256, int(region.sum()), dtype=np.uint8)
        rates = change.rates(frame)
        out = receiver.decode(sender.encode(frame))
        if held is None:
            assert np.array_equal(rates, np.ones(3))
        else:
            diff = np.abs(frame.astype(np.int16) - held.astype(np.int16))
            assert np.array_equal(rates, _channel_nz_reference(diff > threshold, -1))
        held = np.array(out)
        assert np.array_equal(change._held, held)
        if threshold == 0:
            assert np.array_equal(held, frame)


def test_uint8_threshold_sends_a_jump_across_the_range():
    """At a pixel threshold a value jumping from 0 to 255 (or 130) is sent: |x - held| is the plain difference, not
    the distance around 256 (1 for 0 -> 255, which kept the receiver 255 levels off), and the receiver stays within
    the threshold everywhere."""
    sender, receiver = HopSender(4), HopReceiver(MAX)
    a = np.zeros((1, 4, 4, 3), dtype=np.uint8)
    b = a.copy()
    b[0, 0, 0, 0], b[0, 1, 1, 1], b[0, 2, 2, 2] = 255, 130, 3
    receiver.decode(sender.encode(a))
    out = receiver.decode(sender.encode(b))
    assert (out[0, 0, 0, 0], out[0, 1, 1, 1], out[0, 2, 2, 2]) == (255, 130, 0) and sender.last_nnz == 2
    assert np.abs(out.astype(np.int16) - b).max() <= 4
    change = InputChange(4)
    change.rates(a)
    assert np.array_equal(change.rates(b), [1 / 16, 1 / 16, 0.0])


def test_the_uint8_change_mask_is_the_same_with_and_without_cv2(monkeypatch):
    """Where cv2 is loaded (the master reads frames with it) a uint8 input's change mask is one cv2.absdiff; it is
    the numpy max - min mask exactly, at every threshold and shape (a wrong mask would break the closed loop)."""
    import sys

    import cv2  # noqa: F401 - loaded, as on the master

    from cnnvideo.wire import hop

    rng = np.random.default_rng(3)
    for shape in [(48, 72, 3), (1, 3, 16, 24), (7,), (2, 3, 4, 5, 6)]:
        x = rng.integers(0, 256, shape, dtype=np.uint8)
        held = rng.integers(0, 256, shape, dtype=np.uint8)
        held[..., :1] = x[..., :1]  # some equal, some 1 apart, the rest anywhere
        held.reshape(-1)[::5] = x.reshape(-1)[::5] + 1
        for threshold in (0.5, 1, 4, 4.5, 254):
            with_cv2 = hop._changed(x, held, threshold)
            with monkeypatch.context() as m:
                m.delitem(sys.modules, "cv2")
                plain = hop._changed(x, held, threshold)
            assert with_cv2.dtype == bool and with_cv2.shape == shape
            assert np.array_equal(with_cv2, plain), (shape, threshold)
            assert np.array_equal(plain, np.abs(x.astype(int) - held) > threshold)
