"""A damaged predictor cache (truncated, one flipped byte, garbage) is refused by Predictors.load with a
ValueError naming the file, and the trainer logs it and fits again instead of crashing."""
import logging
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from damage import DAMAGES  # noqa: E402

from cnnvideo import config  # noqa: E402
from cnnvideo.plan.predict import Predictors  # noqa: E402


@pytest.fixture(scope="module")
def trainer_cfg(tmp_path_factory, synthetic_video):
    return config.from_dict({"model": "alexnet", "frame_size": [64, 96], "video": synthetic_video,
                             "trainer": {"frames": 4}, "cache_dir": str(tmp_path_factory.mktemp("cache"))})


@DAMAGES
def test_damaged_predictor_cache_is_refitted(trainer_cfg, damage, caplog):
    from cnnvideo.trainer.role import TrainerRole

    first = TrainerRole(trainer_cfg).fit()
    cached = TrainerRole(trainer_cfg)
    cached.fit()
    assert cached.cached
    paths = [os.path.join(d, f) for d, _, fs in os.walk(trainer_cfg.cache_dir) for f in fs if f.endswith(".npz")
             and "predictors" in d]
    assert len(paths) == 1
    damage(paths[0])
    with pytest.raises(ValueError, match="is damaged"):
        Predictors.load(paths[0])
    role = TrainerRole(trainer_cfg)
    with caplog.at_level(logging.WARNING):
        again = role.fit()
    assert not role.cached and again.n_cuts == first.n_cuts
    assert any(paths[0] in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    Predictors.load(paths[0])  # rewritten whole
