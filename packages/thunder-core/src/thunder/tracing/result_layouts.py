"""Eager's memory layout for the results of ops that never alias their arguments (``x.t() * 2``, ``a @ b``).

A result's shadow (``views.shadow``) is contiguous unless an op said otherwise. That holds when the op's
tensor arguments are contiguous, but eager's elementwise kernels give their result the memory order of
their arguments (TensorIterator): ``y = x.t() * 2`` is a transposed tensor in eager, so ``y.reshape(-1)``
copies and ``y.contiguous()`` is a new tensor, where a contiguous shadow would make them a view of ``y`` and
``y`` itself (an in-place update of the reshape would then wrongly reach ``y``).

So when an argument's layout is not known to be contiguous (a strided input or view, a deferred view), the
op's run on the arguments' shadows is recorded here and made only when something asks for the result's shadow
(a view op, a layout query, an in-place update), as PyTorch answers it. Running PyTorch's meta kernels costs up
to milliseconds per op (elementwise ops go through Python references on ``meta``; SDPA about 8 ms), and most
results' shadows are never asked for; so an answer costs one such run, never a chain of them: the result of an
op reading another pending result is taken as contiguous, as before this module existed (a gap: ``y`` in
``y = (x.t() * 2).exp()`` is contiguous for thunder and transposed in eager).
"""

from __future__ import annotations

import torch

from thunder.core.symbolic import hints
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _SAME_ORDER_VIEWS, DeferredMetaRun, shadow

__all__ = ["PendingLayout", "defer_result_layout"]


_UNKNOWN = None  # (an argument whose layout waits on another op's pending run: the result is taken as contiguous)


def _layout_kind(w: TracingTensor):
    """True when ``w``'s shadow is known not to be contiguous or is a deferred view that may not be (its run is
    cheap and made with the result's), False when it is contiguous, ``_UNKNOWN`` when it waits on a pending
    result's run: layouts are learned one pending run at a time, never as a chain of meta runs."""
    if w._tt_layout_pending is not None:
        return _UNKNOWN
    pending = w._tt_pending
    if pending is not None:
        if _same_order_view_of_contiguous(pending):
            return False  # (x.view(...) of a contiguous x: contiguous)
        base = pending.args[0] if pending.args else None
        while type(base) is TracingTensor and base._tt_pending is not None:
            base = base._tt_pending.args[0] if base._tt_pending.args else None
        if type(base) is TracingTensor and base._tt_layout_pending is not None:
            return _UNKNOWN
        return True
    m = w._tt_meta
    if m is None:
        t = w._tt_layout_of  # an input whose shadow is not made yet: the caller's tensor
        return t is not None and not t.is_contiguous()
    return not m.is_contiguous()


def _same_order_view_of_contiguous(pending) -> bool:
    """Whether a deferred view keeps its argument's elements in their order (``view``, ``reshape``,
    ``unsqueeze`` ...) and that argument is a result known to be contiguous: then the view is contiguous too."""
    base = pending.args[0] if pending.args else None
    return (
        getattr(pending.mapped, "name", None) in _SAME_ORDER_VIEWS
        and type(base) is TracingTensor
        and base._tt_meta is None
        and base._tt_pending is None
        and base._tt_layout_pending is None
        and base._tt_layout_of is None
    )


def _tensor_arguments(args, kwargs):
    for a in args:
        if type(a) is TracingTensor:
            yield a
        elif type(a) in (tuple, list):
            for b in a:
                if type(b) is TracingTensor:
                    yield b
    for a in kwargs.values():
        if type(a) is TracingTensor:
            yield a


def _as_shadows(x):
    """``x`` with its stand-ins replaced by their shadows as known now (contiguous for a pending result)."""
    t = type(x)
    if t is TracingTensor:
        if x._tt_pending is not None:
            return x  # (a deferred view: its shadow is made with this op's, when asked for)
        return shadow(x)
    if t is tuple or t is list:
        return t(_as_shadows(y) for y in x)
    if t is dict:
        return {k: _as_shadows(v) for k, v in x.items()}
    return x


class PendingLayout(DeferredMetaRun):
    """An op's run on its arguments' shadows (taken when it was called), made when a result's shadow is first
    needed: one meta run, never a chain of them."""

    __slots__ = ()
    marker = "_tt_layout_pending"

    def __init__(self, func, args, kwargs, outputs: tuple[TracingTensor, ...]) -> None:
        self.func = func
        self.args, self.kwargs = _as_shadows(args), _as_shadows(kwargs)
        self._hold(outputs)

    def resolve(self) -> None:
        ran = self._run()
        if ran is None:
            return
        outs, mout = ran
        if isinstance(mout, torch.Tensor):
            mout = (mout,)
        if not isinstance(mout, (tuple, list)) or len(mout) != len(outs):
            return  # (PyTorch cannot run it on meta, or returns another structure: contiguous, as before)
        with torch._C.DisableTorchFunction():
            for w, m in zip(outs, mout):
                if w is None or w._tt_meta is not None or not isinstance(m, torch.Tensor):
                    continue
                p = w._tt_value
                if m.dtype != p.dtype.torch_dtype or tuple(m.shape) != hints(p.shape) or m.is_contiguous():
                    continue
                # a storage of its own with eager's strides (the result is not a view of an argument: its
                # symbol says so, whatever the meta kernel shares)
                w._tt_meta = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")


def defer_result_layout(func, args, kwargs, wrapped) -> None:
    """Records the layout run of ``func``'s results ``wrapped`` when an argument is known to be strided (or the
    call names a memory format); nothing otherwise (contiguous arguments give contiguous results)."""
    if type(wrapped) is TracingTensor:
        outs = (wrapped,)
    elif type(wrapped) in (tuple, list) and wrapped and all(type(w) is TracingTensor for w in wrapped):
        outs = tuple(wrapped)
    else:
        return
    strided = "memory_format" in kwargs
    with torch._C.DisableTorchFunction():
        for a in _tensor_arguments(args, kwargs):
            kind = _layout_kind(a)
            if kind is _UNKNOWN:
                return
            strided = strided or kind
        if strided:
            PendingLayout(func, args, kwargs, outs)  # (held by the results)
