"""Cheap synchronous checks of received payloads, run in the RPC handler before anything is queued or allocated.

A FrameTask's tensor is decoded later, in sequence order, against the hop's delta state; its headers can be
checked at once, so a truncated, oversize or mis-shaped payload gets INVALID_ARGUMENT on the call that
carried it instead of failing the run later. Only headers are read (no decompression, no allocation).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from cnnvideo.wire import codec, hop


def check_hop_payload(data: bytes, shape: Sequence[int], dtype: str, max_bytes: int) -> None:
    """Raise HopError / CodecError unless `data` has a valid hop header and a codec header of `shape`/`dtype`."""
    hop.peek_header(data)
    h = codec.describe_header(memoryview(data)[hop.HEADER_SIZE :], max_bytes)
    if tuple(h["shape"]) != tuple(shape) or h["out"] != np.dtype(dtype):
        raise hop.HopError("payload holds a %s tensor of shape %s, the cut is %s %s"
                           % (h["out"], tuple(h["shape"]), dtype, tuple(shape)))
