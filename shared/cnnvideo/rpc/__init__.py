"""gRPC stubs (generated from proto/cnnvideo.proto, git-ignored) and helpers; stubs are made on import if missing."""
from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_PROTO = os.path.join(_HERE, "..", "..", "..", "proto", "cnnvideo.proto")


def _stale() -> bool:
    try:
        stub_times = [os.path.getmtime(os.path.join(_HERE, n)) for n in ("cnnvideo_pb2.py", "cnnvideo_pb2_grpc.py")]
    except OSError:
        return True
    return os.path.isfile(_PROTO) and min(stub_times) < os.path.getmtime(_PROTO)


if _stale():  # import-time fallback for source checkouts that skipped `make setup`
    import sys

    from cnnvideo.rpc import generate as _generate

    _generate.ensure(quiet=True)
    del _generate
    sys.modules.pop(__name__ + ".generate", None)  # so `python -m cnnvideo.rpc.generate` runs it fresh
