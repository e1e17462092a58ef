"""Builds a traced program's aliasing and mutation record (``thunder.core.aliasing_record``) from what tracing
found: the inputs sharing a storage (``_InputBuilder.alias_overlapping``), the write-backs in their order
(``emit_writes``), the updates autograd does not see (``keep_grad_of``), the layout steps and the returned
inputs of the step after the call (``PostCall``), and the outputs the executors may compute as views of
inputs (``thunder.core.aliasing``). Built once per traced program, at compile time."""

from __future__ import annotations

from thunder.core.aliasing import aliased_argument_positions, may_alias_an_argument, may_return_alias
from thunder.core.aliasing_record import AliasingRecord, InputUpdate, SharedStorage
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx

__all__ = ["build_aliasing_record"]


def _layout_step(kind: str, detail, input_names: dict[str, str]) -> str:
    if kind == "storage_of":
        return f"storage of {input_names.get(detail, detail)}"
    return kind


def build_aliasing_record(
    trace: TraceCtx,
    callers: dict[str, str],
    shared_storages: list[tuple[str, tuple[str, ...]]],
    writes: list[tuple[TensorProxy, TensorProxy]],
    layout_steps: list[tuple],
    returned: list[tuple],
    views: list[tuple] = (),
    internal_views: list[tuple] = (),
    unseen_by_version_counter: list[tuple[TensorProxy, TensorProxy]] = (),
) -> AliasingRecord:
    """The record of ``trace``, whose last symbol is its return.

    ``callers``: input name -> how the prologue reads the caller's tensor; ``writes``: ``(new value, tensor)``
    in the order written back; ``layout_steps``, ``returned`` and ``views``: ``PostCall.steps``, ``PostCall.returned`` and
    ``PostCall.views``; ``internal_views``: ``PostCall.internal_views``; ``unseen_by_version_counter``: ``(former
    value, new value)`` of the updates made through ``.data`` (``Tracer.unseen_by_version_counter``)."""
    by_caller = {expr: name for name, expr in callers.items()}
    written = {dst.name for _, dst in writes}
    no_grad: set[tuple[str, str]] = set()  # (new value, tensor) of updates autograd does not see
    origins: dict[str, frozenset[str]] = {name: frozenset((name,)) for name in callers}
    for b in trace.bound_symbols:
        if b.sym.id == "keep_grad_of" and isinstance(b.args[0], TensorProxy) and b.args[0].name in written:
            no_grad.add((b.output.name, b.args[0].name))
        args = b.flat_args
        from_inputs = [origins[a.name] for a in args if isinstance(a, TensorProxy) and a.name in origins]
        if from_inputs and may_alias_an_argument(b):
            if may_return_alias(b.sym):  # (declared by the symbol itself: only the arguments it names)
                from_inputs = [origins[args[i].name] for i in aliased_argument_positions(b) if args[i].name in origins]
            reached = frozenset().union(*from_inputs)
            for o in b.flat_outs:
                if isinstance(o, TensorProxy) and reached:
                    origins[o.name] = reached
    layouts = {expr: _layout_step(kind, detail, by_caller) for expr, kind, detail, _ in layout_steps}
    updates = tuple(
        InputUpdate(
            input=dst.name,
            caller=callers.get(dst.name, dst.name),
            new_value=new.name,
            keeps_history=(new.name, dst.name) in no_grad,
            layout=layouts.get(callers.get(dst.name)),
        )
        for new, dst in writes
    )
    # inputs whose layout changes without a write of their elements
    updates += tuple(
        InputUpdate(input=by_caller.get(expr, expr), caller=expr, new_value=None, layout=layout)
        for expr, layout in layouts.items()
        if by_caller.get(expr) not in written
    )
    ret = trace.bound_symbols[-1]
    outputs = [p for p in ret.flat_args if isinstance(p, TensorProxy)]
    aliasing = []
    seen = set()
    as_views = {v.name: v.caller for v in views}
    of_results = {v.name: v.root for v in internal_views if not v.restrided and not v.alias}
    for p in outputs:
        if p.name in seen or p.name in callers or p.name in as_views or p.name in of_results:
            continue
        seen.add(p.name)
        if p.name in origins:
            aliasing.append((p.name, tuple(sorted(origins[p.name]))))
    return AliasingRecord(
        shared_storage=tuple(SharedStorage(storage, inputs) for storage, inputs in shared_storages),
        updates=updates,
        returned_inputs=tuple(dict.fromkeys(expr for _, expr, _ in returned)),
        outputs_aliasing_inputs=tuple(aliasing),
        returned_views=tuple(as_views.items()),
        views_of_results=tuple(of_results.items()),
        unseen_by_version_counter=tuple((old.name, new.name) for old, new in unseen_by_version_counter),
    )
