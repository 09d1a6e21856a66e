"""The events part's keys of the typed config (`events:`, and each camera's zones): check_config, which builds the
events pipeline without connecting so that a bad key stops the config from loading, and resolves `events.enabled`.

It reads the typed config by its fields (cfg.events, cfg.cameras, cfg.frame_size, cfg.out) and imports nothing
else from cnnvideo, as the rest of this pure library: a bad key is an EventsConfigError whose message is the whole
line ("config key 'events.x': ..."), which config_validation, running this check with the other parts', raises as
the ConfigError it is.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, Tuple

from .types import EventsConfigError

# the logger config's warnings always used (log lines read `cnnvideo.config: ...`)
log = logging.getLogger("cnnvideo.config")


def events_keys_set(ev: Any) -> Tuple[str, ...]:
    """The `events` keys (of config_types.Events) other than `enabled` that differ from their defaults, in field
    order; a key set to null (`snapshots: null`, `mqtt: null`: none) is not asked for events, so it does not count."""
    default = type(ev)()
    return tuple(f.name for f in dataclasses.fields(ev) if f.name != "enabled"
                 and getattr(ev, f.name) is not None and getattr(ev, f.name) != getattr(default, f.name))


def _check_zones(zones: Dict, frame_size: Tuple[int, int], key: str, where: str) -> None:
    """Zones (events.zones' shape) inside a camera's frame; the zones parser names the zone."""
    from .zones import parse_zones

    try:
        parse_zones(zones, frame_size, key)
    except EventsConfigError as exc:
        zkey, _, why = str(exc).partition(": ")
        raise EventsConfigError("config key '%s': %s%s" % (zkey, why, where)) from None


def check_cameras(cfg: Any) -> None:
    """Each listed camera's zones inside its own frame: its own zones named `cameras.<name>.zones`, and zones it
    takes from events.zones when its frame differs from the top level's (named events.zones, with the camera)."""
    for cam in cfg.cameras:
        if not cam.own or not cam.zones or any(v <= 0 for v in cam.frame_size):
            continue  # the shorthand camera is the top level (checked below); a bad frame_size is named elsewhere
        if "zones" in cam.own or "frame_size" in cam.own:
            _check_zones(cam.zones, cam.frame_size, cam.key("zones", "events.zones"),
                         "" if "zones" in cam.own else " (camera %s)" % cam.name)


def check_config(cfg: Any, check_files: bool = True) -> None:
    """The cameras' zones, then the `events:` section: `enabled` resolved (null = on when another events key is
    set), the pipeline and the label-change tracker built without connecting, so a bad key is one line naming it
    (an EventsConfigError: see the module's doc). A missing package (paho-mqtt, prometheus_client) is an error only
    where files are checked: a worker
    (check_files false) neither runs events nor needs their packages."""
    check_cameras(cfg)
    ev = cfg.events
    # with `cameras:`, events.camera is a camera's name, not a wish for events
    listed = any(cam.own for cam in cfg.cameras)
    set_keys = tuple(k for k in events_keys_set(ev) if not (k == "camera" and listed))
    if ev.enabled is None:  # unset: events run when any other events key is set
        ev.enabled = bool(set_keys)
        if set_keys and check_files:
            log.info("events on: %s set (config key 'events.enabled' unset; `false` turns them off)",
                     ", ".join("events." + k for k in set_keys))
    elif not ev.enabled and set_keys and check_files:
        log.warning("config key 'events.enabled' is false: %s checked but unused (set events.enabled: true, or "
                    "leave it out, to run events)", ", ".join("events." + k for k in set_keys))
    if not set_keys and not ev.enabled:
        return  # nothing set: nothing to check (and no import of the events modules)
    from . import pipeline_from_config
    from .labelchange import label_change_from_config

    try:
        label_change_from_config(ev.label_change, "events.label_change")
        pipeline_from_config(ev.pipeline_config(cfg.out), cfg.frame_size, start_mqtt=False)
    except EventsConfigError as exc:
        key, _, why = str(exc).partition(": ")
        raise EventsConfigError("config key '%s': %s" % (key, why) if why else "config key 'events': %s" % exc) \
            from None
    except ImportError as exc:
        if check_files:
            raise EventsConfigError("config key 'events' needs a package that is not installed: %s" % exc) from None
