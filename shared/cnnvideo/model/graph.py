"""Model -> layer DAG (Preprocess first) in topological order, single-tensor cut points, and stage sub-modules."""
from __future__ import annotations

import logging
import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Set, Tuple, Union

import numpy as np
import torch
from torch import nn

from cnnvideo.model.cuts import find_cut, unique_name
from cnnvideo.model.detector import splittable
from cnnvideo.model.zoo import Preprocess, disable_inplace

log = logging.getLogger(__name__)

METHODS = ("auto", "fx", "chain")
INPUT_CUT = "input"
PREPROCESS = "preprocess"
_ROOT = "model"  # attribute holding the user's model inside the traced wrapper; stripped from layer names
_INPLACE_FUNCS = {operator.iadd: operator.add, operator.isub: operator.sub,
                  operator.imul: operator.mul, operator.itruediv: operator.truediv}


class GraphError(ValueError):
    """A model that cannot be turned into a layer graph, or an unknown cut."""


@dataclass
class Layer:
    """One node of the layer DAG; `inputs` are indices of producer layers (the raw frame is not a layer)."""

    index: int
    name: str
    kind: str
    inputs: Tuple[int, ...]


@dataclass
class Cut:
    """A point in topological order where exactly one tensor crosses; `layer` produced it (-1 = raw frame)."""

    index: int
    layer: int
    name: str
    shape: Tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        """Number of elements of the crossing tensor."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def bytes_dense(self) -> int:
        """Bytes of the tensor sent whole and uncompressed."""
        return self.numel * np.dtype(self.dtype).itemsize


# (layers, cuts, stage builder) as made by one graph-building method
_Built = Tuple[List[Layer], List[Cut], Callable[[int, int], nn.Module]]


class _Framed(nn.Module):
    """Preprocess followed by the model: raw uint8 frame in, model output out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.preprocess = Preprocess()
        setattr(self, _ROOT, model)

    def forward(self, frame: torch.Tensor) -> torch.Tensor:
        """Run preprocess then the model."""
        return getattr(self, _ROOT)(self.preprocess(frame))


class _Identity(nn.Module):
    """Empty stage: returns its input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return x unchanged."""
        return x


class _Flatten(nn.Module):
    """torch.flatten(x, 1) as a module, for chain-walked models."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Flatten all but the batch dimension."""
        return torch.flatten(x, 1)


class _GlobalAvgPool(nn.Module):
    """adaptive_avg_pool2d(x, 1) as a module (MobileNetV2's functional pooling), for chain-walked models."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Average over the spatial dimensions, keeping them as 1x1."""
        return nn.functional.adaptive_avg_pool2d(x, (1, 1))


def _fx():
    """torch.fx, or None where this torch lacks it (torch < 1.8)."""
    try:
        from torch import fx
    except ImportError:
        return None
    return fx


def _dtype_name(dtype: torch.dtype) -> str:
    """torch.float32 -> 'float32'."""
    return str(dtype).replace("torch.", "")


def _strip_root(path: str) -> str:
    """'model.layer1.0' -> 'layer1.0'; 'model' -> ''."""
    if path == _ROOT:
        return ""
    if path.startswith(_ROOT + "."):
        return path[len(_ROOT) + 1:]
    return path


# ---------------------------------------------------------------- fx tracing


def _make_tracer(fx):
    """A Tracer that keeps Preprocess as one leaf and records each node's module scope."""

    class _ScopeTracer(fx.Tracer):
        """fx Tracer recording the dotted path of the module whose forward created each node."""

        def __init__(self) -> None:
            super().__init__()
            self.scope_stack: List[str] = [""]
            self.scopes: Dict[Any, str] = {}

        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            """Preprocess and modules flagged `fx_leaf` (a detector's resize and heads) are leaves; otherwise fx's
            default (torch.nn built-ins)."""
            return (isinstance(m, Preprocess) or getattr(type(m), "fx_leaf", False)
                    or super().is_leaf_module(m, qualname))

        def call_module(self, m, forward, args, kwargs):
            """Track the module path while tracing through (or recording) a module call."""
            self.scope_stack.append(self.path_of_module(m))
            try:
                return super().call_module(m, forward, args, kwargs)
            finally:
                self.scope_stack.pop()

        def create_node(self, *args, **kwargs):
            """Remember the enclosing module path of every new node."""
            node = super().create_node(*args, **kwargs)
            self.scopes[node] = self.scope_stack[-1]
            return node

    return _ScopeTracer()


def _strip_inplace(graph) -> None:
    """Replace in-place operator calls (x += y) and inplace=True kwargs with their out-of-place forms."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _INPLACE_FUNCS:
            node.target = _INPLACE_FUNCS[node.target]
        if node.op in ("call_function", "call_method") and node.kwargs.get("inplace"):
            kwargs = dict(node.kwargs)
            kwargs["inplace"] = False
            node.kwargs = kwargs


def _node_kind(node, modules: Dict[str, nn.Module]) -> str:
    """Module class name, function name or method name of a computing node."""
    if node.op == "call_module":
        return type(modules[node.target]).__name__
    if node.op == "call_method":
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


def _node_base_name(node, kind: str, scope: str) -> str:
    """Stable dotted name: module path for module calls, '<scope>.<op>' for functions and methods."""
    if node.op == "call_module":
        return _strip_root(str(node.target))
    scope = _strip_root(scope)
    return "%s.%s" % (scope, kind) if scope else kind


def _trace(model: nn.Module):
    """Symbolically trace Preprocess+model; returns (GraphModule, scopes by node)."""
    fx = _fx()
    if fx is None:
        raise GraphError("method 'fx' needs torch.fx (torch>=1.8); this torch is %s" % torch.__version__)
    root = _Framed(model)
    tracer = _make_tracer(fx)
    try:
        graph = tracer.trace(root)
    except Exception as exc:  # fx raises TraceError, TypeError, NotImplementedError... for untraceable code
        raise GraphError("torch.fx cannot trace %s: %s" % (type(model).__name__, exc)) from exc
    _strip_inplace(graph)
    gm = fx.GraphModule(root, graph)
    return gm, tracer.scopes


def _compute_nodes(gm) -> Tuple[Any, List[Any], Any]:
    """(placeholder, computing nodes in order, output node); get_attr constants are left out."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise GraphError("the model must take exactly one input, traced %d" % len(placeholders))
    body = [n for n in gm.graph.nodes if n.op in ("call_module", "call_function", "call_method")]
    outputs = [n for n in gm.graph.nodes if n.op == "output"]
    result = outputs[0].args[0]
    if not isinstance(result, torch.fx.Node):
        raise GraphError("the model must return one tensor, got %r" % (result,))
    return placeholders[0], body, result


def _fx_layers(gm, scopes: Dict[Any, str], body: List[Any]) -> List[Layer]:
    """Layer records for the computing nodes, with producer indices."""
    position = {node: i for i, node in enumerate(body)}
    modules = dict(gm.named_modules())
    layers: List[Layer] = []
    taken: Set[str] = set()
    for i, node in enumerate(body):
        kind = _node_kind(node, modules)
        name = unique_name(_node_base_name(node, kind, scopes.get(node, "")), taken)
        inputs = tuple(sorted({position[a] for a in node.all_input_nodes if a in position}))
        layers.append(Layer(i, name, kind, inputs))
    return layers


def _single_live_positions(placeholder, body: List[Any], result) -> List[int]:
    """Positions i where, after running body[i], exactly one value (body[i]'s) is still needed."""
    position = {node: i for i, node in enumerate(body)}
    position[placeholder] = -1
    last_use: Dict[Any, int] = {}
    for i, node in enumerate(body):
        for arg in node.all_input_nodes:
            if arg in position:
                last_use[arg] = max(last_use.get(arg, -1), i)
    last_use[result] = len(body)
    births = sorted(position[n] for n in last_use)
    deaths = sorted(last_use.values())
    live, b, d, positions = 0, 0, 0, []
    for i in range(-1, len(body)):
        while b < len(births) and births[b] <= i:
            live, b = live + 1, b + 1
        while d < len(deaths) and deaths[d] <= i:
            live, d = live - 1, d + 1
        if i >= 0 and live == 1 and last_use.get(body[i], -1) > i:
            positions.append(i)
    return positions


def _node_path(node, scopes: Dict[Any, str]) -> str:
    """Module path a node belongs to: its own target for module calls, else the module whose forward made it."""
    return str(node.target) if node.op == "call_module" else scopes.get(node, "")


def _module_spans(body: List[Any], scopes: Dict[Any, str]) -> Dict[str, Tuple[int, int]]:
    """(first, last) position of the nodes inside each module path (every ancestor of a node's path counts)."""
    spans: Dict[str, Tuple[int, int]] = {}
    for i, node in enumerate(body):
        parts = _node_path(node, scopes).split(".")
        for depth in range(1, len(parts) + 1):
            path = ".".join(parts[:depth])
            first, _ = spans.get(path, (i, i))
            spans[path] = (first, i)
    return spans


def _branched_modules(spans: Dict[str, Tuple[int, int]], cut_set: Set[int],
                      chains: Set[str] = frozenset()) -> List[str]:
    """Sub-modules (not the roots, not the `chains`) with a non-cut point at their own level, i.e. a fork/merge
    in their forward."""
    out: List[str] = []
    for path, (first, last) in spans.items():
        if path in ("", _ROOT, PREPROCESS) or path in chains:
            continue
        children = [span for child, span in spans.items() if child.startswith(path + ".")
                    and "." not in child[len(path) + 1:]]
        for i in range(first, last):
            inside_child = any(a <= i < b for a, b in children)
            if i not in cut_set and not inside_child:
                out.append(path)
                break
    return out


def _boundary_cuts(body: List[Any], scopes: Dict[Any, str], positions: List[int],
                   chains: Set[str] = frozenset()) -> List[int]:
    """Drop cut positions strictly inside a branched sub-module (e.g. between a ResNet block's add and relu).
    `chains` are module paths run as a chain of children that keep some outputs as taps (a detector's backbone
    body, flagged `fx_chain`): the points between their children before the first tap stay cuts."""
    spans = _module_spans(body, scopes)
    cut_set = set(positions)
    banned: Set[int] = set()
    for path in _branched_modules(spans, cut_set, chains):
        first, last = spans[path]
        banned.update(range(first, last))
    return [i for i in positions if i not in banned]


def _describe(value: Any) -> Union[Tuple[Tuple[int, ...], str], str]:
    """(shape, dtype name) of a tensor, else the value's type name (a cut must carry a tensor)."""
    if isinstance(value, torch.Tensor):
        return tuple(int(s) for s in value.shape), _dtype_name(value.dtype)
    return type(value).__name__


def _record_values(gm, frame: torch.Tensor, wanted: List[Any]) -> Dict[Any, Any]:
    """Run the GraphModule once (fx Interpreter); describe the `wanted` nodes' results without keeping them."""
    fx = _fx()
    keep = set(wanted)
    described: Dict[Any, Any] = {}

    class _Recorder(fx.Interpreter):
        """Interpreter that describes selected node results."""

        def run_node(self, n):
            """Run one node, describing it if wanted."""
            out = super().run_node(n)
            if n in keep:
                described[n] = _describe(out)
            return out

    with torch.no_grad():
        _Recorder(gm).run(frame)
    return described


def _fx_stage(gm, body: List[Any], start_node, lo: int, hi: int, end_node) -> nn.Module:
    """New GraphModule: one input (the start cut's tensor) -> body[lo:hi] -> the end cut's tensor."""
    fx = _fx()
    graph = fx.Graph()
    env: Dict[Any, Any] = {start_node: graph.placeholder("x")}
    consts = {n.name: n for n in gm.graph.nodes if n.op == "get_attr"}

    def lookup(arg):
        """Map an old node to its copy, copying get_attr constants on first use."""
        if arg not in env:
            if arg.name not in consts:
                raise GraphError("stage reads %s from before its start cut" % arg.name)
            env[arg] = graph.node_copy(arg, lookup)
        return env[arg]

    for node in body[lo:hi]:
        env[node] = graph.node_copy(node, lookup)
    graph.output(lookup(end_node))
    return fx.GraphModule(gm, graph)


# ---------------------------------------------------------------- chain walk


def _is_plain_sequential(m: nn.Module) -> bool:
    """nn.Sequential (or a subclass keeping Sequential's forward): safe to walk into."""
    return isinstance(m, nn.Sequential) and type(m).forward is nn.Sequential.forward


def _walk(prefix: str, m: nn.Module) -> List[Tuple[str, nn.Module]]:
    """Leaves of a plain-Sequential tree as (dotted name, module)."""
    if not _is_plain_sequential(m) or len(m) == 0:
        return [(prefix, m)]
    out: List[Tuple[str, nn.Module]] = []
    for child_name, child in m.named_children():
        out.extend(_walk("%s.%s" % (prefix, child_name) if prefix else child_name, child))
    return out


def _chain_modules(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """(name, module) steps of a plain-chain model, or GraphError if its forward is not known to be a chain."""
    kind = type(model).__name__
    children = dict(model.named_children())
    if _is_plain_sequential(model):
        return _walk("", model)
    if kind in ("AlexNet", "VGG") and set(children) == {"features", "avgpool", "classifier"}:
        return (_walk("features", model.features) + [("avgpool", model.avgpool), ("flatten", _Flatten())]
                + _walk("classifier", model.classifier))
    if kind == "MobileNetV2" and set(children) == {"features", "classifier"}:
        return (_walk("features", model.features) + [("adaptive_avg_pool2d", _GlobalAvgPool()),
                                                     ("flatten", _Flatten())] + _walk("classifier", model.classifier))
    raise GraphError(
        "%s is not a plain chain (method 'chain' knows nn.Sequential, AlexNet, VGG, MobileNetV2); "
        "graph models need torch.fx (torch>=1.8), this torch is %s" % (kind, torch.__version__)
    )


def _chain_kind(m: nn.Module) -> str:
    """Kind of a chain step, matching the fx kinds (function names for the functional steps)."""
    if isinstance(m, _Flatten):
        return "flatten"
    if isinstance(m, _GlobalAvgPool):
        return "adaptive_avg_pool2d"
    return type(m).__name__


# ---------------------------------------------------------------- the graph


class LayerGraph:
    """Layers (Preprocess first) in topological order, single-tensor cuts, and stage modules between cuts."""

    def __init__(self, layers: List[Layer], cuts: List[Cut], frame_size: Tuple[int, int], method: str,
                 stage_builder: Callable[[int, int], nn.Module]) -> None:
        self.layers = layers
        self.cuts = cuts
        self.frame_size = frame_size
        self.method = method
        self._stage_builder = stage_builder

    @property
    def num_segments(self) -> int:
        """K = len(cuts) - 1."""
        return len(self.cuts) - 1

    def __repr__(self) -> str:
        return "LayerGraph(method=%s, layers=%d, cuts=%d, frame_size=%s)" % (
            self.method, len(self.layers), len(self.cuts), self.frame_size)

    @classmethod
    def from_model(cls, model: nn.Module, frame_size: Tuple[int, int], method: str = "auto") -> LayerGraph:
        """Build the graph of Preprocess+model for (H, W) frames; method 'fx', 'chain' or 'auto' (fx if present).
        A torchvision detector (Faster R-CNN) is re-arranged by cnnvideo.model.detector first (fx only)."""
        if method not in METHODS:
            raise GraphError("method must be one of %s, got %r" % ("|".join(METHODS), method))
        height, width = (int(v) for v in frame_size)
        disable_inplace(model).eval()
        if type(model).__module__.startswith("torchvision.models.detection"):
            model = splittable(model, (height, width)).eval()
        if method == "auto":
            method = "fx" if _fx() is not None else "chain"
        frame = torch.zeros((1, height, width, 3), dtype=torch.uint8)
        builder = _build_fx if method == "fx" else _build_chain
        layers, cuts, stage_builder = builder(model, frame)
        log.debug("graph of %s via %s: %d layers, %d cuts", type(model).__name__, method, len(layers), len(cuts))
        return cls(layers, cuts, (height, width), method, stage_builder)

    def cut_index(self, name_or_index: Union[int, str]) -> int:
        """Index of a cut given by index or name; GraphError if there is no such cut."""
        return find_cut(self.cuts, name_or_index, GraphError)

    def segment_layers(self, k: int) -> List[int]:
        """Indices of the layers run in segment k (from cut k to cut k+1)."""
        if not 0 <= int(k) < self.num_segments:
            raise GraphError("segment %s out of range 0..%d" % (k, self.num_segments - 1))
        return list(range(self.cuts[k].layer + 1, self.cuts[k + 1].layer + 1))

    def torch_only(self, start_cut: Union[int, str], end_cut: Union[int, str]) -> str:
        """Why the stage between the cuts must run eagerly on torch ('' = it may be exported): it holds a module
        flagged `onnx_export = False` (a detector's heads: data-dependent shapes, and their export is not exact)."""
        start, end = self.cut_index(start_cut), self.cut_index(end_cut)
        if start == end:
            return ""
        for module in self.stage_module(start, end).modules():
            if getattr(type(module), "onnx_export", True) is False:
                return "it holds %s (data-dependent shapes; its ONNX export is not exact)" % type(module).__name__
        return ""

    def stage_module(self, start_cut: Union[int, str], end_cut: Union[int, str]) -> nn.Module:
        """A module mapping the tensor at `start_cut` to the tensor at `end_cut` (identity when equal)."""
        start, end = self.cut_index(start_cut), self.cut_index(end_cut)
        if start > end:
            raise GraphError("stage start cut %d is after end cut %d" % (start, end))
        if start == end:
            return _Identity()
        return self._stage_builder(start, end).eval()


def _cut_of(index: int, layer: int, name: str, described: Any) -> Cut:
    """Cut record from a value description made by _describe."""
    if not isinstance(described, tuple):
        raise GraphError("cut after %s carries a %s, not a tensor" % (name, described))
    shape, dtype = described
    return Cut(index, layer, name, shape, dtype)


def _input_cut(frame: torch.Tensor) -> Cut:
    """Cut 0: the raw uint8 frame."""
    return Cut(0, -1, INPUT_CUT, tuple(int(s) for s in frame.shape), _dtype_name(frame.dtype))


def _build_fx(model: nn.Module, frame: torch.Tensor) -> _Built:
    """Layers, cuts and stage builder via torch.fx."""
    gm, scopes = _trace(model)
    placeholder, body, result = _compute_nodes(gm)
    layers = _fx_layers(gm, scopes, body)
    chains = {"%s.%s" % (_ROOT, path) for path, m in model.named_modules() if getattr(type(m), "fx_chain", False)}
    positions = _boundary_cuts(body, scopes, _single_live_positions(placeholder, body, result), chains)
    values = _record_values(gm, frame, [body[i] for i in positions])
    cuts = [_input_cut(frame)]
    for i in positions:
        cuts.append(_cut_of(len(cuts), i, layers[i].name, values[body[i]]))
    nodes = [placeholder] + [body[c.layer] for c in cuts[1:]]

    def build(start: int, end: int) -> nn.Module:
        """Stage from cut `start` to cut `end` as a GraphModule."""
        return _fx_stage(gm, body, nodes[start], cuts[start].layer + 1, cuts[end].layer + 1, nodes[end])

    return layers, cuts, build


def _build_chain(model: nn.Module, frame: torch.Tensor) -> _Built:
    """Layers, cuts (one after every step) and stage builder by walking a plain-chain module tree."""
    steps = [(PREPROCESS, Preprocess())] + _chain_modules(model)
    layers = [Layer(i, name, _chain_kind(m), (i - 1,) if i else ()) for i, (name, m) in enumerate(steps)]
    cuts = [_input_cut(frame)]
    x = frame
    with torch.no_grad():
        for i, (name, m) in enumerate(steps):
            x = m(x)
            cuts.append(_cut_of(i + 1, i, name, _describe(x)))

    def build(start: int, end: int) -> nn.Module:
        """Stage from cut `start` to cut `end` as an nn.Sequential of the steps between."""
        return nn.Sequential(*[m for _, m in steps[start:end]])

    return layers, cuts, build
