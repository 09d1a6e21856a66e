"""Option validation: runs every part's check of its own keys against the typed config, in one order, so a config
that loads is one every role can run. Each failure is one ConfigError line naming the key.

Who checks what (each a `check_config` beside the code that reads the keys):
- config_rules: the keys no part owns (cluster addresses, frames, frame_size, in_flight, bandwidth, cpus, ...);
- config_cameras: each camera's own values (run while loading: config_cameras.resolve);
- model.from_config: model, weights, engine, precision, engine_options, int8 (and the `fallback` rule);
- results.from_config: detect, live_view (and the live view's token rule);
- video.from_config: each camera's video file and source values, source, trainer.video;
- plan.from_config: scheduler, scheduler_options, cost_model;
- rpc.tls: tls;
- events.from_config: events and each camera's zones.

Unknown keys and wrong types are refused earlier, while config builds the dataclasses from YAML (config._build);
an old and a new key name set at once while config_upgrade renames. Layout: the parts import only the dataclasses
(config_types, the bottom of the core); this module sits above them, and config (the loader) above it
(tests/unit/test_layout.py). The parts that pull in heavy packages are imported inside validate.
"""
from __future__ import annotations

from cnnvideo import config_rules
from cnnvideo.config_types import Config
from cnnvideo.errors import ConfigError
from cnnvideo.events import from_config as events_part
from cnnvideo.events.from_config import events_keys_set
from cnnvideo.events.types import EventsConfigError
from cnnvideo.model import from_config as model_part
from cnnvideo.model.from_config import model_unavailable, resolve_fallback
from cnnvideo.plan import from_config as plan_part
from cnnvideo.results import from_config as results_part
from cnnvideo.results.from_config import VIEW_TOKEN_ENV, is_loopback, view_token
from cnnvideo.video import from_config as video_part

__all__ = ["validate", "events_keys_set", "model_unavailable", "resolve_fallback", "VIEW_TOKEN_ENV", "is_loopback",
           "view_token"]


def validate(cfg: Config, check_files: bool = True) -> Config:
    """Check values that types alone cannot, part by part; raise ConfigError naming the key. The model before the
    video (a missing model file says so even when the default video is missing too)."""
    config_rules.check_cluster(cfg)
    model_part.check_config(cfg, check_files)
    results_part.check_config(cfg)
    video_part.check_config(cfg, check_files)
    config_rules.check_config(cfg)
    plan_part.check_config(cfg)
    from cnnvideo.rpc import tls  # grpc: never imported before the prefork server forks (tools/prefork.py)

    tls.check_config(cfg.tls)
    try:
        events_part.check_config(cfg, check_files)
    except EventsConfigError as exc:  # the events library raises its own error with the whole line
        raise ConfigError(str(exc)) from None
    return cfg
