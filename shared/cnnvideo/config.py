"""Typed cluster/run configuration loaded from YAML; every bad key or value is a ConfigError naming it.

The public entry every role and tool imports (`from cnnvideo import config`; `config.load(...)`): it reads and writes
config files (from_dict, load, load_demo, to_dict, dump; load refuses a key given twice in one YAML mapping, which
a YAML loader would keep silently: UniqueKeyLoader) and lists the keys (key_table, type_name for
docs/configuration.md; tests/unit/test_config_doc.py keeps the two in step). Building a dataclass from YAML refuses
unknown keys and wrong types; every other job is a module of its own, re-exported here so `config.<name>` reaches
all of them:

- config_types: the dataclasses (Config and its sections) and the allowed values of choice keys;
- config_upgrade: renamed keys (RENAMED: the old name still loads, with a warning naming the new one);
- config_validation: option validation (validate, with the `cameras:` rules), the model `fallback` rule, the live view's
  token;
- config_cameras: the configs several cameras run (camera_configs, pick_camera, require_one_camera).

The imports go config -> config_validation -> config_cameras / config_upgrade / config_types, never back
(tests/unit/test_layout.py counts imports inside functions too): from_dict calls the checks, the checks need the
dataclasses, so the dataclasses cannot live here. The demo config (`cnnvideo local` without -c, and
configs/local.yml) is the package file DEMO_PATH.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any, Dict, List, Optional, Tuple

import yaml

from cnnvideo.config_cameras import camera_config, camera_configs, pick_camera, require_one_camera
from cnnvideo.config_cameras import resolve as resolve_cameras
from cnnvideo.config_types import (
    CALIBRATIONS,
    CAMERA_NAME,
    CAMERA_NAME_RULE,
    CPUS_ROLES,
    ENGINE_CHOICES,
    ENGINES,
    MODES,
    ON_ERROR,
    PRECISIONS,
    QUANTIZE_ON,
    Camera,
    CameraEntry,
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
    ResolvedCamera,
    Source,
    Tls,
    TrainerOptions,
)
from cnnvideo.config_upgrade import CPUS_OLD, RENAMED, upgrade
from cnnvideo.config_validation import (
    VIEW_TOKEN_ENV,
    is_loopback,
    model_unavailable,
    resolve_fallback,
    validate,
    view_token,
)
from cnnvideo.errors import ConfigError

# Names callers reach as `config.<name>`: defined here, or re-exported from the module that owns them.
__all__ = [
    # config_types
    "CALIBRATIONS", "CAMERA_NAME", "CAMERA_NAME_RULE", "CPUS_ROLES", "ENGINE_CHOICES", "ENGINES", "MODES", "ON_ERROR",
    "PRECISIONS", "QUANTIZE_ON",
    "Camera", "CameraEntry", "Cluster", "Config", "CostModel", "Delta", "Detect", "EngineOptions", "Events",
    "Int8Options", "Limits", "LiveView", "Local", "ModelChoice", "Reliability", "ResolvedCamera", "Source", "Tls",
    "TrainerOptions",
    # config_upgrade
    "CPUS_OLD", "RENAMED", "upgrade",
    # config_cameras
    "camera_config", "camera_configs", "pick_camera", "require_one_camera", "resolve_cameras",
    # config_validation (each re-exported there from the part that owns it)
    "VIEW_TOKEN_ENV", "is_loopback", "model_unavailable", "resolve_fallback", "validate", "view_token",
    # cnnvideo.errors
    "ConfigError",
    # this module
    "DEMO_PATH", "DuplicateKeyError", "UniqueKeyLoader", "dump", "from_dict", "key_table", "load", "load_demo",
    "to_dict", "type_name",
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


def _camera_entries(data: Dict[str, Any]) -> Dict[str, CameraEntry]:
    """The raw `cameras:` section (taken out of `data`) built as entries: given but empty (`cameras: {}`, or
    `cameras:` with nothing, which YAML reads as null) is an error; an entry with nothing under it (`door:`) is {}
    so that the checks name its missing `video`; each camera's `source` keys checked as the top-level `source:`
    section's (an unknown key or a wrong type named as `cameras.<name>.source.<key>`) and converted to Source's
    types; `mode` is the run's, not a camera's."""
    if "cameras" not in data:
        return {}
    cameras = data.pop("cameras")
    if cameras is None or cameras == {}:
        raise ConfigError("config key 'cameras': empty; list at least one camera (cameras: {door: {video: ...}}), or "
                          "leave it out and set video")
    if isinstance(cameras, dict):
        cameras = {name: {} if entry is None else entry for name, entry in cameras.items()}
    entries = _convert(cameras, Dict[str, CameraEntry], "cameras")
    for name, entry in entries.items():
        prefix = "cameras.%s.source." % name
        if "mode" in entry.source:
            raise ConfigError("config key '%smode' cannot be set per camera: source.mode is how the planner sees the "
                              "whole run; set it at the top level" % prefix)
        built = _build(Source, entry.source, prefix)
        entry.source = {k: getattr(built, k) for k in entry.source}
    return entries


def from_dict(data: Optional[Dict[str, Any]], check_files: bool = True) -> Config:
    """Build and validate a Config from a plain mapping (e.g. parsed YAML): renamed keys upgraded (with a warning),
    the cameras resolved into the camera list (config_cameras.resolve: `video:` alone is one camera), the model
    `fallback` resolved, every value checked."""
    data = upgrade(data or {})  # a copy: the caller's mapping is left as it is
    entries = _camera_entries(data)
    cfg = _build(Config, data)
    resolve_cameras(cfg, entries)
    return validate(resolve_fallback(cfg), check_files=check_files)


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping; the message names its dotted path and both lines."""


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping, anywhere in the document (PyYAML keeps the
    last one silently, so `cameras: {door: ..., door: ...}` would lose a camera without a word).

    The check runs while the document is composed, not in construct_mapping: there each mapping node is still as
    written (a `<<` merge may legitimately repeat a merged key, and construct_mapping sees the merged keys
    flattened in) and the path down to it is known. Only config.load uses it; other YAML readers are unchanged."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._path: List[str] = []  # ".key" and "[i]" steps down to the node being composed

    def compose_node(self, parent: Any, index: Any) -> Any:
        if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
            self._path.append("." + str(index.value))  # a mapping's value, under its key
        elif isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
            self._path.append("[%d]" % index)
        else:
            return super().compose_node(parent, index)
        try:
            return super().compose_node(parent, index)
        finally:
            self._path.pop()

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        seen: Dict[Any, Any] = {}  # key as loaded -> its first key node
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            try:
                first = seen.setdefault(self.construct_object(key_node), key_node)  # `door` and "door": one key
            except TypeError:  # an unhashable key: the constructor refuses it later
                continue
            if first is not key_node:
                path = "".join(self._path + ["." + str(key_node.value)])
                lines = sorted({first.start_mark.line + 1, key_node.start_mark.line + 1})
                raise DuplicateKeyError("key '%s' given twice (%s); a YAML loader would keep only the last" % (
                    path[1:] if path.startswith(".") else path,
                    "line %d" % lines[0] if len(lines) == 1 else "lines %d and %d" % tuple(lines)))
        return node


def _safe_unique_load(stream: Any) -> Any:
    """The one YAML document of `stream`, read by UniqueKeyLoader (a SafeLoader: plain data only, no objects)."""
    loader = UniqueKeyLoader(stream)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load(path: str, overrides: Optional[Dict[str, Any]] = None, check_files: bool = True) -> Config:
    """Read a YAML config file (a key given twice in one mapping is an error: UniqueKeyLoader); relative
    video/weights paths resolve against the current directory."""
    try:
        with open(path) as fh:
            data = _safe_unique_load(fh) or {}
    except OSError as exc:
        raise ConfigError("cannot read config file %s: %s" % (path, exc.strerror)) from None
    except DuplicateKeyError as exc:
        raise ConfigError("config file %s: %s" % (path, exc)) from None
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
    that are sections as `key[].field` and mapping values that are sections as `key.<name>.field` (`cameras`), each
    after the list or mapping itself. docs/configuration.md lists the same."""
    hints = typing.get_type_hints(cls)
    rows: List[Tuple[str, str, Any]] = []
    for f in dataclasses.fields(cls):
        tp, key = f.metadata.get("yaml", hints[f.name]), prefix + f.name  # `yaml`: how a file writes the field
        if dataclasses.is_dataclass(tp):
            rows += key_table(tp, key + ".")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore
        default = f.metadata.get("yaml_default", default)
        rows.append((key, type_name(tp), list(default) if isinstance(default, tuple) else default))
        args = getattr(tp, "__args__", ()) or ()
        if getattr(tp, "__origin__", None) in (list, List) and dataclasses.is_dataclass(args[0]):
            rows += key_table(args[0], key + "[].")
        if getattr(tp, "__origin__", None) in (dict, Dict) and dataclasses.is_dataclass(args[1]):
            rows += key_table(args[1], key + ".<name>.")
    return rows


def _camera_dict(cfg: Config, cam: Camera) -> Dict[str, Any]:
    """One `cameras:` entry as YAML: the keys the camera's entry set (Camera.own). With a single camera the top level
    is the camera, so its entry is written from the top-level values: a change made to the running config (the
    launcher makes `video` an absolute path) reaches the dump, which loads back the same."""
    one = len(cfg.cameras) == 1
    out: Dict[str, Any] = {"video": cfg.video if one else cam.video}
    if "frame_size" in cam.own:
        out["frame_size"] = list(cfg.frame_size if one else cam.frame_size)
    source = [k[len("source."):] for k in cam.own if k.startswith("source.")]
    if source:
        out["source"] = {k: getattr(cfg.source if one else cam.source, k) for k in source}
    if "zones" in cam.own:
        out["zones"] = dict(cfg.events.zones if one else cam.zones)
    if "check_share" in cam.own:
        out["check_share"] = cfg.check_share if one else cam.check_share
    out["weight"] = cam.weight
    return out


def to_dict(cfg: Config) -> Dict[str, Any]:
    """Plain mapping of a Config (for YAML dumps and reports): `cameras` as the file wrote it, a mapping of the
    listed cameras' entries, left out when the config is the `video:` shorthand (its one camera lists no key)."""
    out = dataclasses.asdict(cfg)
    out["frame_size"] = list(cfg.frame_size)
    out["cameras"] = {cam.name: _camera_dict(cfg, cam) for cam in cfg.cameras if cam.own}
    if not out["cameras"]:
        del out["cameras"]  # `cameras: {}` would be refused as an empty section
    return out


def dump(cfg: Config, path: str) -> None:
    """Write the config as YAML; only the owner may read it when it holds a secret (the live view's or the join
    token)."""
    if cfg.live_view.token or cfg.cluster.join_token:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            os.chmod(path, 0o600)
            yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
        return
    with open(path, "w") as fh:
        yaml.safe_dump(to_dict(cfg), fh, sort_keys=False)
