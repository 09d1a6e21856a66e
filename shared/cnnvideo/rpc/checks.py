"""Cheap synchronous checks of received payloads, run in the RPC handler before anything is queued or allocated.

A FrameTask's tensor is decoded later, in sequence order, against the hop's delta state; its headers can be
checked at once, so a truncated, oversize or mis-shaped payload gets INVALID_ARGUMENT on the call that
carried it instead of failing the run later. Only headers are read (no decompression, no allocation).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import codec, hop


def check_hop_payload(data: bytes, shape: Sequence[int], dtype: str, max_bytes: int) -> None:
    """Raise HopError / CodecError unless `data` has a valid hop header and a codec header of `shape`/`dtype`."""
    if len(data) < hop._HEADER.size:
        raise hop.HopError("hop payload too short (%d bytes)" % len(data))
    magic, version, kind, _seq = hop._HEADER.unpack_from(data, 0)
    if magic != hop._MAGIC or version != hop._VERSION or kind not in hop.KIND_NAMES:
        raise hop.HopError("bad hop header (magic %r, version %d, kind %d)" % (magic, version, kind))
    h = codec.describe_header(memoryview(data)[hop._HEADER.size :], max_bytes)
    if tuple(h["shape"]) != tuple(shape) or h["out"] != np.dtype(dtype):
        raise hop.HopError("payload holds a %s tensor of shape %s, the cut is %s %s"
                           % (h["out"], tuple(h["shape"]), dtype, tuple(shape)))
