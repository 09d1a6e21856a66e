"""The video part's keys of the typed config: each camera's video and source values, the top-level `source:`,
`trainer.video` (check_config; config_validation runs it with the other parts' checks)."""
from __future__ import annotations

import os

from cnnvideo.config_types import Config
from cnnvideo.config_types import Source as SourceSettings
from cnnvideo.errors import ConfigError
from cnnvideo.video.sources import kind_of


def check_source(src: SourceSettings, prefix: str = "source.") -> None:
    """The values of a `source:` section (the top level's, or a camera's), each error naming `prefix` + its key."""
    for key, value, allowed in (("drop", src.drop, ("newest", "oldest", "none")),
                                ("mode", src.mode, ("offline", "live"))):
        if value not in allowed:
            raise ConfigError("config key '%s%s' must be one of %s, got %r" % (prefix, key, "|".join(allowed), value))
    if src.queue <= 0:
        raise ConfigError("config key '%squeue' must be positive, got %r" % (prefix, src.queue))
    if src.fps < 0 or src.reopen_s <= 0:
        key = prefix + ("fps" if src.fps < 0 else "reopen_s")
        raise ConfigError("config key '%s' must be %s" % (key, ">= 0" if key.endswith("fps") else "> 0"))


def check_config(cfg: Config, check_files: bool = True) -> None:
    """This part's keys of a typed config: each camera's video (a file must exist where files are checked) and
    source values (a key the camera set named `cameras.<name>.<key>`: Camera.key), the top-level `source:`,
    `trainer.video`, and `source.mode: offline` only with files read as fast as asked. ConfigError naming the key."""
    for cam in cfg.cameras:
        own = {k[len("source."):]: None for k in cam.own if k.startswith("source.")}
        if own:  # its own keys over the defaults: an error is one of its own
            check_source(SourceSettings(**{k: getattr(cam.source, k) for k in own}), "cameras.%s.source." % cam.name)
        if check_files and kind_of(cam.video) == "file" and not os.path.isfile(cam.video):
            raise ConfigError("config key '%s': file not found: %s" % (cam.key("video", "video"), cam.video))
    check_source(cfg.source)
    if (cfg.trainer.video is not None and check_files and kind_of(cfg.trainer.video) == "file"
            and not os.path.isfile(cfg.trainer.video)):
        raise ConfigError("config key 'trainer.video': file not found: %s" % cfg.trainer.video)
    for cam in cfg.cameras if cfg.source.mode == "offline" else []:
        if kind_of(cam.video) != "file" or cam.source.realtime:
            raise ConfigError("config key 'source.mode': offline needs a video file read as fast as asked "
                              "(source.realtime: false), got %r%s"
                              % (cam.video, " (camera %s)" % cam.name if len(cfg.cameras) > 1 else ""))
