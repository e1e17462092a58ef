"""Passes from a semantic trace to an executable one: claiming, dead-code elimination, delete-last-used."""

from __future__ import annotations

from collections.abc import Sequence

from thunder.core import prims
from thunder.core.dce import eliminate_dead_code
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol, flat_proxies
from thunder.core.symbolic import same_shape
from thunder.core.trace import TraceCtx, from_trace, timed_pass, tracectx
from thunder.executors.base import Executor, FusionExecutor

__all__ = [
    "claim_executors",
    "claim_bound_symbols",
    "fusion_claims",
    "dce",
    "del_last_used",
    "boxed_region_call",
    "BOXED_TAG",
    "NoExecutorError",
    "copies_as_is",
    "is_write_back",
    "updated_inputs",
]

# the tag of a fused region's symbol whose callable has ``call_boxed`` (see boxed_region_call)
BOXED_TAG = "boxed_inputs"
# trace.tags keys written by claim_executors and read by fusion passes
FUSION_CLAIMS_TAG = "fusion_claims"
EXECUTORS_TAG = "executors"


class NoExecutorError(RuntimeError):
    pass


def _is_python_construct(bsym: BoundSymbol) -> bool:
    return bsym.sym.python_printer is not None


def claim_executors(trace: TraceCtx, executors: Sequence[Executor]) -> TraceCtx:
    """Hands each bound symbol to the first executor that takes it, else claims its decomposition.

    An operator executor's claim replaces the bound symbol by a call of its operator (or by what
    its execution transform records). A fusion executor's claim keeps the bound symbol as it is
    and notes the claim in ``trace.tags["fusion_claims"]`` (see :func:`fusion_claims`); the
    executor's fusion pass then groups its claims into regions.
    """
    with timed_pass("Transform for execution") as t:
        new = from_trace(trace)
        claims: dict[int, tuple[BoundSymbol, Executor]] = {}
        with tracectx(new):
            for bsym in trace.bound_symbols:
                _claim(bsym, executors, new, new.bound_symbols, claims)
        new.tags[FUSION_CLAIMS_TAG] = claims
        new.tags[EXECUTORS_TAG] = tuple(executors)
        return t.stamp(new)


def claim_bound_symbols(bsyms: Sequence[BoundSymbol], executors: Sequence[Executor], trace: TraceCtx) -> list:
    """Claims ``bsyms`` with ``executors`` (operator executors only) inside ``trace``; returns the claimed list.

    Fusion passes use it to hand back regions too small to fuse, and to lower a region's bound
    symbols to the torch executor's calls.
    """
    out: list[BoundSymbol] = []
    executors = [ex for ex in executors if not isinstance(ex, FusionExecutor)]
    with tracectx(trace):
        for bsym in bsyms:
            _claim(bsym, executors, trace, out, None)
    return out


def fusion_claims(trace: TraceCtx) -> dict[int, tuple[BoundSymbol, Executor]]:
    """The bound symbols of ``trace`` claimed by fusion executors: ``{id(bsym): (bsym, executor)}``."""
    return trace.tags.get(FUSION_CLAIMS_TAG, {})


def _claim(bsym: BoundSymbol, executors, trace: TraceCtx, out: list, claims: dict | None) -> None:
    sym = bsym.sym
    if _is_python_construct(bsym):
        out.append(bsym)
        return
    for ex in executors:
        if isinstance(ex, FusionExecutor):
            if claims is not None and ex.can_fuse(bsym):
                claims[id(bsym)] = (bsym, ex)
                out.append(bsym)
                return
            continue
        impl = ex.implmap.get(sym.id)
        if impl is not None and (impl.symbol is not None or impl.execution_transform is not None):
            if impl.checker is None or impl.checker(*bsym.args, **bsym.kwargs):
                if impl.execution_transform is not None:
                    for new_bsym in _apply_execution_transform(impl.execution_transform, bsym, trace):
                        _claim(new_bsym, executors, trace, out, claims)
                elif impl.symbol is sym:
                    out.append(bsym)
                else:
                    out.append(bsym.from_bsym(sym=impl.symbol, subsymbols=[bsym]))
                return
        if sym.executor is ex:
            # the executor's own operator (its implementation, if any, declined above)
            out.append(bsym)
            return
    if bsym.subsymbols:
        for sub in bsym.subsymbols:
            if sub.source is None:
                sub = sub.from_bsym(source=bsym.source)
            _claim(sub, executors, trace, out, claims)
        return
    if sym.executor is not None and sym.executor not in executors:
        raise NoExecutorError(
            f"{sym.print_name} is an operator of the {sym.executor.name!r} executor, which is not in the executor "
            f"list [{', '.join(ex.name for ex in executors)}]; add it to thunder.jit(executors=[...])"
        )
    names = ", ".join(ex.name for ex in executors)
    raise NoExecutorError(f"no executor among [{names}] can execute {sym.print_name}, and it has no decomposition")


def _apply_execution_transform(transform, bsym: BoundSymbol, trace: TraceCtx) -> list[BoundSymbol]:
    scope: list[BoundSymbol] = []
    trace.scopes.append(scope)
    try:
        result = transform(*bsym.args, **bsym.kwargs)
    finally:
        trace.scopes.pop()
    produced = flat_proxies(result)
    expected = bsym.flat_outs
    mapping = {}
    for p, o in zip(produced, expected):
        if p.name != o.name:
            mapping[p.name] = o
    out = []
    for b in scope:
        b = b.swap_proxies(mapping)
        if b.source is None:
            b.source = bsym.source
        out.append(b)
    return out


def dce(trace: TraceCtx) -> TraceCtx:
    """Removes bound symbols none of whose outputs are used (keeping side effects and random ops)."""
    with timed_pass("Dead Code Elimination") as t:
        new = from_trace(trace)
        new.bound_symbols = eliminate_dead_code(trace.bound_symbols, drop_unused_outputs=True)
        new.scopes = [new.bound_symbols]
        return t.stamp(new)


def del_last_used(trace: TraceCtx) -> TraceCtx:
    """Inserts ``del`` after each value's last use, so memory is freed as early as in eager code.

    A fused region whose callable takes its inputs boxed (see :func:`boxed_region_call`) gets them in a list,
    and the inputs that die there are deleted before the call: the region frees each of them after its own
    last use of it, not when it returns."""
    with timed_pass("Delete Last Used") as t:
        seen: set[str] = set(trace.constants)  # constants are the compiled function's globals: never deleted
        out: list[BoundSymbol] = []
        for bsym in reversed(trace.bound_symbols):
            if bsym.sym is prims.python_return:
                seen.update(p.name for p in bsym.flat_args)
                out.append(bsym)
                continue
            dead = []
            for p in bsym.flat_args:
                if p.name not in seen:
                    seen.add(p.name)
                    dead.append(p)
            seen.update(p.name for p in bsym.flat_outs)
            if dead and BOXED_TAG in bsym.sym.tags:
                out.append(_boxed_call(bsym, dead))
                continue
            if dead:
                out.append(prims.python_del.bind(*dead, output=None))
            out.append(bsym)
        new = from_trace(trace)
        new.bound_symbols = out[::-1]
        new.scopes = [new.bound_symbols]
        return t.stamp(new)


def boxed_region_call(region_fn) -> bool:
    """Whether a fused region's callable takes its inputs boxed: ``region_fn.call_boxed(args)`` with ``args`` a list
    it may empty (as Inductor's compiled graphs do), so that an input the caller no longer holds is freed inside the
    region after its last use there. The program's code calls it so when inputs die at the region."""
    return callable(getattr(region_fn, "call_boxed", None))


def _boxed_call(bsym: BoundSymbol, dead: list) -> BoundSymbol:
    """``bsym`` (a fused region's call) printed as a boxed call that deletes ``dead`` (inputs used last there) first."""
    sym = bsym.sym
    dead_names = {p.name for p in dead}

    def printer(b: BoundSymbol, p) -> list[str]:
        box = f"_{sym.print_name}_inputs"
        call = f"{sym.print_name}.call_boxed({box})"
        out = f"{p.outputs(b.output)} = {call}" if b.flat_outs else call
        dels = ", ".join(p.name(x) for x in b.flat_args if x.name in dead_names)
        return [f"{box} = [{', '.join(p.value(a) for a in b.args)}]; del {dels}", out]

    boxed = Symbol(
        sym.name,
        sym.meta,
        id=sym.id,
        is_prim=sym.is_prim,
        print_name=sym.print_name,
        call_ctx=sym.call_ctx,
        executor=sym.executor,
        tags=sym.tags,
        python_printer=printer,
    )
    return bsym.from_bsym(sym=boxed)


def updated_inputs(trace: TraceCtx) -> set[tuple[str, str]]:
    """``(new value, input)`` name pairs of the inputs the program updates in place, from its aliasing record (the
    write-backs ``copy_(new, input)``); a trace without one (built by hand) has none."""
    record = trace.tags.get("aliasing")
    return {(u.new_value, u.input) for u in record.updates if u.new_value is not None} if record else set()


def is_write_back(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is a claimed ``copy_(new, dst)`` (the form of the program's write-backs into its inputs)."""
    return bsym.sym.id == "torch::copy_" and len(bsym.args) == 2 and not bsym.kwargs


def copies_as_is(new, dst) -> bool:
    """Whether copying ``new`` into ``dst`` only moves values: tensors of one dtype, shape and device (no cast, no
    broadcast), into a ``dst`` that does not require grad."""
    return (
        isinstance(new, TensorProxy)
        and isinstance(dst, TensorProxy)
        and new.dtype == dst.dtype
        and same_shape(new.shape, dst.shape)
        and new.device == dst.device
        and not dst.requires_grad
    )
