"""int8 at inner cuts (issue 24): exporting a stage leaves the torch graph as it was (the calibration inputs of a
later stage come from it), a cut read by a clamp is quantised over the clamped range, a cut whose uint8 rounding
the next layer would blow up travels float, and the stage after a float cut does not round it itself."""
import functools

import numpy as np
import pytest
import torch

from cnnvideo.model import engines
from cnnvideo.model.engines import EngineSpec, StageFactory
from cnnvideo.model.engines.quant import (
    MAX_READ_ERROR,
    CalibrationSpec,
    load_or_measure,
    qparams_from_range,
    read_error,
    reader_clamp,
)
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.video.frames import read_frames, synthetic_frames, write_video

ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")
FRAME = (64, 96)
VTEST = "media/vtest.avi"


@functools.lru_cache(maxsize=2)
def _graph(weights="random", frame=FRAME):
    return LayerGraph.from_model(build_model("mobilenet_v2", weights, seed=0), frame)


def _run(module, x):
    with torch.no_grad():
        return module(torch.from_numpy(np.ascontiguousarray(x))).numpy()


def test_exporting_a_stage_leaves_the_graph_in_eval_mode():
    """After export_stage (ORT engine: the stage's segments in a new Sequential) every module of the graph is still
    in eval mode and the torch model gives the same output as before; in training mode BatchNorm would use the
    frame's own statistics and overwrite its running ones (it did: max logit difference 14 on trained weights)."""
    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.torch_engine import TorchStage

    g = LayerGraph.from_model(build_model("mobilenet_v2", seed=0), FRAME)  # its own: the export is what is tested
    k = g.num_segments
    x = next(iter(synthetic_frames(1, FRAME, seed=2)))[np.newaxis]
    whole = TorchStage(g, 0, k, None, None)  # built before the export, as the bench's torch reference is
    before = whole.run(x)
    export_stage(g, 0, k)
    assert not any(m.training for m in whole.module.modules())
    assert not any(m.training for m in g.stage_module(0, k).modules())
    np.testing.assert_array_equal(whole.run(x), before)
    np.testing.assert_array_equal(_run(g.stage_module(0, k), x), before)


def test_cut_before_relu6_is_quantised_over_the_clamped_range(tmp_path):
    """Cut 20 of mobilenet_v2 (a BatchNorm output that only a ReLU6 reads) gets uint8 parameters covering [0, <= 6]
    (zero point 0, steps finer than over its raw range, which reaches below 0), and the rounding error left after
    the ReLU6 is less than half (in squares) of what the raw range's parameters leave; a block output (cut 18,
    read by a convolution and an add) keeps its raw range."""
    g = _graph()
    video = write_video(str(tmp_path / "clip.avi"), synthetic_frames(6, FRAME, seed=3))
    cal = load_or_measure(g, CalibrationSpec(video, count=4, start=0, stride=1), str(tmp_path / "cal"), "test")
    assert reader_clamp(g, 20) == (0.0, 6.0) and reader_clamp(g, 18) is None
    xs = [_run(g.stage_module(0, 20), f[np.newaxis]) for f in cal.frames]
    raw = qparams_from_range(min(x.min() for x in xs), max(x.max() for x in xs))
    qp = cal.qparams[20]
    assert raw.zero_point > 0 and qp.zero_point == 0 and qp.scale < raw.scale and qp.scale <= 6.0 / 255 * 1.0001
    relu6 = g.stage_module(20, 21)
    clamped = sum(read_error(relu6, x, qp) for x in xs)
    unclamped = sum(read_error(relu6, x, raw) for x in xs)
    assert clamped[0] < 0.5 * unclamped[0]
    mids = [_run(g.stage_module(0, 18), f[np.newaxis]) for f in cal.frames]
    assert cal.qparams[18] == qparams_from_range(min(m.min() for m in mids), max(m.max() for m in mids))


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_stage_after_a_float_cut_keeps_its_readers_fp32(tmp_path):
    """quantize_stage with float_input: no QuantizeLinear/DequantizeLinear pair rounds the input 'x' (the readers of
    'x' stay fp32), while without it the quantiser rounds 'x' as usual."""
    import onnx

    from cnnvideo.model.engines.ort_engine import export_stage
    from cnnvideo.model.engines.ort_int8 import quantize_stage

    g = _graph()
    data, _ = export_stage(g, 13, g.num_segments)
    cal = [_run(g.stage_module(0, 13), f[np.newaxis]) for f in synthetic_frames(3, FRAME, seed=7)]
    rounded = {}
    for float_input in (False, True):
        model = onnx.load_from_string(quantize_stage(data, cal, None, None, str(tmp_path / "tmp"),
                                                     float_input=float_input))
        rounded[float_input] = any(n.op_type == "QuantizeLinear" and "x" in n.input for n in model.graph.node)
    assert rounded == {False: True, True: False}


@ORT
@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_cut_that_rounding_would_wreck_travels_float(tmp_path, trained_weights):
    """Trained mobilenet_v2 at 240x360 on vtest.avi: the raw depthwise output features.2.conv.1.0 (cut 13), whose
    BatchNorm scales up channels of small range, leaves a rounding error above MAX_READ_ERROR after it, so it gets
    no uint8 parameters (features.3.add, cut 18, keeps them); the int8 stages split there hand over float32, and
    the split's RMS logit error against fp32 is below what rounding that cut alone (in the fp32 model, with the
    parameters its range would get) costs."""
    size = (240, 360)
    g = _graph("imagenet", size)
    k = g.num_segments
    cal = load_or_measure(g, CalibrationSpec(VTEST, count=8, start=400, stride=10), str(tmp_path / "cal"), "t")
    assert cal.read_errors[13] > MAX_READ_ERROR > cal.read_errors[18]
    assert 13 not in cal.qparams and 18 in cal.qparams
    f = StageFactory(g, EngineSpec("onnxruntime", "int8", 1, "stop"), str(tmp_path / "onnx"), "t", lambda: cal)
    first, second = f.stage(0, 13), f.stage(13, k)
    assert f.qparams(13) is None and first.q_out is None and second.q_in is None
    frames = [x[np.newaxis] for x in read_frames(VTEST, size, 6, loop=False)]
    ref = [_run(g.stage_module(0, k), x) for x in frames]
    mids = [first.run(x) for x in frames]
    assert all(m.dtype == np.float32 for m in mids)
    split = [second.run(m) for m in mids]
    fp32_mids = [_run(g.stage_module(0, 13), x) for x in frames]
    would = qparams_from_range(min(m.min() for m in fp32_mids), max(m.max() for m in fp32_mids))
    rounded = [_run(g.stage_module(13, k), would.dequantize(would.quantize(m))) for m in fp32_mids]

    def rms(outs):
        return float(np.sqrt(np.mean([(a - b) ** 2 for a, b in zip(outs, ref)])))

    assert rms(split) < rms(rounded)


def test_size_model_counts_a_float_cut_at_its_float_size():
    """predict.cut_meta with the calibration's uint8 cuts listed: those inner cuts are 1 byte per element, an inner
    cut left out (kept float) keeps its 4 (2 with fp16), the frame and the model output stay as they are; True
    still makes every inner cut uint8."""
    from cnnvideo.plan.predict import cut_meta

    g = _graph()
    k = g.num_segments
    quantised = [c for c in range(1, k) if c != 13]
    _, items = cut_meta(g, int8=quantised)
    assert items[13] == 4 and items[18] == 1 and items[0] == 1 and items[k] == 4
    assert cut_meta(g, fp16=True, int8=quantised)[1][13] == 2
    assert np.all(cut_meta(g, int8=True)[1][1:-1] == 1)
