"""The settings that change a run's results, carried between roles as fields plus a digest.

Every request from the master to a worker (Costs, StartRun) or to the trainer (GetPredictors) carries the
sender's values of the keys the receiver depends on. The receiver computes its own; if the digests differ
it refuses, naming the first differing key ("delta.input_threshold: master 2, trainer 0"). A key the
config does not have is left out on both sides (a key added later joins the digest once it exists).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Sequence

# keys a worker's results and profile depend on (the graph it runs, the hop codec it profiles)
WORKER_KEYS = ("model", "weights", "seed", "frame_size", "delta.input_threshold", "delta.threshold", "delta.fp16",
               "engine", "precision", "int8.calibration", "int8.calibration_frames", "int8.calibration_start",
               "int8.calibration_stride")
# keys the trainer's fitted predictors depend on
TRAINER_KEYS = WORKER_KEYS + ("trainer.frames", "trainer.video", "trainer.fit_fraction")
_MISSING = object()


@dataclass(frozen=True)
class Settings:
    """Dotted config key -> canonical JSON value, and who holds them ('master', 'worker 0', 'trainer')."""

    fields: Dict[str, str] = field(default_factory=dict)
    role: str = ""

    @property
    def digest(self) -> str:
        """16 hex digits of sha256 over the sorted fields."""
        return digest_of(self.fields)


def digest_of(fields: Dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _value(cfg: Any, key: str) -> Any:
    """The config's value of a dotted key, normalised so that equal settings compare equal across hosts."""
    if key == "trainer.video":
        return cfg.trainer.video or cfg.video
    if key == "weights" and cfg.weights not in ("imagenet", "random"):
        # a state-dict file: its name and size (paths and mtimes differ between devices holding the same file)
        try:
            return "file:%s:%d" % (os.path.basename(cfg.weights), os.path.getsize(cfg.weights))
        except OSError:
            return "file:%s:missing" % os.path.basename(cfg.weights)
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part, _MISSING)
        if value is _MISSING:
            return _MISSING
    if isinstance(value, tuple):
        value = list(value)
    return value


def of(cfg: Any, keys: Sequence[str], role: str = "") -> Settings:
    """Settings of a Config over `keys` (keys the config lacks are left out)."""
    fields = {}
    for key in keys:
        value = _value(cfg, key)
        if value is not _MISSING:
            fields[key] = json.dumps(value, sort_keys=True)
    return Settings(fields, role)


def difference(mine: Settings, theirs: Settings, digest: str = "") -> str:
    """'' if `theirs` (a request, with the digest it was sent with) equals `mine`, else one line naming the first
    differing key and both values ("delta.input_threshold: master 2, trainer 0")."""
    them, me = theirs.role or "requester", mine.role or "receiver"
    if not theirs.fields:
        return "the request from %s carries no settings (a version without settings checks?)" % them
    if digest and digest != theirs.digest:
        return "the settings digest from %s does not match its fields (%s != %s)" % (them, digest, theirs.digest)
    if theirs.digest == mine.digest:
        return ""
    for key in sorted(set(mine.fields) | set(theirs.fields)):
        a, b = theirs.fields.get(key, "(unset)"), mine.fields.get(key, "(unset)")
        if a != b:
            return "%s: %s %s, %s %s" % (key, them, a, me, b)
    return ""
