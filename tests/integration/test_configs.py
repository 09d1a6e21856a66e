"""Every shipped config under configs/ loads and validates."""
from __future__ import annotations

import glob
import os

import pytest

from .helpers import REPO

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yml")))


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_config_validates(path):
    from cnnvideo import config

    cfg = config.load(path, check_files=False)
    assert cfg.n_workers >= 1


def test_builtin_default_matches_configs_local():
    import yaml

    from cnnvideo.tools import launcher

    with open(os.path.join(REPO, "configs", "local.yml")) as fh:
        local = yaml.safe_load(fh)
    for key, value in launcher.DEFAULT_CONFIG.items():
        if key != "cluster":
            assert local[key] == value, key
