"""Shape inference and shape-value folding of an ONNX model fixed to the frame size: `infer` runs onnx's inference,
`fold_shapes` turns Shape/Size of static tensors into constants, and `fold_probed_shapes` folds the shape values
inference leaves open (after a detector's resize Loop) to what two ORT runs agree on. Used by
cnnvideo.model.onnx_graph before it looks for cuts; the module docstring there says why."""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import numpy as np

from cnnvideo.model.cuts import unique_name
from cnnvideo.model.engines.ort_session import session
from cnnvideo.model.onnx_nodes import NONDETERMINISTIC, OnnxModelError, node_deps, np_dtype, one_line, subgraphs


def probe_session(data: bytes, threads: int, where: str):
    """An ORT CPU session configured as every stage's (cnnvideo.model.engines.ort_session)."""
    return session(data, threads, where)


_LIGHT_MAX = 4096  # initializers with more elements go into shape inference without their data (shapes only)
_TENSOR_DATA = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def infer(model, path: str):
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
        raise OnnxModelError("%s: shape inference failed for the fixed input: %s" % (path, one_line(exc))) from None
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def tensor_types(graph) -> Dict[str, Tuple[int, Optional[Tuple[Optional[int], ...]]]]:
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


def is_static(shape) -> bool:
    return shape is not None and all(d is not None and d >= 0 for d in shape)


def fold_shapes(graph, types) -> int:
    """Replace Shape/Size nodes whose input shape is static by Constant nodes (in place); how many were folded."""
    from onnx import helper

    folded = 0
    for node in graph.node:
        if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        shape = types.get(node.input[0], (0, None))[1]
        if not is_static(shape):
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
    return any(n.op_type in ops or any(_holds_op(g, ops) for g in subgraphs(n)) for n in graph.node)


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
                          or any(_holds_op(g, _DATA_DEPENDENT) for g in subgraphs(node)))
    return {o for i, n in enumerate(graph.node) if tainted.get(i) for o in n.output if o}


def _probe_inputs(elem: int, shape: Tuple[int, ...]) -> List[np.ndarray]:
    """A zero and a (seeded) random-noise input of the given ONNX element type and static shape."""
    dtype = np.dtype(np_dtype(elem))
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
        elif node.op_type in NONDETERMINISTIC:
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


def fold_probed_shapes(model, input_name: str, path: str) -> List[str]:
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
    types = tensor_types(graph)
    tainted = _data_dependent(graph)
    shape_only = _shape_only(graph, set())
    used = {d for n in graph.node for d in node_deps(n)} | {o.name for o in graph.output}
    cands: List[Tuple[int, str, int]] = []  # (node index, tensor, elem type): values to fold
    pins: List[Tuple[str, int]] = []  # (tensor, elem type): shapes to pin
    for i, n in enumerate(graph.node):
        if n.domain not in ("", "ai.onnx") or tainted.intersection(o for o in n.output if o):
            continue
        if n.op_type in ("Shape", "Size") and n.input and n.output[0] in used:
            if n.input[0] not in tainted and not is_static(types.get(n.input[0], (0, None))[1]):
                cands.append((i, n.output[0], TensorProto.INT64))
        elif n.op_type in ("Loop", "If") and not all(d in shape_only for d in node_deps(n)):
            for o in n.output:
                if o in used and o in shape_only and types.get(o, (0, None))[0]:
                    cands.append((i, o, types[o][0]))
        if n.op_type in ("Loop", "If"):
            pins += [(o, types[o][0]) for o in n.output if o in used and types.get(o, (0, None))[0]
                     and not is_static(types[o][1])]
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
        sess = probe_session(m.SerializeToString(), 1, "%s (shape probe)" % path)
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
