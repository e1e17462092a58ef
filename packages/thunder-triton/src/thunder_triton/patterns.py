"""Pattern rewrites over traced operations: find the op chains model code records, fuse them into one symbol.

Model code spells RMSNorm, SwiGLU and rotary embeddings with ordinary torch operations, so the
computation trace holds chains such as ``mul``/``mean``/``add``/``rsqrt``/``mul``. A *matcher*
looks at one bound symbol (the chain's last one, the *anchor*) and walks back through the
producers of its inputs; when it recognises a chain it returns a :class:`Match`. :func:`rewrite`
replaces each match by one bound symbol of a *composite* symbol (defined by the kernel module)
whose ``subsymbols`` are the matched bound symbols, unchanged. So:

- when the Triton executor's checker accepts the composite, its execution and grad transforms
  call the kernels;
- when it declines (a dtype, a shape), claiming and autodiff fall back to the subsymbols: the
  very operations the user's code recorded, with eager's semantics.

A chain is replaced only when it is *closed*: every intermediate value is used only inside the
chain (so removing it changes nothing else; e.g. the logits of a fused linear + cross-entropy
must not also be returned), and every value it reads from outside is an argument of the composite.
Anchors are visited from the end of the trace backwards, so the longest chain that ends at a
value wins (``to(mul(...))`` before the ``mul`` alone).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol, flat_proxies
from thunder.core.trace import TraceCtx, from_trace

__all__ = ["Match", "TraceGraph", "Matcher", "rewrite", "cast_source"]


@dataclass
class Match:
    """A recognised chain: the bound symbols (indices into the trace) and the composite call replacing them."""

    indices: list[int]
    sym: Symbol
    args: tuple
    kwargs: dict = field(default_factory=dict)


class TraceGraph:
    """Producers and uses of the proxies of a list of bound symbols."""

    def __init__(self, bsyms: Sequence[BoundSymbol]):
        self.bsyms = list(bsyms)
        self._producer: dict[str, int] = {}
        self._uses: dict[str, list[int]] = defaultdict(list)
        for i, b in enumerate(self.bsyms):
            for p in b.flat_args:
                self._uses[p.name].append(i)
            for o in b.flat_outs:
                self._producer[o.name] = i

    def producer(self, p, *syms: Symbol) -> tuple[int, BoundSymbol] | None:
        """``(index, bsym)`` producing the tensor ``p`` when its symbol is one of ``syms``, else ``None``."""
        if not isinstance(p, TensorProxy):
            return None
        i = self._producer.get(p.name)
        if i is None:
            return None
        b = self.bsyms[i]
        if syms and not any(b.sym is s for s in syms):
            return None
        return i, b

    def uses(self, p) -> list[int]:
        """Indices of the bound symbols that read ``p`` (the return statement included)."""
        return self._uses.get(p.name, []) if isinstance(p, TensorProxy) else []


Matcher = Callable[[TraceGraph, int], "Match | None"]

_CASTS = (ltorch.to, ltorch.float, ltorch.half, ltorch.bfloat16, ltorch.double)


def cast_source(g: TraceGraph, p) -> tuple[int, TensorProxy] | None:
    """When ``p`` is produced by a pure dtype conversion (``x.float()``, ``x.to(dtype)``): ``(index, x)``."""
    found = g.producer(p, *_CASTS)
    if found is None:
        return None
    i, b = found
    ins = b.flat_args
    if len(ins) != 1 or not isinstance(ins[0], TensorProxy) or b.args[0] is not ins[0]:
        return None
    x = ins[0]
    if x.device != p.device or tuple(x.shape) != tuple(p.shape):
        return None
    if b.sym is ltorch.to and (set(b.kwargs) - {"dtype"}):
        return None
    return i, x


def _closed(g: TraceGraph, m: Match, anchor: int) -> bool:
    inside = set(m.indices)
    out_names = {o.name for o in g.bsyms[anchor].flat_outs}
    produced: set[str] = set()
    for i in m.indices:
        for o in g.bsyms[i].flat_outs:
            produced.add(o.name)
            if o.name in out_names:
                continue
            if any(u not in inside for u in g.uses(o)):
                return False
    composite_inputs = {p.name for p in flat_proxies(m.args)} | {p.name for p in flat_proxies(m.kwargs)}
    for i in m.indices:
        for p in g.bsyms[i].flat_args:
            if p.name not in produced and p.name not in composite_inputs:
                return False
    return True


def rewrite(trace: TraceCtx, matchers: Sequence[Matcher]) -> TraceCtx:
    """``trace`` with every closed chain a matcher recognises replaced by its composite bound symbol.

    Returns ``trace`` itself when nothing matched.
    """
    bsyms = trace.bound_symbols
    g = TraceGraph(bsyms)
    taken: set[int] = set()
    replaced: dict[int, BoundSymbol] = {}
    for anchor in range(len(bsyms) - 1, -1, -1):
        if anchor in taken:
            continue
        for matcher in matchers:
            m = matcher(g, anchor)
            if m is None:
                continue
            indices = sorted(set(m.indices) | {anchor})
            m.indices = indices
            if taken.intersection(indices) or max(indices) != anchor or not _closed(g, m, anchor):
                continue
            taken.update(indices)
            anchor_bsym = bsyms[anchor]
            subsymbols = [bsyms[i] for i in indices]
            replaced[anchor] = BoundSymbol(
                m.sym, m.args, m.kwargs, anchor_bsym.output, subsymbols, source=anchor_bsym.source
            )
            break
    if not replaced:
        return trace
    new = from_trace(trace)
    new.bound_symbols = [replaced.get(i, b) for i, b in enumerate(bsyms) if i in replaced or i not in taken]
    new.scopes = [new.bound_symbols]
    return new
