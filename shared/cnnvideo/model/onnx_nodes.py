"""The node-level ONNX helpers every ONNX module shares: walking a graph with its Loop/If/Scan bodies, what a node
reads, putting nodes in topological order, and the one error type for a model that cannot be loaded or split.

Kept apart from cnnvideo.model.onnx_graph (cut analysis) so the int8 quantiser can sort nodes without importing
the cut analysis, which imports the stage engines."""
from __future__ import annotations

from typing import Dict, Iterable, List, Set

import numpy as np

from cnnvideo.errors import ConfigError

# ops whose output is not a function of their inputs: never treated as constants (they must run once, in order)
NONDETERMINISTIC = frozenset(("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                               "Multinomial", "Bernoulli", "Dropout"))


class OnnxModelError(ConfigError):
    """An ONNX file that cannot be loaded, fixed to the frame size, or split; one line, naming the file."""



def one_line(exc: BaseException) -> str:
    """'Type: first line of the message' (at most 200 characters)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return ("%s: %s" % (type(exc).__name__, lines[0] if lines else ""))[:200].rstrip(": ")



def all_nodes(graph) -> Iterable:
    """Every node of a graph and of the Loop/If/Scan bodies inside it."""
    for node in graph.node:
        yield node
        for g in subgraphs(node):
            yield from all_nodes(g)



def subgraphs(node) -> Iterable:
    """The GraphProtos held in a node's attributes (Loop/Scan body, If branches)."""
    from onnx import AttributeProto

    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                yield g


def outer_refs(graph) -> Set[str]:
    """Names a (sub)graph reads from enclosing scopes: used by its nodes (or their bodies) and not defined in it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: Set[str] = set()
    for node in graph.node:
        defined.update(o for o in node.output if o)
        used.update(i for i in node.input if i)
        for g in subgraphs(node):
            used |= outer_refs(g)
    return used - defined


def node_deps(node) -> List[str]:
    """Every tensor name a node reads: its inputs and what its subgraph bodies read from the outer scope."""
    deps = [i for i in node.input if i]
    seen = set(deps)
    for g in subgraphs(node):
        for name in sorted(outer_refs(g)):
            if name not in seen:
                seen.add(name)
                deps.append(name)
    return deps


def sort_nodes(graph) -> None:
    """Reorder a graph's nodes topologically in place, counting what Loop/If/Scan bodies read from the outer scope
    as inputs (ORT's quantiser sorts by explicit inputs only and can put a detector's resize Loop before the Cast
    its body reads, which the ONNX checker refuses). Stable: file order where it already is one; every node kept.
    OnnxModelError on a cycle."""

    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: List[List[int]] = [[] for _ in nodes]
    indeg = [0] * len(nodes)
    for i, n in enumerate(nodes):
        for p in {producer[d] for d in node_deps(n) if d in producer and producer[d] != i}:
            indeg[i] += 1
            users[p].append(i)
    order = _kahn(dict(enumerate(indeg)), dict(enumerate(users)))
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def topo_live(graph, deps: List[List[str]]) -> List[int]:
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
    return _kahn(indeg, users)


def _kahn(indeg: Dict[int, int], users: Dict[int, List[int]]) -> List[int]:
    """Node indices in topological order, the lowest ready index first (so file order where it already is one);
    `indeg` (consumed) counts each node's producers, `users` lists each node's consumers. OnnxModelError on a
    cycle."""
    import heapq

    ready = [i for i, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(indeg):
        raise OnnxModelError("the graph has a cycle")
    return order


def np_dtype(elem_type: int) -> str:
    """ONNX TensorProto element type -> numpy dtype name ('float32')."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type))).name
