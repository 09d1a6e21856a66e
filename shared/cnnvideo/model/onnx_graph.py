"""Any ONNX model as a layer graph: its single-tensor cut points and the stage (a valid ONNX model) between two
cuts.

`OnnxGraph.load(path, frame_size)` reads the file with the onnx package (no torch), fixes dynamic input dims for the
frame size (batch 1, H and W of an NCHW or NHWC image input), runs shape inference, folds `Shape`/`Size` of tensors
whose shape is then static into constants, folds the shape values inference leaves open (Shape/Size of tensors after
a Loop, a Loop's shape-only outputs such as a TF detector's true image shape) to the values two ORT runs (a zero and
a noise input) agree on and pins open Loop/If output shapes likewise, unless a data-dependent op (NonMaxSuppression,
NonZero, TopK, Unique, also inside a Loop/If/Scan body) is upstream (see _fold_probed_shapes), and finds the CUTS:
tensors that every path from the graph input to the graph outputs crosses. With the nodes in topological order, a
position (after node i) is a cut when exactly one non-constant tensor is live there (produced at or before i,
consumed after i, or a graph output) and node i produced it. Constants (initializers, Constant nodes and anything
computed from constants only) do not count: a stage that needs one recomputes it. A node with subgraphs (Loop, If,
Scan) is atomic: the names its bodies read from the outer scope count as its inputs, and no cut goes inside it, so a
detector's resize loop before the backbone and its NMS loop after it end up in the first and the last stage. Nodes
that no graph output depends on are dropped first (they could only hide cuts).

Cut 0 is the graph input (with `frame_input`, as workers load it: a uint8 (1, H, W, 3) frame feeding
preprocessing nodes prepended to the model, as LayerGraph's cut 0), the last cut is all graph outputs (several
tensors for a detector). Layers are the non-constant nodes. Cut and layer records mirror `cnnvideo.model.graph.Cut` /
`Layer` (index, layer, name, shape, dtype, numel, bytes_dense), plus the tensor names of the cut, whether its shape
is static, and the multiply-accumulates (Conv, ConvTranspose, Gemm, MatMul; other ops count 0) of each layer and
segment for cost models. `stage_model(a, b)` is the subgraph from cut a to cut b as an ONNX model (own extraction:
walk back from cut b's tensors to cut a's, copying the initializers the nodes read, including from subgraph
bodies); `session(a, b)` runs it in ONNX Runtime configured like the ORT stage engine (1 intra-op thread unless
told otherwise); `stage_module(a, b)` stands in for LayerGraph's torch stage module.

Limits: one data input; models over 2 GB (protobuf limit) are not handled; a cut whose shape depends on the data
is measured on a zero input (`static` False) and not shape-checked, but hops still expect one shape per cut.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from cnnvideo.errors import ConfigError
from cnnvideo.model.cuts import find_cut, unique_name

METHOD = "onnx"
# ops whose output is not a function of their inputs: never treated as constants (they must run once, in order)
_NONDETERMINISTIC = frozenset(("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                               "Multinomial", "Bernoulli", "Dropout"))


class OnnxModelError(ConfigError):
    """An ONNX file that cannot be loaded, fixed to the frame size, or split; one line, naming the file."""


@dataclass
class OnnxLayer:
    """One ONNX node in topological order; `inputs` are indices of the layers producing its non-constant inputs."""

    index: int
    name: str
    kind: str
    inputs: Tuple[int, ...]
    macs: int = 0


@dataclass
class OnnxCut:
    """A point in topological order where one tensor crosses (all graph outputs at the last cut); `layer` is the
    node that produced it (-1 = the graph input). `shape`/`dtype` describe the first tensor, `shapes`/`dtypes` all;
    `static` is False when a shape was only measured on a zero input (data-dependent shape)."""

    index: int
    layer: int
    name: str
    shape: Tuple[int, ...]
    dtype: str
    tensors: Tuple[str, ...] = ()
    shapes: Tuple[Tuple[int, ...], ...] = ()
    dtypes: Tuple[str, ...] = ()
    static: bool = True

    @property
    def numel(self) -> int:
        """Number of elements crossing (summed over the tensors of the last cut)."""
        return int(sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes))

    @property
    def bytes_dense(self) -> int:
        """Bytes of the tensors sent whole and uncompressed."""
        return int(sum(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize
                       for s, d in zip(self.shapes, self.dtypes)))


def _one_line(exc: BaseException) -> str:
    """'Type: first line of the message' (at most 200 characters)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return ("%s: %s" % (type(exc).__name__, lines[0] if lines else ""))[:200].rstrip(": ")


def _np_dtype(elem_type: int) -> str:
    """ONNX TensorProto element type -> numpy dtype name ('float32')."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type))).name


# ---------------------------------------------------------------- loading and fixing the input


def load_model(path: str):
    """The ModelProto in `path`, checked; OnnxModelError naming the file if it is missing, not ONNX or damaged."""
    import onnx

    if not os.path.isfile(path):
        raise OnnxModelError("ONNX model file %s not found" % path)
    try:
        model = onnx.load(path)
    except Exception as exc:  # DecodeError, external data errors, ...
        raise OnnxModelError("%s is not a readable ONNX model (truncated or not ONNX?): %s"
                             % (path, _one_line(exc))) from None
    if not model.graph.node or not model.graph.output:
        raise OnnxModelError("%s is not a readable ONNX model (truncated or not ONNX?): it holds no graph" % path)
    try:
        onnx.checker.check_model(path)  # by path: no serialising of the weights in Python
    except Exception as exc:  # ValidationError
        raise OnnxModelError("%s is not a valid ONNX model: %s" % (path, _one_line(exc))) from None
    check_ops(model, path)
    return model


def _all_nodes(graph) -> Iterable:
    """Every node of a graph and of the Loop/If/Scan bodies inside it."""
    for node in graph.node:
        yield node
        for g in _subgraphs(node):
            yield from _all_nodes(g)


def check_ops(model, path: str = "model") -> None:
    """OnnxModelError naming the first op (domain:type and node) that ONNX Runtime here can run neither as a CPU
    kernel nor as a function (the model's own, or an ONNX op defined as one), also inside Loop/If bodies; checked
    at load so a model with a custom op stops in one line before any role starts. Nothing is checked where
    onnxruntime (or its kernel listing) is missing: a session then says what it lacks."""
    try:
        import onnx.defs
        from onnxruntime import __version__ as ort_version
        from onnxruntime.capi import _pybind_state

        kernels = {(k.domain or "", k.op_name) for k in _pybind_state.get_all_opkernel_def()}
    except Exception:  # noqa: BLE001 - no ORT here (armv7), or one without the kernel listing
        return
    local = {(f.domain or "", f.name) for f in model.functions}
    local.add(("", "Constant"))  # no kernel: ORT turns Constant nodes into initialisers
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    seen: Set[Tuple[str, str]] = set()
    for node in _all_nodes(model.graph):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        key = (domain, node.op_type)
        if key in seen or key in kernels or key in local:
            continue
        seen.add(key)
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
            if schema.has_function or schema.has_context_dependent_function:
                continue
        except Exception:  # noqa: BLE001 - SchemaError: ONNX does not define it either
            pass
        raise OnnxModelError("%s: op %s%s (node %s) is not available in ONNX Runtime %s" % (
            path, domain + ":" if domain else "", node.op_type, node.name or "unnamed", ort_version))


def _data_inputs(graph) -> List:
    """Graph inputs that are not initializers (old exporters list every weight as an input too)."""
    inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    return [v for v in graph.input if v.name not in inits]


def _image_axes(dims: List[Optional[int]]) -> Optional[Tuple[int, int]]:
    """(H axis, W axis) of a rank-4 image input: NCHW when axis 1 is a small static channel count, NHWC when
    axis 3 is; None when the layout cannot be told."""
    if len(dims) != 4:
        return None
    if dims[1] is not None and dims[1] <= 4 and not (dims[3] is not None and dims[3] <= 4):
        return 2, 3
    if dims[3] is not None and dims[3] <= 4 and not (dims[1] is not None and dims[1] <= 4):
        return 1, 2
    return None


def fix_input(model, frame_size: Optional[Tuple[int, int]], path: str = "model") -> Tuple[str, Tuple[int, ...]]:
    """Make the single data input's shape static in place: batch 1, H and W from `frame_size` for an image input
    (NCHW or NHWC); (input name, shape). OnnxModelError naming `path` when a dim cannot be fixed, or when a static
    H, W differs from the frame size."""
    inputs = _data_inputs(model.graph)
    if len(inputs) != 1:
        raise OnnxModelError("%s has %d inputs (%s); only single-input models can be split"
                             % (path, len(inputs), ", ".join(v.name for v in inputs) or "none"))
    inp = inputs[0]
    if not inp.type.HasField("tensor_type") or not inp.type.tensor_type.HasField("shape"):
        raise OnnxModelError("%s: input %s is not a tensor of known rank" % (path, inp.name))
    shape = inp.type.tensor_type.shape
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in shape.dim]
    names = [d.dim_param or "?" for d in shape.dim]
    want: Dict[int, int] = {}
    if dims and dims[0] is None:
        want[0] = 1
    axes = _image_axes(dims)
    if axes is not None and frame_size is not None:
        for axis, size in zip(axes, (int(frame_size[0]), int(frame_size[1]))):
            if dims[axis] is None:
                want[axis] = size
            elif dims[axis] != size:
                raise OnnxModelError("%s takes %s images of fixed size %s, the frame size is %dx%d"
                                     % (path, inp.name, "x".join(str(dims[a]) for a in axes), frame_size[0],
                                        frame_size[1]))
    for axis, d in enumerate(dims):
        if d is None and axis not in want:
            how = "no frame size given" if axes is not None else "the input is not a rank-4 NCHW/NHWC image"
            raise OnnxModelError("%s: cannot fix dynamic dim %r (axis %d) of input %s (%s)"
                                 % (path, names[axis], axis, inp.name, how))
    for axis, size in want.items():
        shape.dim[axis].Clear()
        shape.dim[axis].dim_value = size
    return inp.name, tuple(d if d is not None else want[a] for a, d in enumerate(dims))


IMAGENET_MEAN = (0.485, 0.456, 0.406)  # as cnnvideo.model.zoo.Preprocess (which imports torch)
IMAGENET_STD = (0.229, 0.224, 0.225)
FRAME_INPUT = "input"  # LayerGraph's name of cut 0 (the raw frame)


def prepend_preprocess(model, input_name: str, input_shape: Tuple[int, ...], path: str = "model",
                       mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD) -> str:
    """Give the model (in place) the frame input LayerGraph stages take: uint8 (1, H, W, 3) RGB, cast to float,
    /255, normalised by mean and std per channel (cnnvideo.model.zoo.Preprocess's ops in its order), transposed to
    NCHW when the model's image input is NCHW. The new input's name (FRAME_INPUT unless taken)."""
    from onnx import TensorProto, helper

    graph = model.graph
    inp = next(v for v in graph.input if v.name == input_name)
    elem = inp.type.tensor_type.elem_type
    axes = _image_axes(list(input_shape))
    nchw = axes == (2, 3)
    channels = input_shape[1] if nchw else input_shape[-1] if axes is not None else None
    if elem == TensorProto.UINT8 and not nchw and channels == 3 and input_shape[0] == 1:
        return input_name  # the model reads raw frames (a TF detector's image_tensor): nothing to prepend
    if elem != TensorProto.FLOAT or channels != 3 or input_shape[0] != 1:
        raise OnnxModelError("%s: input %s is %s %s, not a float32 3-channel image, so frames cannot be fed to it"
                             % (path, input_name, _np_dtype(elem), "x".join(str(d) for d in input_shape)))
    taken = {v.name for v in graph.input} | {o for n in graph.node for o in n.output} | {
        t.name for t in graph.initializer}
    frame = unique_name(FRAME_INPUT, set(taken))
    pre = lambda s: unique_name("preprocess/" + s, taken)  # noqa: E731 - one-line name maker
    cshape = [1, 3, 1, 1] if nchw else [1, 1, 1, 3]
    c255, cmean, cstd = pre("255"), pre("mean"), pre("std")
    inits = [helper.make_tensor(c255, TensorProto.FLOAT, [], [255.0]),
             helper.make_tensor(cmean, TensorProto.FLOAT, cshape, [float(v) for v in mean]),
             helper.make_tensor(cstd, TensorProto.FLOAT, cshape, [float(v) for v in std])]
    t0, t1, t2 = pre("cast"), pre("scaled"), pre("centred")
    nodes = []
    if nchw:
        nodes.append(helper.make_node("Transpose", [frame], [pre("nchw")], perm=[0, 3, 1, 2], name=pre("transpose")))
    src = nodes[0].output[0] if nodes else frame
    nodes += [helper.make_node("Cast", [src], [t0], to=TensorProto.FLOAT, name=pre("to_float")),
              helper.make_node("Div", [t0, c255], [t1], name=pre("div255")),
              helper.make_node("Sub", [t1, cmean], [t2], name=pre("sub_mean")),
              helper.make_node("Div", [t2, cstd], [input_name], name=pre("div_std"))]
    h, w = (input_shape[2], input_shape[3]) if nchw else (input_shape[1], input_shape[2])
    new_input = helper.make_tensor_value_info(frame, TensorProto.UINT8, [1, h, w, 3])
    old_nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + old_nodes)
    graph.initializer.extend(inits)
    kept = [v for v in graph.input if v.name != input_name]
    del graph.input[:]
    graph.input.extend([new_input] + kept)
    return frame


# ---------------------------------------------------------------- shapes


_LIGHT_MAX = 4096  # initializers with more elements go into shape inference without their data (shapes only)
_TENSOR_DATA = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _infer(model, path: str):
    """`model` with shapes inferred (data propagation on), in place; OnnxModelError naming the file on
    inconsistency. Inference runs on a copy without the data of large initializers (weights: only their shapes
    matter; small ones, such as Reshape targets, keep theirs), since serialising the weights twice took seconds."""
    import onnx

    light = onnx.ModelProto()
    light.CopyFrom(model)
    for t in light.graph.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) > _LIGHT_MAX:
            for f in _TENSOR_DATA:
                t.ClearField(f)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # InferenceError
        raise OnnxModelError("%s: shape inference failed for the fixed input: %s" % (path, _one_line(exc))) from None
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def _types(graph) -> Dict[str, Tuple[int, Optional[Tuple[Optional[int], ...]]]]:
    """name -> (elem type, shape with None for unknown dims, or None for unknown rank) of the top-level tensors."""
    out: Dict[str, Tuple[int, Optional[Tuple[Optional[int], ...]]]] = {}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not v.type.HasField("tensor_type"):
            continue
        tt = v.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        prev = out.get(v.name)
        if prev is None or (prev[1] is None or None in prev[1]) and shape is not None:
            out[v.name] = (tt.elem_type, shape)
    for t in graph.initializer:
        out[t.name] = (t.data_type, tuple(int(d) for d in t.dims))
    return out


def _static(shape) -> bool:
    return shape is not None and all(d is not None and d >= 0 for d in shape)


def _fold_shapes(graph, types) -> int:
    """Replace Shape/Size nodes whose input shape is static by Constant nodes (in place); how many were folded."""
    from onnx import helper

    folded = 0
    for node in graph.node:
        if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        shape = types.get(node.input[0], (0, None))[1]
        if not _static(shape):
            continue
        if node.op_type == "Shape":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            value = np.array(shape[slice(attrs.get("start", 0), attrs.get("end"))], dtype=np.int64)
        else:
            value = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
        out = node.output[0]
        node.Clear()
        node.CopyFrom(helper.make_node("Constant", [], [out], value=helper.make_tensor(
            out + "_value", 7, value.shape, value.ravel().tolist())))
        folded += 1
    return folded


# ops whose outputs' values AND shapes depend on the data in ways no probe can vouch for: a Shape/Size downstream of
# one (or of a Loop/If/Scan whose body holds one anywhere) is never folded, even when two probes agree
_DATA_DEPENDENT = frozenset(("NonMaxSuppression", "NonZero", "TopK", "Unique"))
_PROBE_SEED = 20240601  # the noise frame of the shape probe (fixed: loading is reproducible)


def _holds_op(graph, ops: frozenset) -> bool:
    """True when a (sub)graph or any body nested in it has a node of one of `ops`."""
    return any(n.op_type in ops or any(_holds_op(g, ops) for g in _subgraphs(n)) for n in graph.node)


def _data_dependent(graph) -> Set[str]:
    """Top-level tensor names downstream of a data-dependent op (_DATA_DEPENDENT; a node with a body holding one
    counts as one), following subgraph bodies' outer reads as inputs."""
    deps = [node_deps(n) for n in graph.node]
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    tainted: Dict[int, bool] = {}
    for root in range(len(graph.node)):  # iterative DFS: no recursion limit on deep graphs
        stack = [root]
        while stack:
            i = stack[-1]
            if i in tainted:
                stack.pop()
                continue
            ups = [producer[d] for d in deps[i] if d in producer and producer[d] != i]
            todo = [u for u in ups if u not in tainted]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            node = graph.node[i]
            tainted[i] = (node.op_type in _DATA_DEPENDENT or any(tainted[u] for u in ups)
                          or any(_holds_op(g, _DATA_DEPENDENT) for g in _subgraphs(node)))
    return {o for i, n in enumerate(graph.node) if tainted.get(i) for o in n.output if o}


def _probe_inputs(elem: int, shape: Tuple[int, ...]) -> List[np.ndarray]:
    """A zero and a (seeded) random-noise input of the given ONNX element type and static shape."""
    dtype = np.dtype(_np_dtype(elem))
    rng = np.random.default_rng(_PROBE_SEED)
    if dtype.kind == "f":
        noise = rng.random(shape).astype(dtype)
    elif dtype.kind == "b":
        noise = rng.random(shape) < 0.5
    else:
        hi = min(255, int(np.iinfo(dtype).max))
        noise = rng.integers(0, hi + 1, size=shape).astype(dtype)
    return [np.zeros(shape, dtype=dtype), noise]


def _shape_only(graph, outer: Set[str]) -> Set[str]:
    """Names in `graph` whose values depend on the data only through tensor shapes: initializers, Shape/Size
    outputs, outputs of deterministic nodes reading only such names (Constant nodes included), and the Loop/If
    outputs their bodies compute so (_shape_only_outputs). `outer`: such names of the enclosing scopes. Nodes are
    taken in file order (topological, as ONNX requires)."""
    known = set(outer) | {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    for node in graph.node:
        outs = [o for o in node.output if o]
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            known.update(outs)
        elif node.op_type in _NONDETERMINISTIC:
            continue
        elif all(d in known for d in node_deps(node)):
            known.update(outs)
        elif node.op_type in ("Loop", "If") and node.domain in ("", "ai.onnx"):
            known.update(_shape_only_outputs(node, known))
    return known


def _shape_only_outputs(node, known: Set[str]) -> Set[str]:
    """The outputs of a Loop or If node that its body computes from shapes only (see _shape_only), given the
    outer names `known` to be so: an If's when its condition and both branches' outputs are; a Loop's when its
    trip count, its condition in and out and (for a loop-carried value) the initial value and the body's update
    are; nothing when the body reads a data tensor (through `known`) to decide how often it runs."""
    bodies = {a.name: a.g for a in node.attribute if a.HasField("g")}
    if node.op_type == "If":
        then, other = bodies.get("then_branch"), bodies.get("else_branch")
        if then is None or other is None or node.input[0] not in known:
            return set()
        a, b = _shape_only(then, known), _shape_only(other, known)
        return {o for k, o in enumerate(node.output)
                if o and then.output[k].name in a and other.output[k].name in b}
    body = bodies.get("body")
    if body is None or any(i and i not in known for i in node.input[:2]):
        return set()
    n_carried = len(node.input) - 2
    carried = {k for k in range(n_carried) if not node.input[2 + k] or node.input[2 + k] in known}
    while True:
        ins = {body.input[0].name, body.input[1].name} | {body.input[2 + k].name for k in carried}
        names = _shape_only(body, known | ins)
        if body.output[0].name not in names:
            return set()
        kept = {k for k in carried if body.output[1 + k].name in names}
        if kept == carried:
            break
        carried = kept
    out = {node.output[k] for k in carried if k < len(node.output)}
    out |= {o for j, o in enumerate(node.output) if j >= n_carried and body.output[1 + j].name in names}
    return {o for o in out if o}


def _fold_probed_shapes(model, input_name: str, path: str) -> List[str]:
    """Fold (in place) the shape values shape inference leaves open into Constant nodes of the values measured by
    running the model (input fixed) in ORT on a zero and on a random-noise input, and pin the shapes it leaves open
    on Loop/If outputs to the measured ones (so inference makes what follows static); the names of the folded and
    pinned tensors. Folded are: Shape/Size nodes whose input shape is not static, and Loop/If outputs their bodies
    compute from shapes only (_shape_only: a TF detector's resize Loop also returns the true image shape). Only
    values (shapes) both runs agree on are folded (pinned), and never one downstream of a data-dependent op
    (_data_dependent: NonMaxSuppression, NonZero, TopK, Unique, also inside an upstream Loop/If/Scan body). So a
    detector's resize Loop before the backbone no longer hides the backbone's cuts behind shape values kept live
    until the postprocessor, while whatever follows its NMS keeps being computed. Limit: a shape that depends on the
    pixel values only through other ops (a Reshape target or a Loop trip count computed from them, no data-dependent
    op involved) and happens to agree on both inputs would be folded too. Nothing is folded when ORT cannot load or
    run the model (loading goes on as before)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    types = _types(graph)
    tainted = _data_dependent(graph)
    shape_only = _shape_only(graph, set())
    used = {d for n in graph.node for d in node_deps(n)} | {o.name for o in graph.output}
    cands: List[Tuple[int, str, int]] = []  # (node index, tensor, elem type): values to fold
    pins: List[Tuple[str, int]] = []  # (tensor, elem type): shapes to pin
    for i, n in enumerate(graph.node):
        if n.domain not in ("", "ai.onnx") or tainted.intersection(o for o in n.output if o):
            continue
        if n.op_type in ("Shape", "Size") and n.input and n.output[0] in used:
            if n.input[0] not in tainted and not _static(types.get(n.input[0], (0, None))[1]):
                cands.append((i, n.output[0], TensorProto.INT64))
        elif n.op_type in ("Loop", "If") and not all(d in shape_only for d in node_deps(n)):
            for o in n.output:
                if o in used and o in shape_only and types.get(o, (0, None))[0]:
                    cands.append((i, o, types[o][0]))
        if n.op_type in ("Loop", "If"):
            pins += [(o, types[o][0]) for o in n.output if o in used and types.get(o, (0, None))[0]
                     and not _static(types[o][1])]
    if not cands and not pins:
        return []
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    names = [t for _, t, _ in cands]
    names += [t for t, _ in pins if t not in names]
    for t, elem in [(t, e) for _, t, e in cands] + pins:
        if t not in have:
            have.add(t)
            m.graph.output.append(helper.make_tensor_value_info(t, elem, None))
    elem, shape = types[input_name]
    try:
        sess = _session(m.SerializeToString(), 1, "%s (shape probe)" % path)
        runs = [dict(zip(names, sess.run(names, {input_name: x})))
                for x in _probe_inputs(elem, tuple(int(d) for d in shape))]
    except Exception:  # noqa: BLE001 - EngineError or ORT's own: an optimisation only, the cut search still runs
        return []
    folded: List[str] = []
    infos = {v.name: v for v in list(graph.value_info) + list(graph.output)}
    for t, elem in pins:
        a, b = np.asarray(runs[0][t]), np.asarray(runs[1][t])
        if a.shape != b.shape:
            continue
        if t in infos:
            dims = infos[t].type.tensor_type.shape.dim
            del dims[:]
            for d in a.shape:
                dims.add().dim_value = int(d)
        else:
            graph.value_info.append(helper.make_tensor_value_info(t, elem, a.shape))
        folded.append(t)
    taken = {o for n in graph.node for o in n.output if o} | {v.name for v in graph.input}
    taken |= {t.name for t in graph.initializer}
    consts = []
    for i, t, _ in cands:
        a, b = np.asarray(runs[0][t]), np.asarray(runs[1][t])
        if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
            continue
        node = graph.node[i]
        value = numpy_helper.from_array(a, t + "_value")
        if node.op_type in ("Shape", "Size"):
            node.Clear()
            node.CopyFrom(helper.make_node("Constant", [], [t], value=value))
        else:  # the Loop/If keeps running for its other outputs; this one goes to an unused name
            k = list(node.output).index(t)
            node.output[k] = unique_name(t + "_folded", taken)
            consts.append(helper.make_node("Constant", [], [t], value=value, name=unique_name(t + "_const", taken)))
        folded.append(t)
    if consts:
        old = list(graph.node)
        del graph.node[:]
        graph.node.extend(consts + old)
    return folded


# ---------------------------------------------------------------- graph analysis


def _subgraphs(node) -> Iterable:
    """The GraphProtos held in a node's attributes (Loop/Scan body, If branches)."""
    from onnx import AttributeProto

    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                yield g


def _outer_refs(graph) -> Set[str]:
    """Names a (sub)graph reads from enclosing scopes: used by its nodes (or their bodies) and not defined in it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: Set[str] = set()
    for node in graph.node:
        defined.update(o for o in node.output if o)
        used.update(i for i in node.input if i)
        for g in _subgraphs(node):
            used |= _outer_refs(g)
    return used - defined


def node_deps(node) -> List[str]:
    """Every tensor name a node reads: its inputs and what its subgraph bodies read from the outer scope."""
    deps = [i for i in node.input if i]
    seen = set(deps)
    for g in _subgraphs(node):
        for name in sorted(_outer_refs(g)):
            if name not in seen:
                seen.add(name)
                deps.append(name)
    return deps


def sort_nodes(graph) -> None:
    """Reorder a graph's nodes topologically in place, counting what Loop/If/Scan bodies read from the outer scope
    as inputs (ORT's quantiser sorts by explicit inputs only and can put a detector's resize Loop before the Cast
    its body reads, which the ONNX checker refuses). Stable: file order where it already is one; every node kept.
    OnnxModelError on a cycle."""
    import heapq

    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: List[List[int]] = [[] for _ in nodes]
    indeg = [0] * len(nodes)
    for i, n in enumerate(nodes):
        for p in {producer[d] for d in node_deps(n) if d in producer and producer[d] != i}:
            indeg[i] += 1
            users[p].append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise OnnxModelError("the graph has a cycle")
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def _topo_live(graph, deps: List[List[str]]) -> List[int]:
    """Indices of the nodes some graph output depends on, in a topological order (stable: file order when it
    already is one). OnnxModelError on a cycle or an undefined input."""
    producer: Dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for o in node.output:
            if o:
                producer[o] = i
    needed: Set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        needed.add(i)
        stack.extend(producer[d] for d in deps[i] if d in producer and producer[d] not in needed)
    indeg = {i: 0 for i in needed}
    users: Dict[int, List[int]] = {i: [] for i in needed}
    for i in needed:
        for p in {producer[d] for d in deps[i] if d in producer}:
            indeg[i] += 1
            users[p].append(i)
    import heapq

    ready = [i for i in needed if indeg[i] == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(needed):
        raise OnnxModelError("the graph has a cycle")
    return order


def _node_macs(node, types) -> int:
    """Multiply-accumulates of a Conv, ConvTranspose, Gemm or MatMul node from static shapes (0 otherwise)."""
    def shape(name):
        s = types.get(name, (0, None))[1]
        return s if _static(s) else None

    op = node.op_type
    if node.domain not in ("", "ai.onnx") or op not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
        return 0
    out = shape(node.output[0])
    a = shape(node.input[0])
    b = shape(node.input[1]) if len(node.input) > 1 else None
    if op == "Conv" and out is not None and b is not None:
        return int(np.prod(out, dtype=np.int64) * np.prod(b[1:], dtype=np.int64))
    if op == "ConvTranspose" and a is not None and b is not None:
        return int(np.prod(a, dtype=np.int64) * np.prod(b[1:], dtype=np.int64))
    if op == "Gemm" and out is not None and a is not None and len(a) == 2:
        trans = any(at.name == "transA" and at.i for at in node.attribute)
        return int(np.prod(out, dtype=np.int64) * (a[0] if trans else a[1]))
    if op == "MatMul" and out is not None and a is not None and a:
        return int(np.prod(out, dtype=np.int64) * a[-1])
    return 0


@dataclass
class _Analysis:
    """What the cut search found; internal to OnnxGraph."""

    order: List[int]  # node indices (into graph.node) in topological order
    deps: List[List[str]]  # per node index (into graph.node)
    const: Set[str]  # constant tensor names
    const_nodes: Set[int]  # nodes computing constants only (not layers: every stage that needs one recomputes it)
    positions: List[Tuple[int, str]]  # (position, tensor) of each inner cut
    producer: Dict[str, int] = field(default_factory=dict)  # tensor -> node index


def _analyse(graph, input_name: str) -> _Analysis:
    """Topological order, constants, and the positions where exactly one non-constant tensor is live."""
    deps = [node_deps(n) for n in graph.node]
    order = _topo_live(graph, deps)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    const = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    const |= {v.name for v in graph.input if v.name != input_name and v.name in const}
    born: Dict[str, int] = {input_name: -1}
    last: Dict[str, int] = {}
    const_nodes: Set[int] = set()
    for pos, i in enumerate(order):
        node = graph.node[i]
        if node.op_type not in _NONDETERMINISTIC and all(d in const for d in deps[i]):
            const.update(o for o in node.output if o)
            const_nodes.add(i)
            continue
        for d in deps[i]:
            if d not in const:
                last[d] = pos
        for o in node.output:
            if o:
                born[o] = pos
    end = len(order)
    for o in graph.output:
        if o.name not in const:
            last[o.name] = end
    dying: Dict[int, List[str]] = {}
    for t, pos in last.items():
        dying.setdefault(pos, []).append(t)
    births: Dict[int, List[str]] = {}
    for t, pos in born.items():
        if t in last:  # produced and used (unused outputs never cross anything)
            births.setdefault(pos, []).append(t)
    live: Set[str] = set()
    positions: List[Tuple[int, str]] = []
    for pos in range(-1, end):
        live.update(births.get(pos, ()))
        live.difference_update(dying.get(pos, ()))
        if pos >= 0 and len(live) == 1:
            (t,) = live
            if born[t] == pos:
                positions.append((pos, t))
    return _Analysis(order, deps, const, const_nodes, positions, producer)


# ---------------------------------------------------------------- the graph


class OnnxGraph:
    """An ONNX model fixed to a frame size: layers (nodes) in topological order, single-tensor cuts, segment MACs,
    and stages between cuts as ONNX models. Mirrors the LayerGraph fields the rest of the code reads (layers,
    cuts, frame_size, method, num_segments, cut_index, segment_layers)."""

    method = METHOD

    def __init__(self, model, path: str, frame_size: Optional[Tuple[int, int]], input_name: str,
                 input_shape: Tuple[int, ...], probe: bool = True) -> None:
        self.model = model  # shape-inferred, input fixed, static Shape/Size folded
        self.path = path
        self.input_name = input_name
        self.frame_size = tuple(int(v) for v in frame_size) if frame_size is not None else None
        self._digest: Optional[str] = None
        graph = model.graph
        self._types = _types(graph)
        an = _analyse(graph, input_name)
        self._an = an
        # layers: the non-constant nodes in topological order (LayerGraph leaves constants out too)
        self._pos = {i: pos for pos, i in enumerate(i for i in an.order if i not in an.const_nodes)}
        taken: Set[str] = set()
        self.layers: List[OnnxLayer] = []
        for i, pos in self._pos.items():
            node = graph.node[i]
            ins = sorted({self._pos[an.producer[d]] for d in an.deps[i]
                          if d not in an.const and d in an.producer and an.producer[d] in self._pos})
            self.layers.append(OnnxLayer(pos, unique_name(node.name or "%s_%d" % (node.op_type, pos), taken),
                                         node.op_type, tuple(ins), _node_macs(node, self._types)))
        outputs = tuple(o.name for o in graph.output)
        specs: List[Tuple[int, Tuple[str, ...]]] = [(-1, (input_name,))]
        specs += [(self._pos[an.producer[t]], (t,)) for _, t in an.positions if (t,) != outputs]
        specs.append((len(self.layers) - 1, outputs))
        self.cuts: List[OnnxCut] = self._describe(specs, probe)
        if self.num_segments < 2:
            raise OnnxModelError("%s has no inner cut: no single tensor separates its input from its outputs "
                                 "(%d nodes), so it cannot be split" % (path, len(self.layers)))
        self._macs = np.cumsum([0] + [layer.macs for layer in self.layers])

    # ------------------------------------------------------------ construction
    @classmethod
    def load(cls, path: str, frame_size: Optional[Tuple[int, int]] = None, probe: bool = True,
             frame_input: bool = False) -> OnnxGraph:
        """Load, fix the input for (H, W) frames, infer shapes and find the cuts. `probe`: fold the shape values
        shape inference leaves open by runs on a zero and a noise input (_fold_probed_shapes), and measure the cut
        shapes it leaves open by one run on a zero input (else nothing is folded and such a cut is an error).
        `frame_input`: cut 0 is the raw uint8 (1, H, W, 3) frame as in LayerGraph (see prepend_preprocess), cut 1
        the model's own input."""
        model = load_model(path)
        return cls.from_proto(model, frame_size, path, probe, frame_input)

    @classmethod
    def from_proto(cls, model, frame_size: Optional[Tuple[int, int]] = None, path: str = "model",
                   probe: bool = True, frame_input: bool = False) -> OnnxGraph:
        """As `load`, from a ModelProto (copied, never changed)."""
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(model)
        name, shape = fix_input(m, frame_size, path)
        if frame_input:
            name = prepend_preprocess(m, name, shape, path)
        m = _infer(m, path)
        if _fold_shapes(m.graph, _types(m.graph)):
            m = _infer(m, path)
        if probe and _fold_probed_shapes(m, name, path):
            m = _infer(m, path)
            if _fold_shapes(m.graph, _types(m.graph)):
                m = _infer(m, path)
        return cls(m, path, frame_size, name, shape, probe)

    def _describe(self, specs: List[Tuple[int, Tuple[str, ...]]], probe: bool) -> List[OnnxCut]:
        """Cut records with static shapes from inference, or measured on a zero input where inference left
        dims open."""
        open_names = [t for _, ts in specs for t in ts if not _static(self._types.get(t, (0, None))[1])]
        measured: Dict[str, np.ndarray] = {}
        if open_names:
            if not probe:
                raise OnnxModelError("%s: shape inference leaves the shape of %s open" % (self.path, open_names[0]))
            measured = self._probe(open_names)
        cuts: List[OnnxCut] = []
        for pos, ts in specs:
            shapes, dtypes = [], []
            for t in ts:
                if t in measured:
                    shapes.append(tuple(int(s) for s in measured[t].shape))
                    dtypes.append(measured[t].dtype.name)
                else:
                    elem, shape = self._types[t]
                    shapes.append(tuple(int(s) for s in shape))
                    dtypes.append(_np_dtype(elem))
            name = ts[0] if len(ts) == 1 else "+".join(ts)
            shape, dtype = shapes[0], dtypes[0]
            if len(ts) > 1:  # every model output, packed into one float32 row (see `pack_outputs`)
                shape, dtype = (1, int(sum(int(np.prod(s, dtype=np.int64)) for s in shapes))), "float32"
            cuts.append(OnnxCut(len(cuts), pos, name, shape, dtype, tuple(ts), tuple(shapes), tuple(dtypes),
                                not any(t in measured for t in ts)))
        return cuts

    def _probe(self, names: List[str]) -> Dict[str, np.ndarray]:
        """The named tensors' values on a zero input (the model with them added as outputs, in ORT)."""
        import onnx
        from onnx import helper

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        have = {o.name for o in m.graph.output}
        for t in names:
            if t not in have:
                elem = self._types.get(t, (0, None))[0]
                if not elem:
                    raise OnnxModelError("%s: the type of tensor %s is unknown" % (self.path, t))
                m.graph.output.append(helper.make_tensor_value_info(t, elem, None))
        sess = _session(m.SerializeToString(), 1, "%s (shape probe)" % self.path)
        feed = {self.input_name: self.zero_input()}
        return dict(zip(names, sess.run(names, feed)))

    # ------------------------------------------------------------ LayerGraph-like interface
    @property
    def num_segments(self) -> int:
        """K = len(cuts) - 1."""
        return len(self.cuts) - 1

    def __repr__(self) -> str:
        return "OnnxGraph(%s, layers=%d, cuts=%d, frame_size=%s)" % (self.path, len(self.layers), len(self.cuts),
                                                                    self.frame_size)

    def cut_index(self, name_or_index: Union[int, str]) -> int:
        """Index of a cut given by index or tensor name; OnnxModelError if there is no such cut."""
        return find_cut(self.cuts, name_or_index, OnnxModelError, self.path)

    def segment_layers(self, k: int) -> List[int]:
        """Indices of the layers (nodes) in segment k (from cut k to cut k+1)."""
        if not 0 <= int(k) < self.num_segments:
            raise OnnxModelError("segment %s out of range 0..%d" % (k, self.num_segments - 1))
        return list(range(self.cuts[k].layer + 1, self.cuts[k + 1].layer + 1))

    def segment_macs(self) -> np.ndarray:
        """Multiply-accumulates of each segment [K] (Conv/ConvTranspose/Gemm/MatMul; other ops 0; 0 inside
        subgraph bodies, whose trip counts are unknown)."""
        ends = np.array([c.layer + 1 for c in self.cuts])
        return np.diff(self._macs[ends]).astype(np.int64)

    def segment_flops(self) -> np.ndarray:
        """Approximate FLOPs of each segment [K]: 2 x segment_macs."""
        return 2 * self.segment_macs()

    def zero_input(self) -> np.ndarray:
        """A zero array of the (fixed) input's shape and dtype."""
        c = self.cuts[0] if getattr(self, "cuts", None) else None
        if c is not None:
            return np.zeros(c.shape, dtype=c.dtype)
        elem, shape = self._types[self.input_name]
        return np.zeros(shape, dtype=_np_dtype(elem))

    # ------------------------------------------------------------ stages
    def stage_model(self, start_cut: Union[int, str], end_cut: Union[int, str],
                    io_names: Optional[Tuple[str, str]] = None):
        """The nodes from cut `start_cut` to cut `end_cut` as an ONNX ModelProto: input = the start cut's tensor
        (the model input at cut 0), outputs = the end cut's tensors (every model output at the last cut).
        `io_names` (input, output): the stage's input and (single) output renamed so, through Identity nodes, as
        the ORT engine's exported stages are named ('x', 'y'; its int8 quantiser relies on them)."""
        from onnx import helper

        start, end = self.cut_index(start_cut), self.cut_index(end_cut)
        if start >= end:
            raise OnnxModelError("stage start cut %d is not before end cut %d" % (start, end))
        an, graph = self._an, self.model.graph
        stop = set(self.cuts[start].tensors)
        lo, hi = self.cuts[start].layer, self.cuts[end].layer
        keep: Set[int] = set()
        stack = [an.producer[t] for t in self.cuts[end].tensors if t in an.producer and t not in stop]
        reads: Set[str] = set()
        while stack:
            i = stack.pop()
            if i in keep:
                continue
            keep.add(i)
            node = graph.node[i]
            if i not in an.const_nodes and not lo < self._pos[i] <= hi:
                raise OnnxModelError("stage %d..%d would need node %s from outside its cuts" % (start, end,
                                                                                                 node.name))
            for d in an.deps[i]:
                if d in stop:
                    continue
                if d in an.producer:
                    stack.append(an.producer[d])
                else:
                    reads.add(d)
        nodes = [graph.node[i] for i in an.order if i in keep]
        inits = [t for t in graph.initializer if t.name in reads]
        sparse = [t for t in graph.sparse_initializer if t.values.name in reads]
        known = {t.name for t in inits} | {t.values.name for t in sparse} | stop
        missing = sorted(reads - known)
        if missing:
            raise OnnxModelError("stage %d..%d reads %s from before its start cut" % (start, end, missing[0]))

        def info(name: str, shape=None):
            elem, inferred = self._types[name]
            return helper.make_tensor_value_info(name, elem, shape if shape is not None else inferred)

        c_in, c_out = self.cuts[start], self.cuts[end]
        # a shape inference left open (measured on a zero input) is declared with its rank only
        inputs = [info(t, s if c_in.static else [None] * len(s)) for t, s in zip(c_in.tensors, c_in.shapes)]
        outputs = [info(t, s if c_out.static else [None] * len(s)) for t, s in zip(c_out.tensors, c_out.shapes)]
        produced = {o for n in nodes for o in n.output if o}
        outs = set(c_out.tensors)
        value_info = [v for v in graph.value_info if v.name in produced and v.name not in outs]
        g = helper.make_graph(nodes, "%s_cut%d_cut%d" % (graph.name or "model", start, end), inputs, outputs,
                              initializer=inits, value_info=value_info, sparse_initializer=sparse)
        m = helper.make_model(g, opset_imports=list(self.model.opset_import), producer_name="cnnvideo",
                              ir_version=self.model.ir_version)
        m.functions.extend(self.model.functions)
        if len(c_out.tensors) > 1:
            pack_outputs(m, c_out)
        if io_names is not None:
            _rename_io(m, io_names[0], io_names[1])
        m.metadata_props.add(key="cnnvideo.stage", value="%s cuts %d..%d (%s..%s)" % (
            os.path.basename(self.path), start, end, c_in.name, c_out.name))
        return m

    def stage_module(self, start_cut: Union[int, str], end_cut: Union[int, str]):
        """The stage as a callable standing in for LayerGraph.stage_module's torch module (onnx_stage.OrtModule:
        torch tensors in and out when given torch, numpy otherwise), so code written for LayerGraph (profiling,
        predictors, executor, torch engine) runs ONNX models unchanged."""
        from cnnvideo.model.onnx_stage import OrtModule

        return OrtModule(self, self.cut_index(start_cut), self.cut_index(end_cut))

    @property
    def digest(self) -> str:
        """sha1 (16 hex) of the model file (of the serialised model when it came from memory) and of every cut
        (names, shapes: the frame size, frame input or not, and how this code finds cuts): what stage and profile
        caches are keyed by."""
        import hashlib

        if self._digest is None:
            h = hashlib.sha1()
            if os.path.isfile(self.path):
                with open(self.path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
            else:
                h.update(self.model.SerializeToString())
            h.update(repr([(c.name, c.shape, c.dtype) for c in self.cuts]).encode())
            self._digest = h.hexdigest()[:16]
        return self._digest

    def stage_bytes(self, start_cut: Union[int, str], end_cut: Union[int, str]) -> bytes:
        """stage_model serialised."""
        return self.stage_model(start_cut, end_cut).SerializeToString()

    def session(self, start_cut: Union[int, str], end_cut: Union[int, str], threads: int = 1):
        """An ORT session of the stage (configured as the ORT stage engine's; 1 intra-op thread by default)."""
        start, end = self.cut_index(start_cut), self.cut_index(end_cut)
        return _session(self.stage_bytes(start, end), threads, "stage %d..%d of %s" % (start, end, self.path))

    def full_session(self, threads: int = 1):
        """An ORT session of the whole (fixed, folded) model."""
        return _session(self.model.SerializeToString(), threads, self.path)


PACKED = "cnnvideo_packed_outputs"


def pack_outputs(model, cut: OnnxCut) -> None:
    """Make a stage ending at a multi-output cut (a detector's boxes, scores, classes) give one float32 (1, N)
    tensor, its outputs flattened and concatenated in order (in place): one tensor crosses the last hop, as for
    every other model; `unpack_outputs` splits it again."""
    from onnx import TensorProto, helper

    g = model.graph
    shape = helper.make_tensor("cnnvideo_pack_shape", TensorProto.INT64, [2], [1, -1])
    g.initializer.append(shape)
    flat = []
    for t in cut.tensors:
        f32, row = t + "/cnnvideo_float", t + "/cnnvideo_row"
        g.node.extend([helper.make_node("Cast", [t], [f32], to=TensorProto.FLOAT, name=f32),
                       helper.make_node("Reshape", [f32, shape.name], [row], name=row)])
        flat.append(row)
    # named nodes: the int8 quantiser excludes nodes by name (ort_int8.fp32_nodes keeps these fp32)
    g.node.append(helper.make_node("Concat", flat, [PACKED], axis=1, name=PACKED))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(PACKED, TensorProto.FLOAT, list(cut.shape)))


def unpack_outputs(packed: np.ndarray, cut: OnnxCut) -> Dict[str, np.ndarray]:
    """{model output name: array} from a packed (1, N) row of a multi-output cut (the inverse of pack_outputs)."""
    flat = np.asarray(packed).reshape(-1)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in cut.shapes]
    if flat.size != sum(sizes):
        raise ValueError("packed outputs of %s have %d elements, expected %d" % (cut.name, flat.size, sum(sizes)))
    parts = np.split(flat, np.cumsum(sizes)[:-1])
    return {t: p.reshape(s).astype(d) for t, p, s, d in zip(cut.tensors, parts, cut.shapes, cut.dtypes)}


def _rename_io(model, in_name: str, out_name: str) -> None:
    """Name a single-input stage's input `in_name` and its single output `out_name` (in place), bridging to the
    old names with Identity nodes; OnnxModelError if a name is already taken inside the stage."""
    from onnx import helper

    g = model.graph
    old_in = g.input[0].name
    old_out = g.output[0].name if len(g.output) == 1 else None
    names = {t.name for t in g.initializer} | {n for node in g.node for n in list(node.input) + list(node.output)}
    for new, old in ((in_name, old_in), (out_name, old_out)):
        if old is not None and new != old and new in names:
            raise OnnxModelError("cannot name the stage's %s %r: a tensor inside the stage is named so" % (
                "input" if old == old_in else "output", new))
    if in_name != old_in:
        g.input[0].name = in_name
        g.node.insert(0, helper.make_node("Identity", [in_name], [old_in], name="cnnvideo_stage_input"))
    if old_out is not None and out_name != old_out:
        g.output[0].name = out_name
        g.node.append(helper.make_node("Identity", [old_out], [out_name], name="cnnvideo_stage_output"))


def _session(data: bytes, threads: int, where: str):
    """ORT CPU session set up as cnnvideo.model.engines.ort_engine.session does (sequential, no spinning)."""
    from cnnvideo.model.engines.ort_engine import session

    return session(data, threads, where)


def is_onnx_path(model: str) -> bool:
    """True when a config's `model:` value names an ONNX file (ends in .onnx) rather than a zoo model."""
    return isinstance(model, str) and model.lower().endswith(".onnx")


def load_graph(path: str, frame_size: Sequence[int]) -> OnnxGraph:
    """OnnxGraph of `path` for (H, W) frames (the config's frame_size), fed raw uint8 frames like LayerGraph."""
    return OnnxGraph.load(path, (int(frame_size[0]), int(frame_size[1])), frame_input=True)
