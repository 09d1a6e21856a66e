"""`cnnvideo local-worker OUT`'s refusals, each one line before anything starts: a folder that is no cluster's, a
cluster without joins, and a tc cluster whose run (its network namespace) is not going; and the namespace record
the launcher leaves for it."""
import argparse
import os

import pytest
import yaml

from cnnvideo.errors import ConfigError
from cnnvideo.tools import linkemu, local_join


def _out(tmp_path, **cluster_local):
    out = tmp_path / "run"
    out.mkdir()
    cfg = {"model": "alexnet", "weights": "random", "video": "v.avi", "frame_size": [96, 128], "bandwidth": [3.0],
           "cluster": {"workers": ["127.0.0.1:50060"], "join": cluster_local.get("join", "")},
           "local": {"links": cluster_local.get("links", "paced")}}
    (out / "config.yml").write_text(yaml.safe_dump(cfg))
    return str(out)


def test_a_folder_without_the_launchers_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is not the output folder of a running `cnnvideo local`"):
        local_join.run(argparse.Namespace(out=str(tmp_path)))


def test_a_cluster_without_joins_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="config key 'cluster.join' is empty"):
        local_join.run(argparse.Namespace(out=_out(tmp_path)))


def test_a_tc_cluster_that_is_not_running_is_refused(tmp_path, monkeypatch):
    """No OUT/netns (the run ended, or never ran): one line, nothing started."""
    monkeypatch.delenv(linkemu.NETNS_ENV, raising=False)
    out = _out(tmp_path, join="127.0.0.1:50070", links="tc")
    with pytest.raises(ConfigError, match="is not running"):
        local_join.run(argparse.Namespace(out=out))


def test_the_namespace_record_names_only_a_namespace_that_exists(tmp_path):
    ns = linkemu.Namespace("cnnvideo-test-absent-%d" % os.getpid())
    ns.record(str(tmp_path))
    assert (tmp_path / linkemu.NETNS_FILE).read_text().strip() == ns.name
    assert linkemu.recorded_namespace(str(tmp_path)) is None  # named, but no such namespace
    ns.delete()
    assert not (tmp_path / linkemu.NETNS_FILE).exists()
    assert linkemu.recorded_namespace(str(tmp_path)) is None
