"""The `events:` and `live_view` auth config keys: off by default, on when an events key is set (unless
`enabled: false`), a bad events key fails at config time with one line naming it (checked by building the pipeline
without connecting), and a live view on a non-loopback address needs a token (config or CNNVIDEO_VIEW_TOKEN)."""
import logging
import os
import stat

import pytest
import yaml

from cnnvideo import config, config_validation
from cnnvideo.config import ConfigError
from cnnvideo.events import from_config as events_from_config
from cnnvideo.events.types import EventsConfigError

TOKEN = "0123456789abcdef0123"


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch):
    monkeypatch.delenv("CNNVIDEO_VIEW_TOKEN", raising=False)


def test_defaults_off():
    """No events, no token, metrics closed; the default pipeline config puts snapshots under <out>/snapshots."""
    cfg = config.from_dict({}, check_files=False)
    assert cfg.events.enabled is False and cfg.events.mqtt is None and config_validation.view_token(cfg) is None
    assert cfg.live_view.metrics_open is False
    assert cfg.events.pipeline_config("/o")["snapshots"] == {"dir": os.path.join("/o", "snapshots")}


def test_a_full_events_section_is_valid():
    """Every section set: label_change, tracker, zones (inside the 128x96 frame), snapshots, mqtt."""
    cfg = config.from_dict({"frame_size": [96, 128], "events": {
        "enabled": True, "camera": "door", "recent_max": 50, "label_change": {"min_frames": 2},
        "tracker": {"iou_threshold": 0.4, "labels": ["person"]}, "zones": {"gate": [[0, 0], [50, 0], [50, 50]]},
        "snapshots": {"max_tracks": 4}, "mqtt": {"host": "broker", "port": 1883, "topic_prefix": "site/cnn"}}},
        check_files=False)
    assert cfg.events.pipeline_config("out")["mqtt"]["host"] == "broker"


@pytest.mark.parametrize("events, key", [
    ({"enabeld": True}, "events.enabeld"),
    ({"enabled": "yes"}, "events.enabled"),
    ({"tracker": {"iou_threshold": 2}}, "events.tracker.iou_threshold"),
    ({"tracker": {"iou": 0.5}}, "events.tracker.iou"),
    ({"label_change": {"min_frames": 0}}, "events.label_change.min_frames"),
    ({"label_change": {"minframes": 2}}, "events.label_change.minframes"),
    ({"mqtt": {"port": 70000}}, "events.mqtt.port"),
    ({"mqtt": {"topic_prefix": "a/#"}}, "events.mqtt.topic_prefix"),
    ({"mqtt": {"hots": "x"}}, "events.mqtt.hots"),
    ({"snapshots": {"max_tracks": 0}}, "events.snapshots"),
    ({"zones": {"door": [[0, 0], [1, 1]]}}, "events.zones.door"),
])
def test_bad_events_keys_are_named(events, key):
    """One line, starting `config key '<key>'` (or naming it as unknown), whether events are on or off."""
    for enabled in ({}, {"enabled": False}):
        with pytest.raises(ConfigError) as e:
            config.from_dict({"events": dict(enabled, **events)}, check_files=False)
        msg = str(e.value)
        assert "\n" not in msg and ("'%s'" % key in msg or "%s:" % key in msg), msg


@pytest.mark.parametrize("events, enabled", [
    ({}, False),
    ({"mqtt": {"host": "broker"}}, True),
    ({"zones": {"door": [[0, 0], [50, 0], [50, 50]]}}, True),
    ({"camera": "yard"}, True),
    ({"tracker": {"min_frames": 2}}, True),
    ({"snapshots": None}, False),  # null = no snapshots: asks for nothing
    ({"mqtt": None, "zones": {}}, False),  # defaults written out
    ({"enabled": True}, True),
    ({"enabled": False, "mqtt": {"host": "broker"}}, False),  # explicit off wins (configs/compose.yml)
])
def test_an_events_key_turns_events_on(events, enabled):
    """`events.enabled` unset: any other events key set (not null, not its default) turns events on; an explicit
    true or false is kept."""
    cfg = config.from_dict({"frame_size": [96, 128], "events": events}, check_files=False)
    assert cfg.events.enabled is enabled


def test_turning_events_on_or_ignoring_keys_is_said_once(caplog, tmp_path):
    """Events turned on by a key: one info line naming the key; `enabled: false` with keys set: one warning naming
    them; the dumped config says `enabled: true` and loads back without a second line."""
    caplog.set_level(logging.INFO, logger="cnnvideo.config")
    cfg = config._build(config.Config, {"events": {"mqtt": {"host": "broker"}, "camera": "yard"}})
    events_from_config.check_config(cfg, check_files=True)
    lines = [r.getMessage() for r in caplog.records if "events" in r.getMessage()]
    assert cfg.events.enabled is True and len(lines) == 1 and "events.camera, events.mqtt" in lines[0], lines
    path = str(tmp_path / "c.yml")
    config.dump(config.from_dict({"events": {"camera": "yard"}}, check_files=False), path)
    caplog.clear()
    with open(path) as fh:
        again = config._build(config.Config, yaml.safe_load(fh))
    assert again.events.enabled is True
    events_from_config.check_config(again, check_files=True)
    assert not caplog.records
    off = config._build(config.Config, {"events": {"enabled": False, "mqtt": {"host": "broker"}}})
    events_from_config.check_config(off, check_files=True)
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and "'events.enabled' is false: events.mqtt" in rec.getMessage()


def test_a_zone_point_outside_the_frame_is_one_line():
    """frame_size is (height, width) and zone points (x, y): x 130 is past the 128-wide frame, y 90 is inside the
    96-high one; the error names the zone key and the point."""
    good = {"frame_size": [96, 128], "events": {"zones": {"door": [[0, 0], [128, 0], [128, 96]]}}}
    assert config.from_dict(good, check_files=False).events.enabled is True
    with pytest.raises(ConfigError) as e:
        config.from_dict({"frame_size": [96, 128], "events": {"zones": {"door": [[0, 0], [130, 0], [100, 90]]}}},
                         check_files=False)
    msg = str(e.value)
    assert msg.startswith("config key 'events.zones.door': point 1 (x 130, y 0) is outside the frame (x 0..128, "
                          "y 0..96") and "\n" not in msg, msg


def test_non_loopback_view_needs_a_token(monkeypatch):
    """0.0.0.0 without a token is refused; with live_view.token or CNNVIDEO_VIEW_TOKEN it passes; loopback needs
    none; a short token or one with cookie-breaking characters is refused, naming where it came from."""
    for host in ("0.0.0.0", "192.168.1.5", "::", "cam.example"):
        with pytest.raises(ConfigError, match="config key 'live_view.token' is required when live_view.host"):
            config.from_dict({"live_view": {"port": 8080, "host": host}}, check_files=False)
    for host in ("127.0.0.1", "127.1.2.3", "localhost", "::1"):
        config.from_dict({"live_view": {"port": 8080, "host": host}}, check_files=False)
    config.from_dict({"live_view": {"port": 8080, "host": "0.0.0.0", "token": TOKEN}}, check_files=False)
    config.from_dict({"live_view": {"port": 0, "host": "0.0.0.0"}}, check_files=False)  # off: nothing served
    with pytest.raises(ConfigError, match="'live_view.token' must be at least 16"):
        config.from_dict({"live_view": {"port": 8080, "token": "short"}}, check_files=False)
    with pytest.raises(ConfigError, match="'live_view.token' must be"):
        config.from_dict({"live_view": {"port": 8080, "token": TOKEN + ";x"}}, check_files=False)
    monkeypatch.setenv("CNNVIDEO_VIEW_TOKEN", TOKEN)
    cfg = config.from_dict({"live_view": {"port": 8080, "host": "0.0.0.0"}}, check_files=False)
    assert config_validation.view_token(cfg) == TOKEN
    monkeypatch.setenv("CNNVIDEO_VIEW_TOKEN", "bad token")
    with pytest.raises(ConfigError, match="'environment variable CNNVIDEO_VIEW_TOKEN' must be"):
        config.from_dict({"live_view": {"port": 8080, "host": "0.0.0.0"}}, check_files=False)


def test_a_dumped_config_with_a_token_is_private(tmp_path):
    """config.dump writes a config holding the token readable by its owner only (the launcher dumps it into
    the run's output folder)."""
    cfg = config.from_dict({"live_view": {"port": 8080, "token": TOKEN}}, check_files=False)
    path = str(tmp_path / "c.yml")
    config.dump(cfg, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert config.load(path, check_files=False).live_view.token == TOKEN


def test_a_missing_events_package_fails_only_where_events_run(monkeypatch):
    """Without paho-mqtt an `events.mqtt` section is a one-line error for the master (check_files), while a
    worker (check_files false: it runs no events) accepts the config."""
    import sys

    for name in [n for n in sys.modules if n == "paho" or n.startswith("paho.") or n == "cnnvideo.events.mqtt"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "paho", None)
    data = {"events": {"enabled": True, "mqtt": {"host": "broker"}}}
    cfg = config._build(config.Config, data)  # validate's events part alone: the video file is not there
    with pytest.raises(EventsConfigError, match=r"^config key 'events' needs a package that is not installed"):
        events_from_config.check_config(cfg, check_files=True)  # the events part's error: validate raises it as one
    config.from_dict(data, check_files=False)
