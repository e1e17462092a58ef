"""Splitting a differentiated program into a forward and a backward trace, run by ``ThunderFunction``.

The forward returns the program's tensor outputs and what the backward needs (saved for
backward); the backward takes those and the outputs' cotangents and returns the inputs' gradients.
PyTorch autograd connects them: outputs carry a ``ThunderFunctionBackward`` grad_fn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from thunder.core import dtypes, prims
from thunder.core.aliasing import aliased_argument_positions, aliased_outputs
from thunder.core.codegen import note_user_line
from thunder.core.dce import eliminate_dead_code, has_side_effects
from thunder.core.devices import to_torch_device
from thunder.core.proxies import RuntimeValueProxy, TensorProxy
from thunder.core.pytree import tree_leaves
from thunder.core.symbol import BoundSymbol, Symbol, flat_proxies, swap_proxies
from thunder.core.symbolic import SizeProxy
from thunder.core.trace import TraceCtx, from_trace, timed_pass, tracectx
from thunder.tracing.saved_versions import MODIFIED_IN_PLACE
from thunder.transforms import (
    arithmetic_grads,  # noqa: F401  (registers the reduced-precision arithmetic rules)
    native_grads,  # noqa: F401  (registers the native kernel pairs' rules)
    prim_grads,  # noqa: F401  (registers the prims' rules)
    torch_grads,  # noqa: F401  (registers torch-language rules)
)
from thunder.transforms.autodiff import build_joint, emit_backward

__all__ = ["ThunderFunction", "split_forward_backward", "unpack_sequence", "ForwardBackward"]


def _unpack_printer(bsym, printer):
    names = [printer.name(p) if isinstance(p, (TensorProxy, SizeProxy)) else "_" for p in bsym.output]
    if not names:
        return []
    lines = [f"{', '.join(names)}, = {bsym.args[0]}"]
    if bsym.args[1]:
        lines.append(f"{bsym.args[0]}.clear()")
    return lines


unpack_sequence = Symbol("unpack_sequence", None, id="unpack_sequence", is_prim=True, python_printer=_unpack_printer)


@dataclass
class ForwardBackward:
    forward: TraceCtx
    backward: TraceCtx
    output_proxies: list[TensorProxy]  # the forward's flat outputs, in order
    structure: object  # the program's output structure over those proxies
    # inputs the program updates in place with a differentiable value: (output index of the new value,
    # input index); autograd rebases those inputs' history on the compiled function (``mark_dirty``)
    dirty: tuple[tuple[int, int], ...] = ()
    # names of the outputs no gradient can reach (no input that requires grad flows into them)
    non_differentiable: frozenset = frozenset()
    # eager's errors at backward, (message, indices of the outputs whose gradient reaches the call, type) each: a
    # tensor a call saved for its gradient was updated in place after it, or its derivative is missing (None: none)
    backward_error: tuple[tuple[str, tuple[int, ...], type[Exception]], ...] | None = None
    # the positions of the outputs whose cotangent the backward reads, and, given the positions among them that
    # receive no gradient (None), the backward trace leaving those branches out, or None where it cannot (see
    # ``_pruned_backward``)
    seeded: tuple[int, ...] = ()
    prune: object = None


def _inplace_updates(trace: TraceCtx, requires_grad: set[str]) -> list[tuple[TensorProxy, int]]:
    """(new value, input index) for each input updated in place with a value depending on a grad input.

    The updates are the program's aliasing record's (``thunder.core.aliasing_record``, made when it was
    traced; a trace built by hand has none and updates nothing)."""
    record = trace.tags.get("aliasing")
    if not record or not record.updates:
        return []
    position = {p.name: i for i, p in enumerate(trace.args) if isinstance(p, TensorProxy)}
    depends = set(requires_grad)
    values: dict[str, TensorProxy] = {}
    for b in trace.bound_symbols:
        if b.sym.id == prims.copy_.id:  # (the write-back itself)
            continue
        outs = b.flat_outs
        for o in outs:
            values[o.name] = o
        if any(a.name in depends for a in b.flat_args):
            depends.update(o.name for o in outs if not getattr(o, "nondifferentiable", False))
    updates = []
    for u in record.updates:
        src = values.get(u.new_value)
        if (
            src is not None
            and u.input in position
            # an update under no_grad is invisible to autograd: the caller's tensor keeps its history
            and not u.keeps_history
            # (a tensor that did not require grad and gets a value that does, requires grad afterwards, as in
            # eager; BatchNorm's running statistics are non-differentiable outputs, so they stay as they are)
            and src.name in depends
            and dtypes.is_inexact_dtype(trace.args[position[u.input]].dtype)
        ):
            updates.append((src, position[u.input]))
    return updates


def _save_before_overwrite(
    forward: list[BoundSymbol], saved: list[TensorProxy], written: set[str], restrided: set[str] = frozenset()
) -> tuple[list, list]:
    """Saved values that the forward overwrites in place (``written``: the inputs and constants the aliasing
    record says it writes back, or a view of one) are saved as clones taken before the first write.

    So are the saved values that may alias an input whose sizes, strides or storage the step after the call changes
    in place (``restrided``: ``x.t_(); return x.sin()``): that step bumps the caller's tensor's version counter,
    which its views share, after the forward saved them (autograd would refuse them in the backward), and it
    changes the caller's tensor itself, where the backward needs it as the forward read it. They are cloned at the
    forward's end."""
    saved_names = {p.name for p in saved}
    aliases: dict[str, set[str]] = {}  # a name -> the names that may share its memory
    for b in forward:
        args = b.flat_args
        bases = [args[i].name for i in aliased_argument_positions(b)]
        if not bases:
            continue
        group = aliases.setdefault(bases[0], {bases[0]})
        for n in bases[1:]:
            other = aliases.get(n, {n})
            if other is not group:
                group.update(other)
                for name in other:
                    aliases[name] = group
        for o in aliased_outputs(b):
            group.add(o.name)
            aliases[o.name] = group
    # the arguments written back may share one storage (f(a, a.mT)): every saved value aliasing any of them is
    # copied before the first write
    overwritten: set[str] = set()
    for name in written:
        overwritten.update(aliases.get(name, {name}))
    taken: dict[str, TensorProxy] = {}
    out = []
    by_name = {p.name: p for p in saved}

    def take(names) -> None:
        for name in sorted(names):
            if name in saved_names and name not in taken:
                p = by_name[name]
                clone = TensorProxy(like=p, requires_grad=False)
                out.append(prims.clone.bind(p, output=clone))
                taken[name] = clone

    for b in forward:
        if b.sym.id == prims.copy_.id and b.args[1].name in written:  # (a write-back)
            take(overwritten)
        out.append(b)
    for name in restrided:
        take(aliases.get(name, {name}))
    return out, [taken.get(p.name, p) for p in saved]


def _read_unseen_updates(
    saved: list[TensorProxy], unseen: dict[str, str], forward: list[BoundSymbol], trace: TraceCtx
) -> tuple[list[TensorProxy], list[BoundSymbol]]:
    """What the forward returns for each ``saved`` value, and the view ops it runs at its end for them.

    Where updates eager's version counter does not see (``unseen``: former value name -> new value name, through
    ``.data``) replaced a saved value, or the value a saved view was made of (``y[1:]`` of such a ``y``), the backward
    reads the last new value (or the same view of it): eager's saved tensor shares the storage and holds the new
    elements when its backward runs."""
    if not unseen:
        return saved, []
    producer = {o.name: b for b in forward for o in b.flat_outs if isinstance(o, TensorProxy)}

    def last(name: str) -> str:
        while name in unseen:
            name = unseen[name]
        return name

    out, views = [], []
    for p in saved:
        chain = []  # the view ops from an updated value to ``p``, last first
        name = p.name
        while name not in unseen:
            b = producer.get(name)
            if b is None or aliased_argument_positions(b) != (0,) or len(b.flat_outs) != 1:
                break
            chain.append(b)
            name = b.flat_args[0].name
        if name not in unseen:
            out.append(p)
            continue
        new = producer.get(last(name))
        new = None if new is None else next(o for o in new.flat_outs if o.name == last(name))
        for b in reversed(chain):  # (the same views of the new value)
            if new is None:
                break
            trace.scopes = [views]
            old = b.flat_args[0]
            new = b.sym.record(trace, swap_proxies(b.args, {old.name: new}), swap_proxies(b.kwargs, {old.name: new}))
            new = new if isinstance(new, TensorProxy) else None
        out.append(p if new is None or new.shape != p.shape or new.dtype is not p.dtype else new)
    return out, views


def _differentiable(p) -> bool:
    return isinstance(p, TensorProxy) and dtypes.is_inexact_dtype(p.dtype)


RECOMPUTE_CHOICES = ("elementwise", "reshapes")


def split_forward_backward(
    trace: TraceCtx, requires_grad: set[str], executors, *, recompute: str = "elementwise"
) -> ForwardBackward:
    """The augmented forward and the backward of ``trace`` w.r.t. the inputs named in ``requires_grad``.

    ``recompute`` says which forward values the backward makes again from saved ones instead of keeping
    them alive between the two (see :func:`rematerialize`): ``"elementwise"`` (elementwise operations,
    casts and reshapes: less memory, one more kernel per recomputed value where no fusion executor fuses
    it) or ``"reshapes"`` (reshapes and views only: the kernels eager autograd runs, eager's memory).
    """
    if recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute={recompute!r}: expected one of {', '.join(map(repr, RECOMPUTE_CHOICES))}")
    with timed_pass("Forward-backward split") as t:
        work, joint = build_joint(trace, requires_grad, executors)
        structure = trace.bound_symbols[-1].args[0]
        outputs = []
        seen = set()
        for p in flat_proxies(structure):
            if isinstance(p, TensorProxy) and p.name not in seen:
                seen.add(p.name)
                outputs.append(p)
        # sizes the program returns (computed from symbolic sizes) and Python values it computes from tensor data
        # (torch.equal's bool) are outputs of the forward too, after the tensors
        sizes = [
            leaf
            for leaf in tree_leaves(structure)
            if type(leaf) in (torch.SymInt, torch.SymFloat) or isinstance(leaf, RuntimeValueProxy)
        ]
        dirty = []
        for new, input_index in _inplace_updates(trace, requires_grad):
            if new.name not in seen:
                seen.add(new.name)
                outputs.append(new)
            dirty.append((next(i for i, o in enumerate(outputs) if o.name == new.name), input_index))

        bw = from_trace(work)
        bw.fn_name = "backward_fn"
        bw.tags.pop("aliasing", None)  # (the backward writes no input)
        with tracectx(bw):
            cotangents = [TensorProxy(like=o, requires_grad=False, prefix="ct") for o in outputs]
        reached = joint.requires_grad
        seeds = {o.name: c for o, c in zip(outputs, cotangents) if _differentiable(o) and o.name in reached}
        backward, acc = emit_backward(work, joint, seeds)
        # (a call whose saved tensor was updated in place after it: eager's backward raises when it reaches it)
        backward_error = _stale_save_error(trace, outputs, acc, reached)
        bw.names |= work.names
        grads = [
            acc.get(p.name) if isinstance(p, TensorProxy) and p.name in requires_grad else None for p in trace.args
        ]
        backward.append(prims.python_return.bind(grads, output=None))
        backward = eliminate_dead_code(backward)

        defined = {c.name for c in cotangents}
        saved: list[TensorProxy] = []
        saved_names: set[str] = set()
        for b in backward:
            for a in b.flat_args:
                if a.name not in defined and a.name not in saved_names:
                    saved_names.add(a.name)
                    saved.append(a)
            defined.update(o.name for o in b.flat_outs)

        record = trace.tags.get("aliasing")
        unseen = dict(record.unseen_by_version_counter) if record else {}
        saved, backward = rematerialize(
            saved, backward, joint.forward, elementwise=recompute == "elementwise", keep=unseen
        )

        bw.args = ["saved_for_backward", "cotangents"]
        bw.kwargs = {}
        bw.bound_symbols = [
            unpack_sequence.bind("saved_for_backward", True, output=tuple(saved)),
            unpack_sequence.bind("cotangents", True, output=tuple(cotangents) + (None,) * len(sizes)),
            *backward,
        ]
        bw.scopes = [bw.bound_symbols]

        fw = from_trace(work)
        fw.fn_name = "augmented_forward_fn"
        with tracectx(fw):
            updates = record.updates if record else ()
            written = {u.input for u in updates if u.new_value is not None}
            restrided = {u.input for u in updates if u.layout is not None}
            read, views = _read_unseen_updates(saved, unseen, joint.forward, fw)
            forward, saved_values = _save_before_overwrite(list(joint.forward) + views, read, written, restrided)
        fw.bound_symbols = forward + [
            prims.python_return.bind((tuple(outputs) + tuple(sizes), tuple(saved_values)), output=None)
        ]
        fw.scopes = [fw.bound_symbols]
        t.stamp(fw)
        t.stamp(bw)
        non_differentiable = frozenset(o.name for o in outputs if o.name not in reached)
        fb = ForwardBackward(
            fw,
            bw,
            outputs + sizes,
            structure,
            non_differentiable=non_differentiable,
            dirty=tuple(dirty),
            backward_error=backward_error,
            seeded=tuple(i for i, o in enumerate(outputs) if o.name in seeds),
        )

        def prune(absent: frozenset[int]) -> TraceCtx | None:
            return _pruned_backward(
                fb, work, joint, trace, requires_grad, outputs, cotangents, absent, recompute, unseen
            )

        fb.prune = prune
        return fb


def _pruned_backward(
    fb: ForwardBackward, work, joint, trace, requires_grad, outputs, cotangents, absent, recompute, unseen
) -> TraceCtx | None:
    """The backward trace of ``fb`` for a call whose outputs at the positions ``absent`` receive no gradient.

    Eager autograd never runs the backward of a branch whose outputs receive no gradient; a single backward
    for every output, given zeros for those, would multiply them by the branch's derivatives: ``0 * nan`` where
    the derivative is not finite (``sort.fmod_(take)`` with a NaN in ``sort`` gave NaN in ``take.grad``). This
    backward seeds only the outputs that receive a gradient. It reads the saved values of the forward that runs:
    None where it would need one that forward does not save (the caller then gives the full backward zeros)."""
    head = fb.backward.bound_symbols[:2]
    if len(head) < 2 or any(b.sym.id != unpack_sequence.id for b in head):
        return None
    final_saved = head[0].output
    available = {p.name for p in final_saved}
    seeds = {o.name: c for i, (o, c) in enumerate(zip(outputs, cotangents)) if i in fb.seeded and i not in absent}
    work.names |= fb.backward.names
    backward, acc = emit_backward(work, joint, seeds)
    grads = [acc.get(p.name) if isinstance(p, TensorProxy) and p.name in requires_grad else None for p in trace.args]
    backward.append(prims.python_return.bind(grads, output=None))
    backward = eliminate_dead_code(backward)
    defined = {c.name for c in cotangents}
    saved: list[TensorProxy] = []
    for b in backward:
        for a in b.flat_args:
            if a.name not in defined and a.name not in {p.name for p in saved}:
                saved.append(a)
        defined.update(o.name for o in b.flat_outs)
    saved, backward = rematerialize(saved, backward, joint.forward, elementwise=recompute == "elementwise", keep=unseen)
    if any(p.name not in available for p in saved):
        return None
    bw = from_trace(fb.backward)
    bw.names |= work.names
    bw.bound_symbols = [*head, *backward]
    bw.scopes = [bw.bound_symbols]
    return bw


# operations that only re-describe memory (no arithmetic, no new buffer of values): recomputing one in
# backward costs no kernel, while saving its output keeps a second tensor alive
_FREE_SHAPE_PRIMS = ("broadcast_in_dim", "reshape", "squeeze", "transpose")


def _recomputable(bsym: BoundSymbol, elementwise: bool) -> bool:
    """Reshaping work, and with ``elementwise`` elementwise arithmetic and casts: no reductions, matmuls
    or random numbers.

    Without a fusion executor each elementwise recomputation is one more full-size kernel in the backward
    than eager autograd runs (``gelu``'s output, needed by the next ``linear``'s backward, is computed
    twice), for one tensor less kept alive from the forward to the backward.
    """
    sym = bsym.sym
    if sym.python_printer is not None or "random" in sym.tags or prims.OpTags.RANDOM in sym.tags:
        return False
    if sym.is_prim:
        if elementwise and (prims.OpTags.ELEMENTWISE in sym.tags or sym.name == "convert_element_type"):
            return True
        return sym.id.startswith("prims.") and sym.name in _FREE_SHAPE_PRIMS
    return bool(bsym.subsymbols) and all(_recomputable(s, elementwise) for s in bsym.subsymbols)


def rematerialize(
    saved: list[TensorProxy],
    backward: list[BoundSymbol],
    forward: list[BoundSymbol],
    *,
    elementwise: bool = True,
    keep=frozenset(),
):
    """Recompute in backward, instead of saving, values a reshaping (or, with ``elementwise``, an elementwise)
    forward operation makes from saved values.

    Each recomputation goes right before the value's first use in backward, so it lives no longer than
    needed; memory only goes down (the value's inputs are saved anyway). The values named in ``keep`` stay saved.
    """
    producer = {}
    for b in forward:
        for o in b.flat_outs:
            producer[o.name] = b
    saved_names = {p.name for p in saved}
    recomputed: list[BoundSymbol] = []
    # a tensor made from nothing (zeros a gradient is scattered into) that only the backward reads: made
    # there, the same one kernel, instead of being held from the forward to the backward
    read_in_forward = {a.name for b in forward for a in b.flat_args}
    for p in list(saved):
        b = producer.get(p.name)
        if (
            b is not None
            and isinstance(p, TensorProxy)
            and p.name not in read_in_forward
            and p.name not in keep
            and len(b.flat_outs) == 1
            and not b.flat_args
            and not has_side_effects(b)
            and "random" not in b.sym.tags
        ):
            saved = [q for q in saved if q.name != p.name]
            saved_names.discard(p.name)
            recomputed.append(b)
    changed = True
    while changed:
        changed = False
        for p in list(saved):
            b = producer.get(p.name)
            if b is None or len(b.flat_outs) != 1 or not _recomputable(b, elementwise) or p.name in keep:
                continue
            args = b.flat_args
            # (symbolic sizes are numbers: saving one to recompute from it costs nothing)
            if args and all((a.name in saved_names or type(a) is SizeProxy) and a.name != p.name for a in args):
                saved = [q for q in saved if q.name != p.name]  # never `==`/`remove`: proxies overload __eq__
                saved_names.discard(p.name)
                for a in args:
                    if type(a) is SizeProxy and a.name not in saved_names:
                        saved.append(a)
                        saved_names.add(a.name)
                recomputed.append(b)
                changed = True
    if not recomputed:
        return saved, backward
    # a recomputation may feed another: place each before the first backward use of what it makes
    pending = {b.flat_outs[0].name: b for b in recomputed}
    out: list[BoundSymbol] = []
    placed: set[str] = set()

    def place(name: str) -> None:
        b = pending.get(name)
        if b is None or name in placed:
            return
        placed.add(name)
        for a in b.flat_args:
            place(a.name)
        out.append(b)

    for b in backward:
        for a in b.flat_args:
            place(a.name)
        out.append(b)
    still_needed = {a.name for b in out for a in b.flat_args}
    return [p for p in saved if p.name in still_needed], out


def _refuse_retained_updates(dirty, inputs, names) -> None:
    """Refuses an update in place of an argument that retains its gradient (``retain_grad()``): the program's outputs
    come from one autograd node, beside the argument's new history rather than after it, so the gradient eager
    retains there (of the outputs with respect to the updated values) never reaches it (and autograd's own
    bookkeeping of the retained gradient fails an internal assert when the argument is not the node's first
    output)."""
    for _, in_index in dirty:
        if getattr(inputs[in_index], "retains_grad", False):
            raise RuntimeError(
                f"thunder.jit: the function updates its argument {names[in_index]!r} in place, and that tensor "
                "retains its gradient (retain_grad() before the call). Thunder computes the outputs in one autograd "
                "node beside the argument's new history, not after it, so the gradient eager would retain there "
                "(of the outputs with respect to the updated values) cannot reach it. Retain the gradient of a "
                "tensor the function does not update, or do the update outside the function (docs/sharp_edges.md)."
            )


class ThunderFunction(torch.autograd.Function):
    """Runs a compiled forward; its backward runs the compiled backward trace."""

    @staticmethod
    def forward(ctx, forward_fn, backward_fn, non_differentiable, dirty, *inputs):
        outputs, saved = forward_fn(*inputs)
        ctx.backward_fn = backward_fn
        if backward_fn.__class__ is _PrunedBackwards:
            # outputs that receive no gradient get None (not zeros): the backward leaves their branches out, as eager
            ctx.set_materialize_grads(False)
            if backward_fn.symbolic:
                # (a backward that cannot be pruned seeds zeros of the sizes this call's outputs have)
                ctx.backward_fn = backward_fn.of_sizes(tuple(outputs[i].shape for i in backward_fn.seeded))
        # symbolic sizes the backward reads are saved as numbers beside the tensors
        numbers = [(i, v) for i, v in enumerate(saved) if not isinstance(v, torch.Tensor)]
        ctx.saved_numbers = numbers
        ctx.save_for_backward(*(v for v in saved if isinstance(v, torch.Tensor)) if numbers else saved)
        if dirty:
            # an input updated in place is returned as the output holding its new value, so the
            # caller's tensor carries the new autograd history (as after an eager in-place op)
            outputs = list(outputs)
            marked = []
            for out_index, in_index in dirty:
                t = inputs[in_index]
                # eager refuses leaves that require grad (no_grad updates stay as they are); autograd refuses
                # returning an updated view from a Function (its base keeps the old history then)
                if not (t.is_leaf and t.requires_grad) and t._base is None:
                    outputs[out_index] = t
                    marked.append(t)
            if marked:
                ctx.mark_dirty(*marked)
            outputs = tuple(outputs)
        if non_differentiable:
            ctx.mark_non_differentiable(*(outputs[i] for i in non_differentiable))
        return outputs

    @staticmethod
    def backward(ctx, *cotangents):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "thunder-compiled functions support first-order gradients only: backward with create_graph=True "
                "(double backward, gradient penalties) is not supported; compute it without thunder.jit"
            )
        saved = list(ctx.saved_tensors)
        for i, v in ctx.saved_numbers:
            saved.insert(i, v)
        # drop autograd's references unless the graph is retained, so the backward frees each saved
        # tensor right after its last use instead of when the whole backward returns
        ctx.maybe_clear_saved_tensors()
        try:
            grads = ctx.backward_fn(saved, list(cotangents))
        except Exception as e:
            note_user_line(e, "the gradient of the call of")
            raise
        return (None, None, None, None, *grads)


def _direct_apply():
    """``(apply, unwrap)``: the C++ ``apply`` of ``torch.autograd.Function`` bound to ``ThunderFunction`` and torch's
    ``unwrap_if_dead``, or None where this torch lacks them.

    ``Function.apply`` is a Python layer over that C++ ``apply``: for a Function without ``setup_context`` and with
    no functorch transform active, it only unwraps the tensor arguments that are functorch wrappers of a transform
    that has ended (``unwrap_if_dead``, other tensors are returned as they are) and calls it. That layer costs about
    1.5 µs per call (a generator over the arguments), a fifth of a small training call; the computation does the
    same in a C loop and calls ``Function.apply`` itself while a transform is active (which then raises)."""
    try:
        c_apply = super(torch.autograd.Function, ThunderFunction).apply
        unwrap = torch._C._functorch.unwrap_if_dead
        torch._C._are_functorch_transforms_active  # noqa: B018 - (present, checked on every call)
    except AttributeError:  # pragma: no cover - another torch: Function.apply
        return None
    if ThunderFunction.setup_context is not torch.autograd.Function.setup_context:  # pragma: no cover
        return None  # (Function.apply binds default arguments first then)
    return c_apply, unwrap


def make_autograd_callable(forward_fn, backward_fn, fb: ForwardBackward, build_backward=None):
    """The computation callable for training: outputs carry ``ThunderFunctionBackward``.

    ``build_backward(absent)`` makes the runnable backward for calls whose outputs at the positions ``absent`` receive
    no gradient (``ForwardBackward.prune`` compiled as ``backward_fn`` was), or None; with it, such a call runs a
    backward leaving their branches out (``_PrunedBackwards``)."""
    non_diff = tuple(
        i
        for i, p in enumerate(fb.output_proxies)
        if isinstance(p, TensorProxy) and (not _differentiable(p) or p.name in fb.non_differentiable)
    )
    if build_backward is not None and fb.seeded:
        backward_fn = _PrunedBackwards(backward_fn, fb, build_backward, fb.backward_error)
    elif fb.backward_error is not None:
        backward_fn = _raising(backward_fn, fb.backward_error)
    record = fb.forward.tags.get("aliasing")
    if fb.dirty or (record is not None and record.updates):
        forward_fn = _saving_detached_views(forward_fn)
    if any("grad_source" in b.sym.tags for b in fb.forward.bound_symbols):
        if backward_fn.__class__ is _PrunedBackwards:
            backward_fn.given_none = False  # (wrapped: autograd materialises the zeros, see ThunderFunction)
        forward_fn, backward_fn = _with_grad_source(forward_fn, backward_fn)
    index = {p.name if isinstance(p, TensorProxy) else id(p): i for i, p in enumerate(fb.output_proxies)}
    structure = fb.structure
    dirty = fb.dirty
    function_apply = ThunderFunction.apply
    direct = _direct_apply()
    # (the C loop unwraps tensors only: with symbolic sizes among the inputs, Function.apply's own path)
    direct_ok = direct is not None and all(isinstance(p, TensorProxy) for p in fb.forward.args)
    c_apply, unwrap = direct if direct is not None else (None, None)
    transforms_active = torch._C._are_functorch_transforms_active
    names = [getattr(p, "name", "?") for p in fb.forward.args]

    if isinstance(structure, TensorProxy):

        def computation(*inputs):
            if dirty:
                _refuse_retained_updates(dirty, inputs, names)
            if direct_ok and not transforms_active():
                outs = c_apply(forward_fn, backward_fn, non_diff, dirty, *map(unwrap, inputs))
            else:
                outs = function_apply(forward_fn, backward_fn, non_diff, dirty, *inputs)
            if dirty:
                _record_view_updates(dirty, inputs, outs)
            return outs[0]

    else:

        def computation(*inputs):
            if dirty:
                _refuse_retained_updates(dirty, inputs, names)
            if direct_ok and not transforms_active():
                outs = c_apply(forward_fn, backward_fn, non_diff, dirty, *map(unwrap, inputs))
            else:
                outs = function_apply(forward_fn, backward_fn, non_diff, dirty, *inputs)
            if dirty:
                _record_view_updates(dirty, inputs, outs)
            return _rebuild(structure, outs, index)

    source = getattr(forward_fn, "grad_source", None)
    if source is not None:
        computation_of_inputs = computation

        def computation(*inputs):
            return computation_of_inputs(*inputs, source)

    return computation


def _saving_detached_views(forward_fn):
    """``forward_fn`` of a program that writes an argument in place, saving its views of arguments detached.

    Such a view is made inside ``ThunderFunction.forward``, under no_grad: once the write-back (also of an update
    eager made under no_grad) or ``_record_view_updates`` bumps the counter it shares with an updated argument (an
    empty view of the same base, which the prologue does not group), autograd refuses to unpack it ("a view was
    created in no_grad mode ..."). Detached, it keeps the counter (a later update still makes eager's backward
    refuse) and has no view history."""

    def forward(*inputs):
        outputs, saved = forward_fn(*inputs)
        return outputs, [v.detach() if isinstance(v, torch.Tensor) and v._base is not None else v for v in saved]

    return forward


_UNBUILT = object()  # (a set of absent outputs whose backward was not built yet)


class _PrunedBackwards:
    """The backward of one program for every set of outputs that receive no gradient (autograd gives them None).

    All outputs receiving one: the full backward. Otherwise the backward seeding only the others, made and compiled
    the first time that set comes (``build``); where none can be made, the full backward with zeros for the missing
    cotangents (what autograd would have materialised)."""

    def __init__(self, full, fb: ForwardBackward, build, error):
        self.full = full
        self.error = error  # (eager's error at backward: see _raising)
        self.given_none = True  # (autograd gives None for the outputs not differentiated)
        self.seeded = fb.seeded
        self.outputs = fb.output_proxies
        self.build = build
        self.variants: dict[frozenset, Callable | None] = {}
        self.symbolic = not all(_static(fb.output_proxies[i]) for i in fb.seeded)

    def of_sizes(self, sizes: tuple) -> Callable:
        """This backward for one call whose seeded outputs have ``sizes`` (in ``seeded``'s order)."""
        return lambda saved, cotangents: self(saved, cotangents, sizes)

    def __call__(self, saved, cotangents, sizes=None):
        if self.error is not None:
            # (the outputs not differentiated come as None: every cotangent given is the caller's, zeros too)
            _raise_if_reached(cotangents, self.error, zeros_reach=self.given_none)
        for i in self.seeded:
            if cotangents[i] is None:
                break
        else:
            return self.full(saved, cotangents)
        absent = frozenset(i for i in self.seeded if cotangents[i] is None)
        fn = self.variants.get(absent, _UNBUILT)
        if fn is _UNBUILT:
            fn = self.variants[absent] = self.build(absent)
        if fn is None:
            return self._with_zeros(saved, cotangents, sizes)
        return fn(saved, cotangents)

    def _with_zeros(self, saved, cotangents, sizes):
        cotangents = list(cotangents)
        for k, i in enumerate(self.seeded):
            if cotangents[i] is None:
                p = self.outputs[i]
                shape = tuple(p.shape) if sizes is None else sizes[k]
                cotangents[i] = torch.zeros(shape, dtype=p.dtype.torch_dtype, device=to_torch_device(p.device))
        return self.full(saved, cotangents)


def _static(p) -> bool:
    return isinstance(p, TensorProxy) and all(type(s) is int for s in p.shape)


def _raising(backward_fn, errors):
    """``backward_fn``, raising eager's error (``error`` with ``message``, of each of ``errors``) instead when a
    gradient comes through one of the outputs ``reaching`` the call whose saved tensor was updated (see
    ``ForwardBackward.backward_error``). Here autograd gives the outputs the caller did not differentiate zeros:
    through those, eager's backward never reaches the call (where it gives None, ``_PrunedBackwards`` tells the
    caller's zeros apart)."""

    def backward(saved, cotangents):
        _raise_if_reached(cotangents, errors)
        return backward_fn(saved, cotangents)

    return backward


def _raise_if_reached(cotangents, errors, zeros_reach=False):
    """Raises the first of ``errors`` (message, the outputs reaching the failing call, type) a cotangent comes to:
    through any given one where autograd passes None for the outputs not differentiated (``zeros_reach``), else one
    that is not all zeros (autograd's materialised zeros cannot be told from the caller's)."""
    for message, reaching, error in errors:
        for i in reaching:
            g = cotangents[i] if i < len(cotangents) else None
            # (an empty cotangent counts as reaching: its zeros cannot be told from eager's gradient)
            if isinstance(g, torch.Tensor) and (zeros_reach or not g.numel() or bool(g.ne(0).any())):
                raise error(message)


def _stale_save_error(
    trace: TraceCtx, outputs: list, acc: dict, grad_reach: set[str]
) -> tuple[tuple[str, tuple[int, ...], type[Exception]], ...] | None:
    """(eager's error message, the outputs whose gradient reaches the call, the error's type) for each call the
    backward reaches whose saved tensor was updated in place after it, or whose derivative eager does not have, the
    last call first (eager's backward meets the calls in the reverse of their order)
    (``stale_saves``, found while tracing: saved_versions.py). A gradient comes back to the call only along values it
    can reach (``grad_reach``, the joint's): not through a ``detach`` or an integer result, whose outputs' cotangents
    (autograd's zeros, empty ones included) never reach it in eager."""
    errors = []
    producer = {o.name: b for b in trace.bound_symbols for o in b.flat_outs if isinstance(o, TensorProxy)}
    for name, message, error in reversed(trace.tags.get("stale_saves", ())):
        if name not in acc and not (message.startswith(MODIFIED_IN_PLACE) and name in grad_reach):
            # (a stale save: eager's engine runs the node of every call that requires grad, after one whose gradient
            # is zero too, round(x)'s, which thunder's backward leaves out)
            continue
        reached = {name, *_viewed_bases(producer, name)}
        for b in trace.bound_symbols:
            if any(getattr(a, "name", None) in reached for a in b.flat_args):
                reached.update(o.name for o in b.flat_outs if getattr(o, "name", None) in grad_reach)
        errors.append((message, tuple(i for i, o in enumerate(outputs) if o.name in reached), error))
    return tuple(errors) or None


def _viewed_bases(producer: dict[str, BoundSymbol], name: str) -> list[str]:
    """The tensors ``name`` is a view of, through the views the trace made (``producer``: the bound symbol giving each
    tensor). An in-place update through a view, ``v.diagonal().index_add_(...)``: eager's node for it is reached by
    the gradient of the base it wrote."""
    bases = []
    b = producer.get(name)
    while b is not None and "view" in b.sym.tags:
        base = next((a for a in b.flat_args if isinstance(a, TensorProxy)), None)
        if base is None:
            break
        bases.append(base.name)
        b = producer.get(base.name)
    return bases


def _with_grad_source(forward_fn, backward_fn):
    """``forward_fn`` and ``backward_fn`` for a program where a tensor computed inside was made a leaf requiring
    grad (``x.requires_grad_()``): autograd gives a Function's outputs a history only when an input requires grad,
    so the program gets one more input, a leaf that requires grad (and receives no gradient), after the others."""
    source = torch.empty(0, requires_grad=True)

    def forward(*inputs):
        return forward_fn(*inputs[:-1])

    def backward(saved, cotangents):
        return (*backward_fn(saved, cotangents), None)

    forward.grad_source = source
    return forward, backward


def _record_view_updates(dirty, inputs, outs) -> None:
    """Gives each input that is a view and was updated in place the history eager gives it.

    ``ThunderFunction`` cannot return an updated view (autograd would leave its base with the old history), so
    the compiled forward writes the new values and this copies them into the caller's view once more, now
    visible to autograd: the view's base gets eager's ``CopySlices`` node, the view its grad_fn, and the version
    counter its bump, so every later gradient through the view, its base and their other views is eager's.

    Arguments viewing one storage come with the prologue's view of that whole storage (``alias_overlapping``):
    its new value holds theirs, so it alone is copied. (A view taken of a leaf before the leaf got a history
    refuses a later copy with grad; one copy of the whole storage reaches every view of it.)"""
    whole = {id(inputs[i]._base) for _, i in dirty if _views_whole_storage(inputs[i])}
    for out_index, in_index in dirty:
        t = inputs[in_index]
        if t._base is None or (t._base.is_leaf and t._base.requires_grad):
            continue
        # (a view the prologue made of another input, to share its storage, is that input's business; an empty view
        # shares no storage the prologue could group, so its base, another argument, gets the update's history here)
        if t.numel() and any(t._base is i for i in inputs):
            continue
        if id(t._base) in whole and not _views_whole_storage(t):
            continue
        new = outs[out_index]
        if t.numel() == 0:
            # no element to copy, but the view takes the update's history as in eager (a gradient through it reaches
            # the program's backward, which may have to raise eager's error); the copy's bump is undone, as it would
            # only make the program's saved inputs, which share the view's counter, look updated
            version = t._version
            with torch.enable_grad():
                t.copy_(new)
            torch._C._autograd._unsafe_set_version_counter((t,), (version,))
            continue
        # an expanded view: each memory location once (its elements along a 0-stride dim hold one value)
        for d in range(t.dim()):
            if t.stride(d) == 0 and t.shape[d] > 1:
                t, new = t.narrow(d, 0, 1), new.narrow(d, 0, 1)
        with torch.enable_grad():
            t.copy_(new)


def _views_whole_storage(t: torch.Tensor) -> bool:
    """Whether ``t`` is a view of its base's whole storage as one flat run of elements."""
    return (
        t._base is not None
        and t.dim() == 1
        and t.storage_offset() == 0
        and (t.stride(0) == 1 or t.numel() <= 1)
        and t.numel() * t.element_size() == t.untyped_storage().nbytes()
    )


def _rebuild(x, outs, index):
    if isinstance(x, TensorProxy):
        return outs[index[x.name]]
    t = type(x)
    if t is torch.SymInt or t is torch.SymFloat or t is RuntimeValueProxy:
        return outs[index[id(x)]]
    if t is tuple or t is list:
        return t(_rebuild(y, outs, index) for y in x)
    if t is dict:
        return {k: _rebuild(v, outs, index) for k, v in x.items()}
    return x
