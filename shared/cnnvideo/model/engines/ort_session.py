"""One ONNX Runtime CPU session, configured the same way for every stage and study."""
from __future__ import annotations

from cnnvideo.model.engines.base import EngineError, first_line


def session(data: bytes, threads: int, where: str = "model", profile_prefix: str = ""):
    """An ORT CPU session of `data` with `threads` intra-op threads, sequential, no spin-waiting (a spinning thread
    burns a capped container's quota); EngineError naming `where` if ORT cannot load it. `profile_prefix`: ORT's
    own per-node profiling into files starting there (studies only)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    try:
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        raise EngineError("%s is not a loadable ONNX model (%s)" % (where, first_line(exc))) from None
