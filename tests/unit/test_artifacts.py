"""cnnvideo.artifacts owns the cache file names: ONNX stage files and int8 calibrations are named there, and the
ONNX engine really writes its stage where artifacts says (no second copy of the rule in the engine)."""
import os

import pytest

from cnnvideo import artifacts, config
from cnnvideo.model import engines
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model

ORT = pytest.mark.skipif(not engines.ort_available()[0], reason="onnxruntime is not installed")


def test_onnx_stage_path_names_cuts_precision_and_key_digest(tmp_path):
    """Same inputs, same name; each of cuts, precision and key changes it; the name sits in the given folder."""
    folder = artifacts.onnx_dir(str(tmp_path))
    assert folder == os.path.join(str(tmp_path), "onnx")
    a = artifacts.onnx_stage_path(folder, 0, 5, "fp32", "model x | cuts 0..5")
    assert a == artifacts.onnx_stage_path(folder, 0, 5, "fp32", "model x | cuts 0..5")
    assert os.path.dirname(a) == folder and os.path.basename(a).startswith("0-5-fp32-") and a.endswith(".onnx")
    others = {artifacts.onnx_stage_path(folder, 0, 6, "fp32", "model x | cuts 0..5"),
              artifacts.onnx_stage_path(folder, 0, 5, "int8", "model x | cuts 0..5"),
              artifacts.onnx_stage_path(folder, 0, 5, "fp32", "model y | cuts 0..5")}
    assert len(others) == 3 and a not in others
    assert artifacts.onnx_work_dir(folder) == os.path.join(folder, "tmp")


def test_calibration_path_per_model_and_frame_size(tmp_path):
    """calibration/<model>-<H>x<W> under the cache root; a different frame size or model is another file."""
    p = artifacts.calibration_path(str(tmp_path), "alexnet", (64, 96))
    assert p == os.path.join(str(tmp_path), "calibration", "alexnet-64x96")
    assert p != artifacts.calibration_path(str(tmp_path), "alexnet", (96, 64))
    assert p != artifacts.calibration_path(str(tmp_path), "vgg16", (64, 96))
    assert artifacts.calibration_file(p, "0123abcd") == p + "-0123abcd.npz"  # one file per model key and frames


@ORT
def test_ort_engine_writes_its_stage_file_at_the_artifacts_path(tmp_path):
    """factory_for(cfg) puts the ONNX cache under artifacts.onnx_dir(cfg.cache_dir), and the built stage's file is
    exactly artifacts.onnx_stage_path of its stage key."""
    from cnnvideo.model.engines.ort_engine import stage_key

    cfg = config.from_dict({"model": "alexnet", "frame_size": [64, 96], "engine": "onnxruntime",
                            "cache_dir": str(tmp_path)}, check_files=False)
    graph = LayerGraph.from_model(build_model("alexnet", seed=0), (64, 96))
    factory = engines.factory_for(cfg, graph)
    assert factory.cache_dir == artifacts.onnx_dir(str(tmp_path))
    st = factory.stage(0, 3)
    want = artifacts.onnx_stage_path(factory.cache_dir, 0, 3, "fp32", stage_key(factory, 0, 3, "fp32"))
    assert st.engine == "onnxruntime" and st.path == want and os.path.isfile(want)
    assert os.listdir(factory.cache_dir) == [os.path.basename(want)]  # no tmp file left behind


def test_profile_path_carries_cap_worker_threads_and_engine(tmp_path):
    """A worker's profile file differs for every CPU cap (CFS quota/period), worker id, torch or engine thread
    count and engine-precision; the same inputs give the same file, and equal caps written differently
    (20/50 ms and 40/100 ms) share it."""
    cfg = config.from_dict({"model": "alexnet", "frame_size": [64, 96], "cache_dir": str(tmp_path)},
                           check_files=False)
    base = dict(host="h", threads=2, engine="torch-fp32", worker=0, cap=(0.04, 0.1), engine_threads=1)
    a = artifacts.profile_path(cfg, **base)
    assert a == artifacts.profile_path(cfg, **base)
    assert a == artifacts.profile_path(cfg, **dict(base, cap=(0.02, 0.05)))
    assert os.path.dirname(a) == os.path.join(str(tmp_path), "costs") and "-c0.4-" in os.path.basename(a)
    changes = [dict(cap=(0.01, 0.1)), dict(cap=(0.0, 0.0)), dict(worker=1), dict(threads=1), dict(engine_threads=2),
               dict(engine="onnxruntime-int8"), dict(engine="onnxruntime-fp32"), dict(host="g")]
    others = {artifacts.profile_path(cfg, **dict(base, **c)) for c in changes}
    assert len(others) == len(changes) and a not in others
    assert "-cmax-" in artifacts.profile_path(cfg, **dict(base, cap=(0.0, 0.0)))


def test_atomic_tmp_is_unique_per_call_next_to_the_file():
    """Two writers of the same file (workers in containers with the same PID sharing the cache volume) get different
    temporary names, in the file's folder and with its extension (np.savez and ONNX loaders go by it)."""
    from cnnvideo.artifacts import atomic_tmp

    a, b = atomic_tmp("/c/onnx/0-40-fp32-x.onnx"), atomic_tmp("/c/onnx/0-40-fp32-x.onnx")
    assert a != b
    assert all(p.startswith("/c/onnx/0-40-fp32-x.") and p.endswith(".tmp.onnx") for p in (a, b))
