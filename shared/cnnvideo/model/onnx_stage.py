"""Stages of an ONNX-file model (`model: <path>.onnx`) for workers: the subgraph between two cuts of an OnnxGraph
in an ONNX Runtime session, with the engines' stage interface (`Stage.run(x) -> y`, numpy in and out, input
checked against the start cut). Imports no torch: a worker running an ONNX model needs onnx, onnxruntime and
numpy only.

OnnxStage runs fp32 (workers normally build stages through engines.StageFactory, whose ORT engine takes the
stage from OnnxGraph instead of exporting torch, and quantises it for int8). A stage ending at the last cut of a
model with several outputs (a detector) returns them packed in one float32 (1, N) row (onnx_graph.pack_outputs;
unpack_outputs splits it), so every stage returns one array.
OrtModule is the stand-in for a torch stage module that OnnxGraph.stage_module returns.
"""
from __future__ import annotations

import logging
from typing import List, Tuple, Union

import numpy as np

from cnnvideo.model.engines import Stage, check_input

log = logging.getLogger(__name__)


class OnnxStage(Stage):
    """The nodes of an OnnxGraph from cut `start` to cut `end` in an ORT session (`threads` intra-op threads)."""

    engine = "onnxruntime"
    precision = "fp32"

    def __init__(self, graph, start: int, end: int, threads: int = 1) -> None:
        super().__init__(graph.cut_index(start), graph.cut_index(end), None, None)
        if self.start > self.end:
            raise ValueError("stage start cut %d is after end cut %d" % (self.start, self.end))
        self.in_cut = graph.cuts[self.start]
        self.out_cut = graph.cuts[self.end]
        self.threads = int(threads)
        self.session = None
        self.output_names: List[str] = list(self.out_cut.tensors)
        self.input_name = self.in_cut.tensors[0]
        if not self.empty:
            self.session = graph.session(self.start, self.end, self.threads)
            self.input_name = self.session.get_inputs()[0].name
            self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, x: np.ndarray) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
        """Run the stage on the tensor at the start cut (a leading batch dim of 1 is added when missing); the
        tensor at the end cut, or a tuple of every model output at the last cut of a multi-output model."""
        where = "cut %d (%s)" % (self.start, self.in_cut.name)
        if self.in_cut.static:
            x = check_input(x, self.in_cut.shape, self.in_cut.dtype, where)
        elif not isinstance(x, np.ndarray) or x.ndim != len(self.in_cut.shape) or x.dtype != self.in_cut.dtype:
            raise ValueError("stage input at %s: expected %s of rank %d, got %s" % (
                where, self.in_cut.dtype, len(self.in_cut.shape), getattr(x, "shape", type(x).__name__)))
        if self.empty:
            return x
        outs = self.session.run(self.output_names, {self.input_name: np.ascontiguousarray(x)})
        return outs[0] if len(outs) == 1 else tuple(outs)


class OrtModule:
    """A stage standing in for a torch stage module (OnnxGraph.stage_module): called with a torch tensor it returns
    a torch tensor (torch imported only then), with a numpy array a numpy array; eval() and a weightless
    state_dict() as torch modules have. The session is built on first call."""

    def __init__(self, graph, start: int, end: int, threads: int = 1) -> None:
        self.graph = graph
        self.start = start
        self.end = end
        self.threads = threads
        self._stage = None

    def eval(self) -> "OrtModule":
        """No train/eval modes: self."""
        return self

    def state_dict(self) -> dict:
        """No torch parameters (the weights live in the ONNX file: OnnxGraph.digest identifies them)."""
        return {}

    def __call__(self, x):
        if self._stage is None:
            self._stage = OnnxStage(self.graph, self.start, self.end, self.threads)
        if isinstance(x, np.ndarray):
            return self._stage.run(x)
        import torch

        y = self._stage.run(np.ascontiguousarray(x.detach().cpu().numpy()))
        if isinstance(y, tuple):
            return tuple(torch.from_numpy(np.array(t)) for t in y)
        return torch.from_numpy(np.array(y))
