"""Typed cluster/run configuration loaded from YAML; every bad key or value is a ConfigError naming it.

The public entry every role and tool imports (`from cnnvideo import config`; `config.load(...)`): it reads and writes
config files (from_dict, load, load_demo, to_dict, dump) and lists the keys (key_table, type_name for
docs/configuration.md; tests/unit/test_config_doc.py keeps the two in step). Building a dataclass from YAML refuses
unknown keys and wrong types; every other job is a module of its own, re-exported here so `config.<name>` reaches
all of them:

- config_types: the dataclasses (Config and its sections) and the allowed values of choice keys;
- config_upgrade: renamed keys (RENAMED: the old name still loads, with a warning naming the new one);
- config_checks: option validation (validate), the model `fallback` rule, the live view's token.

The imports go config -> config_checks -> config_upgrade / config_types, never back (tests/unit/test_layout.py
counts imports inside functions too): from_dict calls the checks, the checks need the dataclasses, so the
dataclasses cannot live here. The demo config (`cnnvideo local` without -c, and configs/local.yml) is the package
file DEMO_PATH.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, Dict, List, Optional, Tuple

import yaml

from cnnvideo.config_checks import (
    VIEW_TOKEN_ENV,
    is_loopback,
    model_unavailable,
    resolve_fallback,
    validate,
    view_token,
)
from cnnvideo.config_types import (
    CPUS_ROLES,
    ENGINE_CHOICES,
    ENGINES,
    MODES,
    ON_ERROR,
    PRECISIONS,
    Cluster,
    Config,
    CostModel,
    Delta,
    Detect,
    EngineOptions,
    Events,
    Int8Options,
    Limits,
    LiveView,
    Local,
    ModelChoice,
    Reliability,
    Source,
    Tls,
    TrainerOptions,
)
from cnnvideo.config_upgrade import CPUS_OLD, RENAMED, upgrade
from cnnvideo.errors import ConfigError

# Names callers reach as `config.<name>`: defined here, or re-exported from the module that owns them.
__all__ = [
    # config_types
    "CPUS_ROLES", "ENGINE_CHOICES", "ENGINES", "MODES", "ON_ERROR", "PRECISIONS", "Cluster", "Config", "CostModel",
    "Delta", "Detect", "EngineOptions", "Events", "Int8Options", "Limits", "LiveView", "Local", "ModelChoice",
    "Reliability", "Source", "Tls", "TrainerOptions",
    # config_upgrade
    "CPUS_OLD", "RENAMED", "upgrade",
    # config_checks
    "VIEW_TOKEN_ENV", "is_loopback", "model_unavailable", "resolve_fallback", "validate", "view_token",
    # cnnvideo.errors
    "ConfigError",
    # this module
    "DEMO_PATH", "dump", "from_dict", "key_table", "load", "load_demo", "to_dict", "type_name",
]

# The demo: `cnnvideo local` and `cnnvideo plan` without -c load this file; configs/local.yml is a symlink to it.
DEMO_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.yml")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one YAML value to the annotated type; raise ConfigError naming the key."""
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ()) or ()
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError("config key '%s' must be a mapping, got %r" % (key, value))
        return _build(tp, value, key + ".")
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _convert(value, inner, key)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError("config key '%s' must be a list, got %r" % (key, value))
        return [_convert(v, args[0], "%s[%d]" % (key, i)) for i, v in enumerate(value)]
    if origin in (tuple, Tuple):
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError("config key '%s' must be a list of %d values, got %r" % (key, len(args), value))
        return tuple(_convert(v, a, "%s[%d]" % (key, i)) for i, (v, a) in enumerate(zip(value, args)))
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ConfigError("config key '%s' must be a mapping, got %r" % (key, value))
        return {str(k): _convert(v, args[1], "%s.%s" % (key, k)) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError("config key '%s' must be true or false, got %r" % (key, value))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("config key '%s' must be an integer, got %r" % (key, value))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError("config key '%s' must be a number, got %r" % (key, value))
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError("config key '%s' must be a string, got %r" % (key, value))
        return value
    raise ConfigError("config key '%s' has unsupported type %s" % (key, _type_name(tp)))


def _build(cls: Any, data: Dict[str, Any], prefix: str = "") -> Any:
    """One dataclass from its YAML mapping; an unknown key or a wrong type is a ConfigError naming the key."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError("unknown config key '%s%s' (known: %s)" % (prefix, key, ", ".join(sorted(names))))
    kwargs = {k: _convert(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def from_dict(data: Optional[Dict[str, Any]], check_files: bool = True) -> Config:
    """Build and validate a Config from a plain mapping (e.g. parsed YAML): renamed keys upgraded (with a warning),
    the model `fallback` resolved, every value checked."""
    return validate(resolve_fallback(_build(Config, upgrade(data or {}))), check_files=check_files)


def load(path: str, overrides: Optional[Dict[str, Any]] = None, check_files: bool = True) -> Config:
    """Read a YAML config file; relative video/weights paths resolve against the current directory."""
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError("cannot read config file %s: %s" % (path, exc.strerror)) from None
    except yaml.YAMLError as exc:
        raise ConfigError("config file %s is not valid YAML: %s" % (path, str(exc).splitlines()[0])) from None
    if not isinstance(data, dict):
        raise ConfigError("config file %s must hold a mapping of keys" % path)
    data.update(overrides or {})
    return from_dict(data, check_files=check_files)


def load_demo(overrides: Optional[Dict[str, Any]] = None, check_files: bool = True) -> Config:
    """The demo config (DEMO_PATH): what `cnnvideo local` and `cnnvideo plan` run without -c."""
    return load(DEMO_PATH, overrides, check_files=check_files)


def type_name(tp: Any) -> str:
    """A YAML-facing name of a field type, as docs/configuration.md writes it ('list of float', '[int, int]')."""
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ()) or ()
    if dataclasses.is_dataclass(tp):
        return "{%s}" % ", ".join(f.name for f in dataclasses.fields(tp))
    if origin is typing.Union:
        return "%s or null" % type_name([a for a in args if a is not type(None)][0])
    if origin in (list, List):
        return "list of %s" % type_name(args[0])
    if origin in (tuple, Tuple):
        return "[%s]" % ", ".join(type_name(a) for a in args)
    if origin in (dict, Dict):
        return "mapping" if args[1] is Any else "mapping of %s" % type_name(args[1])
    return _type_name(tp)


def key_table(cls: Any = Config, prefix: str = "") -> List[Tuple[str, str, Any]]:
    """(dotted key, type name, default as YAML would load it) of every config key: sections expanded, list entries
    that are sections as `key[].field` after the list itself. docs/configuration.md lists the same."""
    hints = typing.get_type_hints(cls)
    rows: List[Tuple[str, str, Any]] = []
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        if dataclasses.is_dataclass(tp):
            rows += key_table(tp, key + ".")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore
        rows.append((key, type_name(tp), list(default) if isinstance(default, tuple) else default))
        args = getattr(tp, "__args__", ()) or ()
        if getattr(tp, "__origin__", None) in (list, List) and dataclasses.is_dataclass(args[0]):
            rows += key_table(args[0], key + "[].")
    return rows


def to_dict(cfg: Config) -> Dict[str, Any]:
    """Plain mapping of a Config (for YAML dumps and reports)."""
    out = dataclasses.asdict(cfg)
    out["frame_size"] = list(cfg.frame_size)
    return out


def dump(cfg: Config, path: str) -> None:
    """Write the config as YAML; only the owner may read it when it holds the live view's token."""
    if cfg.live_view.token:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            os.chmod(path, 0o600)
            yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
        return
    with open(path, "w") as fh:
        yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
