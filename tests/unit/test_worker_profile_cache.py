"""A worker's cached profile that is truncated, bit-flipped or garbage is detected, logged and rebuilt (never a
crash); the rebuilt file is used from then on."""
import logging
import os

import numpy as np
import pytest

from cnnvideo import config
from cnnvideo.pipeline import load_graph
from cnnvideo.worker.role import costs_cache_path, profile_cached


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = config.from_dict({"model": "alexnet", "frame_size": [64, 96], "profile_iters": 1,
                            "cache_dir": str(tmp_path_factory.mktemp("cache"))}, check_files=False)
    return cfg, load_graph(cfg)


def _truncate(path):
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def _flip(path):
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) // 3)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))


def _garbage(path):
    with open(path, "wb") as fh:
        fh.write(np.random.default_rng(0).bytes(300))


@pytest.mark.parametrize("damage", [_truncate, _flip, _garbage], ids=["truncated", "bit-flip", "garbage"])
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
