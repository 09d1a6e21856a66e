"""Any ONNX model as a layer graph: its single-tensor cut points and the stage (a valid ONNX model) between two
cuts.

`OnnxGraph.load(path, frame_size)` reads the file with the onnx package (no torch), fixes dynamic input dims for the
frame size (batch 1, H and W of an NCHW or NHWC image input), runs shape inference, folds `Shape`/`Size` of tensors
whose shape is then static into constants, folds the shape values inference leaves open (Shape/Size of tensors after
a Loop, a Loop's shape-only outputs such as a TF detector's true image shape) to the values two ORT runs (a zero and
a noise input) agree on and pins open Loop/If output shapes likewise, unless a data-dependent op (NonMaxSuppression,
NonZero, TopK, Unique, also inside a Loop/If/Scan body) is upstream (cnnvideo.model.onnx_fold), and finds the CUTS:
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
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from cnnvideo.model.cuts import find_cut, unique_name
from cnnvideo.model.onnx_fold import fold_probed_shapes as _fold_probed_shapes
from cnnvideo.model.onnx_fold import fold_shapes as _fold_shapes
from cnnvideo.model.onnx_fold import infer as _infer
from cnnvideo.model.onnx_fold import is_static as _static
from cnnvideo.model.onnx_fold import probe_session as _session
from cnnvideo.model.onnx_fold import tensor_types as _types
from cnnvideo.model.onnx_nodes import NONDETERMINISTIC as _NONDETERMINISTIC
from cnnvideo.model.onnx_nodes import OnnxModelError, node_deps, sort_nodes  # noqa: F401 (re-exported)
from cnnvideo.model.onnx_nodes import all_nodes as _all_nodes
from cnnvideo.model.onnx_nodes import np_dtype as _np_dtype
from cnnvideo.model.onnx_nodes import one_line as _one_line
from cnnvideo.model.onnx_nodes import subgraphs as _subgraphs  # noqa: F401
from cnnvideo.model.onnx_nodes import topo_live as _topo_live
from cnnvideo.model.onnx_stage import OrtModule

METHOD = "onnx"


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


# ---------------------------------------------------------------- graph analysis


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

    def node_segments(self) -> Dict[str, int]:
        """{node name or output tensor name: its segment} of every layer, for reading ORT's per-node profile of a
        stage (ORT keeps or derives its kernels' names from these: `ort_profile.SegmentNames`)."""
        ends = np.array([c.layer for c in self.cuts[1:]])
        graph = self.model.graph
        out: Dict[str, int] = {}
        for i, pos in self._pos.items():
            k = int(np.searchsorted(ends, pos))
            node = graph.node[i]
            for name in [node.name] + [o for o in node.output if o]:
                if name:
                    out.setdefault(name, k)
        return out

    def segment_op_types(self) -> Dict[int, Set[str]]:
        """Segment -> the op types of its layers (what `ort_profile.attribute` checks a fused kernel against)."""
        ops: Dict[int, Set[str]] = {}
        for k in range(self.num_segments):
            ops[k] = {self.layers[i].kind for i in self.segment_layers(k)}
        return ops

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


def load_graph(path: str, frame_size: Sequence[int]) -> OnnxGraph:
    """OnnxGraph of `path` for (H, W) frames (the config's frame_size), fed raw uint8 frames like LayerGraph."""
    return OnnxGraph.load(path, (int(frame_size[0]), int(frame_size[1])), frame_input=True)
