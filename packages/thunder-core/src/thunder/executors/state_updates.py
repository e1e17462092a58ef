"""State updates run in place, as eager runs them, when their only use is the write-back into an input.

A traced program is functional: BatchNorm's running statistics come out of the batch-norm symbol as
new tensors, ``num_batches_tracked += 1`` is an ``add``, and the program ends by copying each new
value into the module's buffer (the write-back). Eager instead lets the kernel update the buffer in
place. On a model with many small layers the functional form costs a fresh allocation and a copy
per buffer and step (DenseNet-121: 363 copies a step).

:func:`update_state_in_place` rewrites, in a trace claimed by the torch executor, each

- ``(out, mean, rstd, new_rm, new_rv) = native_batch_norm_train(x, w, b, rm, rv, ...)`` whose
  ``new_rm``/``new_rv`` are only copied into ``rm``/``rv``, into PyTorch's in-place kernel
  ``(out, mean, rstd) = torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, ...)``;
- ``(out, new_rm, new_rv) = batch_norm_functional(x, rm, rv, ...)`` (no gradient) likewise into
  ``out = torch.nn.functional.batch_norm(x, rm, rv, ...)``;
- ``t = torch.add(a, b)`` (``sub``, ``mul``, ``index_copy``, ``masked_fill``) whose ``t`` is copied into
  ``a`` into ``t = Tensor.add_(a, b)``: a KV cache's ``index_copy_`` writes one position instead of
  copying the whole cache. Other calls may read ``t`` (then the updated ``a``), directly or through
  views, as long as neither ``t`` nor a view of it is returned or saved for the backward.

It does so only where the updated tensor is an argument of the trace (so no other argument shares its
storage: those become views of one storage argument), read by nothing but the update and its
write-back, with the write-back's dtype and shape (no cast, no broadcast). The replaced symbols stay
as the new symbol's decomposition, so the printed trace shows what the in-place call stands for.
"""

from __future__ import annotations

from thunder.core import prims
from thunder.core.aliasing import may_alias_an_argument
from thunder.core.dce import has_side_effects
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol, flat_proxies
from thunder.core.trace import TraceCtx, from_trace, timed_pass
from thunder.executors.passes import copies_as_is, is_write_back, updated_inputs
from thunder.executors.torchex import torch_op

__all__ = ["update_state_in_place"]


_IN_PLACE = (OpTags.IN_PLACE,)
_batch_norm_updating_stats = torch_op(
    "batch_norm_updating_stats",
    print_name="torch.ops.aten._native_batch_norm_legit",
    imports=("import torch",),
    tags=_IN_PLACE,
)
_functional_batch_norm_updating_stats = torch_op(
    "functional_batch_norm_updating_stats",
    print_name="torch.nn.functional.batch_norm",
    imports=("import torch.nn.functional",),
    tags=_IN_PLACE,
)
# functional torch calls -> their in-place methods, with the same arguments (the updated tensor first)
_IN_PLACE_METHODS = {
    name: torch_op(
        f"{name}_in_place", print_name=f"Tensor.{name}_", imports=("from torch import Tensor",), tags=_IN_PLACE
    )
    for name in ("add", "sub", "mul", "index_copy", "masked_fill")
}

# (claimed symbol id) -> (positions of the updated arguments, positions of the new values among the outputs)
_BATCH_NORMS = {
    "torch::native_batch_norm_train": ((3, 4), (3, 4), _batch_norm_updating_stats),
    "torch::batch_norm_functional": ((1, 2), (1, 2), _functional_batch_norm_updating_stats),
}


def update_state_in_place(trace: TraceCtx) -> TraceCtx:
    """``trace`` with its state updates that only feed a write-back run in place (see the module docstring)."""
    with timed_pass("Update state in place") as t:
        bsyms = trace.bound_symbols
        inputs = {p.name for p in flat_proxies((trace.args, trace.kwargs))}
        uses: dict[str, list[int]] = {}
        for i, bsym in enumerate(bsyms):
            for p in bsym.flat_args:
                uses.setdefault(p.name, []).append(i)
        # the write-backs are the program's aliasing record's updates (thunder.core.aliasing_record); a trace
        # without one (built by hand) has none to run in place
        updates = updated_inputs(trace)
        write_back_of: dict[tuple[str, str], int] = {}  # (new value, destination) -> index of its copy_
        for i, bsym in enumerate(bsyms):
            if is_write_back(bsym):
                src, dst = bsym.args
                if isinstance(src, TensorProxy) and isinstance(dst, TensorProxy) and (src.name, dst.name) in updates:
                    write_back_of[(src.name, dst.name)] = i

        def only_write_back(new, dst, at: int, *, reads_of_new: bool = False) -> int | None:
            # the index of the copy_ that writes ``new`` into the input ``dst``, if nothing else reads ``dst``
            # and nothing else reads ``new`` (or, with ``reads_of_new``, only reads it: see only_read)
            if not copies_as_is(new, dst) or dst.name not in inputs:
                return None
            i = write_back_of.get((new.name, dst.name))
            if i is None or sorted(uses.get(dst.name, ())) != sorted({at, i}):
                return None
            if bsyms[i].flat_outs and any(uses.get(o.name) for o in bsyms[i].flat_outs):
                return None
            if reads_of_new:
                if not only_read(new.name, skip=i):
                    return None
            elif uses.get(new.name) != [i]:
                return None
            return i

        def only_read(name: str, skip: int) -> bool:
            # whether every use of ``name``, and of the views taken of it, is a call that only reads it: not the
            # program's return (its outputs, what backward saves), no in-place write or other side effect
            pending, seen = [name], {name}
            while pending:
                for j in uses.get(pending.pop(), ()):
                    if j == skip:
                        continue
                    user = bsyms[j]
                    if user.sym is prims.python_return or has_side_effects(user):
                        return False
                    if may_alias_an_argument(user):
                        for o in user.flat_outs:
                            if o.name not in seen:
                                seen.add(o.name)
                                pending.append(o.name)
            return True

        replaced: dict[int, BoundSymbol | None] = {}
        for at in range(len(bsyms)):
            fused = _batch_norm_in_place(bsyms, at, only_write_back) or _method_in_place(bsyms, at, only_write_back)
            if fused is None:
                continue
            new_bsym, copies = fused
            replaced[at] = new_bsym
            for i in copies:
                replaced[i] = None
        if not replaced:
            return trace
        new = from_trace(trace)
        new.bound_symbols = [replaced.get(i, b) for i, b in enumerate(bsyms) if replaced.get(i, b) is not None]
        new.scopes = [new.bound_symbols]
        return t.stamp(new)


def _batch_norm_in_place(bsyms: list[BoundSymbol], at: int, only_write_back):
    bsym = bsyms[at]
    spec = _BATCH_NORMS.get(bsym.sym.id)
    if spec is None or bsym.kwargs or not isinstance(bsym.output, (tuple, list)):
        return None
    arg_pos, out_pos, sym = spec
    copies = []
    for a, o in zip(arg_pos, out_pos):
        if len(bsym.args) <= a or len(bsym.output) <= o:
            return None
        i = only_write_back(bsym.output[o], bsym.args[a], at)
        if i is None:
            return None
        copies.append(i)
    kept = tuple(x for j, x in enumerate(bsym.output) if j not in out_pos)
    output = kept[0] if len(kept) == 1 else kept
    args = bsym.args
    if sym is _batch_norm_updating_stats:  # _native_batch_norm_legit(x, w, b, rm, rv, training, momentum, eps)
        args = args[:8]
    return _bound(sym, args, output, [bsym, *(bsyms[i] for i in copies)]), copies


def _method_in_place(bsyms: list[BoundSymbol], at: int, only_write_back):
    bsym = bsyms[at]
    sym = _IN_PLACE_METHODS.get(bsym.sym.name) if bsym.sym.id == f"torch::{bsym.sym.name}" else None
    if sym is None or bsym.kwargs or not isinstance(bsym.output, TensorProxy) or not bsym.args:
        return None
    # the in-place method returns the updated input itself, which later calls read in place of the new value
    i = only_write_back(bsym.output, bsym.args[0], at, reads_of_new=True)
    if i is None:
        return None
    return _bound(sym, bsym.args, bsym.output, [bsym, bsyms[i]]), [i]


def _bound(sym: Symbol, args, output, replaced: list[BoundSymbol]) -> BoundSymbol:
    new = BoundSymbol(sym, tuple(args), {}, output, subsymbols=replaced, source=replaced[0].source)
    new.header = replaced[0].header
    return new
