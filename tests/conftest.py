"""Shared fixtures: single-threaded torch, a synthetic static-camera video, leftover-process cleanup."""
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def synthetic_video(tmp_path_factory):
    """A 40-frame 96x128 synthetic clip written as a real AVI file."""
    from cnnvideo.video import synthetic_frames, write_video

    path = str(tmp_path_factory.mktemp("video") / "synthetic.avi")
    return write_video(path, synthetic_frames(40, (96, 128), seed=1))
