"""`engine: auto`: the config accepts it; every engine the host has gets a factory at the configured precision;
each stage runs on the engine with the lowest profiled time over its segments, and says so with the times."""
import numpy as np
import pytest

from cnnvideo import config
from cnnvideo.model import engines
from cnnvideo.model.engines.auto import AutoStages, auto_factories
from cnnvideo.model.graph import LayerGraph
from cnnvideo.plan.profiling import WorkerProfile, fastest_profile

ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")


def _graph():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3),
                                torch.nn.ReLU(), torch.nn.Flatten()).eval()
    return LayerGraph.from_model(model, (32, 48))


def test_config_accepts_auto_and_names_the_choices():
    """`engine: auto` validates; an unknown engine is one line naming the three choices."""
    assert config.from_dict({"engine": "auto"}, check_files=False).engine == "auto"
    with pytest.raises(config.ConfigError, match=r"config key 'engine' must be one of torch\|onnxruntime\|auto"):
        config.from_dict({"engine": "tvm"}, check_files=False)


@ORT
def test_each_stage_runs_on_its_fastest_profiled_engine(tmp_path):
    """With made-up profiles where ORT wins the first segments and torch the last ones, stage 0..2 is built on
    onnxruntime and 2..K on torch; the reason names both times, fastest first; equal times go to torch."""
    g = _graph()
    k = g.num_segments
    cfg = config.from_dict({"model": "alexnet", "engine": "auto", "cache_dir": str(tmp_path)}, check_files=False)
    factories = auto_factories(cfg, g)
    assert list(factories) == ["torch-fp32", "onnxruntime-fp32"]
    auto = AutoStages(factories)
    ort = np.full(k, 1.0)
    ort[:2] = 0.1
    torch_s = np.full(k, 0.5)
    auto.set_costs({"torch-fp32": torch_s, "onnxruntime-fp32": ort})
    label, why = auto.choose(0, 2)
    assert label == "onnxruntime-fp32" and why == ("auto: stage 0..2 on onnxruntime-fp32 (profiled onnxruntime-fp32 "
                                                   "0.2000 s, torch-fp32 1.0000 s)")
    assert auto.stage(0, 2).engine == "onnxruntime" and auto.stage(2, k).engine == "torch"
    assert auto.engines_used() == ["onnxruntime-fp32", "torch-fp32"]
    auto.set_costs({"torch-fp32": ort, "onnxruntime-fp32": ort})
    assert auto.choose(0, 2)[0] == "torch-fp32"
    with pytest.raises(ValueError, match="no factory for profiled engine onnxruntime-int8"):
        auto.set_costs({"onnxruntime-int8": ort})


@ORT
def test_int8_compute_is_a_candidate_only_with_precision_int8(tmp_path):
    """precision fp32: torch and ORT fp32 only; precision int8: both engines at int8 (the hop format is the
    config's whichever engine computes)."""
    g = _graph()
    cfg = config.from_dict({"model": "alexnet", "engine": "auto", "precision": "int8", "cache_dir": str(tmp_path),
                            "trainer": {"video": "x.avi"}}, check_files=False)
    assert list(auto_factories(cfg, g)) == ["torch-int8", "onnxruntime-int8"]


def test_fastest_profile_takes_each_segments_fastest_engine():
    """The planner's profile under auto: the per-segment minimum over engines, the first engine's codec times."""
    a = WorkerProfile(np.array([1.0, 2.0, 3.0]), np.ones(4), np.ones(4) * 2, 1.5, reference=6.0)
    b = WorkerProfile(np.array([2.0, 1.0, 4.0]), np.zeros(4), np.zeros(4), 1.0, reference=7.0, reference_bounds=(0, 3))
    out = fastest_profile({"torch-fp32": a, "onnxruntime-fp32": b})
    np.testing.assert_array_equal(out.seconds, [1.0, 1.0, 3.0])
    np.testing.assert_array_equal(out.encode, a.encode)
    assert out.reference == 6.0 and out.reference_bounds == () and out.wall_per_cpu == 1.5
