"""Video reading: frames come out RGB uint8 at the configured size; bad files fail clearly."""
import numpy as np
import pytest

from cnnvideo.video.frames import VideoError, read_frames, synthetic_frames


def test_reads_and_resizes_and_loops(synthetic_video):
    """A 40-frame clip read at another size yields uint8 frames of that size, looping past the end."""
    frames = list(read_frames(synthetic_video, (48, 64), limit=50))
    assert len(frames) == 50
    assert frames[0].shape == (48, 64, 3) and frames[0].dtype == np.uint8
    assert np.array_equal(frames[0], frames[40])


def test_synthetic_frames_are_mostly_static():
    """Consecutive synthetic frames differ in a minority of pixels, like a fixed camera."""
    a, b = list(synthetic_frames(2, (60, 80)))
    changed = np.mean(np.any(a != b, axis=-1))
    assert 0 < changed < 0.5


def test_bad_video_errors(tmp_path):
    """A missing file and a file that is not a video each raise VideoError naming the path."""
    with pytest.raises(VideoError, match="not found"):
        next(read_frames(str(tmp_path / "none.avi"), (10, 10)))
    junk = tmp_path / "junk.avi"
    junk.write_bytes(b"not a video at all" * 10)
    with pytest.raises(VideoError, match="junk.avi"):
        next(read_frames(str(junk), (10, 10)))


def test_swap_rb_is_numpy_channel_reversal():
    """swap_rb (OpenCV's cvtColor for contiguous uint8) gives the bytes of numpy's [..., ::-1] copy, for a view that
    is not contiguous and for other dtypes too, and always a contiguous array."""
    pytest.importorskip("cv2")
    from cnnvideo.video.frames import swap_rb

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (31, 47, 3), dtype=np.uint8)
    for x in (img, img[:, ::2], img.astype(np.float32), img[:0]):
        got = swap_rb(x)
        assert got.flags.c_contiguous and got.dtype == x.dtype and np.array_equal(got, x[:, :, ::-1])
    assert swap_rb(img) is not img


def test_frames_are_contiguous_rgb_of_the_decoded_bgr(synthetic_video):
    """read_frames' frames are the decoded BGR frames resized (2x smaller: INTER_AREA), channels reversed,
    contiguous."""
    cv2 = pytest.importorskip("cv2")
    cap = cv2.VideoCapture(synthetic_video)
    ok, bgr = cap.read()
    cap.release()
    assert ok
    frame = next(read_frames(synthetic_video, (48, 64), limit=1))
    want = cv2.resize(bgr, (64, 48), interpolation=cv2.INTER_AREA)[:, :, ::-1]
    assert frame.flags.c_contiguous and np.array_equal(frame, want)


def test_a_mild_resize_is_linear_and_a_2x_shrink_averages_the_area():
    """vtest's 768x576 to 720x480 (1.2x) resizes with INTER_LINEAR, 5-6x cheaper than INTER_AREA's general path;
    a shrink of 2x or more on either axis keeps INTER_AREA (no aliasing); the frame's own size is not resized."""
    cv2 = pytest.importorskip("cv2")
    from cnnvideo.video.frames import interpolation, resize

    assert interpolation((576, 768), (480, 720)) == cv2.INTER_LINEAR
    assert interpolation((480, 720), (576, 768)) == cv2.INTER_LINEAR  # enlarging
    assert interpolation((480, 720), (240, 720)) == interpolation((960, 1280), (480, 720)) == cv2.INTER_AREA
    bgr = np.random.default_rng(0).integers(0, 256, (576, 768, 3), dtype=np.uint8)
    assert np.array_equal(resize(bgr, (480, 720)), cv2.resize(bgr, (720, 480), interpolation=cv2.INTER_LINEAR))
    assert resize(bgr, (576, 768)) is bgr
