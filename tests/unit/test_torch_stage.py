"""TorchStage: chained stages equal the whole model for every zoo model; input checks; profiling."""
import functools
import random
import zlib

import numpy as np
import pytest
import torch

from cnnvideo.model import graph as graph_mod
from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import GraphError, LayerGraph
from cnnvideo.model.zoo import MODEL_NAMES, Preprocess, build_model
from cnnvideo.plan.profiling import profile_segments

FRAME = (64, 64)  # small enough for speed, large enough for every zoo model (vgg16/alexnet need >= 32 + pools)


@functools.lru_cache(maxsize=1)
def _model_and_graph(name):
    """Build (model, graph) once per model; keep only the latest (vgg16 is large)."""
    model = build_model(name, seed=0)
    return model, LayerGraph.from_model(model, FRAME)


def _frame(seed=0, size=FRAME):
    """A random uint8 (1,H,W,3) frame."""
    return np.random.RandomState(seed).randint(0, 256, size=(1,) + tuple(size) + (3,)).astype(np.uint8)


def _reference(model, frame):
    """Preprocess + model run eagerly, unsplit."""
    with torch.no_grad():
        return model(Preprocess()(torch.from_numpy(frame))).numpy()


def _random_plan(num_segments, stages, seed):
    """0 = c_0 < c_1 < ... < c_W = K with W = stages, inner cuts drawn at random (stages=0: every cut)."""
    if stages == 0:
        return list(range(num_segments + 1))
    inner = sorted(random.Random(seed).sample(range(1, num_segments), stages - 1))
    return [0] + inner + [num_segments]


CHAIN_MODELS = ("alexnet", "vgg16", "mobilenet_v2")  # graphed without torch.fx too (torch<1.8, the 32-bit Pi)
NO_FX = pytest.mark.skipif(graph_mod._fx() is None, reason="graph model: needs torch.fx (torch>=1.8); "
                           "test_graph checks the GraphError")


def _marks(name):
    return ([pytest.mark.slow] if name == "vgg16" else []) + ([] if name in CHAIN_MODELS else [NO_FX])


CASES = [pytest.param(name, stages, marks=_marks(name)) for name in MODEL_NAMES for stages in (2, 3, 4, 0)]


@pytest.mark.parametrize("name,stages", CASES)
def test_chained_stages_reproduce_model(name, stages):
    """Split at seeded random cuts into 2/3/4 stages (0: one stage per segment), chained executors give the
    unsplit preprocess+model output with max abs error <= 1e-5 (in practice bit-identical)."""
    model, g = _model_and_graph(name)
    plan = _random_plan(g.num_segments, stages, seed=zlib.crc32(name.encode()) + stages)
    frame = _frame(seed=stages)
    x = frame
    for a, b in zip(plan[:-1], plan[1:]):
        x = TorchStage(g, a, b).run(x)
        assert x.shape == g.cuts[b].shape and x.dtype == np.dtype(g.cuts[b].dtype), (plan, b)
        assert x.flags.c_contiguous
    err = float(np.max(np.abs(x - _reference(model, frame))))
    assert err <= 1e-5, (plan, err)


def _tiny_graph():
    """Graph of a small conv chain at 8x8."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten()).eval()
    return model, LayerGraph.from_model(model, (8, 8))


def test_frame_input_checks():
    """A (H,W,3) frame gets a batch dim; a wrong shape or dtype raises ValueError naming expected and got."""
    _, g = _tiny_graph()
    ex = TorchStage(g, 0, g.num_segments)
    frame = _frame(size=(8, 8))
    np.testing.assert_array_equal(ex.run(frame[0]), ex.run(frame))
    with pytest.raises(ValueError) as err:
        ex.run(_frame(size=(8, 9)))
    assert "(1, 8, 8, 3)" in str(err.value) and "(1, 8, 9, 3)" in str(err.value)
    with pytest.raises(ValueError) as err:
        ex.run(frame.astype(np.float32))
    assert "uint8" in str(err.value) and "float32" in str(err.value)
    with pytest.raises(ValueError):
        TorchStage(g, 1, 2).run(frame)


def test_float_stage_and_readonly_input():
    """A mid stage takes float32 at its cut, accepts a read-only array and leaves it unmodified."""
    model, g = _tiny_graph()
    x = np.random.RandomState(1).randn(*g.cuts[1].shape).astype(np.float32)
    keep = x.copy()
    x.setflags(write=False)
    out = TorchStage(g, "preprocess", g.num_segments).run(x)
    with torch.no_grad():
        ref = model(torch.from_numpy(keep)).numpy()
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(x, keep)
    assert out.dtype == np.float32 and not np.may_share_memory(out, x)


def test_empty_stage_returns_input():
    """start == end forwards the input unchanged."""
    _, g = _tiny_graph()
    x = np.zeros(g.cuts[2].shape, dtype=np.float32)
    assert TorchStage(g, 2, 2).run(x) is x


def test_unknown_cut_raises():
    """An unknown cut name raises GraphError naming it."""
    _, g = _tiny_graph()
    with pytest.raises(GraphError, match="bogus"):
        TorchStage(g, 0, "bogus")


def test_profile_segments_shape_and_values():
    """profile_segments returns K positive finite seconds, one per segment."""
    _, g = _tiny_graph()
    times = profile_segments(g, iters=2)
    assert times.shape == (g.num_segments,)
    assert np.all(np.isfinite(times)) and np.all(times > 0)
    with pytest.raises(ValueError):
        profile_segments(g, iters=0)
