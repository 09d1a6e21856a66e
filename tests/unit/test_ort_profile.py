"""An engine profile's per-segment times come from ONNX Runtime's own per-node profile of the engine stage (not
torch's shares): node names map back to segments, fused kernels go to the segment of their main operator, and the
split predicts what the engine's sub-stages really take."""
import numpy as np
import pytest

from cnnvideo.model import engines
from cnnvideo.model.engines.ort_profile import attribute, base_op, fastest_nodes, segment_of
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.plan.profiling import _engine_time, profile_compute, profile_worker

ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")
FRAME = (128, 192)


def test_names_and_operators():
    """Segment scopes and weight names give their segment, other names none; fusion and quantisation prefixes are
    taken off an operator, QuantizeLinear stays itself."""
    assert segment_of("/s3/features.0.2/Clip_output_0_nchwc") == 3
    assert segment_of("s14.model.avgpool.rows_DequantizeLinear") == 14
    assert segment_of("ReorderOutput") is None and segment_of("/features.1/Relu") is None
    assert [base_op(o) for o in ("QLinearConv", "QGemm", "NhwcMaxPool", "FusedConv", "QuantizeLinear", "Conv")] == [
        "Conv", "Gemm", "MaxPool", "Conv", "QuantizeLinear", "Conv"]


def _ev(name, op, dur, ts):
    return {"cat": "Node", "name": name + "_kernel_time", "dur": dur, "ts": ts, "args": {"op_name": op}}


def test_fused_kernel_goes_to_its_main_operator_and_unnamed_to_the_one_before():
    """Conv (segment 1) + BatchNorm (2) + ReLU6 (3) fused and named after the ReLU6's output: its time goes to
    segment 1, which holds the Conv; an unnamed reorder goes with the kernel run before it; events that are not
    kernel times count nothing."""
    ops = {0: {"Cast"}, 1: {"Conv"}, 2: {"BatchNormalization"}, 3: {"Clip"}, 4: {"Conv"}}
    events = [_ev("/s0/pre/Cast", "Cast", 5, 0), _ev("/s3/features.0.2/Clip_output_0_nchwc", "Conv", 100, 1),
              _ev("ReorderOutput", "ReorderOutput", 7, 2), _ev("/s4/conv/Conv", "QLinearConv", 50, 3),
              {"cat": "Node", "name": "/s4/conv/Conv_fence_before", "dur": 999, "ts": 4}]
    np.testing.assert_array_equal(attribute(events, 0, 5, ops), [5, 107, 0, 0, 50])
    np.testing.assert_array_equal(attribute(events[3:], 4, 5, ops), [50])


def test_each_node_counts_its_fastest_run():
    """A CFS throttle's wait lands in one node of one run (a different one each run): each node's fastest run is free
    of it, in the first run's order, so the stall goes to no segment; a node missing from a later run keeps its own."""
    ops = {0: {"Conv"}, 1: {"Conv"}, 2: {"Conv"}}
    run = [_ev("/s0/c/Conv", "Conv", 10, 0), _ev("/s1/c/Conv", "Conv", 20, 1), _ev("/s2/c/Conv", "Conv", 30, 2)]
    stalled = [[dict(e, dur=e["dur"] + (90000 if i == j else 0)) for i, e in enumerate(run)] for j in range(3)]
    np.testing.assert_array_equal(attribute(fastest_nodes(stalled), 0, 3, ops), [10, 20, 30])
    np.testing.assert_array_equal(attribute(stalled[0], 0, 3, ops), [90010, 20, 30])
    assert fastest_nodes([]) == []
    assert [e["dur"] for e in fastest_nodes([run, run[:1]])] == [10, 20, 30]


@ORT
@pytest.mark.parametrize("precision", ["fp32", pytest.param("int8", marks=pytest.mark.slow)])
def test_engine_profile_splits_by_the_engines_own_nodes(precision, tmp_path):
    """AlexNet (random weights) at 128x192 on ORT fp32 and int8: the profile's segment times sum to the measured
    whole-model engine stage (its reference), their shares are not torch's, and the share they give the features
    (cuts 0..15) against the classifier matches the two engine stages timed on their own (within 0.15)."""
    from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
    from cnnvideo.video.frames import synthetic_frames, write_video

    g = LayerGraph.from_model(build_model("alexnet", seed=0), FRAME)
    k, cut = g.num_segments, 15
    cal = None
    if precision == "int8":
        spec = CalibrationSpec(write_video(str(tmp_path / "clip.avi"), synthetic_frames(8, FRAME, seed=3)), count=3,
                               start=4, stride=1)
        cal = lambda: load_or_measure(g, spec, str(tmp_path / "cal"), "test")  # noqa: E731
    stages = engines.StageFactory(g, engines.EngineSpec("onnxruntime", precision, threads=1),
                                  str(tmp_path / "onnx"), "test", cal)
    prof = profile_worker(g, iters=3, stages=stages)
    assert prof.reference_bounds == (0, k) and stages.stage(0, k).precision == precision
    assert prof.seconds.sum() == pytest.approx(prof.reference, rel=1e-9)
    torch_s = profile_compute(g, 1)[0]
    share, torch_share = prof.seconds / prof.seconds.sum(), torch_s / torch_s.sum()
    assert np.abs(share - torch_share).sum() > 0.1, (share, torch_share)
    _, _, tensors = profile_compute(g, 1)
    a, b = stages.stage(0, cut), stages.stage(cut, k)
    xb = tensors[cut] if b.q_in is None else b.q_in.quantize(tensors[cut])
    ta = min(_engine_time(a.run, tensors[0], 3, 0.3) for _ in range(3))
    tb = min(_engine_time(b.run, xb, 3, 0.3) for _ in range(3))
    assert share[:cut].sum() == pytest.approx(ta / (ta + tb), abs=0.15), (share[:cut].sum(), ta, tb)
