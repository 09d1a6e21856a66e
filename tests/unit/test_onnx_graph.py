"""ONNX-file models (`model: <path>.onnx`): cut points of any ONNX graph, stages extracted between cuts, and the
torch-free stage runner (cnnvideo.model.onnx_graph, cnnvideo.model.onnx_stage)."""
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from cnnvideo.model import onnx_graph as og  # noqa: E402
from cnnvideo.model.onnx_graph import (  # noqa: E402
    OnnxGraph,
    OnnxModelError,
    unpack_outputs,  # noqa: E402
)
from cnnvideo.model.onnx_stage import OnnxStage  # noqa: E402

FLOAT = TensorProto.FLOAT
SIZE = (160, 160)


def _save(model, path) -> str:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _chain(graph, cuts, x):
    """Run the stages between consecutive cuts, each feeding the next."""
    y = x
    for a, b in zip(cuts, cuts[1:]):
        y = OnnxStage(graph, a, b).run(y)
    return y


# ---------------------------------------------------------------- hand-made graphs


def _residual_model():
    """x -> a=Relu -> b=Mul(a,W) -> c=Exp -> d=Add(c,a) -> e=Sigmoid -> f=Mul(e,W) -> y=Reshape(f, Shape(x)).
    The branch a -> b -> c merges back at d; W (an initializer) and Shape(x) are read late but are constants."""
    w = helper.make_tensor("W", FLOAT, [1, 2, 1, 1], [0.5, -0.25])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mul", ["a", "W"], ["b"], name="mul_w"),
        helper.make_node("Exp", ["b"], ["c"], name="exp"),
        helper.make_node("Add", ["c", "a"], ["d"], name="add"),
        helper.make_node("Sigmoid", ["d"], ["e"], name="sigmoid"),
        helper.make_node("Mul", ["e", "W"], ["f"], name="mul_w2"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Reshape", ["f", "s"], ["y"], name="reshape"),
    ]
    return _model(nodes, [_vi("x", ["n", 2, "h", "w"])], [_vi("y", ["n", 2, "h", "w"])], [w])


def _residual_ref(x):
    w = np.array([0.5, -0.25], dtype=np.float32).reshape(1, 2, 1, 1)
    a = np.maximum(x, 0)
    d = np.exp(a * w) + a
    return (1 / (1 + np.exp(-d)) * w).reshape(x.shape)


def test_residual_branch_has_no_inner_cut(tmp_path):
    """Cuts fall before and after the residual branch a->b->c->(d=c+a), never inside it (b, c are not cuts); a
    constant read late (initializer W) and Shape of the input (folded once the input is fixed) do not block
    cuts and are no layers; every chain of stages equals numpy's result."""
    g = OnnxGraph.load(_save(_residual_model(), tmp_path / "res.onnx"), (3, 4))
    assert [c.name for c in g.cuts] == ["x", "a", "d", "e", "f", "y"]
    assert g.cuts[0].shape == (1, 2, 3, 4) and g.cuts[0].layer == -1
    assert all(c.dtype == "float32" and c.numel == 24 and c.bytes_dense == 96 for c in g.cuts)
    assert g.num_segments == 5 and g.layers[g.cuts[2].layer].name == "add"
    # constants are no layers: Shape(x) became a Constant once the input was fixed
    assert [layer.name for layer in g.layers] == ["relu", "mul_w", "exp", "add", "sigmoid", "mul_w2", "reshape"]
    x = np.random.RandomState(0).randn(1, 2, 3, 4).astype(np.float32)
    ref = _residual_ref(x)
    for cuts in ([0, 5], [0, 1, 2, 3, 4, 5], [0, 2, 5], [0, 4, 5]):
        np.testing.assert_allclose(_chain(g, cuts, x), ref, rtol=1e-6, atol=1e-6)


def _loop_model():
    """x -> a=Relu -> b=Neg -> l=Loop(3 times: v = (v + a) * w, reading a and w from the outer scope) ->
    y=Sigmoid. a is still needed by the loop body after b, so b is no cut."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "a"], ["t"]),
         helper.make_node("Mul", ["t", "w"], ["v_out"])],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [1, 4])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [1, 4])])
    inits = [helper.make_tensor("M", TensorProto.INT64, [], [3]), helper.make_tensor("T", TensorProto.BOOL, [], [1]),
             helper.make_tensor("w", FLOAT, [1, 4], [0.5, 1.0, -1.0, 2.0])]
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("Loop", ["M", "T", "b"], ["l"], name="loop", body=body),
        helper.make_node("Sigmoid", ["l"], ["y"], name="sigmoid"),
    ]
    return _model(nodes, [_vi("x", [1, 4])], [_vi("y", [1, 4])], inits)


def test_loop_node_is_atomic_and_its_outer_reads_count(tmp_path):
    """A Loop node is one layer: no cut goes inside its body, the outer tensor its body reads (a) stays live up to
    it (so b is no cut), and the stage holding it gets the outer initializer (w) its body reads."""
    g = OnnxGraph.load(_save(_loop_model(), tmp_path / "loop.onnx"))
    assert [c.name for c in g.cuts] == ["x", "a", "l", "y"]
    assert [layer.kind for layer in g.layers] == ["Relu", "Neg", "Loop", "Sigmoid"]
    assert g.layers[2].inputs == (0, 1)  # the loop reads b explicitly and a through its body
    stage = g.stage_model(1, 2)
    assert {t.name for t in stage.graph.initializer} == {"M", "T", "w"}
    x = np.array([[1.0, -2.0, 3.0, 0.5]], dtype=np.float32)
    ref = g.full_session().run(None, {"x": x})[0]
    a = np.maximum(x, 0)
    v = -a
    for _ in range(3):
        v = (v + a) * np.array([0.5, 1.0, -1.0, 2.0], dtype=np.float32)
    np.testing.assert_allclose(ref, 1 / (1 + np.exp(-v)), rtol=1e-6)
    for cuts in ([0, 1, 2, 3], [0, 2, 3], [0, 1, 3]):
        np.testing.assert_allclose(_chain(g, cuts, x), ref, rtol=1e-6, atol=1e-7)


def test_multi_output_last_stage_returns_every_output(tmp_path):
    """A model with two outputs (a detector's boxes and scores): the last cut is both tensors, the last stage
    returns them packed in one float32 row (one tensor crosses the last hop), and unpack_outputs gives back each
    output by name, equal to the unsplit model."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Exp", ["b"], ["boxes"]), helper.make_node("Abs", ["b"], ["scores"])]
    model = _model(nodes, [_vi("x", [1, 3])], [_vi("boxes", [1, 3]), _vi("scores", [1, 3])])
    g = OnnxGraph.load(_save(model, tmp_path / "two.onnx"))
    last = g.cuts[-1]
    assert [c.name for c in g.cuts] == ["x", "a", "b", "boxes+scores"]
    assert last.tensors == ("boxes", "scores") and last.numel == 6 and last.bytes_dense == 24
    x = np.array([[1.0, -2.0, 3.0]], dtype=np.float32)
    ref = g.full_session().run(None, {"x": x})
    out = _chain(g, [0, 2, 3], x)
    assert out.shape == (1, 6) and out.dtype == np.float32 and last.shape == (1, 6)
    got = unpack_outputs(out, last)
    assert list(got) == ["boxes", "scores"]
    for name, want in zip(("boxes", "scores"), ref):
        np.testing.assert_array_equal(got[name], want)


# ---------------------------------------------------------------- bad input


def test_not_a_model_or_truncated_is_one_line_naming_the_file(tmp_path):
    """A text file, a truncated model and a missing file each give one line naming the file."""
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 10)
    data = _residual_model().SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    for path in (text, cut, tmp_path / "missing.onnx"):
        with pytest.raises(OnnxModelError) as err:
            OnnxGraph.load(str(path), SIZE)
        msg = str(err.value)
        assert str(path) in msg and "\n" not in msg, msg


def _custom_op_model(tmp_path) -> str:
    """A small image model (conv, relu) with a made-up op of a custom domain in the middle: valid ONNX, but no
    runtime has it."""
    w = helper.make_tensor("w", FLOAT, [4, 3, 3, 3], np.full(4 * 3 * 3 * 3, 0.1, dtype=np.float32).tolist())
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["f"], domain="com.example.custom", name="frob"),
             helper.make_node("Relu", ["f"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "custom", [_vi("x", [1, 3, 32, 48])], [_vi("y", [1, 4, 32, 48])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example.custom", 1)])
    return _save(model, tmp_path / "custom.onnx")


@pytest.mark.slow  # exports or quantises a model: `make test` runs it, `make test-fast` does not
def test_op_onnx_runtime_lacks_is_one_line_naming_it(tmp_path):
    """A model with an op ONNX Runtime lacks: OnnxGraph.load names the op and its node in one line; `cnnvideo plan`
    and `cnnvideo local` print that one line and exit non-zero without a traceback, local starting no role."""
    path = _custom_op_model(tmp_path)
    with pytest.raises(OnnxModelError) as err:
        OnnxGraph.load(path, (32, 48))
    assert str(err.value).startswith(path + ": op com.example.custom:Frobnicate (node frob) is not available")
    cfg = tmp_path / "c.yml"
    cfg.write_text("model: %s\nengine: onnxruntime\nframe_size: [32, 48]\nvideo: media/vtest.avi\nframes: 2\n" % path)
    for cmd in (["plan", "-c", str(cfg)], ["local", "-c", str(cfg), "--out", str(tmp_path / "out")]):
        proc = subprocess.run([sys.executable, "-m", "cnnvideo"] + cmd, capture_output=True, text=True, timeout=120)
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
        assert proc.returncode != 0 and len(errors) == 1, (cmd, proc.stderr)
        assert "com.example.custom:Frobnicate" in errors[0] and path in errors[0], errors
        assert "Traceback" not in proc.stderr and "[local] started" not in proc.stderr, proc.stderr


def test_standard_and_function_ops_pass_the_op_check():
    """check_ops passes an op with an ORT CPU kernel (Relu) and one ORT runs as ONNX's function body (HardSwish,
    in MobileNetV3 exports, has no CPU kernel in ORT 1.32): no false refusals, and ORT does run the model."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("HardSwish", ["r"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3])], [_vi("y", [1, 3])])
    og.check_ops(model, "m")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": np.array([[-1.0, 1.0, 4.0]], dtype=np.float32)})[0]
    assert np.allclose(y, [[0.0, 2.0 / 3, 4.0]], atol=1e-6)


def test_single_node_model_has_no_usable_cut(tmp_path):
    """A one-node model has only its input and output as cuts: a clear error that it cannot be split."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 3])], [_vi("y", [1, 3])])
    path = _save(model, tmp_path / "one.onnx")
    with pytest.raises(OnnxModelError, match="no inner cut.*cannot be split"):
        OnnxGraph.load(path)


def test_dynamic_dims_that_cannot_be_fixed(tmp_path):
    """Dynamic dims are fixed only for batch and an image's H, W: a dynamic feature axis, a dynamic H/W with no
    frame size, and a fixed H/W other than the frame size are errors naming the file."""
    relu2 = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    flat = _save(_model(relu2, [_vi("x", ["n", "features"])], [_vi("y", ["n", "features"])]), tmp_path / "flat.onnx")
    with pytest.raises(OnnxModelError, match="cannot fix dynamic dim 'features'") as err:
        OnnxGraph.load(flat, SIZE)
    assert flat in str(err.value)
    image = _save(_model(relu2, [_vi("x", ["n", 3, "h", "w"])], [_vi("y", ["n", 3, "h", "w"])]), tmp_path / "img.onnx")
    with pytest.raises(OnnxModelError, match="no frame size"):
        OnnxGraph.load(image)
    g = OnnxGraph.load(image, (5, 7))  # the same model is fine once the frame size is known
    assert g.cuts[0].shape == (1, 3, 5, 7) and g.cuts[-1].shape == (1, 3, 5, 7)
    # stage caches are keyed by the file and the fixed input
    assert g.digest == OnnxGraph.load(image, (5, 7)).digest != OnnxGraph.load(image, (6, 7)).digest
    fixed = _save(_model(relu2, [_vi("x", [1, 8, 8, 3])], [_vi("y", [1, 8, 8, 3])]), tmp_path / "fixed.onnx")
    with pytest.raises(OnnxModelError, match="fixed size 8x8, the frame size is 5x7"):
        OnnxGraph.load(fixed, (5, 7))


# ---------------------------------------------------------------- torchvision models


def _export(name, path):
    """torchvision `name` with seeded random weights exported at SIZE with dynamic batch, H, W."""
    from tests.onnx_export import export_torchvision

    return export_torchvision(name, path, SIZE)


def _torch_macs(model):
    """Conv2d and Linear multiply-accumulates of one SIZE forward, counted from torch module hooks."""
    import torch

    total = []

    def hook(m, inp, out):
        if isinstance(m, torch.nn.Conv2d):
            total.append(out.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1])
        else:
            total.append(out.numel() * m.in_features)

    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(torch.zeros(1, 3, *SIZE))
    for h in hooks:
        h.remove()
    return sum(total)


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet50"])
def test_torchvision_split_equals_unsplit(tmp_path, name):
    """mobilenet_v2 / resnet50 exported with dynamic dims, fixed to 160x160: split at 3 random inner cuts
    (seeded), the chained stage sessions give the unsplit ORT model's logits within 1e-4; every stage is a valid
    ONNX model; segment MACs add up to torch's Conv2d+Linear count; resnet cuts inside layerN fall only at the
    end of a bottleneck (after its residual add or the relu following it)."""
    path = tmp_path / ("%s.onnx" % name)
    model = _export(name, path)
    g = OnnxGraph.load(str(path), SIZE)
    assert g.cuts[0].name == "image" and g.cuts[0].shape == (1, 3) + SIZE
    assert g.cuts[-1].name == "logits" and g.cuts[-1].shape == (1, 1000)
    assert g.num_segments > 20
    assert int(g.segment_macs().sum()) == _torch_macs(model)
    assert (g.segment_flops() == 2 * g.segment_macs()).all()
    if name == "resnet50":
        inner = [c.name for c in g.cuts if "/layer" in c.name]
        assert inner and all(n.endswith(("/Add_output_0", "/relu_2/Relu_output_0")) for n in inner), inner
    rng = np.random.RandomState(7)
    x = rng.randn(1, 3, *SIZE).astype(np.float32)
    ref = g.full_session().run(None, {"image": x})[0]
    picks = sorted(rng.choice(np.arange(1, g.num_segments), 3, replace=False).tolist())
    cuts = [0] + picks + [g.num_segments]
    for a, b in zip(cuts, cuts[1:]):
        onnx.checker.check_model(g.stage_model(a, b))
    y = _chain(g, cuts, x)
    assert y.shape == (1, 1000)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_onnx_stage_imports_no_torch():
    """Importing the ONNX stage runner (and the graph module) pulls in no torch: ONNX-model workers need none."""
    code = ("import sys, cnnvideo.model.onnx_stage, cnnvideo.model.onnx_graph\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr


def test_frame_input_matches_torch_preprocess_and_model(tmp_path):
    """With frame_input (what load_graph gives workers), cut 0 is LayerGraph's raw uint8 (1, H, W, 3) frame named
    'input', the model's own input is a later cut (after the preprocess nodes, whose Transpose output is a cut
    too); chained stages fed an (H, W, 3) frame equal torch's Preprocess + model within 1e-4."""
    import torch

    from cnnvideo.model.onnx_graph import load_graph
    from cnnvideo.model.zoo import Preprocess

    path = tmp_path / "mobilenet_v2.onnx"
    model = _export("mobilenet_v2", path)
    g = load_graph(str(path), SIZE)
    assert (g.cuts[0].name, g.cuts[0].shape, g.cuts[0].dtype) == ("input", (1,) + SIZE + (3,), "uint8")
    k = g.cut_index("image")
    assert g.cuts[k].shape == (1, 3) + SIZE and g.cuts[k].dtype == "float32"
    assert [layer.kind for layer in g.layers[:g.cuts[k].layer + 1]] == ["Transpose", "Cast", "Div", "Sub", "Div"]
    frame = np.random.RandomState(3).randint(0, 256, size=SIZE + (3,)).astype(np.uint8)
    with torch.no_grad():
        want = model(Preprocess()(torch.from_numpy(frame[None]))).numpy()
    np.testing.assert_allclose(_chain(g, [0, 1, k, 10, g.num_segments], frame), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_chain(g, [0, g.num_segments], frame), want, rtol=1e-4, atol=1e-4)


def test_config_and_cache_names_for_an_onnx_file(tmp_path):
    """`model: <path>.onnx` runs on onnxruntime with no `engine` key; a missing file or engine torch is a
    ConfigError naming the key; cache file names use a path-free tag of the file, and check_weights names the file."""
    from cnnvideo import artifacts, config, config_validation
    from cnnvideo.config import ConfigError
    from cnnvideo.model.loading import check_weights

    path = _save(_residual_model(), tmp_path / "My Net.onnx")
    cfg = config.from_dict({"model": path, "engine": "onnxruntime"}, check_files=False)
    missing = config.from_dict({"model": str(tmp_path / "nope.onnx"), "engine": "onnxruntime"}, check_files=False)
    with pytest.raises(ConfigError, match="'model': ONNX file not found"):
        config_validation.validate(missing)  # checking files: the model is checked before the (default) video
    assert config.from_dict({"model": path}, check_files=False).engine == "onnxruntime"
    with pytest.raises(ConfigError, match="'engine' must be onnxruntime"):
        config.from_dict({"model": path, "engine": "torch"}, check_files=False)
    tag = artifacts.model_tag(path)
    assert tag.startswith("My_Net-onnx-") and "/" not in tag and artifacts.model_tag("resnet50") == "resnet50"
    info = check_weights(cfg)
    assert info.path == path and info.sha256 and path in info.describe()


def test_data_dependent_cut_shapes_are_measured_and_not_enforced(tmp_path):
    """A cut whose shape depends on the data (NonZero) gets the shape measured on a zero input, marked not
    static; stages across it are declared with its rank only and run on inputs of other sizes, equal to the
    unsplit model."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("NonZero", ["a"], ["n"]),
             helper.make_node("Cast", ["n"], ["c"], to=FLOAT),
             helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0)]
    g = OnnxGraph.load(_save(_model(nodes, [_vi("x", [1, 4])], [_vi("y", [])]), tmp_path / "nz.onnx"))
    by_name = {c.name: c for c in g.cuts}
    assert [c.name for c in g.cuts] == ["x", "a", "n", "c", "y"]
    assert by_name["n"].shape == (2, 0) and not by_name["n"].static and by_name["n"].dtype == "int64"
    assert by_name["a"].static and by_name["y"].static and by_name["y"].shape == ()
    x = np.array([[1.0, -2.0, 3.0, 0.5]], dtype=np.float32)
    ref = g.full_session().run(None, {"x": x})[0]
    assert ref == 0 + 0 + 0 + (0 + 2 + 3)  # row indices 0, 0, 0 plus column indices 0, 2, 3
    for cuts in ([0, 2, 4], [0, 3, 4], [0, 1, 2, 3, 4]):
        np.testing.assert_array_equal(_chain(g, cuts, x), ref)


def test_stage_io_renamed_like_exported_stages(tmp_path):
    """stage_model(io_names=('x', 'y')) names the stage's input and output as the ORT engine's exported stages are
    named (its int8 quantiser looks for them), computing the same; a name taken inside the stage is an error."""
    g = OnnxGraph.load(_save(_residual_model(), tmp_path / "res.onnx"), (3, 4))
    m = g.stage_model("a", "e", io_names=("x", "y"))
    onnx.checker.check_model(m)
    assert [i.name for i in m.graph.input] == ["x"] and [o.name for o in m.graph.output] == ["y"]
    a = np.random.RandomState(1).rand(1, 2, 3, 4).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": a})[0], OnnxStage(g, 1, 3).run(a))
    with pytest.raises(OnnxModelError, match="output 'f'"):
        g.stage_model("a", "y", io_names=("x", "f"))


@pytest.mark.slow
def test_detector_post_processing_stays_in_the_last_stage(tmp_path):
    """torchvision's SSDlite detector (random weights) exported with its pre- and post-processing: the cut search
    runs on its 3000+ nodes, the control-flow nodes (If/Loop of the box decoding and NMS) all fall in the last
    segment, and a 3-stage split returns the model's three outputs (boxes, scores, labels) exactly."""
    import inspect
    import warnings

    import torch
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None,
                                                                           weights_backbone=None).eval()
    path = str(tmp_path / "ssdlite.onnx")
    kwargs = dict(opset_version=17, input_names=["image"], output_names=["boxes", "scores", "labels"])
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([torch.rand(3, 320, 320)],), path, **kwargs)
    g = OnnxGraph.load(path)
    assert g.cuts[-1].tensors == ("boxes", "scores", "labels") and g.num_segments > 10
    control = [layer.index for layer in g.layers if layer.kind in ("If", "Loop", "Scan")]
    assert control and min(control) > g.cuts[-2].layer
    x = np.random.RandomState(0).rand(3, 320, 320).astype(np.float32)
    ref = g.full_session().run(None, {"image": x})
    out = _chain(g, [0, 2, g.num_segments // 2, g.num_segments], x)
    # the last stage packs the outputs into one float32 row; their lengths depend on the frame (data-dependent
    # shapes), so compare with the reference packed the same way
    want = np.concatenate([np.asarray(r, dtype=np.float32).reshape(-1) for r in ref])[None]
    np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------- shape values measured by probing


def _late_shape_model():
    """x (1, 8) -> a=Relu -> b=Reshape(a, Abs(T)) (shape inference cannot tell b's shape: it does not evaluate
    Abs) -> s=Shape(b), c=Sigmoid(b) -> d=Exp(c) -> e=Flatten(d) -> y=Reshape(e, s): s is read only at the end."""
    t = helper.make_tensor("T", TensorProto.INT64, [2], [2, -4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Abs", ["T"], ["t"], name="abs"),
             helper.make_node("Reshape", ["a", "t"], ["b"], name="reshape"),
             helper.make_node("Shape", ["b"], ["s"], name="shape"),
             helper.make_node("Sigmoid", ["b"], ["c"], name="sigmoid"),
             helper.make_node("Exp", ["c"], ["d"], name="exp"),
             helper.make_node("Flatten", ["d"], ["e"], name="flatten"),
             helper.make_node("Reshape", ["e", "s"], ["y"], name="reshape_back")]
    return _model(nodes, [_vi("x", [1, 8])], [_vi("y", [2, 4])], [t])


def test_shape_of_an_open_shape_read_late_is_folded_and_cuts_appear(tmp_path):
    """A Shape whose input shape inference leaves open, read only by the last node, kept c, d, e from being cuts
    (two tensors live). With probing (zero and noise inputs agree on [2, 4]) it becomes a Constant, so c, d and e
    are cuts and every split equals the unsplit model (before, the only inner cuts were a and b)."""
    path = _save(_late_shape_model(), tmp_path / "late.onnx")
    g = OnnxGraph.load(path)
    assert [c.name for c in g.cuts] == ["x", "a", "b", "c", "d", "e", "y"]
    (shape_node,) = [n for n in g.model.graph.node if "s" in n.output]
    assert shape_node.op_type == "Constant"
    assert list(onnx.numpy_helper.to_array(shape_node.attribute[0].t)) == [2, 4]
    assert all(layer.kind != "Shape" for layer in g.layers)
    m = _late_shape_model()  # before the probe: the cut search on the inferred model without it
    og.fix_input(m, None)
    m = og._infer(m, "late")
    assert og._fold_shapes(m.graph, og._types(m.graph)) == 0
    assert [t for _, t in og._analyse(m.graph, "x").positions] == ["a", "b", "y"]
    x = np.random.RandomState(3).randn(1, 8).astype(np.float32)
    want = (np.exp(1 / (1 + np.exp(-np.maximum(x, 0))))).reshape(2, 4)
    np.testing.assert_allclose(g.full_session().run(None, {"x": x})[0], want, rtol=1e-6)
    for cuts in ([0, 3, 6], [0, 2, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6]):
        np.testing.assert_allclose(_chain(g, cuts, x), want, rtol=1e-6)


def _nonzero_shape_model(inside_if: bool):
    """x (1, 4) -> a=Relu -> n=NonZero(Greater(a, 2)) (directly, or as the output of an If whose branches compute
    it) -> s=Shape(n) read at the end: y = Exp(Sigmoid(a)) * (number of entries > 2, from s). Zero and [0, 1)
    noise inputs both give s = [2, 0], any input with an entry > 2 another value."""
    two = helper.make_tensor("two", FLOAT, [], [2.0])
    inits = [two, helper.make_tensor("idx", TensorProto.INT64, [], [1])]
    nz = [helper.make_node("Greater", ["a", "two"], ["g"]), helper.make_node("NonZero", ["g"], ["n"])]
    if inside_if:
        branch = lambda name: helper.make_graph(  # noqa: E731
            [helper.make_node("Greater", ["a", "two"], ["g_" + name]),
             helper.make_node("NonZero", ["g_" + name], ["n_" + name])], name, [],
            [helper.make_tensor_value_info("n_" + name, TensorProto.INT64, None)])
        inits.append(helper.make_tensor("yes", TensorProto.BOOL, [], [True]))
        nz = [helper.make_node("If", ["yes"], ["n"], then_branch=branch("then"), else_branch=branch("else"))]
    nodes = [helper.make_node("Relu", ["x"], ["a"])] + nz + [
        helper.make_node("Shape", ["n"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["k"]),
        helper.make_node("Cast", ["k"], ["kf"], to=FLOAT),
        helper.make_node("Sigmoid", ["a"], ["c"]),
        helper.make_node("Exp", ["c"], ["d"]),
        helper.make_node("Mul", ["d", "kf"], ["y"])]
    return _model(nodes, [_vi("x", [1, 4])], [_vi("y", [1, 4])], inits)


@pytest.mark.parametrize("inside_if", [False, True], ids=["nonzero", "nonzero-in-if-body"])
def test_shape_downstream_of_nonzero_is_not_folded(tmp_path, inside_if):
    """A Shape downstream of NonZero (also of an If whose branch holds the NonZero) stays a Shape node although the
    zero and the noise probe agree on its value ([2, 0]): folding it would freeze a data-dependent count, which
    an input with entries > 2 changes. So its value stays live (c and d are no cuts) and the model still counts."""
    g = OnnxGraph.load(_save(_nonzero_shape_model(inside_if), tmp_path / "nz_shape.onnx"))
    assert [n.op_type for n in g.model.graph.node if "s" in n.output] == ["Shape"]
    assert not {"c", "d"} & {c.name for c in g.cuts}
    x = np.array([[1.0, 3.0, -1.0, 5.0]], dtype=np.float32)
    want = np.exp(1 / (1 + np.exp(-np.maximum(x, 0)))) * 2  # two entries > 2
    np.testing.assert_allclose(g.full_session().run(None, {"x": x})[0], want, rtol=1e-6)
    np.testing.assert_allclose(_chain(g, [0, 1, g.num_segments], x), want, rtol=1e-6)


def test_person_detector_has_backbone_cuts_and_a_split_is_exact(person_detector):
    """The trained TF SSDLite person detector (resize Loop, MobileNetV2, BoxPredictors, NMS Loop) at 480x720: the
    shape values its resize Loop hid (true image shape, Shape of Loop-derived tensors) are folded, so it has >= 10
    inner cuts through the FeatureExtractor, all static and all before the first BoxPredictor node, the NMS Loop
    stays in the last stage, and a 3-way split gives the unsplit model's detections (same count and classes,
    boxes and scores within 1e-4) on darknet's person.jpg (or a synthetic frame without it)."""
    import cv2

    from cnnvideo.model.onnx_graph import load_graph
    from cnnvideo.video.frames import synthetic_frames

    g = load_graph(person_detector, (480, 720))
    inner = g.cuts[1:-1]
    first_box = min(layer.index for layer in g.layers if layer.name.startswith("BoxPredictor"))
    backbone = [c for c in inner if c.name.startswith("FeatureExtractor/")]
    assert len(backbone) >= 10 and all(c.layer < first_box and c.static for c in inner)
    assert any(c.name.endswith("/add:0") for c in backbone)
    loops = [layer.index for layer in g.layers if layer.kind == "Loop"]
    assert len(loops) == 2 and max(loops) > g.cuts[-2].layer
    photo = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "media",
                         "photos", "person.jpg")
    bgr = cv2.imread(photo) if os.path.isfile(photo) else None
    if bgr is not None:
        frame = np.ascontiguousarray(cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (720, 480)))
    else:
        frame = next(synthetic_frames(1, (480, 720), seed=2))
    x = frame[None]
    names = [o.name for o in g.model.graph.output]
    ref = dict(zip(names, g.full_session().run(None, {g.input_name: x})))
    k = g.num_segments
    got = unpack_outputs(_chain(g, [0, k // 3, 2 * k // 3, k], x), g.cuts[-1])
    n = int(ref["num_detections:0"][0])
    assert int(got["num_detections:0"][0]) == n
    np.testing.assert_array_equal(got["detection_classes:0"][0][:n], ref["detection_classes:0"][0][:n])
    for key in ("detection_boxes:0", "detection_scores:0"):
        np.testing.assert_allclose(got[key], ref[key], atol=1e-4, rtol=0)


def test_sort_nodes_counts_what_a_loop_body_reads():
    """A Loop whose body reads a tensor of the outer graph, placed before the node making that tensor (as ORT's
    int8 quantiser left the detector's resize Loop): the checker refuses it, sort_nodes moves the producer first
    (Loop bodies' outer reads counted as inputs), and the model then checks and runs (y = 2 * x)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["xf", "xf"], ["twice"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("twice", [1, 3])])
    nodes = [helper.make_node("Loop", ["trip", ""], ["scan"], body=body, name="loop"),
             helper.make_node("Cast", ["x"], ["xf"], to=FLOAT, name="cast"),
             helper.make_node("Squeeze", ["scan", "axis"], ["y"], name="squeeze")]
    inits = [helper.make_tensor("trip", TensorProto.INT64, [], [1]),
             helper.make_tensor("axis", TensorProto.INT64, [1], [0])]
    model = _model(nodes, [_vi("x", [1, 3], TensorProto.INT32)], [_vi("y", [1, 3])], inits)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    og.sort_nodes(model.graph)
    assert [n.name for n in model.graph.node] == ["cast", "loop", "squeeze"]
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([[1, 2, 3]], dtype=np.int32)
    assert np.array_equal(sess.run(None, {"x": x})[0], 2 * x.astype(np.float32))
