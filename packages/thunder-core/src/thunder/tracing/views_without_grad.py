"""Views made under ``no_grad`` or ``inference_mode`` of tensors that require grad: leaves of their own in eager."""

from __future__ import annotations

import torch

from thunder.tracing.inplace_grad import _detached, view_leaf_requiring_grad
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import view_of

__all__ = ["view_made_without_grad"]


def view_made_without_grad(trace, out, args) -> None:
    """A view of a tensor that requires grad, made under ``no_grad`` or ``inference_mode``, requires grad in eager,
    as does what is computed from it, but no gradient reaches the tensor through it (its history is cut): its value
    is a leaf of its own that requires grad (``leaf_requiring_grad``). A view op that gave its argument's value
    back unchanged (``w.view(-1)`` of a vector) is cut as well; one that returns the argument itself, as eager's
    ``w.contiguous()`` does, is not a view."""
    read = [a for a in args if type(a) is TracingTensor and a.requires_grad]
    if not read:
        return
    root = read[0]._tt_view[0] if read[0]._tt_view is not None else read[0]
    if not getattr(root, "_tt_base_requires_grad", True):
        return  # (eager's view is a view of the caller's base, which does not require grad)
    for o in out if type(out) is tuple else (out,):
        if type(o) is not TracingTensor or any(o is a for a in args):
            continue
        p = o._tt_value
        if p.dtype.kind not in ("float", "complex") or view_of(o) is None:
            continue
        if p.requires_grad:  # (the argument's own value, which the stop-gradient of the no_grad region skipped)
            p = _detached(p)
        o._tt_value = view_leaf_requiring_grad(trace, p, tuple(a._thunder_proxy for a in read))
        o._tt_leaf_view = True
        with torch._C.DisableTorchFunction():
            o.requires_grad_(True)
