"""Copies of a tensor's own data into itself, which eager skips (``x.copy_(x)``, ``x[0] = x`` with ``x`` of size 1
first).

Eager's ``copy_`` returns at once when its source is the destination's own data: the same storage, offset, sizes,
strides and dtype. Its check of the destination for memory locations shared by two elements (an expanded tensor)
comes after that, so such a copy into an expanded tensor runs where any other refuses. ``x[key] = value`` copies the
value with its leading size-1 dimensions dropped, broadcast to the selected elements: ``a[0] = a`` for an ``a`` of
size 1 in its first dimension copies ``a[0]`` into itself.
"""

from __future__ import annotations

import torch

from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["copies_its_own_data"]


def copies_its_own_data(name: str | None, region: torch.Tensor, args) -> bool:
    """Whether the in-place ``name`` (``copy_`` or ``__setitem__``) writes into ``region`` (the shadow of the elements
    written) a value that is exactly those elements: eager's copy then does nothing."""
    if name == "copy_" and len(args) > 1:
        value = args[1]
        if value is args[0]:
            return True
    elif name == "__setitem__" and len(args) > 2:
        value = args[2]
    else:
        return False
    if type(value) is not TracingTensor:
        return False
    from thunder.tracing.views import shadow

    v = shadow(value)
    with torch._C.DisableTorchFunction():
        if name == "__setitem__":
            while v.ndim and v.shape[0] == 1:
                v = v[0]  # (eager drops the value's leading size-1 dimensions)
        try:
            v = v.expand(region.shape)
        except RuntimeError:
            return False
        return (
            v.untyped_storage()._cdata == region.untyped_storage()._cdata
            and v.storage_offset() == region.storage_offset()
            and v.stride() == region.stride()
            and v.dtype == region.dtype
        )
