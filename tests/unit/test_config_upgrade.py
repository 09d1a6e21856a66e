"""Renamed config keys (cnnvideo.config_upgrade): old names load as the new ones with a warning naming the new key,
dump under the new names, and upgrade() renames a copy of the mapping."""
import pytest

from cnnvideo import config, config_upgrade
from cnnvideo.config import ConfigError


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


@pytest.mark.parametrize("old, new", sorted(config_upgrade.RENAMED.items()))
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


def test_upgrade_renames_a_copy_and_leaves_a_bad_section_to_the_builder():
    """upgrade() returns the renamed mapping and leaves the caller's unchanged; an old key whose new section is not
    a mapping stays where it is, for building to refuse."""
    data = {"limits": {"max_message_mb": 8}, "net_cpu_ns_per_byte": 3.0}
    upgraded = config_upgrade.upgrade(data)
    assert upgraded == {"limits": {"max_message_mib": 8}, "cost_model": {"net_cpu_ns_per_byte": 3.0}}
    assert data == {"limits": {"max_message_mb": 8}, "net_cpu_ns_per_byte": 3.0}
    bad = {"cost_model": 5, "master_turnaround_s": 0.1}
    assert config_upgrade.upgrade(bad) == bad
    with pytest.raises(ConfigError, match="unknown config key 'master_turnaround_s'"):
        config.from_dict(bad, check_files=False)


@pytest.mark.parametrize("key, name", [
    ("w0", "worker0"), ("w01", "worker1"), ("worker", "workers"),  # old spellings
    ("worker3", "worker3"), ("workers", "workers"), ("master", "master"),  # canonical already
    ("gpu", "gpu"), ("w", "w"),  # not roles: config_validation refuses them
])
def test_cpus_role_names_are_spelled_canonically(key, name):
    """An old `cpus` spelling gives its canonical role name; any other key comes back as it is."""
    assert config_upgrade.cpus_role_name(key) == name
