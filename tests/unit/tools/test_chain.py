"""Delta mode through a real 3-stage split: lossless is exact at every frame, thresholds do not drift."""
import numpy as np
import pytest

from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.tools.chain import LocalChain
from cnnvideo.video.frames import synthetic_frames

FRAME = (64, 96)
N = 300


@pytest.fixture(scope="module")
def setup():
    graph = LayerGraph.from_model(build_model("alexnet", "random", 0), FRAME)
    k = len(graph.cuts) - 1
    cuts = [0, k // 3, 2 * k // 3, k]
    whole = TorchStage(graph, 0, k)
    frames = list(synthetic_frames(N, FRAME, seed=3))
    reference = [whole.run(f) for f in frames]
    return graph, cuts, frames, reference


def _errors(chain, frames, reference):
    return np.array([np.max(np.abs(chain.run(f) - ref)) for f, ref in zip(frames, reference)])


def test_lossless_delta_matches_full_every_frame(setup):
    """300 frames, 3 stages, threshold 0: every frame's output within 1e-4 of full execution, and sparse hops."""
    graph, cuts, frames, reference = setup
    chain = LocalChain(graph, cuts, mode="delta")
    errors = _errors(chain, frames, reference)
    assert errors.max() <= 1e-4
    m_w0 = chain.stats[0]
    assert m_w0.bytes_sent <= 0.15 * m_w0.bytes_dense


def test_threshold_error_does_not_drift(setup):
    """With thresholds the error stays bounded: the last 30 frames are no worse than the first 30.

    Single frames fluctuate with the scene, so windows of 30 frames are compared (frame 300 vs 30 in spirit).
    """
    graph, cuts, frames, reference = setup
    chain = LocalChain(graph, cuts, mode="delta", input_threshold=2, threshold=0.02)
    errors = _errors(chain, frames, reference)
    assert errors[1:].max() > 0  # the threshold really dropped something
    assert errors[-30:].max() <= errors[:30].max() * 1.5 + 1e-6
    assert errors[-1] <= errors[:30].max() * 1.5 + 1e-6


def test_full_mode_and_keyframe(setup):
    """Full mode sends every tensor whole and equals delta results; a keyframe resynchronises delta hops."""
    graph, cuts, frames, reference = setup
    full = LocalChain(graph, cuts, mode="full")
    delta = LocalChain(graph, cuts, mode="delta")
    for i, frame in enumerate(frames[:10]):
        if i == 5:
            delta.keyframe()
        out_full, out_delta = full.run(frame), delta.run(frame)
        assert np.max(np.abs(out_full - reference[i])) <= 1e-5
        assert np.max(np.abs(out_delta - out_full)) <= 1e-4
    assert full.stats[0].bytes_sent > delta.stats[0].bytes_sent
