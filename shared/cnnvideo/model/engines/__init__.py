"""Stage backends: run the layers between two cuts in eager torch or in an ONNX Runtime session, fp32 or int8.

One interface for every backend (`Stage.run(x) -> y`, numpy in and out). With `precision: int8`, the tensors at
inner cuts are uint8 quantised values; their (scale, zero point) per cut come from one calibration (`quant`): the
master's, made on its camera's own frames and sent to every worker (`camera_calibration`), or one every worker
computes the same way from the trainer's video; they travel with the tensor so the receiver can check them.

`StageFactory.stage(start, end)` builds (and caches in memory) the stage a worker runs; where ONNX Runtime is not
installed (armv7, the 32-bit Pi image) or a stage cannot be exported, it falls back to torch unless configured to
stop, and says why (`Stage.engine` is the engine that really runs).
"""
from __future__ import annotations

from cnnvideo.model.engines.base import (  # noqa: F401 - the package's public names
    ENGINES,
    ON_ERROR,
    PRECISIONS,
    EngineError,
    EngineSpec,
    QParams,
    Stage,
    check_input,
    cpu_threads,
    first_line,
    ort_available,
)
from cnnvideo.model.engines.factory import StageFactory, factory_for, model_key, weights_digest  # noqa: F401
