"""Stage backends: ONNX Runtime fp32 splits equal the unsplit torch model; int8 stages hand uint8 tensors to each
other; cache, export, calibration and missing-runtime failures name the file or layer and fall back or stop."""
import functools
import logging
import os
import random
import threading

import numpy as np
import pytest
import torch
from torch import nn

from cnnvideo.model import engines
from cnnvideo.model.engines import EngineError, EngineSpec, QParams, StageFactory, cpu_threads
from cnnvideo.model.engines.ort_engine import _fixed_adaptive_pool, fix_pools
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import MODEL_NAMES, build_model
from cnnvideo.video.frames import synthetic_frames, write_video
from cnnvideo.wire.hop import HopReceiver, HopSender

ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")
FRAME = (64, 96)


@functools.lru_cache(maxsize=1)
def _graph(name, frame=FRAME):
    return LayerGraph.from_model(build_model(name, seed=0), frame)


def _frame(size=FRAME, seed=0):
    return np.random.RandomState(seed).randint(0, 256, size=(1,) + tuple(size) + (3,)).astype(np.uint8)


def _factory(graph, tmp_path, engine="onnxruntime", precision="fp32", on_error="fallback", calibration=None,
             key="test"):
    return StageFactory(graph, EngineSpec(engine, precision, threads=1, on_error=on_error), str(tmp_path / "onnx"),
                        key, calibration)


def _video(tmp_path, n=12, size=FRAME):
    return write_video(str(tmp_path / "clip.avi"), synthetic_frames(n, size, seed=3))


CASES = [pytest.param(name, marks=[pytest.mark.slow] if name == "vgg16" else []) for name in MODEL_NAMES]


@ORT
@pytest.mark.parametrize("name", CASES)
def test_ort_fp32_split_matches_unsplit_torch(name, tmp_path):
    """Each zoo model on ONNX Runtime fp32, split in 3 at seeded random cuts, gives the unsplit torch output
    within 1e-4 (so does the unsplit ORT model); every stage really ran on ORT."""
    g = _graph(name)
    k = g.num_segments
    cuts = [0] + sorted(random.Random(1).sample(range(1, k), 2)) + [k]
    frame = _frame()
    ref = _factory(g, tmp_path, engine="torch").stage(0, k).run(frame)
    f = _factory(g, tmp_path)
    x = frame
    for a, b in zip(cuts, cuts[1:]):
        st = f.stage(a, b)
        assert st.engine == "onnxruntime", f.notes
        x = st.run(x)
    assert np.abs(x - ref).max() <= 1e-4
    assert np.abs(f.stage(0, k).run(frame) - ref).max() <= 1e-4


def test_fixed_adaptive_pool_equals_adaptive_avg_pool():
    """alexnet's AdaptiveAvgPool2d(6, 6) on the 14x21 map of a 480x720 frame, written as two matrix products,
    gives the same values (float rounding apart)."""
    x = torch.randn(1, 256, 14, 21)
    ref = nn.AdaptiveAvgPool2d((6, 6))(x)
    assert torch.allclose(_fixed_adaptive_pool((14, 21), (6, 6))(x), ref, atol=1e-6)


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_alexnet_non_dividing_pool_exports(tmp_path):
    """At a frame size whose feature map (6x9) does not divide 6x6, alexnet's pooling is replaced (and said so) and
    the ORT stage across it matches torch."""
    g = LayerGraph.from_model(build_model("alexnet"), (224, 320))
    _, notes = fix_pools(g.stage_module(0, g.num_segments), torch.zeros(1, 224, 320, 3, dtype=torch.uint8))
    assert notes and "avgpool" in notes[0]
    k = g.num_segments
    frame = _frame((224, 320))
    ref = _factory(g, tmp_path, engine="torch").stage(0, k).run(frame)
    st = _factory(g, tmp_path).stage(0, k)
    assert st.engine == "onnxruntime"
    assert np.abs(st.run(frame) - ref).max() <= 1e-4


class _MaxPoolNet(nn.Module):
    """A conv then an adaptive max pool that does not divide its input (no ONNX export for it)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveMaxPool2d((3, 3))
        self.fc = nn.Linear(36, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))


@ORT
def test_export_failure_names_layer_and_falls_back_or_stops(tmp_path):
    """A stage with a layer that does not export: `stop` raises naming the layer; `fallback` runs the stage on
    torch, says why in the factory's notes, and gives torch's output."""
    torch.manual_seed(0)
    g = LayerGraph.from_model(_MaxPoolNet().eval(), (16, 16))
    k = g.num_segments
    with pytest.raises(EngineError, match=r"ONNX export of stage 0\.\.%d failed at layer pool" % k):
        _factory(g, tmp_path, on_error="stop").stage(0, k)
    f = _factory(g, tmp_path)
    st = f.stage(0, k)
    assert st.engine == "torch" and "pool" in st.reason and "pool" in f.notes[0]
    frame = _frame((16, 16))
    assert np.array_equal(st.run(frame), _factory(g, tmp_path, engine="torch").stage(0, k).run(frame))
    assert f.engines_used() == ["torch-fp32"]


@ORT
def test_cache_reused_corrupted_or_foreign_file_named(tmp_path, caplog):
    """The second factory loads the cached file (no export); a corrupted file and a file of another stage are each
    named: replaced with a warning under `fallback`, an EngineError under `stop`."""
    g = _graph("mobilenet_v2")
    k = g.num_segments
    st = _factory(g, tmp_path).stage(0, 5)
    path, mtime = st.path, os.path.getmtime(st.path)
    assert _factory(g, tmp_path).stage(0, 5).path == path and os.path.getmtime(path) == mtime
    with open(path, "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff" * 200)
    with pytest.raises(EngineError, match="cached ONNX file %s is not a loadable ONNX model" % path):
        _factory(g, tmp_path, on_error="stop").stage(0, 5)
    with caplog.at_level(logging.WARNING):
        again = _factory(g, tmp_path).stage(0, 5)
    assert again.engine == "onnxruntime" and path in caplog.text
    other = _factory(g, tmp_path).stage(5, k).path
    with open(other, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    with pytest.raises(EngineError, match="belongs to another model or stage"):
        _factory(g, tmp_path, on_error="stop").stage(0, 5)
    foreign = _factory(g, tmp_path, key="other weights").stage(0, 5).path
    with open(other, "rb") as src, open(foreign, "wb") as dst:
        dst.write(src.read())
    with pytest.raises(EngineError, match="belongs to another model or stage .*test.*expected other weights"):
        _factory(g, tmp_path, on_error="stop", key="other weights").stage(0, 5)


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_int8_stages_hand_over_uint8_and_delta_is_lossless(tmp_path):
    """int8 mobilenet_v2 split in two: the weights use 7 bits (WEIGHT_BITS); the inner-cut tensor is uint8 with the
    calibration's (scale, zero point); the closed-loop delta carries it bit-exactly; the split output stays within
    10% of the unsplit int8 output's range (random weights: tiny logits)."""
    g = _graph("mobilenet_v2")
    k = g.num_segments
    spec = CalibrationSpec(_video(tmp_path), count=4, start=6, stride=1)
    f = _factory(g, tmp_path, precision="int8",
                 calibration=lambda: load_or_measure(g, spec, str(tmp_path / "cal"), "test"))
    a, b, whole = f.stage(0, 20), f.stage(20, k), f.stage(0, k)
    assert (a.engine, a.precision) == ("onnxruntime", "int8") and a.q_out == f.qparams(20) == b.q_in
    import onnx
    from onnx import numpy_helper

    weights = [numpy_helper.to_array(i) for i in onnx.load(a.path).graph.initializer
               if i.data_type == onnx.TensorProto.INT8]
    assert weights and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64  # the engine's 7 bits
    frames = [f_[None] for f_ in synthetic_frames(3, FRAME, seed=5)]
    sender, receiver = HopSender(), HopReceiver(1 << 26)
    for i, frame in enumerate(frames):
        mid = a.run(frame)
        assert mid.dtype == np.uint8 and mid.shape == tuple(g.cuts[20].shape)
        got = receiver.decode(sender.encode(mid, keyframe=i == 0))
        assert np.array_equal(got, mid)
        out = b.run(got)
        ref = whole.run(frame)
        # each stage is quantised on its own (inner tensors calibrated per stage), so the split is close to the
        # unsplit int8 model rather than bit-equal; the hop itself adds nothing (asserted above)
        assert np.abs(out - ref).max() <= 0.1 * float(np.abs(ref).max())


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_int8_bias_correction_removes_the_mean_error(tmp_path):
    """Whole mobilenet_v2 (random weights) quantised with and without the output bias correction: with it, the mean
    of (int8 - fp32) logits over the calibration frames is zero per class (float rounding), without it it is not
    (on trained weights this is what lifts top-1 agreement: docs/results/engine)."""
    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.ort_int8 import quantize_stage

    g = _graph("mobilenet_v2")
    k = g.num_segments
    data, _ = export_stage(g, 0, k)
    cal = [f[None] for f in synthetic_frames(6, FRAME, seed=7)]
    fp32 = engines.ort_engine.session(data, 1)

    def run(sess, xs):
        return np.concatenate([sess.run(None, {"x": x})[0] for x in xs])

    def ref(xs):
        return run(fp32, xs)

    mean_err = {}
    for corrected in (False, True):
        q = engines.ort_engine.session(quantize_stage(data, cal, None, None, str(tmp_path / "tmp"), first_conv=True,
                                                      classifier=True, correct_bias=corrected), 1)
        mean_err[corrected] = np.abs((run(q, cal) - ref(cal)).mean(0)).max()
    scale = float(np.abs(ref(cal)).max())
    assert mean_err[True] <= 1e-5 * scale < 1e-2 * mean_err[False]


@ORT
def test_int8_inner_cut_correction_acts_before_the_uint8_rounding(tmp_path):
    """A stage ending at an inner cut: the correction is subtracted before the cut's one QuantizeLinear (the node
    making 'y' and the subtraction stay fp32), so the uint8 output's mean error per channel shrinks (at a block
    output: cut 20 is read by a ReLU6 only, so its uint8 range is clamped to [0, 6] and the negative values, which
    the ReLU6 zeroes, are not the mean error this is about)."""
    import onnx

    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.ort_int8 import quantize_stage

    g = _graph("mobilenet_v2")
    spec = CalibrationSpec(_video(tmp_path), count=6, start=0, stride=1)
    calib = load_or_measure(g, spec, str(tmp_path / "cal"), "test")
    q_out = calib.qparams[18]
    data, _ = export_stage(g, 0, 18)
    cal = calib.inputs(0)
    fp32 = engines.ort_engine.session(data, 1)
    ref = np.concatenate([fp32.run(None, {"x": x})[0] for x in cal])
    err = {}
    for corrected in (False, True):
        model = quantize_stage(data, cal, None, q_out, str(tmp_path / "tmp"), first_conv=True, correct_bias=corrected)
        names = [n.op_type for n in onnx.load_from_string(model).graph.node]
        assert names[-1] == "QuantizeLinear" and (names[-2] == "Sub") == corrected
        q = engines.ort_engine.session(model, 1)
        out = q_out.dequantize(np.concatenate([q.run(None, {"x": x})[0] for x in cal]))
        err[corrected] = np.abs((out - ref).mean(axis=(0, 2, 3))).mean()
    assert err[True] < 0.5 * err[False]


@ORT
def test_int8_keeps_the_half_resolution_stem_fp32():
    """fp32_nodes keeps the first conv, the classifier and every node whose input has >= stem_area pixels, and
    quantises the rest."""
    import onnx

    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.ort_int8 import _spatial_sizes, fp32_nodes

    g = _graph("mobilenet_v2")
    model = onnx.shape_inference.infer_shapes(onnx.load_from_string(export_stage(g, 0, g.num_segments)[0]))
    area = (FRAME[0] // 2) * (FRAME[1] // 2)
    keep = set(fp32_nodes(model, True, True, area))
    sizes = _spatial_sizes(model)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    big = [n.name for n in convs if sizes.get(n.input[0], 0) >= area]
    assert convs[0].name in keep and set(big) <= keep and 3 <= len(big) < len(convs) // 4
    assert [n.name for n in model.graph.node if n.op_type == "Gemm"][0] in keep
    assert not keep & {n.name for n in convs if sizes.get(n.input[0], 0) < area}


def test_calibration_without_frames_named(tmp_path):
    """A calibration start past the video's end: EngineError naming the video; `fallback` runs fp32 and says so."""
    g = _graph("mobilenet_v2")
    video = _video(tmp_path, n=4)
    spec = CalibrationSpec(video, count=4, start=50, stride=1)
    cal = lambda: load_or_measure(g, spec, str(tmp_path / "cal"), "test")  # noqa: E731
    with pytest.raises(EngineError, match="int8 calibration without frames: .*clip.avi has no frame at 50"):
        _factory(g, tmp_path, engine="torch", precision="int8", on_error="stop", calibration=cal).stage(0, 3)
    f = _factory(g, tmp_path, engine="torch", precision="int8", calibration=cal)
    assert f.stage(0, 3).q_out is None and f.precision == "fp32" and "calibration without frames" in f.notes[0]


def test_calibration_video_missing_named(tmp_path):
    """No calibration video at all: `stop` raises naming the file; `fallback` runs fp32 and notes why."""
    g = _graph("mobilenet_v2")
    spec = CalibrationSpec(str(tmp_path / "gone.avi"), count=4, start=0, stride=1)
    cal = lambda: load_or_measure(g, spec, str(tmp_path / "cal"), "test")  # noqa: E731
    with pytest.raises(EngineError, match="int8 calibration without frames: video file not found: .*gone.avi"):
        _factory(g, tmp_path, engine="torch", precision="int8", on_error="stop", calibration=cal).stage(0, 3)
    f = _factory(g, tmp_path, engine="torch", precision="int8", calibration=cal)
    assert f.stage(0, 3).q_out is None and f.precision == "fp32" and "gone.avi" in f.notes[0]


def test_calibration_cache_truncated_or_foreign_is_named_and_measured_again(tmp_path, caplog):
    """A cached calibration that is truncated (a bad zip), or that another model's run stored (its digest differs),
    is named in a warning and measured again; the result equals a fresh measurement."""
    g = _graph("mobilenet_v2")
    spec = CalibrationSpec(_video(tmp_path), count=3, start=6, stride=1)
    base = str(tmp_path / "cal" / "m")
    first = load_or_measure(g, spec, base, "test")
    path = [os.path.join(tmp_path, "cal", n) for n in os.listdir(tmp_path / "cal")][0]
    good = open(path, "rb").read()
    with open(path, "wb") as fh:
        fh.write(good[: len(good) // 2])
    with caplog.at_level(logging.WARNING):
        again = load_or_measure(g, spec, base, "test")
    assert "ignoring int8 calibration file %s" % path in caplog.text and again.qparams == first.qparams
    other = load_or_measure(g, spec, base, "other weights")  # another model key: another file
    other_path = [os.path.join(tmp_path, "cal", n) for n in os.listdir(tmp_path / "cal")
                  if os.path.join(tmp_path, "cal", n) != path][0]
    with open(other_path, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_or_measure(g, spec, base, "test")
    assert "belongs to another model or calibration (digest %s, expected %s)" % (other.digest, first.digest) \
        in caplog.text


def test_no_runtime_falls_back_to_torch(tmp_path, monkeypatch):
    """Where onnxruntime does not import (armv7, the 32-bit Pi image) a stage runs on torch and says why; with
    `stop` the worker stops with that reason."""
    monkeypatch.setattr(engines.factory, "ort_available", lambda: (False, "onnxruntime is not installed here (test)"))
    g = _graph("mobilenet_v2")
    st = _factory(g, tmp_path).stage(0, 4)
    assert st.engine == "torch" and "not installed" in st.reason
    with pytest.raises(EngineError, match="not installed"):
        _factory(g, tmp_path, on_error="stop").stage(0, 4)


def test_qparams_round_trip_exact():
    """quantize(dequantize(q)) == q for every uint8 value, as the int8 hop needs."""
    qp = QParams(0.0371, 17)
    q = np.arange(256, dtype=np.uint8)
    assert np.array_equal(qp.quantize(qp.dequantize(q)), q)


def test_cpu_threads_follow_cgroup_cap(tmp_path):
    """Threads: explicit count wins; else the cgroup quota rounded up, at most the cores this process may use."""
    (tmp_path / "cpu.max").write_text("40000 100000\n")
    assert cpu_threads(0, str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_threads(0, str(tmp_path)) == len(os.sched_getaffinity(0))
    assert cpu_threads(3, str(tmp_path)) == 3


def test_config_engine_keys_match_engines():
    """config's engine/precision lists are the engines package's."""
    from cnnvideo import config

    assert config.ENGINES == engines.ENGINES and config.PRECISIONS == engines.PRECISIONS
    assert config.ON_ERROR == engines.ON_ERROR


def test_a_stage_being_built_does_not_hold_up_other_stages(tmp_path):
    """While one stage builds (a re-plan's stage warming in the background, an export that takes seconds), the
    stages the running plan uses are handed out at once and other stages build beside it; two callers of the
    stage being built get the one stage, built once."""
    fac = _factory(_graph("mobilenet_v2"), tmp_path, engine="torch")
    running = fac.stage(0, 2)
    gate, entered, builds = threading.Event(), threading.Event(), []
    real = fac._build

    def slow_build(start, end):
        builds.append((start, end))
        if (start, end) == (2, 6):
            entered.set()
            assert gate.wait(60)
        return real(start, end)

    fac._build = slow_build
    got = []
    threads = [threading.Thread(target=lambda: got.append(fac.stage(2, 6))) for _ in range(2)]
    for t in threads:
        t.start()
    assert entered.wait(60)
    assert fac.stage(0, 2) is running and fac.built(0, 2)
    assert fac.stage(6, 9).end == 9  # another stage builds while 2..6 is held up
    assert not fac.built(2, 6) and fac.built(4, 4)  # an empty stage is always built
    gate.set()
    for t in threads:
        t.join(60)
    assert len(got) == 2 and got[0] is got[1] and fac.built(2, 6)
    assert builds.count((2, 6)) == 1


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_int8_person_detector_boxes_match_fp32(tmp_path, person_detector):
    """The trained person detector at 480x720 on ORT int8, whole and split in two at a backbone cut, on 10
    vtest.avi frames (calibrated on 8 others): its boxes match ORT fp32's (IoU >= 0.5, same label, score >= 0.5)
    with F1 >= 0.9 (0.74 when the NMS loop and box decoding were quantised and the packed outputs bias-corrected;
    the stage did not build at all before sort_nodes), and no output of the post-processing is quantised."""
    import onnx

    from cnnvideo.model.engines.ort_int8 import postprocess_nodes
    from cnnvideo.model.onnx_graph import load_graph, unpack_outputs
    from cnnvideo.results.detections import PERSON_SSDLITE, DetectionAgreement, decode
    from cnnvideo.video.frames import read_frames

    g = load_graph(person_detector, (480, 720))
    k, cut = g.num_segments, g.cut_index("FeatureExtractor/MobilenetV2/expanded_conv_2/add:0")
    spec = CalibrationSpec("media/vtest.avi", count=8, start=400, stride=10)
    cal = lambda: load_or_measure(g, spec, str(tmp_path / "cal"), "detector")  # noqa: E731
    fp32 = StageFactory(g, EngineSpec("onnxruntime", "fp32", 1, "stop"), str(tmp_path / "onnx"), "detector")
    int8 = StageFactory(g, EngineSpec("onnxruntime", "int8", 1, "stop"), str(tmp_path / "onnx"), "detector", cal)
    frames = [f[np.newaxis] for f in read_frames("media/vtest.avi", (480, 720), 10, loop=False)]

    def dets(rows):
        return [decode(unpack_outputs(r, g.cuts[-1]), PERSON_SSDLITE, 720, 480) for r in rows]

    ref = dets([fp32.stage(0, k).run(f) for f in frames])
    whole = dets([int8.stage(0, k).run(f) for f in frames])
    split = dets([int8.stage(cut, k).run(int8.stage(0, cut).run(f)) for f in frames])
    for name, found in (("whole", whole), ("split", split)):
        agree = DetectionAgreement(0.5)
        for a, b in zip(found, ref):
            agree.add(a, b)
        s = agree.summary()
        assert s["reference_boxes"] >= 15 and s["f1"] >= 0.9, (name, s)
    model = onnx.load(int8.stage(0, k).path)
    post = set(postprocess_nodes(model))
    made = {o: n.name for n in model.graph.node if n.name in post and "Quantize" not in n.op_type for o in n.output}
    quantised = [made[n.input[0]] for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in made]
    assert len(post) > 20 and not quantised


@ORT
def test_int8_builds_at_once_in_one_work_folder_do_not_collide(tmp_path):
    """Two quantisations at once in the same work folder (compose workers share the cache volume and often the same
    PID) both succeed and leave the folder empty: each works in a folder of its own. Before, the second removed the
    first's files and that worker fell back to another engine."""
    import threading

    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.ort_int8 import quantize_stage

    g = _graph("mobilenet_v2")
    data, _ = export_stage(g, 0, 4)
    cal = [f[None] for f in synthetic_frames(2, FRAME, seed=7)]
    work = str(tmp_path / "tmp")
    out, errors = [], []

    def build():
        try:
            out.append(quantize_stage(data, cal, None, None, work, first_conv=True, classifier=False))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(out) == 2
    assert os.listdir(work) == []


def _tiny_detector(shuffle: bool = False):
    """x (32x32) -> Conv A (stride 4) -> Relu r1 -> Conv B -> Relu r2 -> Conv C -> Sigmoid s -> scores; r1 -> Conv D
    -> boxes, all after A at 8x8 (an SSD in miniature: A the backbone, B a predictor's depthwise, C and D the
    predictors); ONNX, shapes inferred."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.RandomState(0)

    def w(name, shape):
        return numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="A", pads=[1, 1, 1, 1], strides=[4, 4]),
             helper.make_node("Relu", ["a"], ["r1o"], name="r1"),
             helper.make_node("Conv", ["r1o", "wb"], ["b"], name="B", pads=[1, 1, 1, 1], group=4),
             helper.make_node("Relu", ["b"], ["r2o"], name="r2"),
             helper.make_node("Conv", ["r2o", "wc"], ["c"], name="C"),
             helper.make_node("Sigmoid", ["c"], ["scores"], name="s"),
             helper.make_node("Conv", ["r1o", "wd"], ["boxes"], name="D")]
    if shuffle:
        nodes = nodes[::-1]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 8, 8]),
                               helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [w("wa", (4, 3, 3, 3)), w("wb", (4, 1, 3, 3)), w("wc", (2, 4, 1, 1)),
                               w("wd", (4, 4, 1, 1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("shuffle", [False, True])
def test_int8_head_nodes_are_the_convolutions_nearest_the_outputs(shuffle):
    """head_nodes(model, 1) is what has exactly one convolution left on its longest path to an output (the
    predictors C and D and the ReLU between B and C), depth 2 adds the depthwise B and the ReLU before it, depth 0
    nothing, the backbone A never and the Sigmoid after the last convolution never; the same in any node order."""
    from cnnvideo.model.engines.ort_int8 import head_nodes

    model = _tiny_detector(shuffle)
    assert head_nodes(model, 0) == []
    assert set(head_nodes(model, 1)) == {"C", "r2", "D"}
    assert set(head_nodes(model, 2)) == {"C", "r2", "D", "B", "r1"}
    assert "A" in head_nodes(model, 3) and "s" not in head_nodes(model, 3)


@ORT
def test_int8_weights_use_seven_bits_unless_asked_for_eight(tmp_path):
    """With reduce_range (the engine's WEIGHT_BITS 7) every quantised weight lies in [-64, 63], so ONNX Runtime's
    u8 x s8 kernels cannot saturate their int16 pair sums on AVX2 without VNNI; without it (a study's 8 bits) the
    largest weight of a channel reaches 127."""
    import onnx
    from onnx import numpy_helper

    from cnnvideo.model.engines.ort_int8 import WEIGHT_BITS, quantize_stage

    assert WEIGHT_BITS == 7
    model = _tiny_detector()
    inputs = [np.random.RandomState(i).normal(0, 1, (1, 3, 32, 32)).astype(np.float32) for i in range(4)]

    def largest_weight(reduce_range):
        q = onnx.load_from_string(quantize_stage(model.SerializeToString(), inputs, None, None, str(tmp_path),
                                                 correct_bias=False, reduce_range=reduce_range))
        ints = [numpy_helper.to_array(i) for i in q.graph.initializer if i.data_type == onnx.TensorProto.INT8]
        assert ints
        return max(int(np.abs(a.astype(np.int32)).max()) for a in ints)

    assert largest_weight(True) <= 64
    assert largest_weight(False) == 127


@ORT
def test_int8_heads_stay_fp32_in_the_quantised_stage(tmp_path):
    """quantize_stage with heads=1 leaves the weights of the predictors (C, D) float and quantises the backbone's
    and the depthwise's (A, B); with heads=0 every convolution's weights are quantised."""
    from cnnvideo.model.engines.ort_int8 import quantize_stage

    model = _tiny_detector()
    inputs = [np.random.RandomState(i).normal(0, 1, (1, 3, 32, 32)).astype(np.float32) for i in range(4)]

    def quantised_weights(heads):
        import onnx

        q = onnx.load_from_string(quantize_stage(model.SerializeToString(), inputs, None, None, str(tmp_path),
                                                 correct_bias=False, heads=heads))
        made_by = {o: n.op_type for n in q.graph.node for o in n.output}
        return {n.name for n in q.graph.node if n.op_type == "Conv" and made_by.get(n.input[1]) == "DequantizeLinear"}

    assert quantised_weights(0) == {"A", "B", "C", "D"}
    assert quantised_weights(1) == {"A", "B"}


def test_int8_stem_head_rule_and_band_are_the_finest_head_input():
    """stem_area(graph, 'head') is the pixel count of the largest map a head convolution reads (8x8 here, where
    'model' is a quarter of the first convolution's 32x32 input); head_band(levels) runs from it to twice the pixels
    of its levels-th map; fp32_nodes with that band keeps every node reading an 8x8 map and not the backbone's A
    (which reads 32x32); no band with levels 0 or without an ONNX model (stem_area then falls back to half the
    frame)."""
    from types import SimpleNamespace

    from cnnvideo.model.engines.ort_engine import head_band, stem_area
    from cnnvideo.model.engines.ort_int8 import fp32_nodes

    model = _tiny_detector()
    graph = SimpleNamespace(frame_size=(128, 192), model=model)
    assert stem_area(graph, "head") == 64 and stem_area(graph, "model") == 256
    assert head_band(graph, 1) == (64, 128) and head_band(graph, 2) == (64, 512) and head_band(graph, 0) == (0, 0)
    assert set(fp32_nodes(model, False, False, band=head_band(graph, 1))) == {"r1", "B", "r2", "C", "s", "D"}
    assert fp32_nodes(model, False, False, band=(0, 0)) == []
    bare = SimpleNamespace(frame_size=(128, 192))
    assert stem_area(bare, "head") == 64 * 96 and head_band(bare, 2) == (0, 0)


@ORT
def test_int8_study_knobs_name_their_stage_and_travel_with_the_calibration(tmp_path):
    """Each study knob of a StageFactory (heads, method, symmetric activations, kept node prefixes) gives its int8
    stage another cache key, the defaults add nothing to the key (stages built before the knobs keep their files),
    and with_calibration hands every knob to the factory it makes."""
    from cnnvideo.model.engines.ort_engine import stage_key

    class Cal:
        digest = "d" * 16

    g = _graph("mobilenet_v2")
    f = _factory(g, tmp_path, precision="int8", calibration=lambda: Cal())
    base = stage_key(f, 0, 3, "int8")
    assert not any(w in base for w in ("fp32 heads", "head band", "method", "symmetric", "fp32 nodes", "-bit"))
    keys = {base}
    for knob, value in (("heads", 2), ("band", 2), ("method", "percentile"), ("symmetric", True),
                        ("keep", ("block_1/",)), ("weight_bits", 8)):
        other = _factory(g, tmp_path, precision="int8", calibration=lambda: Cal())
        setattr(other, knob, value)
        keys.add(stage_key(other, 0, 3, "int8"))

        class Camera:
            def check(self, *a):
                pass

            def to_calibration(self, graph):
                return Cal()

        assert getattr(other.with_calibration(Camera()), knob) == value
    assert len(keys) == 7
