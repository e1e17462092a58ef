"""The partitioner every fusion executor shares: claimed bound symbols -> regions -> one call each.

After the claiming pass, a :class:`~thunder.executors.base.FusionExecutor`'s claims are still the
original bound symbols. :func:`fusion_pass` groups them into regions and replaces each region by
one bound symbol that calls the callable the executor compiled for it (``fuse_region``), printed
as ``torchCompile0(...)`` (or the executor's ``region_name``) with the region's contents as
comments below it.

Partitioning walks the trace in order with one open region at a time. A claimed bound symbol
joins the open region unless that would create a cycle: when one of its inputs was computed
*outside* the region from something the region computes (the region would have to run both
before and after that outside computation). Then the open region is closed and a new one
starts. Bound symbols outside regions don't close the open region, so independent unfused
operations between fusible ones don't split it. Operations with side effects (in-place updates,
random number draws) are barriers: no region spans them, so their order relative to everything
else is kept. Finally the regions and the other bound symbols are put in a dependency order that
keeps the original order where it can.

Because only the open region can grow, an edge between two regions always goes from an older to
a newer one, and a region-level cycle would need a path leaving and re-entering one region,
which the input check rejects.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from thunder.core import prims
from thunder.core.dce import has_side_effects
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, from_trace, timed_pass
from thunder.executors.passes import (
    BOXED_TAG,
    EXECUTORS_TAG,
    boxed_region_call,
    claim_bound_symbols,
    copies_as_is,
    fusion_claims,
    is_write_back,
    updated_inputs,
)

__all__ = ["Region", "partition", "fusion_pass", "region_trace"]


@dataclass
class Region:
    """Bound symbols fused into one call: ``outputs = callable(*inputs)``.

    ``inputs`` are the proxies the region reads but does not compute; ``outputs`` those it
    computes that are used after it (by other bound symbols or the trace's return); inputs in
    first-use order, outputs in the order they are computed.
    """

    bound_symbols: list[BoundSymbol]
    inputs: list[Proxy] = field(default_factory=list)
    outputs: list[Proxy] = field(default_factory=list)
    name: str = ""


def _is_barrier(bsym: BoundSymbol) -> bool:
    """Side effects (in-place writes, random draws) no region spans; the return is not one."""
    return bsym.sym is not prims.python_return and has_side_effects(bsym)


def partition(bsyms: Sequence[BoundSymbol], is_member: Callable[[BoundSymbol], bool]) -> list[list[BoundSymbol]]:
    """Groups the bound symbols ``is_member`` accepts into acyclic regions.

    Returns a list of *nodes* in a valid execution order: each node is a list of bound symbols,
    either a region (bound symbols ``is_member`` accepts, in their original order) or a single
    other bound symbol.
    """
    # group id of each bound symbol position (None: not fused); values' taints
    group_of: list[int | None] = [None] * len(bsyms)
    producer_group: dict[str, int | None] = {}
    # taint[name]: regions R such that the value is computed outside R from something R computes
    taint: dict[str, frozenset[int]] = {}
    empty: frozenset[int] = frozenset()
    n_groups = 0
    open_group: int | None = None

    for i, bsym in enumerate(bsyms):
        member = is_member(bsym)
        if not member and _is_barrier(bsym):
            open_group = None
        in_taint: set[int] = set()
        producers: set[int] = set()
        for p in bsym.flat_args:
            in_taint.update(taint.get(p.name, empty))
            g = producer_group.get(p.name)
            if g is not None:
                producers.add(g)
        group = None
        if member:
            if open_group is not None and open_group not in in_taint:
                group = open_group
            else:
                group = open_group = n_groups
                n_groups += 1
        group_of[i] = group
        out_taint = frozenset(in_taint | (producers - {group})) if (in_taint or producers) else empty
        for p in bsym.flat_outs:
            producer_group[p.name] = group
            taint[p.name] = out_taint
    return _schedule(bsyms, group_of)


def _schedule(bsyms: Sequence[BoundSymbol], group_of: list[int | None]) -> list[list[BoundSymbol]]:
    """Orders regions and the other bound symbols by their dependencies, else by original position."""
    # nodes: one per region (keyed by its first member's position) and one per other bound symbol
    node_of: list[int] = []
    nodes: list[list[BoundSymbol]] = []
    first_pos: list[int] = []
    group_node: dict[int, int] = {}
    for i, (bsym, g) in enumerate(zip(bsyms, group_of)):
        if g is None:
            node = len(nodes)
            nodes.append([bsym])
            first_pos.append(i)
        else:
            node = group_node.get(g)
            if node is None:
                node = group_node[g] = len(nodes)
                nodes.append([])
                first_pos.append(i)
            nodes[node].append(bsym)
        node_of.append(node)

    # barriers keep their position relative to everything: edges from all before, to all after
    producer_node: dict[str, int] = {}
    deps: list[set[int]] = [set() for _ in nodes]
    last_barrier: int | None = None
    since_barrier: list[int] = []
    for i, bsym in enumerate(bsyms):
        node = node_of[i]
        for p in bsym.flat_args:
            d = producer_node.get(p.name)
            if d is not None and d != node:
                deps[node].add(d)
        for p in bsym.flat_outs:
            producer_node[p.name] = node
        if group_of[i] is None and _is_barrier(bsym):
            deps[node].update(n for n in since_barrier if n != node)
            if last_barrier is not None:
                deps[node].add(last_barrier)
            last_barrier = node
            since_barrier = []
        else:
            if last_barrier is not None and last_barrier != node:
                deps[node].add(last_barrier)
            since_barrier.append(node)
    if bsyms and bsyms[-1].sym is prims.python_return:
        ret = node_of[len(bsyms) - 1]
        deps[ret].update(n for n in range(len(nodes)) if n != ret)

    users: list[list[int]] = [[] for _ in nodes]
    waiting = [len(d) for d in deps]
    for node, ds in enumerate(deps):
        for d in ds:
            users[d].append(node)
    ready = [(first_pos[n], n) for n in range(len(nodes)) if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[list[BoundSymbol]] = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(nodes[n])
        for u in users[n]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (first_pos[u], u))
    if len(order) != len(nodes):  # pragma: no cover - the partitioner's invariant
        raise RuntimeError("internal error: the fusion partition has a cycle")
    return order


def _region_io(bsyms: Sequence[BoundSymbol], used_after: set[str]) -> tuple[list[Proxy], list[Proxy]]:
    produced: dict[str, Proxy] = {}
    inputs: dict[str, Proxy] = {}
    for bsym in bsyms:
        for p in bsym.flat_args:
            if p.name not in produced and p.name not in inputs:
                inputs[p.name] = p
        for p in bsym.flat_outs:
            produced[p.name] = p
    outputs = [p for name, p in produced.items() if name in used_after]
    return list(inputs.values()), outputs


def fusion_pass(trace: TraceCtx, executor) -> TraceCtx:
    """Replaces the bound symbols ``executor`` claimed in ``trace`` by calls of fused regions."""
    with timed_pass(f"Fusion ({executor.name})") as t:
        claims = fusion_claims(trace)
        claimed = {key for key, (_, ex) in claims.items() if ex is executor}

        def is_member(bsym: BoundSymbol) -> bool:
            return id(bsym) in claimed

        new = from_trace(trace)
        if not claimed:
            new.bound_symbols = list(trace.bound_symbols)
            new.scopes = [new.bound_symbols]
            return t.stamp(new)
        nodes = partition(trace.bound_symbols, is_member)

        # names used by each node position onwards, to find each region's outputs
        used_later: list[set[str]] = [set() for _ in range(len(nodes) + 1)]
        for k in range(len(nodes) - 1, -1, -1):
            names = set(used_later[k + 1])
            for bsym in nodes[k]:
                names.update(p.name for p in bsym.flat_args)
            used_later[k] = names

        others = [ex for ex in trace.tags.get(EXECUTORS_TAG, ()) if ex is not executor]
        write_backs = _WriteBacks(trace, nodes) if executor.fuses_write_backs else None
        out: list[BoundSymbol] = []
        for k, node in enumerate(nodes):
            if not is_member(node[0]):
                if write_backs is None or not write_backs.absorbed(node[0]):
                    out.extend(node)
                continue
            if not executor.worth_fusing(node):
                if not others:
                    raise RuntimeError(f"{executor.name}: a region is too small to fuse and no other executor is known")
                out.extend(claim_bound_symbols(node, others, new))
                continue
            used_after = used_later[k + 1]
            if write_backs is not None and (copies := write_backs.absorb(k, node)):
                node = [*node, *copies]
                used_after = used_after - {c.args[0].name for c in copies}
            inputs, outputs = _region_io(node, used_after)
            region = Region(node, inputs, outputs, new.make_name(executor.region_name))
            fn = executor.fuse_region(region)
            out.append(_region_bsym(region, fn, executor))
        new.bound_symbols = out
        new.scopes = [new.bound_symbols]
        new.tags.pop("fusion_claims", None)
        return t.stamp(new)


class _WriteBacks:
    """The program's write-backs (``copy_(new, x)`` of a new value into an input ``x`` it updates, from its aliasing
    record) that a region computing ``new`` can do itself, as its last operation: a BatchNorm's running statistics,
    written in place by the fused kernel instead of returned and copied by the program after the call.

    A write-back is absorbed where ``new`` is read by nothing but the write-back, ``x`` is the program's argument
    (no other argument shares its storage) read by nothing but the region and the write-back, and the copy is plain
    (same dtype, shape and device; ``x`` does not require grad), so that moving it into the region changes no value
    any operation reads."""

    def __init__(self, trace: TraceCtx, nodes: list[list[BoundSymbol]]):
        updates = updated_inputs(trace)
        record = trace.tags.get("aliasing")
        # (an argument sharing its storage with another, or that storage: a write into it reaches what the others
        # read, which the region's users do not show, so it stays where the program wrote it)
        shared = {n for group in (record.shared_storage if record else ()) for n in (group.storage, *group.inputs)}
        arguments = {p.name for p in trace.args if isinstance(p, TensorProxy)} - shared
        self.nodes = nodes
        self.users: dict[str, set[int]] = {}  # name -> the nodes reading it
        for k, node in enumerate(nodes):
            for bsym in node:
                for p in bsym.flat_args:
                    self.users.setdefault(p.name, set()).add(k)
        self.candidates: dict[str, list[int]] = {}  # new value's name -> the nodes of its write-backs
        for k, node in enumerate(nodes):
            bsym = node[0]
            if (
                len(node) == 1
                and is_write_back(bsym)
                and copies_as_is(*bsym.args)
                and (bsym.args[0].name, bsym.args[1].name) in updates
            ):
                if bsym.args[1].name in arguments:
                    self.candidates.setdefault(bsym.args[0].name, []).append(k)
        self._absorbed: set[int] = set()  # id() of the write-backs moved into regions

    def absorb(self, k: int, region: list[BoundSymbol]) -> list[BoundSymbol]:
        """The write-backs region ``k`` does itself (then left out where they stood)."""
        copies = []
        for bsym in region:
            for p in bsym.flat_outs:
                for j in self.candidates.get(p.name, ()):
                    copy = self.nodes[j][0]
                    new, dst = copy.args
                    if not self.users.get(new.name, set()) <= {k, j} or not self.users.get(dst.name, set()) <= {k, j}:
                        continue
                    if any(self.users.get(o.name) for o in copy.flat_outs):
                        continue
                    copies.append(copy)
                    self._absorbed.add(id(copy))
        return copies

    def absorbed(self, bsym: BoundSymbol) -> bool:
        return id(bsym) in self._absorbed


def _region_bsym(region: Region, fn: Callable, executor) -> BoundSymbol:
    sym = Symbol(
        region.name,
        None,
        id=f"{executor.name}::{region.name}",
        is_prim=True,
        print_name=region.name,
        call_ctx={region.name: fn},
        executor=executor,
        tags=("fusion", BOXED_TAG) if boxed_region_call(fn) else ("fusion",),
    )
    source = next((b.source for b in region.bound_symbols if b.source is not None), None)
    return BoundSymbol(sym, tuple(region.inputs), {}, tuple(region.outputs), list(region.bound_symbols), source)


def region_trace(region: Region, executors: Sequence, *, fn_name: str | None = None) -> TraceCtx:
    """A standalone trace computing ``region`` (``outputs = fn(*inputs)``), claimed with ``executors``.

    A fusion executor that lowers a region to Python (as torch_compile does) compiles this trace.
    """
    trace = TraceCtx(fn_name or region.name)
    trace.args = list(region.inputs)
    for p in region.inputs:
        trace.names.add(p.name)
    for bsym in region.bound_symbols:
        for p in bsym.flat_outs:
            trace.names.add(p.name)
    body = claim_bound_symbols(region.bound_symbols, executors, trace)
    body.append(prims.python_return.bind(tuple(region.outputs), output=None))
    trace.bound_symbols = body
    trace.scopes = [trace.bound_symbols]
    return trace
