"""Typed arrays <-> proto Array (raw little-endian bytes + dtype + shape); validated, never pickled."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from cnnvideo.model.engines.base import QParams
from cnnvideo.model.engines.camera_calibration import CalibrationRefused, CameraCalibration
from cnnvideo.rpc import cnnvideo_pb2 as pb
from cnnvideo.wire import settings as run_settings
from cnnvideo.wire.settings import Settings

DTYPES = ("float32", "float64", "int32", "int64", "uint8", "bool")
MAX_NDIM = 32  # numpy's own limit
MAX_DIM = (1 << 31) - 1


class WireError(ValueError):
    """A message from the network is malformed."""


def to_array(values: np.ndarray, name: str = "") -> pb.Array:
    arr = np.asarray(values)
    if arr.dtype.name not in DTYPES:
        raise WireError("array %r: dtype %s cannot travel (allowed: %s)" % (name, arr.dtype.name, ", ".join(DTYPES)))
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return pb.Array(name=name, dtype=arr.dtype.name, shape=list(arr.shape), data=arr.tobytes())


def from_array(msg: pb.Array, max_elements: Optional[int] = None) -> np.ndarray:
    if msg.dtype not in DTYPES:
        raise WireError("array %r: unsupported dtype %r" % (msg.name, msg.dtype))
    shape = tuple(int(s) for s in msg.shape)
    if any(s < 0 for s in shape):
        raise WireError("array %r: negative dimension in shape %r" % (msg.name, shape))
    if len(shape) > MAX_NDIM or any(s > MAX_DIM for s in shape):
        raise WireError("array %r: shape %r has more than %d dimensions or one above %d"
                        % (msg.name, shape, MAX_NDIM, MAX_DIM))
    dtype = np.dtype(msg.dtype).newbyteorder("<")
    count = 1
    for s in shape:  # python ints: np.prod would wrap around on hostile shapes
        count *= s
    if max_elements is not None and count > max_elements:
        raise WireError("array %r: %d elements exceed the limit %d" % (msg.name, count, max_elements))
    if len(msg.data) != count * dtype.itemsize:
        raise WireError("array %r: %d bytes do not match shape %r of %s" % (msg.name, len(msg.data), shape, msg.dtype))
    try:
        return np.frombuffer(msg.data, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)
    except ValueError as exc:  # e.g. an empty array whose other dimensions overflow numpy's size
        raise WireError("array %r: shape %r: %s" % (msg.name, shape, exc)) from None


def to_arrays(arrays: Dict[str, np.ndarray]) -> list:
    return [to_array(v, k) for k, v in sorted(arrays.items())]


def from_arrays(msgs) -> Dict[str, np.ndarray]:
    out = {}
    for m in msgs:
        if m.name in out:
            raise WireError("array name %r repeated" % m.name)
        out[m.name] = from_array(m)
    return out


def stage_plan_to_pb(cuts: Sequence[int], stage_of: Sequence[int]) -> pb.StagePlan:
    """A plan for the wire: its cuts and the stage of each worker (-1: left out)."""
    return pb.StagePlan(cuts=[int(c) for c in cuts], stage_of=[int(s) for s in stage_of])


def settings_to_pb(settings) -> pb.Settings:
    """cnnvideo.wire.settings.Settings -> proto Settings (fields, their digest, who holds them)."""
    return pb.Settings(digest=settings.digest, fields=dict(settings.fields), role=settings.role)


def settings_from_pb(msg: pb.Settings):
    """(cnnvideo.wire.settings.Settings, the digest it was sent with) from a proto Settings."""
    return Settings(dict(msg.fields), msg.role), msg.digest


def refusal(cfg: Any, keys: Sequence[str], role: str, msg: Any) -> str:
    """'' if the proto Settings `msg` of a request agrees with this role's config over `keys`, else why not."""
    theirs, digest = settings_from_pb(msg)
    return run_settings.difference(run_settings.of(cfg, keys, role), theirs, digest)


def calibration_to_pb(cal) -> pb.Int8Calibration:
    """The wire form of a camera_calibration.CameraCalibration."""
    cuts = sorted(cal.qparams)
    return pb.Int8Calibration(digest=cal.digest, model_key=cal.model_key, height=int(cal.frame_size[0]),
                              width=int(cal.frame_size[1]), source=cal.source, frame_index=list(cal.indices),
                              frame_time=list(cal.times), jpeg=list(cal.jpegs), cut=cuts,
                              scale=[cal.qparams[c].scale for c in cuts],
                              zero_point=[cal.qparams[c].zero_point for c in cuts], rules=cal.rules,
                              recipe=cal.recipe)


def calibration_from_pb(msg: pb.Int8Calibration):
    """camera_calibration.CameraCalibration of the message; CalibrationRefused when its fields do not agree (lengths,
    or the digest the frames and key give)."""
    if not (len(msg.cut) == len(msg.scale) == len(msg.zero_point)) or not msg.jpeg:
        raise CalibrationRefused("int8 calibration %s refused: %d frames, %d cuts, %d scales, %d zero points"
                                 % (msg.digest, len(msg.jpeg), len(msg.cut), len(msg.scale), len(msg.zero_point)))
    cal = CameraCalibration(msg.model_key, (int(msg.height), int(msg.width)), msg.source,
                            [int(i) for i in msg.frame_index], [float(t) for t in msg.frame_time],
                            [bytes(b) for b in msg.jpeg],
                            {int(c): QParams(float(s), int(z)) for c, s, z in zip(msg.cut, msg.scale, msg.zero_point)},
                            msg.rules, recipe=msg.recipe)
    if cal.digest != msg.digest:
        raise CalibrationRefused("int8 calibration refused: its digest %s does not match its content (%s)"
                                 % (msg.digest, cal.digest))
    return cal
