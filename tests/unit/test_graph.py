"""Layer graph: exact layers and cuts of a hand-made model, block-boundary cuts, stage modules, chain vs fx."""
import re

import numpy as np
import pytest
import torch
from torch import nn

from cnnvideo.model import graph as graph_mod
from cnnvideo.model.graph import Cut, GraphError, LayerGraph
from cnnvideo.model.zoo import Preprocess, build_model

HAS_FX = graph_mod._fx() is not None
# Tiny and Block are not plain chains: without torch.fx (torch<1.8, the 32-bit Pi image) they cannot be graphed
needs_fx = pytest.mark.skipif(not HAS_FX, reason="needs torch.fx (torch>=1.8); this torch is %s" % torch.__version__)


class Tiny(nn.Module):
    """conv -> relu -> two branches -> add -> relu -> mean -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.left = nn.Conv2d(4, 4, 1)
        self.right = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.relu(self.conv(x))
        y = self.left(x) + self.right(x)
        y = torch.relu(y)
        return self.head(y.mean((2, 3)))


class Block(nn.Module):
    """Residual block: relu(bn(conv(x)) + x), with a single-tensor point between add and relu."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.bn(self.conv(x))
        out += x
        return self.relu(out)


def _frame(h, w, seed=0):
    """A random uint8 (1,H,W,3) frame."""
    return np.random.RandomState(seed).randint(0, 256, size=(1, h, w, 3)).astype(np.uint8)


def _reference(model, frame):
    """Preprocess + model run eagerly on a numpy frame."""
    with torch.no_grad():
        return model(Preprocess()(torch.from_numpy(frame))).numpy()


def _run_stages(g, plan, frame):
    """Run stage modules for consecutive cut pairs of `plan`."""
    x = torch.from_numpy(frame)
    with torch.no_grad():
        for a, b in zip(plan[:-1], plan[1:]):
            x = g.stage_module(a, b)(x)
    return x.numpy()


@needs_fx
def test_tiny_model_exact_layers_and_cuts():
    """Layers are in topological order with fx-stable names and producer inputs; cuts are the 1-live points."""
    g = LayerGraph.from_model(Tiny().eval(), (8, 8), method="fx")
    got = [(layer.index, layer.name, layer.kind, layer.inputs) for layer in g.layers]
    assert got == [
        (0, "preprocess", "Preprocess", ()),
        (1, "conv", "Conv2d", (0,)),
        (2, "relu", "ReLU", (1,)),
        (3, "left", "Conv2d", (2,)),
        (4, "right", "Conv2d", (2,)),
        (5, "add", "add", (3, 4)),
        (6, "relu_1", "relu", (5,)),
        (7, "mean", "mean", (6,)),
        (8, "head", "Linear", (7,)),
    ]
    assert g.cuts == [
        Cut(0, -1, "input", (1, 8, 8, 3), "uint8"),
        Cut(1, 0, "preprocess", (1, 3, 8, 8), "float32"),
        Cut(2, 1, "conv", (1, 4, 8, 8), "float32"),
        Cut(3, 2, "relu", (1, 4, 8, 8), "float32"),
        Cut(4, 5, "add", (1, 4, 8, 8), "float32"),
        Cut(5, 6, "relu_1", (1, 4, 8, 8), "float32"),
        Cut(6, 7, "mean", (1, 4), "float32"),
        Cut(7, 8, "head", (1, 2), "float32"),
    ]
    assert g.cuts[0].bytes_dense == 192 and g.cuts[1].numel == 192 and g.cuts[1].bytes_dense == 768
    assert g.num_segments == 7 and g.frame_size == (8, 8)


@needs_fx
def test_segments_partition_layers():
    """segment_layers over all segments lists every layer exactly once, in order."""
    g = LayerGraph.from_model(Tiny().eval(), (8, 8))
    assert g.segment_layers(0) == [0] and g.segment_layers(3) == [3, 4, 5]
    flat = [i for k in range(g.num_segments) for i in g.segment_layers(k)]
    assert flat == list(range(len(g.layers)))
    with pytest.raises(GraphError):
        g.segment_layers(g.num_segments)


@needs_fx
def test_tiny_stages_reproduce_model():
    """Every split of the tiny model at two cuts gives bit-identical output to the whole model."""
    torch.manual_seed(0)
    model = Tiny().eval()
    frame = _frame(8, 8)
    g = LayerGraph.from_model(model, (8, 8))
    ref = _reference(model, frame)
    K = g.num_segments
    for a in range(K + 1):
        for b in range(a, K + 1):
            np.testing.assert_array_equal(_run_stages(g, [0, a, b, K], frame), ref)


@needs_fx
def test_no_cut_inside_residual_submodule():
    """A sub-module with a fork/merge is cut only at its boundaries (not between its add and relu)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 1), Block(), Block()).eval()
    g = LayerGraph.from_model(model, (6, 6))
    assert [c.name for c in g.cuts] == ["input", "preprocess", "0", "1.relu", "2.relu"]
    assert [layer.kind for layer in g.layers if layer.name.startswith("1.")] == ["Conv2d", "BatchNorm2d", "add", "ReLU"]


@needs_fx
def test_resnet50_cuts_only_at_bottleneck_boundaries():
    """resnet50: each cut inside layerN.M is that bottleneck's last layer; no cut is inside a bottleneck."""
    g = LayerGraph.from_model(build_model("resnet50"), (64, 64))
    for cut in g.cuts[1:]:
        parts = cut.name.split(".")
        if parts[0].startswith("layer"):
            block = ".".join(parts[:2]) + "."
            in_block = [layer.index for layer in g.layers if layer.name.startswith(block)]
            assert cut.layer == max(in_block), cut.name
    assert len([c for c in g.cuts if c.name.startswith("layer")]) == 16  # 3 + 4 + 6 + 3 bottlenecks
    assert g.cuts[-1].shape == (1, 1000)


@needs_fx
def test_unknown_cut_and_bad_stage_raise():
    """Unknown cut names/indices raise GraphError naming them; a reversed stage raises too."""
    g = LayerGraph.from_model(Tiny().eval(), (8, 8))
    assert g.cut_index("relu_1") == 5 and g.cut_index(3) == 3
    with pytest.raises(GraphError, match="nope"):
        g.cut_index("nope")
    with pytest.raises(GraphError, match="99"):
        g.stage_module(0, 99)
    with pytest.raises(GraphError):
        g.stage_module(3, 2)
    with pytest.raises(GraphError, match="method"):
        LayerGraph.from_model(Tiny(), (8, 8), method="magic")


@needs_fx
def test_empty_stage_is_identity():
    """stage_module(k, k) returns its input."""
    g = LayerGraph.from_model(Tiny().eval(), (8, 8))
    x = torch.ones(1, 4, 8, 8)
    assert g.stage_module(3, 3)(x) is x


@needs_fx
def test_chain_equals_fx_for_alexnet():
    """For alexnet the module-tree walk gives the same layers, cuts and stage outputs as torch.fx."""
    model = build_model("alexnet")
    fx_g = LayerGraph.from_model(model, (64, 64), method="fx")
    ch_g = LayerGraph.from_model(model, (64, 64), method="chain")
    assert ch_g.method == "chain" and fx_g.method == "fx"
    assert fx_g.layers == ch_g.layers
    assert fx_g.cuts == ch_g.cuts
    frame = _frame(64, 64, seed=1)
    mid = fx_g.cut_index("avgpool")
    plan = [0, 5, mid, fx_g.num_segments]
    out = _run_stages(ch_g, plan, frame)
    np.testing.assert_array_equal(out, _run_stages(fx_g, plan, frame))
    np.testing.assert_allclose(out, _reference(model, frame), rtol=0, atol=1e-5)


def test_chain_mobilenet_v2_matches_model():
    """The chain walk also handles mobilenet_v2 (blocks as leaves), reproducing the model output."""
    model = build_model("mobilenet_v2")
    g = LayerGraph.from_model(model, (64, 64), method="chain")
    frame = _frame(64, 64, seed=2)
    out = _run_stages(g, [0, 7, g.num_segments - 3, g.num_segments], frame)
    np.testing.assert_allclose(out, _reference(model, frame), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet50", "googlenet"])
def test_graph_models_ask_for_fx_in_chain_mode(name):
    """resnet50/googlenet are not chains: the chain walk (all there is without torch.fx) says fx is needed."""
    with pytest.raises(GraphError, match=r"need torch\.fx \(torch>=1\.8\)"):
        LayerGraph.from_model(build_model(name), (64, 64), method="chain")


@pytest.mark.skipif(HAS_FX, reason="this torch has torch.fx")
@pytest.mark.parametrize("name", ["resnet50", "googlenet"])
def test_graph_models_fail_clearly_without_fx(name):
    """On torch<1.8 (the Pi's 1.7) 'auto' falls back to the chain walk: a clear GraphError asking for fx."""
    clear = r"need torch\.fx \(torch>=1\.8\), this torch is " + re.escape(torch.__version__)
    with pytest.raises(GraphError, match=clear):
        LayerGraph.from_model(build_model(name), (64, 64))
    with pytest.raises(GraphError, match=r"needs torch\.fx \(torch>=1\.8\)"):
        LayerGraph.from_model(build_model(name), (64, 64), method="fx")


def test_auto_falls_back_to_chain_without_fx(monkeypatch):
    """Without torch.fx, 'auto' uses the chain walk; a non-chain model raises GraphError asking for fx."""
    monkeypatch.setattr(graph_mod, "_fx", lambda: None)
    g = LayerGraph.from_model(nn.Sequential(nn.Conv2d(3, 2, 1), nn.ReLU()), (4, 4))
    assert g.method == "chain" and [c.name for c in g.cuts] == ["input", "preprocess", "0", "1"]
    with pytest.raises(GraphError, match="fx"):
        LayerGraph.from_model(Tiny(), (8, 8))
    with pytest.raises(GraphError, match="fx"):
        LayerGraph.from_model(Tiny(), (8, 8), method="fx")


def test_graph_switches_off_inplace_ops():
    """Module inplace flags and `x += y` are made out-of-place, so a stage never overwrites its input."""
    model = nn.Sequential(nn.Conv2d(3, 4, 1), Block(), nn.ReLU(inplace=True)).eval()
    g = LayerGraph.from_model(model, (6, 6))
    assert not model[2].inplace
    start = g.cut_index("0")
    x = torch.randn(g.cuts[start].shape)
    keep = x.clone()
    with torch.no_grad():
        g.stage_module(start, g.num_segments)(x)
    assert torch.equal(x, keep)
