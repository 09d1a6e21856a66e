"""The `cameras:` section (issue 35, its config step): cameras keyed by name inherit every setting they do not set
from the top level; `video:` alone is one camera; one listed camera is applied to the top level; every bad input is
one ConfigError line naming the key; a key given twice anywhere in a config file is refused; dumps keep cameras;
require_one_camera refuses several."""
import textwrap

import pytest

from cnnvideo import config, config_cameras
from cnnvideo.config import ConfigError

GATE = {"gate": [[0, 0], [60, 0], [60, 40]]}  # inside a 96x128 frame (x <= 128, y <= 96)


def _write(tmp_path, text, name="c.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _error(data=None, path=None):
    """The message of the ConfigError that loading `data` (from_dict) or the file `path` raises; one line."""
    with pytest.raises(ConfigError) as err:
        if path is not None:
            config.load(path, check_files=False)
        else:
            config.from_dict(data, check_files=False)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def test_two_cameras_inherit_the_top_level_and_override_their_own_keys():
    """Each resolved camera takes its own source keys (merged key-wise), zones, check_share and weight, and the top
    level's for every key it leaves out; the top level itself is untouched with two cameras."""
    cfg = config.from_dict({
        "frame_size": [96, 128], "check_share": 0.5, "source": {"realtime": True, "fps": 5, "reopen_s": 3},
        "events": {"zones": GATE},
        "cameras": {
            "door": {"video": "rtsp://cam/door", "frame_size": [96, 128], "weight": 2, "check_share": 1,
                     "source": {"fps": 10, "drop": "newest"}, "zones": {"porch": [[0, 0], [120, 0], [120, 90]]}},
            "yard": {"video": "media/yard.mp4"},
        }}, check_files=False)
    door, yard = cfg.camera_list()
    assert [door.name, yard.name] == ["door", "yard"] and cfg.camera_names() == ["door", "yard"]
    assert (door.video, door.frame_size, door.weight, door.check_share) == ("rtsp://cam/door", (96, 128), 2.0, 1.0)
    assert (door.source.fps, door.source.drop, door.source.realtime, door.source.reopen_s) == (10.0, "newest", True, 3)
    assert list(door.zones) == ["porch"]
    assert (yard.video, yard.frame_size, yard.weight, yard.check_share) == ("media/yard.mp4", (96, 128), 1.0, 0.5)
    assert yard.source == cfg.source and yard.zones == GATE
    assert isinstance(cfg.camera("door").source.fps, float) and "source.fps" in door.own  # Source's types
    assert (cfg.video, cfg.frame_size, cfg.events.camera) == ("media/vtest.avi", (96, 128), "cam")  # not applied


def test_video_alone_is_one_camera_named_by_events_camera():
    """No `cameras:`: one camera, the top-level video and settings, named `events.camera` (default `cam`)."""
    cfg = config.from_dict({"video": "rtsp://cam/x", "frame_size": [96, 128]}, check_files=False)
    (cam,) = cfg.cameras  # the shorthand: one camera, no key of its own
    assert cam.own == ()
    assert (cam.name, cam.video, cam.frame_size, cam.weight, cam.source) == (
        "cam", "rtsp://cam/x", (96, 128), 1.0, cfg.source)
    named = config.from_dict({"video": "rtsp://cam/x", "events": {"camera": "porch"}}, check_files=False)
    assert [c.name for c in named.camera_list()] == ["porch"]
    config_cameras.require_one_camera(cfg)  # one camera: runs


def test_one_listed_camera_is_applied_to_the_top_level():
    """A single entry of `cameras:` becomes the top-level video, frame_size, source, check_share, zones and
    events.camera, so today's single-camera master runs it unchanged; its name alone does not turn events on."""
    cfg = config.from_dict({"source": {"queue": 7}, "cameras": {"door": {
        "video": "rtsp://cam/door", "frame_size": [96, 128], "check_share": 0.25, "source": {"fps": 12}}}},
        check_files=False)
    assert (cfg.video, cfg.frame_size, cfg.check_share) == ("rtsp://cam/door", (96, 128), 0.25)
    assert (cfg.source.fps, cfg.source.queue, cfg.events.camera, cfg.events.enabled) == (12.0, 7, "door", False)
    assert [c.name for c in cfg.camera_list()] == ["door"]
    config_cameras.require_one_camera(cfg)
    zoned = config.from_dict({"cameras": {"door": {"video": "rtsp://x", "frame_size": [96, 128], "zones": GATE}}},
                             check_files=False)
    assert zoned.events.zones == GATE and zoned.events.enabled is True  # zones turn events on, as events.zones does


def test_a_camera_video_file_is_checked_and_two_cameras_skip_the_unused_top_level_video(tmp_path, synthetic_video):
    """With file checks on, a camera's missing video file is named under the camera; with two cameras the top-level
    video (the unused default, which may not exist) is not checked."""
    cfg = config.from_dict({"cameras": {"a": {"video": synthetic_video}, "b": {"video": synthetic_video}}})
    assert [c.video for c in cfg.camera_list()] == [synthetic_video, synthetic_video]
    with pytest.raises(ConfigError, match=r"^config key 'cameras\.b\.video': file not found"):
        config.from_dict({"cameras": {"a": {"video": synthetic_video}, "b": {"video": str(tmp_path / "no.avi")}}})


def test_a_camera_name_given_twice_is_refused_with_its_lines(tmp_path):
    """YAML keeps the last of two equal keys silently: config.load names the key path and both lines."""
    path = _write(tmp_path, """\
        frames: 10
        cameras:
          door: {video: rtsp://a}
          yard: {video: rtsp://b}
          door: {video: rtsp://c}
        """)
    msg = _error(path=path)
    assert "key 'cameras.door' given twice (lines 3 and 5)" in msg and path in msg, msg


@pytest.mark.parametrize("text, key", [
    ("model: alexnet\nframes: 3\nmodel: vgg16\n", "model"),  # a top-level key
    ("source:\n  fps: 1\n  fps: 2\n", "source.fps"),  # inside a section
    ("cluster:\n  workers: [127.0.0.1:1, 127.0.0.1:2]\nfallback:\n  - {model: a, model: b}\n", "fallback[0].model"),
    ("cameras: {door: {video: a, video: b}}\n", "cameras.door.video"),  # flow style, one line
])
def test_a_key_given_twice_anywhere_is_refused(tmp_path, text, key):
    """The duplicate check covers every mapping of the file, not only `cameras:`, and names the key's path."""
    assert "key '%s' given twice" % key in _error(path=_write(tmp_path, text))


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    """A `<<` merge may repeat a merged key (the mapping's own value wins): that is YAML, not a duplicate."""
    path = _write(tmp_path, """\
        source: &live {realtime: true, fps: 5}
        cameras:
          door:
            video: rtsp://a
            source:
              <<: *live
              fps: 10
        """)
    cfg = config.load(path, check_files=False)
    assert cfg.source.fps == 10.0 and cfg.source.realtime is True


def test_other_yaml_readers_keep_their_loader():
    """Only config.load uses the strict loader: yaml.safe_load itself is unchanged."""
    import yaml

    assert yaml.safe_load("a: 1\na: 2\n") == {"a": 2}


@pytest.mark.parametrize("cameras, start", [
    ({}, "config key 'cameras': empty"),
    (None, "config key 'cameras': empty"),  # `cameras:` with nothing under it
    ({"front door": {"video": "a"}}, "config key 'cameras.front door': not a safe camera name ("),
    ({"door/1": {"video": "a"}}, "config key 'cameras.door/1': not a safe camera name ("),
    ({"_door": {"video": "a"}}, "config key 'cameras._door': not a safe camera name ("),
    ({"d" * 33: {"video": "a"}}, "config key 'cameras.%s': not a safe camera name (" % ("d" * 33)),
    ({"Door": {"video": "a"}, "door": {"video": "b"}}, "config key 'cameras.door': the same name as 'cameras.Door'"),
    ({"door": {"video": "a", "zoom": 2}}, "unknown config key 'cameras.door.zoom' (known: "),
    ({"door": {"video": "a", "source": {"fsp": 2}}}, "unknown config key 'cameras.door.source.fsp' (known: "),
    ({"door": {"video": "a", "source": {"mode": "offline"}}}, "config key 'cameras.door.source.mode' cannot be set"),
    ({"door": {"video": "a", "source": {"drop": "all"}}}, "config key 'cameras.door.source.drop' must be one of"),
    ({"door": {"video": "a", "source": {"fps": "fast"}}}, "config key 'cameras.door.source.fps' must be a number"),
    ({"door": {}}, "config key 'cameras.door.video': required"),
    ({"door": None}, "config key 'cameras.door.video': required"),  # `door:` with nothing under it
    ({"door": {"video": ""}}, "config key 'cameras.door.video': required"),
    ({"door": {"video": "a", "weight": 0}}, "config key 'cameras.door.weight' must be > 0"),
    ({"door": {"video": "a", "weight": -1.5}}, "config key 'cameras.door.weight' must be > 0"),
    ({"door": {"video": "a", "frame_size": [0, 10]}}, "config key 'cameras.door.frame_size' must be two positive"),
    ({"door": {"video": "a", "check_share": 2}}, "config key 'cameras.door.check_share' must be in (0, 1]"),
    ({"door": {"video": "a", "frame_size": [96, 128], "zones": {"z": [[0, 0], [200, 0], [200, 50]]}}},
     "config key 'cameras.door.zones.z': point 1 (x 200, y 0) is outside the frame"),
    ({"door": "rtsp://a"}, "config key 'cameras.door' must be a mapping"),
    (["door"], "config key 'cameras' must be a mapping"),
])
def test_bad_cameras_are_one_line_naming_the_key(cameras, start):
    """Each bad `cameras:` input is one ConfigError line that starts by naming its key."""
    msg = _error({"cameras": cameras})
    assert msg.startswith(start), msg


def test_a_camera_s_own_zones_must_fit_the_frame():
    """A camera's own zones are checked against the frame its master resizes to, named under the camera."""
    msg = _error({"frame_size": [96, 128], "cameras": {
        "door": {"video": "a", "zones": {"wide": [[0, 0], [700, 0], [700, 400]]}}, "yard": {"video": "b"}}})
    assert msg.startswith("config key 'cameras.door.zones.wide': point 1"), msg


def test_several_cameras_run_at_the_cluster_s_frame_size():
    """With several cameras a camera's own frame_size must be the cluster's (each camera's frames are resized to the
    size the workers built their stages for): one line naming the key; with one camera it is the cluster's."""
    msg = _error({"frame_size": [96, 128], "cameras": {"door": {"video": "a", "frame_size": [48, 64]},
                                                       "yard": {"video": "b"}}})
    assert msg.startswith("config key 'cameras.door.frame_size': [48, 64] differs from frame_size [96, 128]"), msg
    one = config.from_dict({"cameras": {"door": {"video": "a", "frame_size": [48, 64]}}}, check_files=False)
    assert one.frame_size == (48, 64)


def test_video_and_cameras_together():
    """A top-level `video` other than its default next to `cameras:` is an error naming both keys (which would
    run?), as is events.camera naming another camera; the default video, or one camera's own video, loads."""
    msg = _error({"video": "rtsp://other", "cameras": {"door": {"video": "rtsp://a"}}})
    assert msg.startswith("config keys 'video' and 'cameras' are both set"), msg
    msg = _error({"video": "rtsp://a", "cameras": {"door": {"video": "rtsp://a"}, "yard": {"video": "rtsp://b"}}})
    assert msg.startswith("config keys 'video' and 'cameras' are both set"), msg
    msg = _error({"events": {"camera": "porch"}, "cameras": {"door": {"video": "rtsp://a"}}})
    assert msg.startswith("config keys 'events.camera' and 'cameras' are both set"), msg
    cfg = config.from_dict({"video": "rtsp://a", "events": {"camera": "door"},
                            "cameras": {"door": {"video": "rtsp://a"}}}, check_files=False)
    assert (cfg.video, cfg.events.camera) == ("rtsp://a", "door")
    config.from_dict({"video": "media/vtest.avi", "cameras": {"door": {"video": "rtsp://a"}, "yard": {
        "video": "rtsp://b"}}}, check_files=False)


def test_dump_round_trip_keeps_cameras(tmp_path):
    """to_dict writes the cameras (only the keys each sets, sizes as lists) and a dump loads back equal, with two
    cameras and with one (applied to the top level); a config without cameras dumps no `cameras` key."""
    two = config.from_dict({"frame_size": [96, 128], "cameras": {
        "door": {"video": "rtsp://a", "frame_size": [96, 128], "weight": 3, "source": {"fps": 4}, "zones": GATE},
        "yard": {"video": "rtsp://b", "check_share": 0.5}}}, check_files=False)
    data = config.to_dict(two)
    assert data["cameras"] == {
        "door": {"video": "rtsp://a", "frame_size": [96, 128], "source": {"fps": 4.0}, "zones": GATE, "weight": 3.0},
        "yard": {"video": "rtsp://b", "check_share": 0.5, "weight": 1.0}}
    one = config.from_dict({"cameras": {"door": {"video": "rtsp://a", "frame_size": [96, 128],
                                                 "source": {"fps": 4}}}}, check_files=False)
    for cfg in (two, one):
        path = str(tmp_path / "dump.yml")
        config.dump(cfg, path)
        loaded = config.load(path, check_files=False)
        assert loaded == cfg and loaded.camera_list() == cfg.camera_list()
    assert "cameras" not in config.to_dict(config.from_dict({}, check_files=False))


def test_a_one_camera_dump_follows_changes_to_the_running_config(tmp_path):
    """With one camera the top level is the camera: a change made after loading (the launcher makes `video` an
    absolute path before it dumps the config for the roles) is what the dump's camera entry says, so it loads."""
    cfg = config.from_dict({"cameras": {"door": {"video": "clip.avi"}}}, check_files=False)
    cfg.video = str(tmp_path / "clip.avi")
    path = str(tmp_path / "dump.yml")
    config.dump(cfg, path)
    loaded = config.load(path, check_files=False)
    assert loaded.video == loaded.camera("door").video == str(tmp_path / "clip.avi")


def test_require_one_camera():
    """require_one_camera refuses several cameras in one line naming them and why; one listed camera passes."""
    cfg = config.from_dict({"cameras": {"door": {"video": "a"}, "yard": {"video": "b"}}}, check_files=False)
    with pytest.raises(ConfigError) as err:
        config.require_one_camera(cfg, "plan one")
    assert str(err.value) == "config key 'cameras': 2 cameras listed (door, yard); plan one"
    config.require_one_camera(config.from_dict({"cameras": {"door": {"video": "a"}}}, check_files=False))


def test_pick_camera_gives_a_master_its_camera_from_the_shared_config():
    """`cnnvideo master --camera NAME` (a master per camera's device, one config everywhere): that camera's config
    as `cnnvideo local` gives its master; no name with several cameras, or a name not listed: one line."""
    cfg = config.from_dict({"out": "o", "in_flight": 4, "cameras": {"door": {"video": "a", "weight": 3},
                                                                      "yard": {"video": "b"}}}, check_files=False)
    yard = config.pick_camera(cfg, "yard")
    assert (yard.video, yard.events.camera, yard.out, yard.in_flight) == ("b", "yard", "o/yard", 2)
    assert yard.camera_names() == ["yard"]
    with pytest.raises(ConfigError, match=r"^config key 'cameras': 2 cameras listed \(door, yard\); name the one this "
                                          r"master runs with --camera NAME$"):
        config.pick_camera(cfg)
    with pytest.raises(ConfigError, match=r"^--camera gate: no such camera under config key 'cameras' \(door, yard\)$"):
        config.pick_camera(cfg, "gate")
    one = config.from_dict({"video": "a"}, check_files=False)
    assert config.pick_camera(one) is one


def test_the_key_table_lists_the_camera_keys():
    """key_table (what docs/configuration.md lists) has `cameras` and each camera key as `cameras.<name>.<key>`."""
    keys = [k for k, _, _ in config.key_table() if k.startswith("cameras")]
    assert keys == ["cameras"] + ["cameras.<name>.%s" % k for k in (
        "video", "frame_size", "source", "zones", "check_share", "weight")]


def test_plan_and_a_master_without_its_camera_refuse_two_cameras_with_one_line(tmp_path):
    """`cnnvideo plan`, `cnnvideo master` given no --camera and one given a camera not listed exit non-zero with one
    line naming `cameras` before doing anything."""
    import subprocess
    import sys

    path = _write(tmp_path, """\
        cameras:
          door: {video: rtsp://cam/door}
          yard: {video: rtsp://cam/yard}
        """)
    proc = subprocess.run([sys.executable, "-m", "cnnvideo", "plan", "-c", path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    errors = [ln for ln in proc.stderr.splitlines() if "cameras" in ln]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-2000:]
    assert "2 cameras listed (door, yard)" in errors[0]
    for extra, says in (([], "--camera NAME"), (["--camera", "gate"], "no such camera")):
        proc = subprocess.run([sys.executable, "-m", "cnnvideo", "master", "-c", path, "--out", str(tmp_path)] + extra,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        errors = [ln for ln in proc.stderr.splitlines() if "cameras" in ln]
        assert proc.returncode != 0 and len(errors) == 1 and says in errors[0], proc.stderr[-2000:]


def test_camera_configs_give_each_camera_its_master_s_config():
    """camera_configs: one single-camera config per camera (its video, source, check_share, zones, name as
    events.camera, folder <out>/<name>, in_flight scaled by weight over the mean weight); one camera: the config."""
    cfg = config.from_dict({"frame_size": [96, 128], "in_flight": 6, "out": "o", "check_share": 0.5, "cameras": {
        "door": {"video": "a", "weight": 3, "check_share": 1, "source": {"fps": 4}, "zones": GATE},
        "yard": {"video": "b"}}}, check_files=False)
    door, yard = config.camera_configs(cfg)
    assert (door.video, door.events.camera, door.out, door.in_flight, door.check_share) == ("a", "door", "o/door", 9,
                                                                                            1.0)
    assert (yard.video, yard.events.camera, yard.out, yard.in_flight, yard.check_share) == ("b", "yard", "o/yard", 3,
                                                                                            0.5)
    assert door.source.fps == 4.0 and door.events.zones == GATE and not yard.events.zones
    assert door.camera_names() == ["door"]
    assert cfg.in_flight == 6 and len(cfg.cameras) == 2  # the config itself is untouched
    single = config.from_dict({}, check_files=False)
    assert config.camera_configs(single) == [single]


def test_camera_configs_give_each_master_its_own_mqtt_client_and_availability():
    """With MQTT, each camera's master gets the client_id suffixed with its name and `availability: camera`
    (<prefix>/<name>/available), which the publisher then uses; one camera keeps the shared topic."""
    pytest.importorskip("paho.mqtt.client")
    from cnnvideo.events.mqtt import MqttPublisher, MqttSettings

    mqtt = {"host": "127.0.0.1", "topic_prefix": "site", "client_id": "hub"}
    cfg = config.from_dict({"events": {"enabled": True, "mqtt": dict(mqtt)}, "cameras": {
        "door": {"video": "a"}, "yard": {"video": "b"}}}, check_files=False)
    door, yard = config.camera_configs(cfg)
    assert door.events.mqtt["client_id"] == "hub-door" and door.events.mqtt["availability"] == "camera"
    assert MqttPublisher(MqttSettings(**yard.events.mqtt), camera="yard").available_topic == "site/yard/available"
    assert MqttPublisher(MqttSettings(**mqtt), camera="yard").available_topic == "site/available"
    assert cfg.events.mqtt == mqtt  # the config itself is untouched


def test_the_config_holds_a_list_of_cameras_and_video_alone_is_one_of_them():
    """The typed config's model is its camera list: `cameras:` entries and the `video:` shorthand both load as a
    list of Camera dataclasses (the shorthand's has no key of its own and dumps back as `video:`); a Config built
    in code holds its one camera too; each camera's config (camera_config) is a one-camera config whose top level is
    that camera's."""
    short = config.from_dict({"video": "rtsp://x", "events": {"camera": "porch"}}, check_files=False)
    listed = config.from_dict({"cameras": {"door": {"video": "rtsp://a"}, "yard": {"video": "rtsp://b"}}},
                              check_files=False)
    for cfg in (short, listed, config.Config()):
        assert cfg.cameras and all(isinstance(c, config.Camera) for c in cfg.cameras)
    assert short.camera_names() == ["porch"] and short.cameras[0].own == () and "cameras" not in config.to_dict(short)
    assert config.Config().camera_names() == ["cam"] and config.Config().cameras[0].video == "media/vtest.avi"
    yard = config.camera_config(listed, listed.camera("yard"))
    assert (yard.camera_names(), yard.video, yard.events.camera) == (["yard"], "rtsp://b", "yard")
    assert listed.camera("gate") is None


def test_a_worker_s_join_finds_every_camera_s_master():
    """camera_join_addresses (a joining worker's `--join`): one address is the first camera's master, the next ones
    at the next ports (one host: local, compose), as camera_configs has each master listen; a comma-separated list
    names each camera's master on its own device (Swarm, Pis), one per camera."""
    assert config_cameras.camera_join_addresses("", 2) == []
    assert config_cameras.camera_join_addresses("10.0.0.5:50070", 1) == ["10.0.0.5:50070"]
    assert config_cameras.camera_join_addresses("m:50070", 3) == ["m:50070", "m:50071", "m:50072"]
    assert config_cameras.camera_join_addresses("10.0.0.5:50070, 10.0.0.6:50071", 2) == ["10.0.0.5:50070",
                                                                                          "10.0.0.6:50071"]
    cfg = config.from_dict({"cluster": {"workers": [], "join": "0.0.0.0:50070", "join_token": "t" * 16},
                            "cameras": {"door": {"video": "a"}, "yard": {"video": "b"}}}, check_files=False)
    assert [c.cluster.join for c in config.camera_configs(cfg)] == ["0.0.0.0:50070", "0.0.0.0:50071"]


@pytest.mark.parametrize("join, cameras, start", [
    ("10.0.0.5", 2, "--join: '10.0.0.5' is not HOST:PORT (give one, the first camera's master, or one per camera"),
    ("a:1,b:x", 2, "--join: 'b:x' is not HOST:PORT"),
    ("a:1,", 2, "--join: '' is not HOST:PORT"),
    ("a:1,a:1", 2, "--join a:1,a:1: an address is listed twice"),
    ("a:1,b:1,c:1", 2, "--join lists 3 addresses for 2 camera(s): give one per camera's master, or one"),
    ("a:1,b:1", 1, "--join lists 2 addresses for 1 camera(s)"),
])
def test_a_bad_join_is_one_line(join, cameras, start):
    """A bad `--join` (not HOST:PORT, an address twice, not one per camera) is one ConfigError line."""
    with pytest.raises(ConfigError) as err:
        config_cameras.camera_join_addresses(join, cameras)
    assert str(err.value).startswith(start) and "\n" not in str(err.value), str(err.value)


def test_cluster_join_is_one_address():
    """cluster.join is where one master listens: a comma-separated list is refused (it is a worker's `--join`)."""
    msg = _error({"cluster": {"workers": [], "join": "a:1,b:2", "join_token": "t" * 16}, "video": "x"})
    assert msg == "config key 'cluster.join' must be host:port (or empty: no joins), got 'a:1,b:2'"
