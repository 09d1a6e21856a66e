"""A worker's cached profile that is truncated, bit-flipped or garbage is detected, logged and rebuilt (never a
crash); the rebuilt file is used from then on."""
import logging
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from damage import DAMAGES  # noqa: E402

from cnnvideo import config  # noqa: E402
from cnnvideo.model.loading import load_graph  # noqa: E402
from cnnvideo.worker.role import costs_cache_path, profile_cached  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = config.from_dict({"model": "alexnet", "frame_size": [64, 96], "profile_iters": 1,
                            "cache_dir": str(tmp_path_factory.mktemp("cache"))}, check_files=False)
    return cfg, load_graph(cfg)


@DAMAGES
def test_damaged_profile_cache_is_rebuilt(setup, damage, caplog):
    cfg, graph = setup
    path = costs_cache_path(cfg, "testhost")
    first, _ = profile_cached(cfg, graph, "testhost")
    again, cached = profile_cached(cfg, graph, "testhost")
    assert cached and np.array_equal(again.seconds, first.seconds)
    damage(path)
    with caplog.at_level(logging.WARNING, logger="cnnvideo.worker.role"):
        rebuilt, cached = profile_cached(cfg, graph, "testhost")
    assert not cached and rebuilt.seconds.shape == first.seconds.shape
    assert any("is damaged" in r.getMessage() and path in r.getMessage() for r in caplog.records)
    reread, cached = profile_cached(cfg, graph, "testhost")
    assert cached and np.array_equal(reread.seconds, rebuilt.seconds)


def test_profile_cache_is_per_cap_and_per_worker(setup, caplog):
    """A profile cached under one CPU cap is not loaded under another, nor by the other worker of the same host
    (each measures its own); a load from the cache logs the file it came from."""
    cfg, graph = setup
    _, cached = profile_cached(cfg, graph, "capshost", worker=0, cap=(0.04, 0.1))
    assert not cached
    with caplog.at_level(logging.INFO, logger="cnnvideo.worker.role"):
        _, cached = profile_cached(cfg, graph, "capshost", worker=0, cap=(0.04, 0.1))
    path = costs_cache_path(cfg, "capshost", worker=0, cap=(0.04, 0.1))
    assert cached and any("loaded from %s" % path in r.getMessage() for r in caplog.records)
    assert not profile_cached(cfg, graph, "capshost", worker=0, cap=(0.01, 0.1))[1]  # another cap: measured anew
    assert not profile_cached(cfg, graph, "capshost", worker=1, cap=(0.04, 0.1))[1]  # the neighbour: its own
    assert profile_cached(cfg, graph, "capshost", worker=0, cap=(0.01, 0.1))[1]


def test_the_profile_path_of_an_onnx_worker_does_not_import_torch(tmp_path):
    """With OMP_NUM_THREADS set (the images, `cnnvideo local`), a worker's profile path names torch's threads
    without importing torch (1.4 s of CPU: 14 s of a joining worker's start under a 0.1 cap), and it is the path
    torch's own count gives once torch is imported."""
    import subprocess

    code = ("import sys; from cnnvideo import config; from cnnvideo.worker.role import costs_cache_path\n"
            "cfg = config.from_dict({'model': 'alexnet', 'cache_dir': %r}, check_files=False)\n"
            "before = costs_cache_path(cfg, 'h', 'onnxruntime-int8')\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "import torch\n"
            "assert costs_cache_path(cfg, 'h', 'onnxruntime-int8') == before, before\n"
            "print(before)" % str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, OMP_NUM_THREADS="1"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "-t1-" in proc.stdout
