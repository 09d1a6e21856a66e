"""Option validation (cnnvideo.config_validation) through config.from_dict: scheduler options, `cpus` role names and the
model `fallback` rule; each bad value is one ConfigError line naming the key."""
import pytest

from cnnvideo import config
from cnnvideo.config import ConfigError


def test_scheduler_options_each_scheduler_takes_pass():
    """The options schedulers.OPTIONS lists for a scheduler are accepted (the one list config checks against)."""
    from cnnvideo.plan.schedulers import OPTIONS

    valid = {"cuts": [0, 5, 9], "groups": [[0], [1]]}  # fixed's plan: one more cut than the default 2 workers
    for name, keys in OPTIONS.items():
        options = {k: valid.get(k, 1) for k in keys}
        cfg = config.from_dict({"scheduler": name, "scheduler_options": options}, check_files=False)
        assert set(cfg.scheduler_options) == set(keys)


def test_cpus_canonical_roles_and_old_spellings(caplog):
    """cpus keys are master, trainer, worker<i>, workers; w<i> and worker load with a warning naming the canonical
    key; a worker's share is its own key, else `workers`."""
    cfg = config.from_dict({"cpus": {"master": 1.0, "worker1": 0.3, "workers": 0.5}}, check_files=False)
    assert [cfg.cpu_share(r) for r in ("master", "trainer", "worker0", "w1")] == [1.0, None, 0.5, 0.3]
    with caplog.at_level("WARNING", logger="cnnvideo.config"):
        cfg = config.from_dict({"cpus": {"w0": 0.1, "worker": 0.2}}, check_files=False)
    assert cfg.cpus == {"worker0": 0.1, "workers": 0.2}
    warned = " | ".join(r.getMessage() for r in caplog.records)
    assert "'cpus.worker0'" in warned and "'cpus.workers'" in warned, warned


@pytest.mark.parametrize("cpus, key", [
    ({"wrker0": 0.5}, "cpus.wrker0"),
    ({"worker2": 0.5}, "cpus.worker2"),  # the default chain has 2 workers
    ({"w0": 0.5, "worker0": 0.4}, "cpus.worker0"),  # one role named twice
    ({"gpu": 1}, "cpus.gpu"),
])
def test_unknown_cpus_keys_are_one_line_errors_naming_the_key(cpus, key):
    with pytest.raises(ConfigError) as err:
        config.from_dict({"cpus": cpus}, check_files=False)
    assert "'%s'" % key in str(err.value) and "\n" not in str(err.value)


def test_fallback_runs_the_first_model_that_can_run_and_says_so(monkeypatch, caplog):
    """`fallback` entries are tried in order when model/weights cannot run here; one warning line says which ran
    and why; the list is consumed (the config that runs names one model)."""
    from cnnvideo.model import zoo

    data = {"model": "mobilenet_v2", "weights": "imagenet",
            "fallback": [{"model": "person-detector-not-in-this-build"}, {"model": "alexnet", "weights": "random"}]}
    monkeypatch.setattr(zoo, "imagenet_available", lambda name="": False)
    with caplog.at_level("WARNING", logger="cnnvideo.config"):
        cfg = config.from_dict(data, check_files=False)
    assert (cfg.model, cfg.weights, cfg.fallback) == ("alexnet", "random", [])
    lines = [r.getMessage() for r in caplog.records if r.name == "cnnvideo.config"]
    assert len(lines) == 1 and "mobilenet_v2" in lines[0] and "fallback alexnet" in lines[0], lines
    caplog.clear()
    monkeypatch.setattr(zoo, "imagenet_available", lambda name="": True)
    with caplog.at_level("WARNING", logger="cnnvideo.config"):
        cfg = config.from_dict(data, check_files=False)
    assert (cfg.model, cfg.weights, cfg.fallback) == ("mobilenet_v2", "imagenet", []) and not caplog.records
    with pytest.raises(ConfigError, match=r"'fallback\[0\]\.model'"):
        config.from_dict({"fallback": [{"weights": "random"}]}, check_files=False)


def test_fixed_pool_plan_errors_name_the_key():
    """scheduler fixed with `groups`: a worker named twice, a stage with no worker, a worker outside the cluster or
    cuts that are not one per stage boundary each stop with one line naming the key; a valid pool plan loads."""
    def load(groups, cuts=None):
        opts = {"groups": groups} if cuts is None else {"groups": groups, "cuts": cuts}
        return config.from_dict({"scheduler": "fixed", "scheduler_options": opts, "bandwidth": [3],
                                 "cluster": {"workers": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}},
                                check_files=False)

    assert load([[0, 1, 2]]).scheduler_options["groups"] == [[0, 1, 2]]
    assert load([[0, 1], [2]], [0, 4, 9]).scheduler_options["cuts"] == [0, 4, 9]
    with pytest.raises(ConfigError, match="'scheduler_options.groups' names worker 1 twice"):
        load([[0, 1], [1, 2]], [0, 4, 9])
    with pytest.raises(ConfigError, match="'scheduler_options.groups' leaves stage 1 with no worker"):
        load([[0, 1], []], [0, 4, 9])
    with pytest.raises(ConfigError, match="'scheduler_options.groups' names worker 5, not one of the 3"):
        load([[0, 5]])
    with pytest.raises(ConfigError, match="'scheduler_options.cuts' must list 3 increasing"):
        load([[0, 1], [2]], [0, 9])
