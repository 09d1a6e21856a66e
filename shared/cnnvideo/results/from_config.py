"""The results part's keys of the typed config: `detect` (what a detector keeps: results.detections) and
`live_view` (the live page's address and token: results.liveview), check_config; config_validation runs it with the
other parts' checks. The live view's token rule (view_token) lives here, where the page is served (is_loopback is
config_rules', which the join rule shares)."""
from __future__ import annotations

import os
import re
from typing import Optional

from cnnvideo.artifacts import onnx_model_path
from cnnvideo.config_rules import is_loopback
from cnnvideo.config_types import Config
from cnnvideo.errors import ConfigError
from cnnvideo.results.detections import check_settings, is_detector

VIEW_TOKEN_ENV = "CNNVIDEO_VIEW_TOKEN"


def view_token(cfg: Config) -> Optional[str]:
    """The live view's bearer token: `live_view.token`, else $CNNVIDEO_VIEW_TOKEN, else None."""
    return cfg.live_view.token or os.environ.get(VIEW_TOKEN_ENV) or None


def check_live_view(cfg: Config) -> None:
    lv = cfg.live_view
    if not 0 <= lv.port < 65536:
        raise ConfigError("config key 'live_view.port' must be 0 (off) or a TCP port, got %r" % lv.port)
    token = view_token(cfg)
    if token is not None and (lv.port or lv.token):
        key = "live_view.token" if lv.token else "environment variable %s" % VIEW_TOKEN_ENV
        if not re.fullmatch(r"[A-Za-z0-9._~+/=-]{16,}", token):
            raise ConfigError("config key '%s' must be at least 16 characters of A-Z a-z 0-9 . _ ~ + / = - "
                              "(e.g. `openssl rand -hex 16`)" % key)
    if lv.port and not is_loopback(lv.host) and token is None:
        raise ConfigError("config key 'live_view.token' is required when live_view.host is %r (not loopback): set "
                          "it or the environment variable %s, or bind 127.0.0.1" % (lv.host, VIEW_TOKEN_ENV))


def check_config(cfg: Config) -> None:
    """`detect` against the model (an ONNX file holds its weights, so `weights` is a classifier setting there; a
    torchvision detector takes it), then `live_view`."""
    onnx_path = onnx_model_path(cfg.model)
    check_settings(cfg.model, is_detector(cfg.model), cfg.detect,
                   classifier={"weights": cfg.weights} if onnx_path else None)
    check_live_view(cfg)
