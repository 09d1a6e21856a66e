"""The torch backend: the fx (or chain) stage module run eagerly in fp32; with int8 cuts it dequantises its input
and quantises its output with the cut's calibration, so it can stand in for an int8 stage (fallback)."""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from cnnvideo.model.engines.base import QParams, Stage, check_input


class TorchStage(Stage):
    """Eager torch fp32 compute between two cuts (indices or names): the one torch stage runner, used by the
    workers, the master's reference model and the tools."""

    engine = "torch"
    precision = "fp32"

    def __init__(self, graph, start: Union[int, str], end: Union[int, str], q_in: Optional[QParams] = None,
                 q_out: Optional[QParams] = None) -> None:
        start, end = graph.cut_index(start), graph.cut_index(end)
        super().__init__(start, end, q_in, q_out)
        self.graph = graph
        self.in_cut = graph.cuts[start]
        self.out_cut = graph.cuts[end]
        self.module = graph.stage_module(start, end)

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run the stage (see Stage.run)."""
        import torch

        where = "cut %r" % self.in_cut.name
        if self.q_in is not None:
            x = self.q_in.dequantize(check_input(x, self.in_cut.shape, "uint8", where))
        else:
            x = check_input(x, self.in_cut.shape, self.in_cut.dtype, where)
        if self.empty:
            y = x
        else:
            # copy in: the model never sees (or aliases) the caller's buffer, which may be read-only held state
            with torch.no_grad():
                y = np.ascontiguousarray(self.module(torch.from_numpy(np.array(x, copy=True))).detach().numpy())
        return self.q_out.quantize(y) if self.q_out is not None else y
