"""The configs a cluster of several cameras runs, derived from one checked config: a single camera applied to the
top level (apply_one_camera), one config per camera (camera_configs, what each camera's master runs), the camera
a master given `--camera NAME` runs (pick_camera), and the refusal where only one camera can run
(require_one_camera). The `cameras:` section's values are checked by config_validation, which owns option validation.
"""
from __future__ import annotations

import copy
import os
from typing import List

from cnnvideo.config_types import Config
from cnnvideo.errors import ConfigError


def apply_one_camera(cfg: Config) -> Config:
    """A config of exactly one camera runs as today's single-camera cluster: its video, frame_size, source,
    check_share and zones (events.zones) become the top-level values, and its name becomes events.camera (the
    camera in MQTT topics). Idempotent: applying it to a config already applied changes nothing."""
    if len(cfg.cameras) != 1:
        return cfg
    cam = cfg.camera_list()[0]
    cfg.video, cfg.frame_size, cfg.source, cfg.check_share = cam.video, cam.frame_size, cam.source, cam.check_share
    cfg.events.zones, cfg.events.camera = cam.zones, cam.name
    return cfg


def camera_configs(cfg: Config) -> List[Config]:
    """One single-camera Config per camera of `cfg` (file order), what that camera's master runs: its video,
    source, check_share and zones, `events.camera` its name, `out` the folder <out>/<name>, `in_flight` scaled
    by its weight over the cameras' mean weight (a camera's window of frames in flight is its share of a busy
    pool), an MQTT `client_id` given in the config suffixed with its name and MQTT availability per camera
    (<prefix>/<name>/available). Without several cameras: [cfg]."""
    if len(cfg.cameras) <= 1:
        return [cfg]
    cams = cfg.camera_list()
    mean = sum(c.weight for c in cams) / len(cams)
    out = []
    for cam in cams:
        one = copy.deepcopy(cfg)
        one.cameras = {}
        one.video, one.source, one.check_share = cam.video, cam.source, cam.check_share
        one.events.zones, one.events.camera = cam.zones, cam.name
        if one.events.mqtt and one.events.mqtt.get("client_id"):  # a broker drops a client whose id reconnects
            one.events.mqtt["client_id"] = "%s-%s" % (one.events.mqtt["client_id"], cam.name)
        if one.events.mqtt:  # one master's end must not say the others are offline
            one.events.mqtt["availability"] = "camera"
        one.in_flight = max(1, int(round(cfg.in_flight * cam.weight / mean)))
        one.out = os.path.join(cfg.out, cam.name)
        out.append(one)
    return out


def require_one_camera(cfg: Config, why: str = "this version runs one camera per cluster") -> None:
    """Refuse a config of several cameras where one camera runs (`cnnvideo plan`): one line, ending with `why`."""
    if len(cfg.cameras) > 1:
        raise ConfigError("config key 'cameras': %d cameras listed (%s); %s"
                          % (len(cfg.cameras), ", ".join(cfg.cameras), why))


def pick_camera(cfg: Config, name: str = "") -> Config:
    """The config of the one camera a master runs: camera `name`'s (camera_configs: the same config on every
    device, `cnnvideo master --camera NAME` on each camera's device), or the config itself when it has one camera.
    One line when `name` is not a listed camera, or when several are listed and none is named."""
    if not name:
        require_one_camera(cfg, "name the one this master runs with --camera NAME")
        return cfg
    if name not in cfg.cameras:
        raise ConfigError("--camera %s: no such camera under config key 'cameras' (%s)"
                          % (name, ", ".join(cfg.cameras) or "none listed"))
    return next(one for one in camera_configs(cfg) if one.events.camera == name)
