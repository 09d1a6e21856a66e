"""`cnnvideo trainer -c CONFIG`: fit the predictors on the training video and serve them until SIGTERM/SIGINT."""
from __future__ import annotations

from cnnvideo import config
from cnnvideo.model.loading import check_weights
from cnnvideo.rpc import tls

from .role import TrainerRole


def run(args) -> int:
    cfg = config.load(args.config)
    if len(cfg.cameras) > 1 and not cfg.trainer.video:  # (`cnnvideo local` sets the first camera's)
        raise config.ConfigError("config key 'trainer.video': with several cameras the trainer needs a video of its "
                                 "own to fit on (one of the cameras')")
    tls.setup(cfg, "trainer")  # mutual TLS for every channel/server of this process, if configured
    check_weights(cfg)  # bad weights: one clear line before the server starts (fitting runs after it)
    role = TrainerRole(cfg)
    try:
        role.start()
        role.serve()
    finally:
        role.stop()
    return 0
