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
