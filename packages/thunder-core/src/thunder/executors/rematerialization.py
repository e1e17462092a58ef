"""Rematerialisation across the forward/backward boundary: recompute in backward instead of saving.

The forward/backward split (:mod:`thunder.transforms.split`) makes the forward return, besides
the program's outputs, every tensor the backward reads ("saved for backward"); they stay in
memory from the forward until the backward runs. Many of them are cheap functions of a few
others: ``silu(a) * b`` saves ``a``, ``b``, ``sigmoid(a)`` and ``silu(a)``, all computable from
``a`` and ``b`` by elementwise operations. A fusion executor that will fuse those operations into
the backward's own kernels can save only ``a`` and ``b`` and recompute the rest there, at no
extra kernel launch and with less memory between forward and backward.

:func:`rematerialize_forward_backward` does that for the operations a predicate accepts
(``can_recompute``, given by the executor; random draws and side effects never qualify). It
chooses what to save by a minimum cut: in the graph of values from which the saved values are
computed by recomputable operations, it finds the set of values of least total size (bytes,
then count) whose saving lets every saved value be recomputed, saves those, and moves the
operations between them and the old saved values into the backward, each before its first use.
The saved bytes never grow (the old saved set is one of the cuts considered).

:meth:`thunder.extend.FusionExecutor.rematerialize` is the hook ``thunder.jit`` calls with both
traces after the split and before claiming (by default it changes nothing).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from thunder.core import prims
from thunder.core.dce import eliminate_dead_code, has_side_effects
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, from_trace

__all__ = ["rematerialize_forward_backward", "saved_for_backward", "is_cheap_to_recompute"]

_SAVED_NAME = "saved_for_backward"
_CHEAP_SHAPE_PRIMS = frozenset(
    ("broadcast_in_dim", "reshape", "convert_element_type", "squeeze", "transpose", "slice", "clone")
)


def is_cheap_to_recompute(bsym: BoundSymbol) -> bool:
    """Elementwise, cast and reshaping work only (no reductions, matmuls, random draws or side effects).

    A torch-language symbol qualifies when its whole decomposition does.
    """
    sym = bsym.sym
    if sym.python_printer is not None or has_side_effects(bsym) or prims.OpTags.RANDOM in sym.tags:
        return False
    if sym.is_prim:
        return prims.OpTags.ELEMENTWISE in sym.tags or (sym.id.startswith("prims.") and sym.name in _CHEAP_SHAPE_PRIMS)
    return bool(bsym.subsymbols) and all(is_cheap_to_recompute(s) for s in bsym.subsymbols)


def _saved_unpack(backward: TraceCtx) -> int | None:
    for i, b in enumerate(backward.bound_symbols):
        if b.sym.id == "unpack_sequence" and b.args and b.args[0] == _SAVED_NAME:
            return i
    return None


def saved_for_backward(forward: TraceCtx) -> tuple:
    """The values the augmented ``forward`` trace saves for backward (the second part of its return)."""
    ret = forward.bound_symbols[-1]
    if ret.sym is not prims.python_return or not isinstance(ret.args[0], tuple) or len(ret.args[0]) != 2:
        raise ValueError("not an augmented forward trace: it does not return (outputs, saved_for_backward)")
    return tuple(ret.args[0][1])


def _nbytes(p: TensorProxy) -> int:
    try:
        return int(p.numel()) * p.dtype.bytes
    except (TypeError, AttributeError):  # a symbolic size: treat as large
        return 1 << 40


def _recomputable(b: BoundSymbol, can_recompute: Callable[[BoundSymbol], bool]) -> bool:
    if b.sym is prims.python_return or has_side_effects(b) or prims.OpTags.RANDOM in b.sym.tags:
        return False
    outs = b.flat_outs
    if not outs or not all(isinstance(o, TensorProxy) for o in outs):
        return False
    # scalars computed in the forward (NumberProxy) are not available in the backward
    if not all(isinstance(a, TensorProxy) for a in b.flat_args if isinstance(a, Proxy)):
        return False
    return bool(can_recompute(b))


class _FlowGraph:
    """A directed graph with integer capacities; ``min_cut_source_side`` after a max flow (Edmonds-Karp)."""

    def __init__(self):
        self.cap: dict[object, dict[object, int]] = {}

    def add(self, u, v, c: int) -> None:
        self.cap.setdefault(u, {})
        self.cap.setdefault(v, {})
        self.cap[u][v] = self.cap[u].get(v, 0) + c
        self.cap[v].setdefault(u, 0)

    def _augmenting_path(self, s, t):
        parent = {s: None}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v, c in self.cap[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    if v == t:
                        return parent
                    queue.append(v)
        return None

    def min_cut_source_side(self, s, t) -> set:
        while (parent := self._augmenting_path(s, t)) is not None:
            flow, v = None, t
            while parent[v] is not None:
                u = parent[v]
                flow = self.cap[u][v] if flow is None else min(flow, self.cap[u][v])
                v = u
            v = t
            while parent[v] is not None:
                u = parent[v]
                self.cap[u][v] -= flow
                self.cap[v][u] += flow
                v = u
        seen = {s}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v, c in self.cap[u].items():
                if c > 0 and v not in seen:
                    seen.add(v)
                    queue.append(v)
        return seen


def rematerialize_forward_backward(
    forward: TraceCtx, backward: TraceCtx, can_recompute: Callable[[BoundSymbol], bool]
) -> tuple[TraceCtx, TraceCtx]:
    """Saves fewer bytes for backward by recomputing there what ``can_recompute`` accepts (see the module docstring).

    Args:
        forward: the augmented forward trace (returns ``(outputs, saved_for_backward)``).
        backward: the backward trace (starts by unpacking ``saved_for_backward``).
        can_recompute: whether a forward bound symbol may be recomputed in the backward (for a
            fusion executor: one it fuses and that is cheap, e.g. ``ex.can_fuse(b) and
            is_cheap_to_recompute(b)``).

    Returns:
        ``(forward, backward)``: new traces, or the given ones when nothing is gained.
    """
    unpack_index = _saved_unpack(backward)
    try:
        saved = saved_for_backward(forward)
    except ValueError:
        return forward, backward
    if unpack_index is None:
        return forward, backward

    body = forward.bound_symbols[:-1]
    producer: dict[str, BoundSymbol] = {}
    for b in body:
        for o in b.flat_outs:
            producer[o.name] = b
    recomputable = {id(b): _recomputable(b, can_recompute) for b in body}

    # the values the saved tensors are computed from through recomputable operations
    tensors = {p.name: p for p in saved if isinstance(p, TensorProxy)}
    internal: set[str] = set()
    queue = deque(tensors)
    while queue:
        name = queue.popleft()
        b = producer.get(name)
        if b is None or not recomputable[id(b)] or name in internal:
            continue
        internal.add(name)
        for a in b.flat_args:
            if isinstance(a, TensorProxy) and a.name not in tensors:
                tensors[a.name] = a
                queue.append(a.name)
    if not internal:
        return forward, backward

    # node-split graph: a value costs its size to cut (save); source feeds what cannot be recomputed
    scale = len(tensors) + 1
    weight = {name: _nbytes(p) * scale + 1 for name, p in tensors.items()}  # bytes, then count
    infinite = sum(weight.values()) + 1
    graph = _FlowGraph()
    source, sink = ("source",), ("sink",)
    for name in tensors:
        graph.add(("in", name), ("out", name), weight[name])
        if name not in internal:
            graph.add(source, ("in", name), infinite)
    for name in internal:
        for a in producer[name].flat_args:
            if isinstance(a, TensorProxy):
                graph.add(("out", a.name), ("in", name), infinite)
    for p in saved:
        if isinstance(p, TensorProxy):
            graph.add(("out", p.name), sink, infinite)
    reached = graph.min_cut_source_side(source, sink)
    cut = {name for name in tensors if ("in", name) in reached and ("out", name) not in reached}

    old_cost = sum(weight[p.name] for p in saved if isinstance(p, TensorProxy))
    if sum(weight[name] for name in cut) >= old_cost:
        return forward, backward

    # what the backward recomputes: from the old saved values back to the cut
    recompute: dict[int, BoundSymbol] = {}
    stack = [p.name for p in saved if isinstance(p, TensorProxy) and p.name not in cut]
    while stack:
        name = stack.pop()
        if name in cut:
            continue
        if name not in internal:  # pragma: no cover - a cut always separates the saved values from the leaves
            return forward, backward
        b = producer[name]
        if id(b) not in recompute:
            recompute[id(b)] = b
            stack.extend(a.name for a in b.flat_args if isinstance(a, TensorProxy))

    kept = [p for p in saved if not isinstance(p, TensorProxy) or p.name in cut]
    kept_names = {p.name for p in kept}
    order = {name: i for i, name in enumerate(tensors)}
    new_saved = kept + sorted(
        (tensors[n] for n in cut if n not in kept_names),
        key=lambda p: (producer.get(p.name) is not None, order[p.name]),
    )

    # backward: unpack the new saved values, recompute each value right before its first use
    pending = {o.name: b for b in recompute.values() for o in b.flat_outs}
    bsyms = list(backward.bound_symbols)
    out: list[BoundSymbol] = []
    placed: set[int] = set()

    def place(name: str) -> None:
        b = pending.get(name)
        if b is None or id(b) in placed:
            return
        placed.add(id(b))
        for a in b.flat_args:
            if isinstance(a, Proxy):
                place(a.name)
        out.append(b)

    for i, b in enumerate(bsyms):
        if i == unpack_index:
            out.append(b.from_bsym(output=tuple(new_saved)))
            continue
        for a in b.flat_args:
            if isinstance(a, Proxy):
                place(a.name)
        out.append(b)
    new_backward = from_trace(backward)
    new_backward.bound_symbols = out
    new_backward.scopes = [new_backward.bound_symbols]

    ret = forward.bound_symbols[-1]
    outputs = ret.args[0][0]
    new_forward = from_trace(forward)
    new_forward.bound_symbols = eliminate_dead_code(
        [*body, ret.from_bsym(args=((outputs, tuple(new_saved)), *ret.args[1:]))]
    )
    new_forward.scopes = [new_forward.bound_symbols]
    return new_forward, new_backward
