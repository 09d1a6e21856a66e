"""Config loading: defaults are valid; every bad key or value fails with a message naming the key."""
import pytest

from cnnvideo import config
from cnnvideo.config import ConfigError


def _write(tmp_path, text):
    path = tmp_path / "c.yml"
    path.write_text(text)
    return str(path)


def test_defaults_are_valid_without_files():
    """The built-in defaults pass validation (file checks off: the video may not be fetched)."""
    cfg = config.from_dict({}, check_files=False)
    assert cfg.model == "alexnet" and cfg.n_workers == 2 and cfg.mode == "delta"


def test_yaml_round_trip(tmp_path, synthetic_video):
    """A dumped config loads back equal."""
    cfg = config.from_dict({"video": synthetic_video, "frame_size": [96, 128], "bandwidth": [1.5]})
    path = str(tmp_path / "dump.yml")
    config.dump(cfg, path)
    assert config.load(path) == cfg
    assert cfg.bandwidth_bytes() == [1.5e6, 1.5e6]


@pytest.mark.parametrize(
    "data, key",
    [
        ({"modle": "alexnet"}, "modle"),
        ({"delta": {"treshold": 1}}, "delta.treshold"),
        ({"frames": "ten"}, "frames"),
        ({"check": "yes"}, "check"),
        ({"frame_size": [0, 10]}, "frame_size"),
        ({"frame_size": [10]}, "frame_size"),
        ({"cluster": {"workers": []}}, "cluster.workers"),
        ({"cluster": {"workers": ["nohost"]}}, "cluster.workers[0]"),
        ({"mode": "diff"}, "mode"),
        ({"scheduler": "fastest"}, "scheduler"),
        ({"model": "lenet9000"}, "model"),
        ({"bandwidth": [1, 2, 3]}, "bandwidth"),
        ({"in_flight": -1}, "in_flight"),
        ({"cost_model": {"net_cpu_us_per_message": -1}}, "cost_model.net_cpu_us_per_message"),
        ({"cost_model": {"net_cpu_ns_per_byte": -0.5}}, "cost_model.net_cpu_ns_per_byte"),
        ({"net_cpu_ns_per_byte": -0.5}, "cost_model.net_cpu_ns_per_byte"),  # an old name: checked under the new
        ({"limits": {"max_message_mib": 0}}, "limits.max_message_mib"),
        ({"reliability": {"peer_wait_s": 0}}, "reliability.peer_wait_s"),
        ({"source": {"reopen_s": 0}}, "source.reopen_s"),
        ({"cpus": {"worker0": 0}}, "cpus.worker0"),
        ({"delta": {"input_threshold": 300}}, "delta.input_threshold"),
        ({"delta": {"input_threshold": -1}}, "delta.input_threshold"),
        ({"delta": {"skip_unchanged": "yes"}}, "delta.skip_unchanged"),
        ({"scheduler": "lbs", "scheduler_options": {"zz": 1}}, "scheduler_options.zz"),
        ({"scheduler": "das", "scheduler_options": {"prev": 1}}, "scheduler_options.prev"),  # run-time state only
        ({"scheduler": "optimal", "scheduler_options": {"alpha": 0.5}}, "scheduler_options.alpha"),  # adaptive's
    ],
)
def test_bad_values_name_the_key(data, key):
    """Each bad key/value raises ConfigError whose message names the offending key."""
    with pytest.raises(ConfigError) as err:
        config.from_dict(data, check_files=False)
    assert "'%s'" % key in str(err.value)


def test_missing_video_named(tmp_path):
    """A video path that does not exist is reported under the 'video' key."""
    path = _write(tmp_path, "video: /nonexistent/clip.avi\n")
    with pytest.raises(ConfigError, match="'video'"):
        config.load(path)


def test_unreadable_or_invalid_yaml(tmp_path):
    """A missing file or broken YAML is one clear ConfigError."""
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(str(tmp_path / "nope.yml"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(_write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(ConfigError, match="mapping"):
        config.load(_write(tmp_path, "- a list\n"))


def test_scheduler_options_each_scheduler_takes_pass():
    """The options schedulers.OPTIONS lists for a scheduler are accepted (the one list config checks against)."""
    from cnnvideo.plan.schedulers import OPTIONS

    for name, keys in OPTIONS.items():
        cfg = config.from_dict({"scheduler": name, "scheduler_options": {k: 1 for k in keys}}, check_files=False)
        assert set(cfg.scheduler_options) == set(keys)


def _nest(values):
    """{"a.b": 1, "c": 2} -> {"a": {"b": 1}, "c": 2}"""
    data = {}
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


@pytest.mark.parametrize("old, new", sorted(config.RENAMED.items()))
def test_renamed_keys_load_with_a_warning_naming_the_new_key(old, new, caplog):
    """Every old key still loads, as the new one (same value), with one warning that names the new key; the old
    and the new key at once is an error naming both."""
    with caplog.at_level("WARNING", logger="cnnvideo.config"):
        cfg = config.from_dict(_nest({old: 7.5}), check_files=False)
    value = cfg
    for part in new.split("."):
        value = getattr(value, part)
    assert value == 7.5
    warned = [r.getMessage() for r in caplog.records if r.name == "cnnvideo.config"]
    assert len(warned) == 1 and "'%s'" % new in warned[0] and "'%s'" % old in warned[0], warned
    with pytest.raises(ConfigError) as err:
        config.from_dict(_nest({old: 1.0, new: 2.0}), check_files=False)
    assert "'%s'" % old in str(err.value) and "'%s'" % new in str(err.value)


def test_renamed_keys_are_dumped_under_the_new_names(tmp_path):
    """A config loaded from old names dumps (and so reaches every role) under the new ones only."""
    cfg = config.from_dict({"limits": {"max_message_mb": 8}, "master_turnaround_s": 0.5}, check_files=False)
    data = config.to_dict(cfg)
    assert data["limits"]["max_message_mib"] == 8 and "max_message_mb" not in data["limits"]
    assert data["cost_model"]["master_turnaround_s"] == 0.5 and "master_turnaround_s" not in data
    assert cfg.max_message_bytes == 8 * 1024 * 1024  # MiB


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
