"""int8 of one ONNX stage: static QDQ quantisation (uint8 activations, per-channel int8 weights, min/max ranges)
with the cut tensors pinned to the cut's calibration, some layers kept fp32, and the stage output bias-corrected.

Why (measured on trained mobilenet_v2, vtest.avi, docs/results/engine): a street scene is no ImageNet class, so
the fp32 top-2 logits are 0.002-0.4 apart, and an error of a few tenths flips top-1. Most of the int8 error is
a *bias* that stays the same from frame to frame (a fixed camera): on the calibration frames the quantised stage
is run beside its fp32 model, and the mean difference of its output per channel is subtracted (empirical bias
correction). The layers that add most of the rest (the first convolution and the blocks at half the input
resolution, few channels each) and the classifier stay fp32."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import warnings
from typing import List, Optional, Tuple

import numpy as np

from cnnvideo.model.engines.base import EngineError, QParams, first_line
from cnnvideo.model.engines.ort_session import session
from cnnvideo.model.onnx_nodes import node_deps, sort_nodes

log = logging.getLogger(__name__)

# int8 weights use 7 of their 8 bits (quantize_static's reduce_range). On x86 without VNNI, ONNX Runtime's u8 x s8
# kernels add each pair of products in int16 with saturation (255 * 127 * 2 > 32767); 7-bit weights cannot saturate
# and cost no CPU. How much saturation costs depends on the host: none measurable on MobileNetV2 on one AVX2 host
# (docs/results/engine), but on the detector on an AMD EPYC (AVX2, no VNNI) F1 against fp32 fell to 0.934 on vtest
# and 0.835 on walkers with 8 bits, against 0.977 and 0.954 with 7 (docs/results/int8-scenes).
WEIGHT_BITS = 7

RECIPE = ("qdq u8 act, per-channel s8 weights in 7 bits, minmax, pre-processed, fp32: first conv, classifier, "
          "half-resolution stem, a detector's post-processing, the readers of an inner cut kept float; output bias "
          "correction per channel against the fp32 model, on the int8 prefix's output, none on a detector's outputs")


def name_io(model, q_in: Optional[QParams], q_out: Optional[QParams]):
    """Make an int8 stage take and give uint8 at inner cuts: DequantizeLinear in front of 'x' (input 'xq') and
    QuantizeLinear after 'y' (output 'yq'), with the cut's parameters; ORT folds the Q/DQ pairs this creates."""
    import onnx
    from onnx import TensorProto, helper

    g = model.graph
    if q_in is not None:
        old = [i for i in g.input if i.name == "x"][0]
        shape = [d.dim_value for d in old.type.tensor_type.shape.dim]
        g.input.remove(old)
        g.input.insert(0, helper.make_tensor_value_info("xq", TensorProto.UINT8, shape))
        g.initializer.extend([helper.make_tensor("xq_scale", TensorProto.FLOAT, [], [q_in.scale]),
                              helper.make_tensor("xq_zp", TensorProto.UINT8, [], [q_in.zero_point])])
        g.node.insert(0, helper.make_node("DequantizeLinear", ["xq", "xq_scale", "xq_zp"], ["x"], name="cut_in_dq"))
    if q_out is not None:
        old = [o for o in g.output if o.name == "y"][0]
        shape = [d.dim_value for d in old.type.tensor_type.shape.dim]
        g.output.remove(old)
        g.output.append(helper.make_tensor_value_info("yq", TensorProto.UINT8, shape))
        g.initializer.extend([helper.make_tensor("yq_scale", TensorProto.FLOAT, [], [q_out.scale]),
                              helper.make_tensor("yq_zp", TensorProto.UINT8, [], [q_out.zero_point])])
        g.node.append(helper.make_node("QuantizeLinear", ["y", "yq_scale", "yq_zp"], ["yq"], name="cut_out_q"))
    onnx.checker.check_model(model)
    return model


class _DropRootRecords(logging.Filter):
    """Drops records logged straight to the root logger (the ORT quantiser's chatter), not those of named loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != "root"


class _Reader:
    """Calibration data reader for the ORT quantiser: the stage input of every calibration frame."""

    def __init__(self, inputs: List[np.ndarray]) -> None:
        self._it = iter([{"x": x} for x in inputs])

    def get_next(self):
        return next(self._it, None)


def _spatial_sizes(model) -> dict:
    """Tensor name -> H*W of every 4-d tensor whose shape the pre-processing inferred."""
    sizes = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if len(dims) == 4 and all(d > 0 for d in dims):
            sizes[vi.name] = dims[2] * dims[3]
    return sizes


def fp32_nodes(model, first_conv: bool, classifier: bool, stem_area: int = 0, postprocess: bool = False,
               band: Tuple[int, int] = (0, 0)) -> List[str]:
    """Nodes kept in fp32: the model's first convolution (its input is the normalised frame), the classifier's
    Gemm/MatMul (its output is what top-1 reads), with `stem_area` > 0 every node whose input has at least
    that many pixels (the blocks at half the input resolution: few channels, so the most quantisation noise per
    multiply-add, measured as the largest share of the int8 error), and with `postprocess` every node after the
    last convolution (postprocess_nodes: a detector's score sigmoid, box decoding and NMS loop, whose uint8
    rounding moved and dropped boxes), and every node whose input has `band` = (lo, hi) pixels, lo <= n < hi
    (ort_engine.head_band: the maps that feed a detector's finest head)."""
    nodes = list(model.graph.node)
    names = []
    if postprocess:
        names += postprocess_nodes(model)
    if first_conv:
        names += [n.name for n in nodes if n.op_type == "Conv"][:1]
    if classifier:
        names += [n.name for n in nodes if n.op_type in ("Gemm", "MatMul")][-1:]
    if stem_area > 0:
        sizes = _spatial_sizes(model)
        names += [n.name for n in nodes if n.input and sizes.get(n.input[0], 0) >= stem_area and n.name not in names]
    if band[1] > band[0]:
        sizes = _spatial_sizes(model)
        names += [n.name for n in nodes if n.input and band[0] <= sizes.get(n.input[0], 0) < band[1]
                  and n.name not in names]
    return names


def name_nodes(graph) -> int:
    """Give every unnamed node of the graph a unique name, in place (the quantiser excludes nodes by name only: an
    unnamed Concat packing a detector's outputs was quantised, and every box collapsed); how many were named."""
    taken = {n.name for n in graph.node}
    count = 0
    for i, node in enumerate(graph.node):
        if not node.name:
            name, k = "cnnvideo_node_%d" % i, 0
            while name in taken:
                k += 1
                name = "cnnvideo_node_%d_%d" % (i, k)
            node.name = name
            taken.add(name)
            count += 1
    return count


def postprocess_nodes(model) -> List[str]:
    """Names of the nodes no convolution depends on (what follows the last convolution on every path: a detector's
    reshapes and concats of the head outputs, score sigmoid, box decoding, NMS loop), reads of Loop/If bodies
    counted as inputs."""

    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    feeds_conv = set()
    stack = [i for i, n in enumerate(nodes) if n.op_type.startswith("Conv")]
    while stack:
        i = stack.pop()
        if i in feeds_conv:
            continue
        feeds_conv.add(i)
        stack.extend(producer[d] for d in node_deps(nodes[i]) if d in producer)
    return [n.name for i, n in enumerate(nodes) if i not in feeds_conv and n.name]


def head_nodes(model, depth: int) -> List[str]:
    """Names of the nodes with between 1 and `depth` convolutions after them on their longest path to an output
    (themselves counted): a detector's heads. Depth 1: the last convolutions (an SSD's class and box predictors,
    whose outputs are the score logits and box offsets) and what lies between them and the one before; depth 2:
    the depthwise convolutions feeding those too. Nothing with depth 0."""

    if depth <= 0:
        return []
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    conv = [int(n.op_type.startswith("Conv")) for n in nodes]
    after = list(conv)  # convolutions on the longest path from the node to an output, itself counted
    changed = True
    while changed:  # a fixed point whatever the node order (a DAG: at most its depth passes)
        changed = False
        for i in reversed(range(len(nodes))):
            for j in (producer[d] for d in node_deps(nodes[i]) if d in producer):
                if conv[j] + after[i] > after[j]:
                    after[j], changed = conv[j] + after[i], True
    return [n.name for i, n in enumerate(nodes) if 1 <= after[i] <= depth and n.name]


def _run_all(sess, inputs: List[np.ndarray]) -> List[np.ndarray]:
    name = sess.get_inputs()[0].name
    return [sess.run(None, {name: x})[0] for x in inputs]


def bias_correction(fp32_sess, int8_sess, inputs: List[np.ndarray],
                    int8_inputs: Optional[List[np.ndarray]] = None) -> np.ndarray:
    """Mean over the calibration frames of (int8 output - fp32 output), per channel (axis 1), shaped to broadcast
    over the output (1, C, 1, ...); the fp32 stage runs on `inputs` (fp32 activations), the int8 one on
    `int8_inputs` (what the int8 stages before it deliver; default `inputs`), so the error of the whole chain up to
    this stage's output is corrected, not only this stage's own."""
    total = None
    for a, b in zip(_run_all(int8_sess, inputs if int8_inputs is None else int8_inputs), _run_all(fp32_sess, inputs)):
        d = (a.astype(np.float64) - b.astype(np.float64))
        axes = tuple(i for i in range(d.ndim) if i != 1)
        d = d.mean(axis=axes, keepdims=True) if d.ndim > 1 else d
        total = d if total is None else total + d
    return (total / len(inputs)).astype(np.float32)


CORRECTION = "y_bias_correction"
_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def with_correction_node(model) -> List[str]:
    """Append `y = y_uncorrected - y_bias_correction` (zeros, per channel) to an fp32 stage model, in place; the
    names of the nodes that must stay fp32 for the correction to act before the cut's one rounding to uint8 (the
    node that made 'y', and the subtraction)."""
    from onnx import helper, numpy_helper

    g = model.graph
    out = [o for o in g.output if o.name == "y"][0]
    dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
    shape = [1, dims[1]] + [1] * (len(dims) - 2) if len(dims) > 1 else dims
    producer = ""
    for node in g.node:
        if "y" in node.output:
            producer = node.name
        node.output[:] = ["y_uncorrected" if o == "y" else o for o in node.output]
        node.input[:] = ["y_uncorrected" if i == "y" else i for i in node.input]
    g.initializer.append(numpy_helper.from_array(np.zeros(shape, dtype=np.float32), CORRECTION))
    g.node.append(helper.make_node("Sub", ["y_uncorrected", CORRECTION], ["y"], name="y_bias_correct"))
    return [producer, "y_bias_correct"]


def set_correction(model, correction: np.ndarray) -> None:
    """Write the measured correction into the model's `y_bias_correction` initializer, in place."""
    from onnx import numpy_helper

    init = [i for i in model.graph.initializer if i.name == CORRECTION][0]
    init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(correction, dtype=np.float32), CORRECTION))


def quantize_stage(fp32: bytes, inputs: List[np.ndarray], q_in: Optional[QParams], q_out: Optional[QParams],
                   workdir: str, first_conv: bool = False, classifier: bool = False, stem_area: int = 0,
                   correct_bias: bool = True, chain_inputs: Optional[List[np.ndarray]] = None,
                   method: str = "minmax", reduce_range: bool = False, weights: str = "s8",
                   postprocess: bool = False, float_input: bool = False, keep_prefixes: tuple = (),
                   per_channel: bool = True, heads: int = 0, symmetric: bool = False,
                   band: Tuple[int, int] = (0, 0)) -> bytes:
    """Static QDQ int8 of an fp32 stage model, with the cut tensors pinned to the cut's calibration; `first_conv`
    / `classifier`: the stage holds the model's first convolution / its classifier, which stay fp32; `stem_area`:
    nodes whose input has at least that many pixels stay fp32; `correct_bias`: subtract the output's mean error
    per channel on the calibration inputs (with `chain_inputs`, the stage's input as the int8 stages before it
    deliver it, dequantised: the correction then covers their error too). EngineError when there are no calibration
    inputs. `method`: the quantiser's range calibration (minmax, the engine's; entropy, percentile for studies);
    `reduce_range`: 7-bit weights (WEIGHT_BITS: the engine's, against AVX2's u8 x s8 pair-sum saturation);
    `weights` ("s8" or "u8"): a study knob (u8 x u8 avoids saturation too, at about fp32's CPU).
    `postprocess`: the stage ends at a detector's outputs, whose post-processing stays fp32 (fp32_nodes).
    `float_input`: the stage starts at an inner cut the calibration keeps float (quant.MAX_READ_ERROR), so the
    nodes reading 'x' stay fp32: quantising it here would round the channels the float hop kept. `keep_prefixes`:
    nodes whose names start so stay fp32; `per_channel`: False for one weight scale per tensor (studies); `heads`:
    the nodes with at most that many convolutions after them stay fp32 (head_nodes: a detector's predictors);
    `band`: nodes whose input has lo <= pixels < hi stay fp32 (fp32_nodes);
    `symmetric`: activation ranges symmetric around their zero point (studies)."""
    if not inputs:
        raise EngineError("int8 calibration without frames: no calibration input for the stage")
    overrides = {}
    for name, qp in (("x", q_in), ("y", q_out)):
        if qp is not None:
            overrides[name] = [{"scale": np.array(qp.scale, dtype=np.float32),
                                "zero_point": np.array(qp.zero_point, dtype=np.uint8)}]
    os.makedirs(workdir, exist_ok=True)
    # a folder of its own: workers of a compose cluster share the cache volume and, each PID n of its container, had
    # overwritten and removed each other's stage-n files when they built a stage at once
    scratch = tempfile.mkdtemp(prefix="stage-", dir=workdir)
    src, pre, dst = (os.path.join(scratch, "stage.%s.onnx" % kind) for kind in ("fp32", "pre", "int8"))
    with open(src, "wb") as fh:
        fh.write(fp32)
    try:
        import onnx
        import onnxruntime as ort
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

    except Exception as exc:  # noqa: BLE001 - e.g. an onnx too old for this quantiser
        raise EngineError("int8 quantisation is not available here: %s" % first_line(exc)) from None
    ort.set_default_logger_severity(3)
    quiet = _DropRootRecords()
    logging.getLogger().addFilter(quiet)
    try:
        # the histogram calibrators print progress: keep stdout for the caller's output (bench JSON)
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            # constant folding and shape inference first: conv biases become initialisers, so convs quantise
            quant_pre_process(src, pre, skip_symbolic_shape=True)
            model = onnx.load(pre)
            named = name_nodes(model.graph)
            keep = fp32_nodes(model, first_conv, classifier, stem_area, postprocess, band)
            keep += [n for n in head_nodes(model, heads) if n not in keep]
            if keep_prefixes:
                keep += [n.name for n in model.graph.node if n.name.startswith(tuple(keep_prefixes))
                         and n.name not in keep]
            if float_input:
                keep += [n.name for n in model.graph.node if "x" in n.input and n.name not in keep]
            if correct_bias:
                keep += with_correction_node(model)
            if correct_bias or named:
                onnx.save(model, pre)
            extra = {"TensorQuantOverrides": overrides} if overrides else {}
            if symmetric:
                extra["ActivationSymmetric"] = True
            quantize_static(pre, dst, _Reader(inputs), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                            activation_type=QuantType.QUInt8, reduce_range=reduce_range,
                            weight_type=QuantType.QInt8 if weights == "s8" else QuantType.QUInt8,
                            calibrate_method=getattr(CalibrationMethod, _METHODS[method]), nodes_to_exclude=keep,
                            extra_options=extra or None)
        model = onnx.load(dst)
        sort_nodes(model.graph)
        if correct_bias:
            corr = bias_correction(session(fp32, 1, "fp32 stage"), session(model.SerializeToString(), 1, "int8 stage"),
                                   inputs, chain_inputs)
            log.debug("int8 output bias correction: max |mean error| %.4g", float(np.abs(corr).max()))
            set_correction(model, corr)
        return name_io(model, q_in, q_out).SerializeToString()
    except EngineError:
        raise
    except Exception as exc:  # noqa: BLE001 - the quantiser raises many types
        raise EngineError("int8 quantisation failed: %s" % first_line(exc)) from None
    finally:
        logging.getLogger().removeFilter(quiet)
        shutil.rmtree(scratch, ignore_errors=True)  # with the quantiser's own side files (*.pre-inferred.onnx)
