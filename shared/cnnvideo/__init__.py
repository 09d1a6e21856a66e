"""cnn-video: run a CNN split over a pool of edge devices (stages x replicas; a chain is one plan) over frame
differences."""
from __future__ import annotations

__version__ = "0.1.0"


def _onnx_before_torch() -> None:
    """Import onnx before anything imports torch when protobuf runs its C++ implementation (Debian's, in the
    images): that implementation shares one descriptor pool with the C++ libraries in the process, and Debian's
    torch registers its own older onnx.proto there at import, after which onnx 1.17 fails to import
    ("cannot import name 'IR_VERSION_2021_7_30'") and every ONNX Runtime stage fell back to torch in compose.
    Imported first, onnx keeps its own descriptors. Nothing to do where torch is already in, onnx is missing, or
    protobuf is another implementation (pip's upb: no shared pool)."""
    import sys

    if "torch" in sys.modules or "onnx" in sys.modules:
        return
    try:
        from google.protobuf.internal import api_implementation

        if api_implementation.Type() != "cpp":
            return
        import onnx  # noqa: F401
    except Exception:  # no protobuf or no onnx here: the engines say so when asked (engines.ort_available)
        return


_onnx_before_torch()
