"""Config loading: defaults are valid; every bad key or value fails with a message naming the key; every name the
single-module config had is still `config.<name>`."""
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
        ({"scheduler": "fixed"}, "scheduler_options.cuts"),  # fixed needs its plan
        ({"scheduler": "fixed", "scheduler_options": {"cuts": [0, 9]}}, "scheduler_options.cuts"),  # 2 workers: 3
        ({"scheduler": "fixed", "scheduler_options": {"cuts": [0, 9, 5]}}, "scheduler_options.cuts"),  # decreasing
        ({"scheduler": "fixed", "scheduler_options": {"cuts": [1, 5, 9]}}, "scheduler_options.cuts"),  # not from 0
        ({"engine": "tensorrt"}, "engine"),
        ({"model": "person-ssdlite", "engine": "torch"}, "engine"),  # an ONNX file runs on onnxruntime only
        ({"model": "person-ssdlite", "engine": "auto"}, "engine"),
    ],
)
def test_bad_values_name_the_key(data, key):
    """Each bad key/value raises ConfigError whose message names the offending key."""
    with pytest.raises(ConfigError) as err:
        config.from_dict(data, check_files=False)
    assert "'%s'" % key in str(err.value)


@pytest.mark.parametrize("data, engine", [
    ({}, "torch"),  # a zoo model
    ({"model": "person-ssdlite"}, "onnxruntime"),  # an ONNX model file by its short name
    ({"model": "net.onnx", "weights": "imagenet"}, "onnxruntime"),
    ({"model": "person-ssdlite", "engine": None}, "onnxruntime"),  # `engine: null` is unset
    ({"model": "person-ssdlite", "engine": "onnxruntime"}, "onnxruntime"),
    ({"model": "mobilenet_v2", "engine": "onnxruntime"}, "onnxruntime"),  # set: kept
    ({"model": "mobilenet_v2", "engine": "auto"}, "auto"),
])
def test_unset_engine_follows_the_model(data, engine):
    """`engine` unset: onnxruntime for an ONNX model file, torch for a zoo model; a set engine stays; the config that
    runs (and its dump, and the settings workers compare) names the resolved engine."""
    cfg = config.from_dict(data, check_files=False)
    assert cfg.engine == engine
    assert config.to_dict(cfg)["engine"] == engine


def test_unset_engine_follows_the_model_fallback_picks(tmp_path):
    """An ONNX model that is not here falls back to a zoo model: the unset engine is the fallback's (torch)."""
    cfg = config.from_dict({"model": str(tmp_path / "absent.onnx"),
                            "fallback": [{"model": "alexnet", "weights": "random"}]}, check_files=False)
    assert (cfg.model, cfg.engine) == ("alexnet", "torch")


def test_an_onnx_model_with_torch_is_one_line():
    """An explicit `engine: torch` with an ONNX model stops with one line naming the key, the model and the fix."""
    with pytest.raises(ConfigError) as err:
        config.from_dict({"model": "person-ssdlite", "engine": "torch"}, check_files=False)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("config key 'engine' must be onnxruntime (or unset)") and "person" in msg


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


# The public names of cnnvideo.config before its split, by the module that owns each now.
MOVED = {
    "config_types": ["MODES", "ENGINES", "ENGINE_CHOICES", "PRECISIONS", "ON_ERROR", "CPUS_ROLES", "Cluster", "Delta",
                     "TrainerOptions", "Limits", "Tls", "Reliability", "Detect", "Source", "LiveView", "Local",
                     "EngineOptions", "Int8Options", "CostModel", "ModelChoice", "Events", "Config"],
    "config_upgrade": ["RENAMED", "CPUS_OLD", "upgrade"],
    "config_validation": ["validate"],
    "model.from_config": ["resolve_fallback", "model_unavailable"],
    "results.from_config": ["VIEW_TOKEN_ENV", "view_token", "is_loopback"],
    "errors": ["ConfigError"],
}


def test_moved_names_are_still_config_names():
    """Every name callers reached as `config.<name>` before the split still is, as the owner's own object (a
    re-export, not a copy that could drift), and every public name of config_types is re-exported (a new section
    reaches the callers)."""
    import importlib

    for owner, names in MOVED.items():
        module = importlib.import_module("cnnvideo." + owner)
        for name in names:
            assert name in config.__all__ and getattr(config, name) is getattr(module, name), (owner, name)
    from cnnvideo import config_types

    public = {n for n, v in vars(config_types).items()  # the classes it defines and its constants
              if (isinstance(v, type) and v.__module__ == config_types.__name__) or n.isupper()}
    assert {"Config", "Events", "MODES"} <= public
    assert sorted(public - set(config.__all__)) == []
