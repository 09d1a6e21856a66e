"""The ONNX Runtime backend: export the fx stage module between two cuts to ONNX once (cached on disk per model,
weights, frame size, cuts and precision), quantise it to int8 (static QDQ, per-channel weights) when asked, and run
it in a session whose intra-op threads match the CPU cap.

Layers that do not export: adaptive average pooling whose output does not divide its input (alexnet's
AdaptiveAvgPool2d(6, 6) on a 14x21 map at 480x720) is replaced, for the fixed input size of the stage, by the same
averages written as two matrix products (each output cell is a mean over a row band times a column band, so the
pooling is separable); any other layer that fails makes the stage an EngineError naming the layer, and the factory
runs that stage in torch (or stops)."""
from __future__ import annotations

import copy
import io
import logging
import os
import warnings
from typing import List, Optional, Tuple

import numpy as np

from cnnvideo.artifacts import atomic_tmp, onnx_stage_path, onnx_work_dir
from cnnvideo.model.engines.base import EngineError, QParams, Stage, check_input, cpu_threads, first_line
from cnnvideo.model.engines.ort_int8 import RECIPE, WEIGHT_BITS, _spatial_sizes, head_nodes, quantize_stage
from cnnvideo.model.engines.ort_profile import SEGMENT_SCOPE, SegmentNames, segment_kernel_seconds
from cnnvideo.model.engines.ort_session import session

log = logging.getLogger(__name__)

OPSET = 17
META_KEY = "cnnvideo.key"


# ---------------------------------------------------------------- export


def _fixed_pool_matrix(n_in: int, n_out: int):
    """(n_out, n_in) averaging matrix of adaptive pooling along one axis (torch's start/end bin rule)."""
    import torch

    m = torch.zeros(n_out, n_in, dtype=torch.float32)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def _fixed_adaptive_pool(in_hw: Tuple[int, int], out_hw: Tuple[int, int]):
    """A module equal to AdaptiveAvgPool2d(out_hw) on (N, C, *in_hw) inputs, built from two matmuls."""
    import torch
    from torch import nn

    class FixedAdaptiveAvgPool2d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("rows", _fixed_pool_matrix(in_hw[0], out_hw[0]))
            self.register_buffer("cols_t", _fixed_pool_matrix(in_hw[1], out_hw[1]).t().contiguous())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.matmul(torch.matmul(self.rows, x), self.cols_t)

    return FixedAdaptiveAvgPool2d()


def _out_size(size, in_hw: Tuple[int, int]) -> Tuple[int, int]:
    if isinstance(size, int):
        size = (size, size)
    return tuple(in_hw[i] if s is None else int(s) for i, s in enumerate(size))


def fix_pools(module, sample) -> Tuple[object, List[str]]:
    """(module, notes): non-dividing AdaptiveAvgPool2d layers replaced by their fixed-size equivalent (on a copy)."""
    import torch
    from torch import nn

    shapes = {}
    hooks = [m.register_forward_pre_hook(lambda mod, inp, name=name: shapes.__setitem__(name, tuple(inp[0].shape)))
             for name, m in module.named_modules() if isinstance(m, nn.AdaptiveAvgPool2d)]
    try:
        with torch.no_grad():
            module(sample)
    finally:
        for h in hooks:
            h.remove()
    todo = []
    for name, shape in shapes.items():
        in_hw = shape[-2:]
        out_hw = _out_size(dict(module.named_modules())[name].output_size, in_hw)
        if out_hw != (1, 1) and (in_hw[0] % out_hw[0] or in_hw[1] % out_hw[1]):
            todo.append((name, in_hw, out_hw))
    if not todo:
        return module, []
    module = copy.deepcopy(module)
    notes = []
    for name, in_hw, out_hw in todo:
        parent, _, leaf = name.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, leaf, _fixed_adaptive_pool(in_hw, out_hw))
        notes.append("%s: AdaptiveAvgPool2d%s on %dx%d exported as fixed pooling matrices" % (name, out_hw, *in_hw))
    return module, notes


def _export_bytes(module, sample) -> bytes:
    import inspect

    import torch

    kwargs = dict(input_names=["x"], output_names=["y"], opset_version=OPSET, do_constant_folding=True)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript exporter: no onnxscript needed, same path as torch 1.13
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (sample,), buf, **kwargs)
    return buf.getvalue()


def _sample(graph, cut: int):
    import torch

    c = graph.cuts[cut]
    if c.dtype == "uint8":
        return torch.zeros(c.shape, dtype=torch.uint8)
    return torch.zeros(c.shape, dtype=getattr(torch, c.dtype))


def export_stage(graph, start: int, end: int) -> Tuple[bytes, List[str]]:
    """(ONNX bytes, notes) of the stage from cut `start` to cut `end`; EngineError naming the failing layer."""
    if hasattr(graph, "stage_bytes"):  # an ONNX-file model: the stage is extracted from the file, not exported
        try:
            return graph.stage_model(start, end, io_names=("x", "y")).SerializeToString(), []
        except Exception as exc:  # noqa: BLE001 - onnx raises its own types
            raise EngineError("stage %d..%d of %s: %s" % (start, end, graph.path, first_line(exc))) from None
    why = graph.torch_only(start, end) if hasattr(graph, "torch_only") else ""
    if why:
        raise EngineError("stage %d..%d cannot be exported to ONNX: %s" % (start, end, why))
    sample = _sample(graph, start)
    module, notes = fix_pools(segment_scoped(graph, start, end), sample)
    try:
        return _export_bytes(module, sample), notes
    except Exception as exc:  # the exporter raises many types
        first = _failing_segment(graph, start, end)
        where = ""
        if first is not None:
            names = [graph.layers[i].name for i in graph.segment_layers(first)]
            where = " at layer %s (segment %d)" % (", ".join(names), first)
        raise EngineError("ONNX export of stage %d..%d failed%s: %s" % (start, end, where, first_line(exc))) from None


def segment_scoped(graph, start: int, end: int):
    """The stage start..end as its segments in sequence, each under the module name `s<k>`, so every exported
    node and tensor name says which segment it computes (ort_profile reads ORT's per-node times back by it); the
    same layers as graph.stage_module(start, end), since a cut is one tensor. In eval mode: a new Sequential is
    in training mode, and torch.onnx.export restores the mode it found on the module *and its children*, which
    are the graph's own layers (every stage_module shares them and sets eval again): a module taken from the
    graph before an export (the bench's torch reference) then ran BatchNorm on the frame's statistics and
    overwrote the running ones, which every later pass of the graph reads (bench engine: int8 top-1 agreement 0.0
    against that reference; issue 24)."""
    from collections import OrderedDict

    from torch import nn

    seq = nn.Sequential(OrderedDict((SEGMENT_SCOPE % k, graph.stage_module(k, k + 1)) for k in range(start, end)))
    return seq.eval()


def _failing_segment(graph, start: int, end: int) -> Optional[int]:
    """First segment between the cuts that does not export on its own (None if each does)."""
    for k in range(start, end):
        sample = _sample(graph, k)
        try:
            _export_bytes(fix_pools(graph.stage_module(k, k + 1), sample)[0], sample)
        except Exception:  # noqa: BLE001 - any failure names this segment
            return k
    return None


# ---------------------------------------------------------------- cache and session


def _with_key(data: bytes, key: str) -> bytes:
    import onnx

    model = onnx.load_from_string(data)
    del model.metadata_props[:]
    model.metadata_props.add(key=META_KEY, value=key)
    return model.SerializeToString()


def load_cached(path: str, key: str, threads: int):
    """Session of the cached file at `path`; EngineError naming the file if it is corrupted or of another stage."""
    with open(path, "rb") as fh:
        data = fh.read()
    sess = session(data, threads, "cached ONNX file %s" % path)
    found = sess.get_modelmeta().custom_metadata_map.get(META_KEY)
    if found != key:
        raise EngineError("cached ONNX file %s belongs to another model or stage (%s), expected %s"
                          % (path, found or "no cnnvideo key", key))
    return sess


def torch_version() -> str:
    """torch's version without its local part ("2.5.1+cpu" -> "2.5.1"), from the installed package's metadata: a
    worker that runs ONNX Runtime stages from the cache never imports torch (1.4 s of CPU, 14 s under a 0.1 cap)."""
    try:
        from importlib import metadata  # novermin - Python 3.8+ (3.7 imports torch below)

        return metadata.version("torch").split("+")[0]
    except Exception:  # noqa: BLE001 - ImportError (3.7), PackageNotFoundError (no metadata)
        import torch

        return torch.__version__.split("+")[0]


def stage_key(factory, start: int, end: int, precision: str) -> str:
    """What identifies a stage's ONNX file: model identity, cuts, precision (and calibration), exporter versions."""
    import onnxruntime

    g = factory.graph
    parts = [factory.key, "cuts %d..%d (%s..%s)" % (start, end, g.cuts[start].name, g.cuts[end].name),
             precision, "torch %s" % torch_version(), "opset %d" % OPSET, "segment-scoped names"]
    if precision == "int8":
        parts += ["calibration %s" % factory.calibration.digest, "ort %s" % onnxruntime.__version__, RECIPE,
                  "stem area %d" % stem_area(g, getattr(factory, "stem", "model"))]
        if not getattr(factory, "per_channel", True):
            parts.append("per-tensor weights")
        if getattr(factory, "weight_bits", WEIGHT_BITS) != WEIGHT_BITS:
            parts.append("%d-bit weights" % factory.weight_bits)
        parts += _study_parts(factory)
    return " | ".join(parts)


def _study_parts(factory) -> List[str]:
    """The stage key's words for a factory's study knobs away from the engine's recipe (none by default)."""
    parts = []
    if getattr(factory, "heads", 0):
        parts.append("fp32 heads %d" % factory.heads)
    if getattr(factory, "band", 0):
        parts.append("fp32 head band %d" % factory.band)
    if getattr(factory, "method", "minmax") != "minmax":
        parts.append("method %s" % factory.method)
    if getattr(factory, "symmetric", False):
        parts.append("symmetric activations")
    if getattr(factory, "keep", ()):
        parts.append("fp32 nodes %s" % ",".join(factory.keep))
    return parts


def _store(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = atomic_tmp(path)
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _model_bytes(factory, start: int, end: int, precision: str, q_in, q_out) -> bytes:
    """Export (and for int8 quantise) a stage, going through the fp32 cache file for int8."""
    fp32_key = stage_key(factory, start, end, "fp32")
    fp32_path = onnx_stage_path(factory.cache_dir, start, end, "fp32", fp32_key)
    data = None
    if os.path.isfile(fp32_path):
        try:
            load_cached(fp32_path, fp32_key, 1)
            with open(fp32_path, "rb") as fh:
                data = fh.read()
        except EngineError as exc:
            log.warning("%s; exporting again", exc)
    if data is None:
        data, notes = export_stage(factory.graph, start, end)
        for n in notes:
            log.info("stage %d..%d: %s", start, end, n)
        data = _with_key(data, fp32_key)
        _store(fp32_path, data)
    if precision == "fp32":
        return data

    inputs = factory.calibration.inputs(start)
    g = factory.graph
    chain = None
    if start > 0:
        try:
            chain = _chain_inputs(factory, start, q_in)
        except EngineError as exc:  # the stage itself can still be built; its correction then covers only itself
            log.warning("stage %d..%d: int8 bias correction without the stages before it (%s)", start, end, exc)
    # a stage ending at several model outputs (a detector's boxes, scores, classes, packed in one row): its
    # post-processing stays fp32, and no per-"channel" bias correction (each packed element is a box slot whose
    # content changes from frame to frame: a mean error per slot shifted boxes)
    detector_end = len(getattr(g.cuts[end], "tensors", ())) > 1
    q = quantize_stage(data, inputs, q_in, q_out, onnx_work_dir(factory.cache_dir),
                       first_conv=start <= _first_conv_cut(g), classifier=end == g.num_segments,
                       stem_area=stem_area(g, getattr(factory, "stem", "model")), chain_inputs=chain,
                       correct_bias=not detector_end, postprocess=detector_end,
                       per_channel=getattr(factory, "per_channel", True),
                       reduce_range=getattr(factory, "weight_bits", WEIGHT_BITS) == 7,
                       float_input=start > 0 and q_in is None,
                       heads=getattr(factory, "heads", 0) if detector_end else 0,
                       band=head_band(g, getattr(factory, "band", 0)),
                       method=getattr(factory, "method", "minmax"), symmetric=getattr(factory, "symmetric", False),
                       keep_prefixes=tuple(getattr(factory, "keep", ())))
    return _with_key(q, stage_key(factory, start, end, "int8"))


def stem_area(graph, rule: str = "model") -> int:
    """Input pixels from which a node stays fp32 (ort_int8.fp32_nodes): half the resolution of the model's own
    input (`model`: the first convolution's input; a detector resizes the frame to 300x300 inside, so its
    half-resolution blocks are 150x150), a quarter of it (`quarter`: the 75x75 blocks too, a study), the input of
    a detector's finest head (`head`: every block down to the 19x19 map its first predictor reads, a study), or
    half the frame's (`frame`, the rule before issue 46: it kept none of the detector's blocks fp32). Measured on
    trained person-ssdlite (docs/results/int8-scenes/README.md, `cnnvideo bench int8-scenes`): the `model` rule took F1
    against fp32 on vtest from 0.983 to 0.993 and on a beach of small people from 0.953 to 0.987."""
    h, w = graph.frame_size
    half_frame = (h // 2) * (w // 2)
    model = getattr(graph, "model", None)
    if rule == "frame" or model is None:
        return half_frame
    sizes = _spatial_sizes(model)
    if rule == "head":
        return _head_area(model) or half_frame
    first = next((n for n in model.graph.node if n.op_type == "Conv"), None)
    area = sizes.get(first.input[0], 0) if first is not None else 0
    if area <= 0:
        return half_frame
    return area // 16 if rule == "quarter" else area // 4


def head_band(graph, levels: int) -> Tuple[int, int]:
    """(lo, hi) input pixels of the nodes that stay fp32 around a detector's finest head (ort_int8.fp32_nodes): its
    own map and the `levels` - 1 finer maps before it, each 4x the pixels of the next; lo = the head's input (19x19
    on person-ssdlite), hi = twice the finest map's pixels, so odd sizes (38x38 over 19x19) stay inside and the
    next map (75x75) outside: levels 2 keeps the 19x19 and 38x38 blocks of its MobileNetV2. (0, 0) with levels 0,
    or when the graph has no ONNX model or no head."""
    area = _head_area(graph.model) if levels > 0 and getattr(graph, "model", None) is not None else 0
    return (area, area * 4 ** (levels - 1) * 2) if area else (0, 0)


def _head_area(model) -> int:
    """Pixels of the largest map a detector's last convolutions read (ort_int8.head_nodes, depth 1); 0 if none."""
    sizes = _spatial_sizes(model)
    heads = set(head_nodes(model, 1))
    return max((sizes.get(n.input[0], 0) for n in model.graph.node if n.name in heads and n.input), default=0)


def _chain_inputs(factory, start: int, q_in: Optional[QParams]) -> List[np.ndarray]:
    """The tensor at cut `start` as int8 stages deliver it for each calibration frame, dequantised (as is at a cut
    the calibration keeps float): the prefix 0..start built as one int8 stage (the file a first worker ending there
    uses; cached), so the stage's bias correction also removes the mean error of the stages before it."""
    prefix = build_ort_stage(factory, 0, start, None, q_in)
    outs = [prefix.run(x) for x in factory.calibration.inputs(0)]
    return [q_in.dequantize(y) for y in outs] if q_in is not None else outs


def _first_conv_cut(graph) -> int:
    """Index of the last cut before the model's first convolution layer."""
    for k in range(graph.num_segments):
        if any(graph.layers[i].kind.startswith("Conv") for i in graph.segment_layers(k)):
            return k
    return 0


class OrtStage(Stage):
    """A stage in an ONNX Runtime session."""

    engine = "onnxruntime"

    def __init__(self, graph, start: int, end: int, sess, precision: str, q_in, q_out, path: str = "",
                 threads: int = 1) -> None:
        super().__init__(start, end, q_in, q_out)
        self.graph = graph
        self.threads = threads
        self.precision = precision
        self.in_cut = graph.cuts[start]
        self.out_cut = graph.cuts[end]
        self.session = sess
        self.path = path
        self.input_name = sess.get_inputs()[0].name
        self.in_dtype = "uint8" if q_in is not None else self.in_cut.dtype

    def segment_seconds(self, x: np.ndarray, runs: int = 3) -> Optional[np.ndarray]:
        """Kernel seconds per segment of this stage on x, from ORT's per-node profile (ort_profile; a stage of an
        ONNX-file model by its nodes' names, `SegmentNames`); None when no kernel could be placed."""
        if not self.path or not os.path.isfile(self.path):
            return None
        with open(self.path, "rb") as fh:
            data = fh.read()
        names = None
        if hasattr(self.graph, "node_segments"):
            names = SegmentNames(self.graph.node_segments(), self.graph.segment_op_types())
        x = check_input(x, self.in_cut.shape, self.in_dtype, "cut %d (%s)" % (self.start, self.in_cut.name))
        x = np.ascontiguousarray(x)
        got = segment_kernel_seconds(data, self.start, self.end, x, self.threads, runs, names,
                                     plain=lambda: self.session.run(None, {self.input_name: x}))
        return got if got.sum() > 0 else None

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run the stage (see Stage.run)."""
        x = check_input(x, self.in_cut.shape, self.in_dtype, "cut %d (%s)" % (self.start, self.in_cut.name))
        return self.session.run(None, {self.input_name: np.ascontiguousarray(x)})[0]


def build_ort_stage(factory, start: int, end: int, q_in: Optional[QParams], q_out: Optional[QParams]) -> OrtStage:
    """The stage as an ORT session, from the disk cache when a valid file is there (a corrupted file or one of
    another stage is named, then replaced, unless `on_error: stop`)."""
    precision = factory.precision
    threads = cpu_threads(factory.spec.threads)
    key = stage_key(factory, start, end, precision)
    path = onnx_stage_path(factory.cache_dir, start, end, precision, key)
    if os.path.isfile(path):
        try:
            sess = load_cached(path, key, threads)
            log.info("stage %d..%d: %s from %s (%d threads)", start, end, factory.spec.label, path, threads)
            return OrtStage(factory.graph, start, end, sess, precision, q_in, q_out, path, threads)
        except EngineError as exc:
            if factory.spec.on_error == "stop":
                raise
            log.warning("%s; building it again", exc)
    sess = _from_master(factory, start, end, precision, key, path, threads)
    if sess is not None:
        return OrtStage(factory.graph, start, end, sess, precision, q_in, q_out, path, threads)
    data = _model_bytes(factory, start, end, precision, q_in, q_out)
    _store(path, data)
    sess = session(data, threads, "stage %d..%d" % (start, end))
    log.info("stage %d..%d: %s built into %s (%d threads)", start, end, factory.spec.label, path, threads)
    return OrtStage(factory.graph, start, end, sess, precision, q_in, q_out, path, threads)


def _from_master(factory, start: int, end: int, precision: str, key: str, path: str, threads: int):
    """The session of the int8 stage file the master pushed for exactly this key (stage_files.StageInbox, stored
    into the cache first), or None after one line saying why this worker quantizes it itself."""
    inbox = getattr(factory, "inbox", None)
    if precision != "int8" or inbox is None:
        return None
    data, why = inbox.take(start, end, precision, key)
    if data is None:
        log.warning("stage %d..%d: quantizing int8 here: %s", start, end, why)
        return None
    _store(path, data)
    try:
        sess = load_cached(path, key, threads)  # the key in the file's own metadata, and a session that loads
    except EngineError as exc:
        log.warning("stage %d..%d: the master's int8 file is refused (%s); quantizing int8 here", start, end, exc)
        return None
    log.info("stage %d..%d: %s fetched from the master, stored in %s (%d threads)", start, end, factory.spec.label,
             path, threads)
    return sess


def stage_file(factory, start: int, end: int) -> Tuple[str, bytes]:
    """(stage key, ONNX bytes) of the stage at the factory's precision, from the factory's cache folder or built
    (exported, quantized: the same _model_bytes a worker runs) and stored there: what the master serves its
    workers (stage_files). EngineError when it cannot be built."""
    precision = factory.precision
    key = stage_key(factory, start, end, precision)
    path = onnx_stage_path(factory.cache_dir, start, end, precision, key)
    if os.path.isfile(path):
        try:
            load_cached(path, key, 1)
            with open(path, "rb") as fh:
                return key, fh.read()
        except EngineError as exc:
            log.warning("%s; building it again", exc)
    data = _model_bytes(factory, start, end, precision, factory.qparams(start), factory.qparams(end))
    _store(path, data)
    return key, data
