"""Every shipped config under configs/ loads and validates."""
from __future__ import annotations

import glob
import os

import pytest

from .helpers import REPO

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yml")))


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_config_validates(path, monkeypatch):
    """Every config in configs/ loads; a pool of joining workers (no `cluster.workers`) with the join token its
    deployment gives it (compose's JOIN_TOKEN, the Pis' PI_JOIN_TOKEN), and without it one line names the key."""
    from cnnvideo import config
    from cnnvideo.errors import ConfigError

    monkeypatch.delenv("CNNVIDEO_JOIN_TOKEN", raising=False)
    try:
        cfg = config.load(path, check_files=False)
    except ConfigError as exc:
        assert "config key 'cluster.join_token'" in str(exc)
        monkeypatch.setenv("CNNVIDEO_JOIN_TOKEN", "a-token-of-16-characters")
        cfg = config.load(path, check_files=False)
        assert cfg.cluster.join and cfg.n_workers == 0 and cfg.cluster.min_workers >= 1
        return
    assert cfg.n_workers >= 1


def test_configs_local_is_the_demo_file():
    """configs/local.yml is the package's demo file (a symlink to it, or the same bytes where a checkout made the
    link a copy)."""
    from cnnvideo import config

    local = os.path.join(REPO, "configs", "local.yml")
    if os.path.islink(local):
        assert os.path.realpath(local) == os.path.realpath(config.DEMO_PATH)
    with open(local, "rb") as a, open(config.DEMO_PATH, "rb") as b:
        assert a.read() == b.read()


def test_local_without_c_runs_what_configs_local_says(tmp_path, monkeypatch):
    """`cnnvideo local` without -c resolves (renamed keys, model fallback, defaults) to the same Config as loading
    configs/local.yml, with and without --frames."""
    from argparse import Namespace

    from cnnvideo import config
    from cnnvideo.tools import launcher

    monkeypatch.chdir(tmp_path)  # the demo's relative video path, present as a file here
    os.makedirs("media")
    open(os.path.join("media", "vtest.avi"), "w").close()
    local = os.path.join(REPO, "configs", "local.yml")
    assert launcher.user_config(Namespace(config=None, frames=None)) == config.load(local)
    assert launcher.user_config(Namespace(config=None, frames=7)) == config.load(local, {"frames": 7})
    assert launcher.user_config(Namespace(config=local, frames=None)) == config.load(local)


def test_plan_without_c_uses_the_demo():
    """`cnnvideo plan` without -c plans the demo config (video check relaxed: synthetic frames if it is missing)."""
    from argparse import Namespace

    from cnnvideo import config
    from cnnvideo.tools import planner

    assert planner._load(Namespace(config=None)) == config.load(config.DEMO_PATH, check_files=False)
