"""An engine profile's per-segment times come from ONNX Runtime's own per-node profile of the engine stage (not
torch's shares): node names map back to segments, fused kernels go to the segment of their main operator, and the
split predicts what the engine's sub-stages really take."""
import numpy as np
import pytest

from cnnvideo.model import engines
from cnnvideo.model.engines.ort_profile import (
    SegmentNames,
    attribute,
    base_op,
    fastest_nodes,
    kernel_events,
    segment_of,
    without_profiler_cost,
)
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


def test_onnx_file_kernels_find_their_segment_by_name():
    """A stage cut from an ONNX-file model keeps the model's node names, which ORT extends: an exact name, a
    tensor name with ORT's suffix, a `_token_<n>` kernel all find their segment; shortening stops at the last `/`
    (no other node's name is reached by cutting into a path) and unknown names go with the kernel before."""
    names = SegmentNames({"Pre/mul": 0, "Fx/conv_1/Conv2D": 1, "Fx/conv_1/Relu6:0": 1, "Fx/conv_2/Conv2D": 2,
                          "Fx": 0}, {0: {"Mul"}, 1: {"Conv", "Clip"}, 2: {"Conv"}})
    assert names("Pre/mul_kernel_time") == 0
    assert names("Fx/conv_1/Relu6:0_QuantizeLinear_kernel_time") == 1
    assert names("Fx/conv_2/Conv2D_token_27_kernel_time") == 2
    assert names("Fx/conv_3/Conv2D_token_30") is None and names("ReorderOutput") is None
    events = [_ev("Pre/mul", "Mul", 4, 0), _ev("Fx/conv_1/Relu6:0_nchwc", "Conv", 30, 1),
              _ev("ReorderOutput", "ReorderOutput", 2, 2), _ev("Fx/conv_2/Conv2D_token_27", "QLinearConv", 50, 3)]
    np.testing.assert_array_equal(attribute(events, 0, 3, names.ops, names), [4, 32, 50])


def test_nodes_run_inside_a_loop_count_once():
    """ORT lists a Loop's own kernel time (which holds its body's) and each body node's: the body's events are
    dropped, a Loop nested in the body too, the outer Loop's and the nodes after it kept."""
    run = [_ev("pre", "Cast", 3, 0), _ev("loop", "Loop", 100, 10), _ev("body/add", "Add", 40, 20),
           _ev("body/inner", "Loop", 30, 25), _ev("body/resize", "Resize", 50, 60), _ev("conv", "Conv", 30, 200)]
    assert [e["name"] for e in kernel_events(run)] == ["pre_kernel_time", "loop_kernel_time", "conv_kernel_time"]
    assert [e["held"] for e in kernel_events(run)] == [1, 4, 1]  # the Loop holds its body's 3 kernels
    assert [e["name"] for e in kernel_events(run[2:])] == ["body/add_kernel_time", "body/inner_kernel_time",
                                                          "body/resize_kernel_time", "conv_kernel_time"]


def test_the_profilers_cost_comes_out_per_event_held():
    """Kernels summing 90 us over 5 held events where the plain run took 72: 3.6 us out of each event it holds (18
    of the Loop's 60, which holds 3); nothing out when the plain run was as slow, no duration below zero."""
    run = [_ev("a", "Conv", 10, 0), _ev("b", "Conv", 20, 10), dict(_ev("l", "Loop", 60, 30), held=3)]
    assert [round(e["dur"], 6) for e in without_profiler_cost(run, 72)] == [6.4, 16.4, 49.2]
    assert [e["dur"] for e in without_profiler_cost(run, 90)] == [10, 20, 60]
    assert [e["dur"] for e in without_profiler_cost(run, 95)] == [10, 20, 60]
    assert [e["dur"] for e in without_profiler_cost(run, 0)] == [0, 2, 6]  # 18 us each: a would go below zero
    assert without_profiler_cost([], 5) == []


@ORT
@pytest.mark.serial  # compares a profile with stages timed apart: another process on the cores skews the ratio
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
    # the two stages timed in turn, so a change of the host's speed meanwhile reaches both (timed one after the
    # other, the ratio failed once in a serial tier: the same stage's plain run read 7.2 and 11.3 ms minutes apart)
    ta = tb = float("inf")
    for _ in range(5):
        ta = min(ta, _engine_time(a.run, tensors[0], 3, 0.1))
        tb = min(tb, _engine_time(b.run, xb, 3, 0.1))
    assert share[:cut].sum() == pytest.approx(ta / (ta + tb), abs=0.15), (share[:cut].sum(), ta, tb)


@ORT
@pytest.mark.slow
@pytest.mark.serial  # compares a profile with stages timed apart: another process on the cores skews the ratio
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_detector_profile_is_its_whole_stage_and_splits_like_its_stages(precision, tmp_path, person_detector,
                                                                       monkeypatch):
    """The person detector (an ONNX-file model, Loops for its resize and NMS) at 240x320 on ORT fp32 and int8: the
    profile is split by ORT's node profile (one whole-model stage, not four chunks that each quantise their ends),
    so it sums to the whole stage timed on a real frame (within 50%; four int8 chunks summed 1.6x it. On an AMD EPYC
    host the sum read 0.99-1.28x the stage on fp32 and 0.88-1.37x on int8, idle and under CI load), and the
    share it gives cuts 0..20 matches the two stages timed alone (within 0.15). On int8 the profiler's own per-event
    cost, left in, moves time to the NMS Loop's 215 small kernels (share 0.506 against 0.583 measured, 0.576 after it
    is taken out): on the same profiled events, the share with the cost taken out must be above the share with it
    left in. (Bounds on timed shares failed under CI load: 0.532 against 0.585 with 0.045; and +0.02 where 0.03 was
    asked, between two separate profiles; and a plain run slower than the kernels left the events unchanged.)"""
    import os

    from cnnvideo import config
    from cnnvideo.model.engines.factory import factory_for
    from cnnvideo.model.loading import load_graph
    from cnnvideo.video.frames import read_frames
    from tests.integration.helpers import REPO

    video = os.path.join(REPO, "media", "vtest.avi")
    if not os.path.isfile(video):
        pytest.skip("media/vtest.avi missing (make video)")
    from cnnvideo.model.engines import ort_profile

    taken = []  # (events, plain_us) of each profile whose profiler cost was taken out

    def spy(events, plain_us):
        taken.append((events, plain_us))
        return without_profiler_cost(events, plain_us)

    without_profiler_cost = ort_profile.without_profiler_cost
    monkeypatch.setattr(ort_profile, "without_profiler_cost", spy)
    cfg = config.from_dict({"model": person_detector, "engine": "onnxruntime", "precision": precision,
                            "video": video, "frame_size": [240, 320], "cache_dir": str(tmp_path),
                            "engine_options": {"threads": 1}})
    g = load_graph(cfg)
    stages = factory_for(cfg, g)
    prof = profile_worker(g, iters=3, stages=stages)
    k, cut = g.num_segments, 20
    assert prof.reference_bounds == (0, k)
    frame = next(iter(read_frames(video, (240, 320), 1)))[None]
    whole = min(_engine_time(stages.stage(0, k).run, frame, 3, 0.3) for _ in range(3))
    if prof.seconds.sum() != pytest.approx(whole, rel=0.5):
        # a stall of the host inside the profile (a CI rehearsal read 1.67x once, and 0.99-1.28x in the three runs
        # after it): profile again. The bug this guards summed 1.6x on every profile, so it fails both times
        again = profile_worker(g, iters=3, stages=stages)
        prof = again if abs(again.seconds.sum() - whole) < abs(prof.seconds.sum() - whole) else prof
    assert prof.seconds.sum() == pytest.approx(whole, rel=0.5), (prof.seconds.sum(), whole)
    a, b = stages.stage(0, cut), stages.stage(cut, k)
    ta = min(_engine_time(a.run, frame, 3, 0.3) for _ in range(3))
    y = a.run(frame)
    tb = min(_engine_time(b.run, y, 3, 0.3) for _ in range(3))
    share = prof.seconds[:cut].sum() / prof.seconds.sum()
    assert share == pytest.approx(ta / (ta + tb), abs=0.15), (share, ta, tb)
    if precision == "int8":  # the whole-model profile's events, with and without the profiler's cost
        names = ort_profile.SegmentNames(g.node_segments(), g.segment_op_types())
        assert taken, "the profile took no profiler cost out"
        events, plain_us = max(taken, key=lambda t: len(t[0]))
        # a plain run slower than the kernels' sum (timing noise) leaves nothing to take out: then take out what a
        # plain run at 0.8 of the sum leaves, so the check is of these events, not of that run's timing
        kernels = sum(float(e.get("dur", 0.0)) for e in events)
        corrected = without_profiler_cost(events, min(float(plain_us), 0.8 * kernels))
        raw = ort_profile.attribute(events, 0, k, names.ops, names)
        fixed = ort_profile.attribute(corrected, 0, k, names.ops, names)
        old, new = raw[:cut].sum() / raw.sum(), fixed[:cut].sum() / fixed.sum()
        assert new > old, (new, old, share, ta / (ta + tb))  # typically 0.576 against 0.506 on an idle host
