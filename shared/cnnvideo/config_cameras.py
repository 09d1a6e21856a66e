"""The cluster's cameras, the config's unit: the `cameras:` entries resolved over the top level into the config's
camera list (resolve, with the rules that are the cameras' own), the config one camera's master runs
(camera_config, camera_configs), the camera a master given `--camera NAME` runs (pick_camera), where a joining
worker finds every camera's master (camera_join_addresses), and the refusal where only one camera can run
(require_one_camera).

A top-level `video:` is the shorthand for one camera (Config.shorthand_camera). A config of one camera, the one
every master runs, holds that camera's values at the top level too (camera_config), so a role reads `cfg.video`,
`cfg.source`, `cfg.frame_size`, `cfg.check_share`, `cfg.events.zones` and `cfg.events.camera` as its camera's.
Checks of a camera's values that another part owns (its video file and source: video.sources; its zones: events)
run in that part and name `cameras.<name>.<key>` for a key the camera set (Camera.key). Imports only the
dataclasses, the address rule (config_rules) and errors: the bottom of the core.
"""
from __future__ import annotations

import copy
import dataclasses
import os
from typing import Dict, List

from cnnvideo.config_rules import is_host_port
from cnnvideo.config_types import CAMERA_NAME, CAMERA_NAME_RULE, Camera, CameraEntry, Config, Events
from cnnvideo.errors import ConfigError


def _default(name: str):
    """The default of a top-level key."""
    return {f.name: f for f in dataclasses.fields(Config)}[name].default


def _own_keys(entry: CameraEntry) -> tuple:
    """The keys an entry sets itself (Camera.own)."""
    own = ["video"] + ["source." + k for k in entry.source]
    own += [k for k in ("frame_size", "zones", "check_share") if getattr(entry, k) is not None]
    return tuple(own + (["weight"] if entry.weight != 1.0 else []))


def resolve(cfg: Config, entries: Dict[str, CameraEntry]) -> None:
    """cfg.cameras from the `cameras:` entries (file order), each over the top level, after the cameras' own rules:
    safe names, no two names equal but for case, a video, a weight > 0, a positive frame_size, a check_share in
    (0, 1], no clash with a top-level `video` or `events.camera`, one frame_size with several cameras. One camera:
    the config becomes that camera's (camera_config's values at the top level). No entries: the shorthand camera."""
    if not entries:
        cfg.cameras = [cfg.shorthand_camera()]
        return
    lowered: Dict[str, str] = {}
    for name, entry in entries.items():
        key = "cameras.%s" % name
        if not CAMERA_NAME.match(name):
            raise ConfigError("config key '%s': not a safe camera name (%s; it goes into MQTT topics, file names "
                              "and URLs)" % (key, CAMERA_NAME_RULE))
        if name.lower() in lowered:
            raise ConfigError("config key '%s': the same name as 'cameras.%s' but for case (their files would "
                              "clash)" % (key, lowered[name.lower()]))
        lowered[name.lower()] = name
        _check_entry(entry, key)
    names = list(entries)
    only = entries[names[0]] if len(names) == 1 else None
    if cfg.video != _default("video") and (only is None or cfg.video != only.video):
        raise ConfigError("config keys 'video' and 'cameras' are both set: with cameras each camera names its own "
                          "video; leave out the top-level video (or list it as a camera)")
    if cfg.events.camera != Events().camera and (only is None or cfg.events.camera != names[0]):
        raise ConfigError("config keys 'events.camera' and 'cameras' are both set: with cameras each camera's name "
                          "is its name in events and MQTT topics; leave out events.camera")
    for name, entry in entries.items():
        if only is None and entry.frame_size is not None and tuple(entry.frame_size) != tuple(cfg.frame_size):
            raise ConfigError("config key 'cameras.%s.frame_size': %s differs from frame_size %s; with several cameras "
                              "every camera runs at the cluster's frame_size (the workers build their stages for "
                              "one size, and each camera's frames are resized to it): leave it out"
                              % (name, list(entry.frame_size), list(cfg.frame_size)))
    cfg.cameras = [_camera(cfg, name, entry) for name, entry in entries.items()]
    if only is not None:
        _take_camera(cfg, cfg.cameras[0])


def _camera(cfg: Config, name: str, entry: CameraEntry) -> Camera:
    size = cfg.frame_size if entry.frame_size is None else entry.frame_size
    return Camera(name, entry.video, (size[0], size[1]), dataclasses.replace(cfg.source, **entry.source),
                  dict(cfg.events.zones if entry.zones is None else entry.zones),
                  cfg.check_share if entry.check_share is None else entry.check_share, entry.weight, _own_keys(entry))


def _check_entry(entry: CameraEntry, key: str) -> None:
    """One entry's own values that need no other part, each error naming `cameras.<name>.<key>`."""
    if not entry.video:
        raise ConfigError("config key '%s.video': required (the camera's source: a file, stream URL, device or "
                          "GStreamer pipeline)" % key)
    if not entry.weight > 0:
        raise ConfigError("config key '%s.weight' must be > 0 (the camera's share of the pool, relative to the "
                          "other cameras' weights), got %r" % (key, entry.weight))
    if entry.frame_size is not None and any(v <= 0 for v in entry.frame_size):
        raise ConfigError("config key '%s.frame_size' must be two positive integers, got %r"
                          % (key, list(entry.frame_size)))
    if entry.check_share is not None and not 0 < entry.check_share <= 1:
        raise ConfigError("config key '%s.check_share' must be in (0, 1], got %r" % (key, entry.check_share))


def _take_camera(cfg: Config, cam: Camera) -> None:
    """The top-level values a one-camera config holds: its camera's (camera_config)."""
    cfg.video, cfg.frame_size, cfg.source, cfg.check_share = cam.video, cam.frame_size, cam.source, cam.check_share
    cfg.events.zones, cfg.events.camera = cam.zones, cam.name


def camera_join_addresses(join: str, cameras: int) -> List[str]:
    """Where each camera's master takes joining workers, from a worker's `--join`: one HOST:PORT is the first
    camera's (cluster.join), the next cameras' at the next ports, in the config's order (the masters share one host:
    `cnnvideo local`, compose); a comma-separated list names every camera's master, one each, in any order (each on
    its own device: Swarm, Pis). A worker joins them all: it joins the cluster, not one camera. ConfigError (one
    line) for an address that is not HOST:PORT, one named twice, or a list of another length."""
    if not join:
        return []
    listed = [a.strip() for a in join.split(",")]
    for address in listed:
        if not is_host_port(address):
            raise ConfigError("--join: %r is not HOST:PORT (give one, the first camera's master, or one per camera "
                              "separated by commas)" % address)
    if len(set(listed)) < len(listed):
        raise ConfigError("--join %s: an address is listed twice (one per camera's master)" % join)
    if len(listed) > 1:
        if len(listed) != max(cameras, 1):
            raise ConfigError("--join lists %d addresses for %d camera(s): give one per camera's master, or one (the "
                              "first camera's; the next cameras' at the next ports)" % (len(listed), cameras))
        return listed
    host, _, port = listed[0].rpartition(":")
    return ["%s:%d" % (host, int(port) + i) for i in range(max(cameras, 1))]


def camera_config(cfg: Config, cam: Camera) -> Config:
    """The config camera `cam` of `cfg` runs on its master: a copy whose camera list is `cam` alone and whose
    top-level video, frame_size, source, check_share, zones and events.camera are the camera's; with several
    cameras also `out` the folder <out>/<name>, `in_flight` scaled by its weight over the cameras' mean weight (a
    camera's window of frames in flight is its share of a busy pool), an MQTT `client_id` given in the config
    suffixed with its name and MQTT availability per camera (<prefix>/<name>/available)."""
    one = copy.deepcopy(cfg)
    one.cameras = [copy.deepcopy(cam)]
    _take_camera(one, one.cameras[0])
    if len(cfg.cameras) <= 1:
        return one
    if one.events.mqtt and one.events.mqtt.get("client_id"):  # a broker drops a client whose id reconnects
        one.events.mqtt["client_id"] = "%s-%s" % (one.events.mqtt["client_id"], cam.name)
    if one.events.mqtt:  # one master's end must not say the others are offline
        one.events.mqtt["availability"] = "camera"
    mean = sum(c.weight for c in cfg.cameras) / len(cfg.cameras)
    if cfg.cluster.join:  # each camera's master takes joins on its own port (camera_join_addresses)
        one.cluster.join = camera_join_addresses(cfg.cluster.join, len(cfg.cameras))[cfg.cameras.index(cam)]
    one.in_flight = max(1, int(round(cfg.in_flight * cam.weight / mean)))
    one.out = os.path.join(cfg.out, cam.name)
    return one


def camera_configs(cfg: Config) -> List[Config]:
    """One config per camera of `cfg` (file order), what that camera's master runs (camera_config). With one
    camera: [cfg] (it already is that camera's)."""
    if len(cfg.cameras) <= 1:
        return [cfg]
    return [camera_config(cfg, cam) for cam in cfg.cameras]


def require_one_camera(cfg: Config, why: str = "this version runs one camera per cluster") -> None:
    """Refuse a config of several cameras where one camera runs (`cnnvideo plan`): one line, ending with `why`."""
    if len(cfg.cameras) > 1:
        raise ConfigError("config key 'cameras': %d cameras listed (%s); %s"
                          % (len(cfg.cameras), ", ".join(cfg.camera_names()), why))


def pick_camera(cfg: Config, name: str = "") -> Config:
    """The config of the one camera a master runs: camera `name`'s (camera_config: the same config on every
    device, `cnnvideo master --camera NAME` on each camera's device), or the config itself when it has one camera.
    One line when `name` is not a listed camera, or when several are listed and none is named."""
    if not name:
        require_one_camera(cfg, "name the one this master runs with --camera NAME")
        return cfg
    cam = cfg.camera(name)
    if cam is None or not cam.own:  # the shorthand camera (`video:` alone) is listed under no name
        raise ConfigError("--camera %s: no such camera under config key 'cameras' (%s)"
                          % (name, ", ".join(c.name for c in cfg.cameras if c.own) or "none listed"))
    return camera_configs(cfg)[cfg.camera_names().index(name)]
