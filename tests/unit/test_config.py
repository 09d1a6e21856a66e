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
        ({"net_cpu_us_per_message": -1}, "net_cpu_us_per_message"),
        ({"net_cpu_ns_per_byte": -0.5}, "net_cpu_ns_per_byte"),
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
