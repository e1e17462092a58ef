"""``torch.autograd.Function.apply`` inside traced code: one operation whose gradient is the user's ``backward``.

While thunder traces, ``Function.apply`` called with stand-in tensors runs the Function's ``forward``
with grad disabled (as PyTorch does: its operations carry no gradient of their own), traces its
``backward`` right away on stand-ins for the outputs' cotangents, and records one
``autograd_function_<Name>`` operation. That operation passes the forward's outputs through
unchanged and takes the differentiable inputs as arguments; its gradient rule is the traced
``backward``, so autodiff puts the user's backward into the backward trace, where executors can
fuse it like any other code. ``ctx.save_for_backward``/``saved_tensors``, tensors kept as ``ctx``
attributes, ``needs_input_grad``, ``mark_non_differentiable``, ``set_materialize_grads``,
``once_differentiable``, ``setup_context``, ``mark_dirty`` (an input updated in place and returned),
non-tensor arguments and several outputs behave as in PyTorch.
"""

from __future__ import annotations

import inspect
import threading
from itertools import count

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.tracing.errors import TracingError

__all__ = ["patch_function_apply"]

_Function = torch.autograd.Function
_original_apply = _Function.__dict__["apply"]
_lock = threading.Lock()
_installed = [0]
_counter = count()


class patch_function_apply:
    """While entered, ``Function.apply`` with stand-in tensors is traced as one operation (reentrant)."""

    def __enter__(self):
        with _lock:
            if _installed[0] == 0:
                _Function.apply = classmethod(_apply)
            _installed[0] += 1
        return self

    def __exit__(self, *exc):
        with _lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                _Function.apply = _original_apply
        return False


def _apply(cls, *args, **kwargs):
    from thunder.tracing.tracer import TracingTensor, _current_tracer

    tracer = _current_tracer[-1]
    if tracer is None or not any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
        return _original_apply.__func__(cls, *args, **kwargs)

    # (tensors from outside the inputs, a global's: inputs of the program too, see inputs.captured)
    def stand_in(a):
        return tracer.outside_tensor(a) if isinstance(a, torch.Tensor) and not isinstance(a, TracingTensor) else a

    args, kwargs = tuple(map(stand_in, args)), {k: stand_in(v) for k, v in kwargs.items()}
    return _trace_apply(tracer, cls, args, kwargs)


class _Context:
    """What ``forward``/``setup_context`` and ``backward`` see as ``ctx``."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.to_save = ()
        self.non_differentiable: set[int] = set()
        self.dirty: set[int] = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        pass

    @property
    def saved_tensors(self) -> tuple:
        return self.to_save

    saved_variables = saved_tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self.non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors) -> None:
        self.dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


def _is_float(t) -> bool:
    return t.is_floating_point() or t.is_complex()


def _checkpointed(run_function, preserve_rng_state, *args):
    # torch.utils.checkpoint(use_reentrant=True): recomputing in backward is how it saves memory, not what it
    # computes; the program is the function itself (thunder chooses what to save or recompute)
    return run_function(*args)


# Functions whose gradient is their forward's: traced through, not as one operation
_TRACED_THROUGH = {}
try:
    from torch.utils.checkpoint import CheckpointFunction

    _TRACED_THROUGH[CheckpointFunction] = _checkpointed
except ImportError:  # pragma: no cover - older or newer PyTorch without it
    pass


def _trace_apply(tracer, cls, args: tuple, kwargs: dict):
    from thunder.tracing.tracer import TracingTensor, unwrap

    through = _TRACED_THROUGH.get(cls)
    if through is not None:
        return through(*args, **kwargs)

    setup_context = cls.setup_context is not _Function.setup_context
    if setup_context:
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    if kwargs:
        raise TracingError(f"{cls.__name__}.apply does not take keyword arguments")
    needs = tuple(isinstance(a, TracingTensor) and a.requires_grad and _is_float(a) for a in args)
    with torch._C.DisableTorchFunction():  # as inside the tracer: a view's value may be derived here
        before = [unwrap(a) if isinstance(a, TracingTensor) else None for a in args]  # the values at the call
    ctx = _Context(needs)
    with torch.no_grad():
        if setup_context:
            out = cls.forward(*args)
            cls.setup_context(ctx, args, out)
        else:
            out = cls.forward(ctx, *args)
    if not (torch.is_grad_enabled() and tracer.autodiff and any(needs)):
        return out

    outs = list(out) if isinstance(out, tuple) else [out]
    input_ids = {id(a) for a in args}
    routed: list[int] = []  # positions of the outputs that carry the backward's gradient
    dirty: list[int] = []  # positions of the outputs that are inputs the forward updated (ctx.mark_dirty)
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and not isinstance(o, TracingTensor):
            raise TracingError(f"{cls.__name__}.forward returned a tensor that was not computed from its inputs")
        if isinstance(o, TracingTensor) and id(o) not in ctx.non_differentiable and _is_float(o):
            if id(o) in ctx.dirty and id(o) in input_ids:
                dirty.append(i)  # returned as itself: its new value gets the Function's gradient
            elif id(o) in input_ids:
                with torch.no_grad():
                    outs[i] = o = tracer.handle(torch.Tensor.clone, (o,), {})  # a new value, as in eager
            routed.append(i)
    returned = {id(o) for o in outs}
    if any(id(a) in ctx.dirty and id(a) not in returned for a in args):
        raise TracingError(
            f"{cls.__name__}.forward marked an input dirty (ctx.mark_dirty) without returning it; "
            "PyTorch requires the tensors marked dirty to be returned"
        )
    if not routed:
        return out

    # the backward, traced now on stand-ins for the cotangents
    trace = tracer.trace
    placeholders = [
        TensorProxy(like=o._thunder_proxy, requires_grad=False, prefix="ct") if isinstance(o, TracingTensor) else None
        for o in outs
    ]
    cotangents = [
        (TracingTensor(p) if (i in routed or ctx.materialize_grads) else None) if p is not None else None
        for i, p in enumerate(placeholders)
    ]
    backward_scope: list = []
    trace.scopes.append(backward_scope)
    autodiff, tracer.autodiff = tracer.autodiff, False
    try:
        with torch.no_grad():
            grads = cls.backward(ctx, *cotangents)
    finally:
        tracer.autodiff = autodiff
        trace.scopes.pop()
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    if len(grads) != len(args):
        # PyTorch allows trailing Nones beyond the inputs
        if len(grads) > len(args) and all(g is None for g in grads[len(args) :]):
            grads = grads[: len(args)]
        else:
            raise TracingError(
                f"function {cls.__name__}Backward returned an incorrect number of gradients "
                f"(expected {len(args)}, got {len(grads)})"
            )
    grad_proxies = [tracer._unwrap_inputs(g) if needs[i] and g is not None else None for i, g in enumerate(grads)]
    # an input the forward updated (marked dirty) is differentiated at its value before the call
    diff_inputs = [before[i] if id(a) in ctx.dirty else unwrap(a) for i, a in enumerate(args) if needs[i]]
    input_grads = [g for i, g in enumerate(grad_proxies) if needs[i]]
    routed_proxies = [outs[i]._thunder_proxy for i in routed]
    unrouted = [p for i, p in enumerate(placeholders) if p is not None and i not in routed and ctx.materialize_grads]
    routed_placeholders = [placeholders[i] for i in routed]

    name = "".join(c if c.isalnum() else "_" for c in cls.__name__)
    n_inputs = len(diff_inputs)
    # the callable passes its last values through: two applies of one Function with different numbers of
    # differentiable inputs are two callables, so two names (one namespace holds every call's callable)
    print_name = f"autograd_function_{name}" if n_inputs == 1 else f"autograd_function_{name}_{n_inputs}"

    def run(*values):
        return values[n_inputs:]

    def meta(*values):
        return tuple(TensorProxy(like=p, requires_grad=True) for p in values[n_inputs:])

    from thunder.executors.torchex import ex as torch_ex

    sym = Symbol(
        print_name,
        meta,
        id=f"autograd_function::{print_name}_{next(_counter)}",
        is_prim=True,
        print_name=print_name,
        call_ctx={print_name: run},
        executor=torch_ex,
        tags=("autograd_function",),
    )
    sym.grad_rule = _grad_rule(sym, n_inputs, routed_placeholders, unrouted, backward_scope, input_grads)
    results = sym.record(trace, (*diff_inputs, *routed_proxies), {})
    for i, p in zip(routed, results):
        if i in dirty:  # the input itself, as in eager: it now holds the output, with the Function's gradient
            tracer._rebind(cls.apply, outs[i], p)
            with torch._C.DisableTorchFunction():
                if outs[i].is_leaf and not outs[i].requires_grad:
                    outs[i].requires_grad_(True)
        else:
            outs[i] = _with_layout_of(TracingTensor(p), outs[i])
    if results:  # (eager's backward raises where a tensor it saved is updated in place later: saved_versions.py)
        from thunder.tracing.saved_versions import note_function_saves

        note_function_saves(tracer.saves, f"{cls.__name__}.forward", ctx.to_save, results[0])
    return tuple(outs) if isinstance(out, tuple) else outs[0]


def _with_layout_of(new, made):
    """``new`` (the Function's output, a tensor of its own) with the strides of ``made``, the forward's result it
    stands for (``x * y`` of channels_last tensors is channels_last, and so is eager's output: a flatten() of it
    copies)."""
    from thunder.core.symbolic import hints
    from thunder.tracing.tracer import TracingTensor
    from thunder.tracing.views import shadow

    if isinstance(made, TracingTensor):
        with torch._C.DisableTorchFunction():
            m = shadow(made)
            if tuple(m.shape) == hints(new._thunder_proxy.shape) and m.dtype == new._thunder_proxy.dtype.torch_dtype:
                new._tt_meta = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")
    return new


def _grad_rule(sym: Symbol, n_inputs: int, placeholders, unrouted, backward_scope, input_grads):
    """The node's gradient: the traced backward, its cotangent stand-ins replaced by the real cotangents."""

    def rule(*values):
        from thunder.core.trace import get_tracectx
        from thunder.transforms.autodiff import get_grad, put_grad, zeros_like
        from thunder.transforms.prim_grads import sum_to_shape

        inputs = values[:n_inputs]
        outs = sym(*values)
        mapping = {p.name: get_grad(o) for p, o in zip(placeholders, outs)}
        for p in unrouted:  # non-differentiable outputs' cotangents are zeros, as in PyTorch
            mapping[p.name] = zeros_like(p)
        scope = get_tracectx().scopes[-1]
        for b in backward_scope:
            scope.append(b.swap_proxies(mapping))
        for x, g in zip(inputs, input_grads):
            if g is None:
                continue
            if not isinstance(g, TensorProxy):
                raise TracingError(f"{sym.name}'s backward returned a {type(g).__name__} as a gradient")
            g = mapping.get(g.name, g)
            if g.shape != x.shape:
                g = sum_to_shape(g, x.shape)
            if g.dtype is not x.dtype and dtypes.is_inexact_dtype(x.dtype):
                import thunder.torch as ltorch

                g = ltorch.to(g, x.dtype.torch_dtype)
            put_grad(x, g)
        return outs

    return rule


def _keep_new(old, new):
    # a tensor object of its own: ``new`` may be another output too (a detached alias updated in place, and the
    # tensor it aliases), and autograd's per-output flags (non-differentiable outputs) are per object
    return new.detach()


def value_update_symbol(name: str, *, gradient_to_old: bool) -> Symbol:
    """``name(old, new)``: ``new``'s values for a tensor updated in place, requiring grad; its gradient goes to
    ``old`` (the tensor keeps the gradient path it had) or to ``new`` (and zeros to ``old``, whose values the
    update replaced: as eager's ``copy_``/``fill_`` backward, so a NaN or inf in ``old``'s backward shows)."""

    def rule(old, new):
        from thunder.core.symbolic import same_shape
        from thunder.transforms.autodiff import get_grad, put_grad, zeros_like
        from thunder.transforms.prim_grads import sum_to_shape

        out = sym(old, new)
        g = get_grad(out)
        if gradient_to_old:
            if not same_shape(g.shape, old.shape):
                # (a tensor resized below autograd, an out= tensor under no_grad: eager hands the gradient of the new
                # shape to the old history, summed back where the old shape expands to it; where it does not, the
                # backward raises eager's error before this runs: resized_history.py)
                from thunder.tracing.resized_history import expandable

                if not expandable(old.shape, g.shape):
                    return out
                g = sum_to_shape(g, old.shape)
            put_grad(old, g)
        else:
            put_grad(new, g)
            if old.requires_grad:
                put_grad(old, zeros_like(g))
        return out

    sym = Symbol(
        name,
        lambda old, new: TensorProxy(like=new, requires_grad=True),
        id=name,
        is_prim=True,
        call_ctx={name: _keep_new},
        tags=("alias",),  # (its output shares ``new``'s memory)
    )
    sym.grad_rule = rule
    return sym


keep_grad_of = value_update_symbol("keep_grad_of", gradient_to_old=True)


def reading_update_symbol(name: str, *, zero_gradient_to_read: bool, tags: tuple = ()) -> Symbol:
    """``name(new, *read)``: ``new``'s values as a tensor that requires grad, whose history ends there; the tensors
    it ``read`` get a zero gradient (``zero_gradient_to_read``) or none at all. Its output shares ``new``'s memory,
    never that of the tensors it reads for their gradient."""

    def rule(new, *read):
        from thunder.transforms.autodiff import put_grad, zeros_like

        out = sym(new, *read)
        if zero_gradient_to_read:
            for r in read:
                if r.requires_grad:
                    put_grad(r, zeros_like(r))
        return out

    sym = Symbol(
        name,
        lambda new, *read: TensorProxy(like=new, requires_grad=True),
        id=name,
        is_prim=True,
        call_ctx={name: lambda new, *read: new.detach()},
        tags=("view", *tags),
    )
    sym.grad_rule = rule
    return sym


# an in-place update by an op autograd records with a zero gradient for every tensor it read (``x.eq_(y)``:
# derivatives.yaml gives ``x`` and ``y`` zeros)
zero_gradient_update = reading_update_symbol("zero_gradient_update", zero_gradient_to_read=True)
# eager's view made under no_grad of a tensor that requires grad: a leaf of its own that requires grad; what is
# computed from it requires grad, but the tensors it viewed keep ``.grad`` None when this is their only use
leaf_requiring_grad = reading_update_symbol("leaf_requiring_grad", zero_gradient_to_read=False)
# ``y.requires_grad_()`` of a tensor computed inside the function that did not require grad: eager makes it a leaf
# requiring grad, so what is computed from it afterwards requires grad (its own gradient is not kept)
# ("grad_source": autodiff starts a gradient path there though it reads nothing that requires grad)
made_leaf_requiring_grad = reading_update_symbol(
    "made_leaf_requiring_grad", zero_gradient_to_read=False, tags=("grad_source",)
)


def record_on_torch_executor(sym: Symbol, trace, args: tuple) -> TensorProxy:
    """Records ``sym(*args)`` into ``trace``, run by the torch executor (assigned on first use: the executor's
    module imports this one)."""
    if sym.executor is None:
        from thunder.executors.torchex import ex as torch_ex

        sym.executor = torch_ex
    return sym.record(trace, args, {})


def _no_grad_update(trace, old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """The value an in-place update under ``no_grad`` gives a tensor: ``new``'s values, and for autodiff the
    gradient path ``old`` had (``keep_grad_of``), or none when ``old`` needed no gradient (``detach``)."""
    if old.requires_grad:
        return record_on_torch_executor(keep_grad_of, trace, (old, new))
    from thunder.torch import detach

    out = detach.record(trace, (new,), {})
    out.requires_grad = False
    return out
