"""Grad semantics of in-place updates: recorded clones, gradient paths through detached views, strided writes."""

from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy
from thunder.tracing.autograd_function import (
    _no_grad_update,
    leaf_requiring_grad,
    record_on_torch_executor,
    value_update_symbol,
    zero_gradient_update,
)
from thunder.tracing.errors import (
    TracingError,
    describe_location,
    user_frame,
)

T = torch.Tensor


class _recording_directly:
    """Symbols called here are recorded as they are (not as calls from user code through the tracer)."""

    def __enter__(self):
        from thunder.core.trace import get_tracectx

        self.trace = get_tracectx()
        if self.trace is None:
            raise TracingError("internal error: a view was re-derived outside of tracing")
        self.hook, self.trace.user_call_hook = self.trace.user_call_hook, None

    def __exit__(self, *exc):
        self.trace.user_call_hook = self.hook
        return False


def recorded_clone(p: TensorProxy) -> TensorProxy:
    """A copy of ``p`` recorded into the trace being traced, requiring grad as ``p`` does."""
    from thunder.core import prims

    with _recording_directly():
        copy = prims.clone(p)
    copy.requires_grad = p.requires_grad
    return copy


still_requires_grad = value_update_symbol("still_requires_grad", gradient_to_old=False)


def _still_requires_grad(trace, old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``new``'s values for a tensor that required grad and still does after an in-place update that did not
    read a tensor requiring grad (``x.fill_(1.5)``, ``x.copy_(c)``): its gradient there is zero, as in eager."""
    with _recording_directly():
        return record_on_torch_executor(still_requires_grad, trace, (old, new))


# in-place ops PyTorch declares non-differentiable: autograd does not record them, so the updated tensor keeps
# the gradient path it had (comparisons such as eq_ are differentiable, with a zero gradient)
_HISTORY_KEEPING_UPDATES = frozenset(("logical_not_", "logical_and_", "logical_or_", "logical_xor_"))


# in-place ops that change only a tensor's sizes and strides: eager refuses them on a leaf that requires grad (or a
# view of one) as it refuses a write
_LAYOUT_UPDATES = frozenset("unsqueeze_ squeeze_ t_ transpose_ swapdims_ swapaxes_ as_strided_".split())


def refuse_resize_requiring_grad(name: str | None, wrapper) -> None:
    """Eager refuses ``x.resize_(...)`` and ``x.resize_as_(y)`` of a tensor that requires grad, in any grad mode
    (not the resize of an ``out=`` tensor, which its kernel does below autograd: ``wrapper._tt_out_resize``)."""
    if (name == "resize_" or name == "resize_as_") and wrapper._thunder_proxy.requires_grad:
        if not wrapper._tt_out_resize:
            raise RuntimeError(f"cannot resize variables that require grad\n  {describe_location(user_frame(3))}")


def note_unrecorded_layout_change(name: str | None, wrapper) -> None:
    """Notes an in-place change of the sizes or strides (``t_``, ``unsqueeze_``, ``as_strided_`` ...) of a tensor
    that requires grad made where autograd does not record it (under no_grad): eager's backward hands the gradient
    of the new layout, as it is, to the history of the old one (after ``x.t_()`` it comes back transposed), which
    thunder's backward, deriving each element's gradient, does not reproduce. The backward raises, naming both
    lines, where a gradient comes through a call that read the tensor afterwards (``multi_views.refuse_rebased_use``)."""
    if name in _LAYOUT_UPDATES and not torch.is_grad_enabled() and wrapper._thunder_proxy.requires_grad:
        wrapper._tt_unrecorded_layout = f"{name}() {describe_location(user_frame(3))}"


def _func_name_of(func) -> str | None:
    return getattr(func, "__name__", None)


def comparison_operands_requiring_grad(func, old: TensorProxy, operands) -> tuple[TensorProxy, ...]:
    """The tensors an in-place update ``func`` with a bool result (``x.eq_(y)``, ``x.lt_(y)``) reads that require
    grad, ``old`` (the updated tensor's former value) first: eager's autograd gives each a zero gradient and the
    updated tensor requires grad. Empty for the logical ops, which autograd does not record."""
    if getattr(func, "__name__", None) in _HISTORY_KEEPING_UPDATES or not torch.is_grad_enabled():
        return ()
    read = [old] if old.requires_grad else []
    read += [p for p in operands if isinstance(p, TensorProxy) and p.requires_grad and p is not old]
    return tuple(read)


def _nondifferentiable_update(trace, func, old: TensorProxy, new: TensorProxy, read=()) -> TensorProxy:
    """``new`` (a bool/int result converted to ``old``'s float dtype) as the value of a float tensor: with
    ``old``'s gradient path after a logical op, requiring grad with a zero gradient for each tensor in ``read``
    (see ``comparison_operands_requiring_grad``) after any other (``eq_``, ``lt_``)."""
    if getattr(func, "__name__", None) in _HISTORY_KEEPING_UPDATES:
        return _no_grad_update(trace, old, new)
    with _recording_directly():
        return record_on_torch_executor(zero_gradient_update, trace, (new, *read))


def view_leaf_requiring_grad(trace, new: TensorProxy, read) -> TensorProxy:
    """``new`` (a view made under no_grad of the tensors ``read``, which require grad) as eager's such view: a leaf
    that requires grad, through which no gradient reaches ``read`` (``leaf_requiring_grad``)."""
    with _recording_directly():
        return record_on_torch_executor(leaf_requiring_grad, trace, (new, *read))


def _detached(p: TensorProxy) -> TensorProxy:
    from thunder.core.trace import get_tracectx
    from thunder.torch import detach

    with _recording_directly():
        out = detach.record(get_tracectx(), (p,), {})
    out.requires_grad = False
    return out


def _strip_inplace(position: int, args, kwargs):
    """``args``/``kwargs`` with the ``inplace`` flag (at ``position`` or by keyword) set to False."""
    flag = False
    if "inplace" in kwargs:
        flag = bool(kwargs["inplace"])
        kwargs = {**kwargs, "inplace": False}
    elif len(args) > position:
        flag = bool(args[position])
        args = (*args[:position], False, *args[position + 1 :])
    return args, kwargs, flag
