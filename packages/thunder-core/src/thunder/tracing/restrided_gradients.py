"""The gradient of a view restrided in place past its elements: ``x.as_strided_(size, stride)`` where ``x`` is a view
that requires grad and the new layout reads storage elements ``x`` did not hold (``b[::2].as_strided_((2, 2), (1,
2))`` reads ``b[1]``).

Eager reads the new elements from the storage, but records ``AsStridedBackward1`` against ``x``'s former geometry:
its backward scatters the gradient into the storage's positions and gathers it at ``x``'s former elements, so the
gradient of a position ``x`` did not hold is dropped. Thunder's restrided view re-derives its value from its root
(``views._derive_strided``); here that root's value is given a gradient path only at the positions of every former
geometry the view passed through (``where(inside, value, value.detach())``), which is eager's backward.
"""

from __future__ import annotations

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.tracing.errors import TracingError, describe_location, user_frame
from thunder.tracing.inplace_grad import _detached, _recording_directly
from thunder.tracing.storage_geometry import spans_its_storage, storage_elements
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _positions, _strided_index, _strided_layout, reads_past, shadow

__all__ = [
    "gradient_only_at",
    "note_restride_past_elements",
    "refuse_update_of_bounded_view",
    "root_value_for",
    "strided_past_elements",
]


def note_restride_past_elements(func, w: TracingTensor, old: torch.Tensor, new: torch.Tensor | None, value):
    """``value``, the new value of ``x`` after ``x.as_strided_(...)`` (of former shadow ``old``, new one ``new``),
    given eager's gradient where the new layout reaches storage elements ``x`` did not hold while ``x`` requires
    grad: a tensor of its own gets it here (``_past_former_elements``); a view records the former geometry that
    bounds the gradient of its re-derivations from its root (``_tt_grad_geometry``, ``root_value_for``). Raises
    where the root does not hold the new elements or reads them as another dtype."""
    if getattr(func, "__name__", None) != "as_strided_" or new is None or not torch.is_grad_enabled():
        return value
    if not w._tt_value.requires_grad:
        return value
    with torch._C.DisableTorchFunction():
        if _positions(new) <= _positions(old):
            return value
        if w._tt_view is None:
            return _past_former_elements(w._tt_value, value, old, new)
        root = w._tt_view[0] if w._tt_view[0]._tt_view is None else None
        rm = shadow(root) if root is not None else None
        if rm is not None and rm.dtype == old.dtype and _positions(new) <= _positions(rm):
            earlier = w._tt_grad_geometry
            metas = earlier[2] if _bounds(w, root) else ()
            w._tt_grad_geometry = (root, root._tt_version, (*metas, old))
            return value
    raise TracingError(
        "thunder.jit cannot run as_strided_ reaching past the elements of a view that requires grad when its base "
        "does not hold them (eager's gradient follows its former elements): use torch.as_strided on its base, or "
        "run it under no_grad\n  " + describe_location(user_frame(4))
    )


def _past_former_elements(former, value, old: torch.Tensor, new: torch.Tensor):
    """``value`` (read from the storage) whose elements at a position of ``old`` take their gradient path from
    ``former``'s element there, the others none: eager's ``AsStridedBackward1`` against the former geometry."""
    from thunder import clang
    from thunder.core import prims

    device = value.device
    n = storage_elements(old)
    storage = torch.empty((n,), dtype=old.dtype, device="meta")
    with _recording_directly():
        # storage positions of the former elements and of the new ones
        at_old = clang.reshape(_strided_index(storage, old, device), (old.numel(),))
        at_new = clang.reshape(_strided_index(storage, new, device), (new.numel(),))
        held = prims.scatter(
            clang.full((n,), False, device=device, dtype=dtypes.bool8),
            at_old,
            clang.full((old.numel(),), True, device=device, dtype=dtypes.bool8),
            0,
        )
        which = prims.scatter(
            clang.full((n,), 0, device=device, dtype=dtypes.int64),
            at_old,
            prims.iota(old.numel(), start=0, step=1, device=device, dtype=dtypes.int64),
            0,
        )
        inside = prims.take(held, at_new, 0)
        from_former = prims.take(clang.reshape(former, (old.numel(),)), prims.take(which, at_new, 0), 0)
        flat = clang.where(inside, from_former, _detached(clang.reshape(value, (new.numel(),))))
        out = clang.reshape(flat, tuple(value.shape))
    out.requires_grad = True
    return out


def _bounds(view: TracingTensor, root: TracingTensor) -> bool:
    """Whether ``view``'s recorded former geometries still bound its gradient: until ``root`` (or any view of it) is
    updated in place, after which eager makes the view's history again as a view of its base (all of it)."""
    recorded = view._tt_grad_geometry
    return recorded is not None and recorded[0] is root and recorded[1] == root._tt_version


def refuse_update_of_bounded_view(root: TracingTensor, view: TracingTensor) -> None:
    """Raises for an in-place update through a view whose gradient is bounded by its former geometry: eager then
    routes the update's gradient to the base's elements under the new layout (``CopySlices``), which the bounded
    value thunder reads does not carry."""
    if _bounds(view, root) and root._tt_value.requires_grad:
        raise TracingError(
            "thunder.jit cannot update in place a view restrided (as_strided_) past its elements while it requires "
            "grad; restride its base instead, or clone it before the update\n  " + describe_location(user_frame(2))
        )


def root_value_for(view: TracingTensor, root: TracingTensor):
    """The value ``view`` re-derives from: its root's, with a gradient path only at the positions of the former
    geometries recorded by ``note_restride_past_elements`` while they bound it (``_bounds``; None: the root's own
    value)."""
    if not _bounds(view, root):
        return None
    recorded = view._tt_grad_geometry
    value = root._tt_value
    if not value.requires_grad:
        return None
    with _recording_directly():
        out = gradient_only_at(value, shadow(root), recorded[2])
    out.requires_grad = True
    return out


def gradient_only_at(value, rm: torch.Tensor, geometries) -> TensorProxy:
    """``value`` (of the tensor whose shadow is ``rm``) with a gradient path only at the elements every layout of
    ``geometries`` (shadows viewing ``rm``'s storage) holds, the others detached: eager's ``as_strided`` backward
    against those layouts. Records prims: call it under ``_recording_directly``."""
    from thunder import clang
    from thunder.core import prims

    n, device = rm.numel(), value.device
    inside = None
    for m in geometries:
        idx = clang.reshape(_strided_index(rm, m, device), (m.numel(),))
        none = clang.full((n,), False, device=device, dtype=dtypes.bool8)
        held = prims.scatter(none, idx, clang.full((m.numel(),), True, device=device, dtype=dtypes.bool8), 0)
        inside = held if inside is None else prims.bitwise_and(inside, held)
    flat = clang.reshape(value, (n,))
    return clang.reshape(clang.where(inside, flat, _detached(flat)), tuple(value.shape))


def strided_past_elements(func, args, kwargs) -> tuple[tuple, dict]:
    """The arguments to run ``torch.as_strided(w, size, stride, offset)`` with where the result reads storage elements
    past ``w``'s own: ``w``'s storage is that of its root, whose value the program holds as one tensor of the whole
    storage when the root is a tensor the program made (contiguous, at offset 0) or an argument it did not update;
    the op then reads the root, whose elements past ``w``'s carry no gradient path (eager's ``as_strided`` backward
    follows ``w``'s geometry). ``w``'s own value is no view of that storage after an in-place update of it (or of
    its root). Raises where the root's value is not the whole storage (an argument updated in place)."""
    w = args[0] if args else None
    if type(w) is not TracingTensor:
        return args, kwargs
    layout = _strided_layout(w, args, kwargs)
    if layout is None:
        return args, kwargs
    wm = shadow(w)
    try:
        with torch._C.DisableTorchFunction():
            read = wm.as_strided(*layout)
    except RuntimeError:
        return args, kwargs
    with torch._C.DisableTorchFunction():
        if not reads_past(read, wm):
            return args, kwargs
    root = w if w._tt_view is None else w._tt_view[0]
    rm = shadow(root)
    with torch._C.DisableTorchFunction():
        whole = spans_its_storage(rm)
    if root is w and w._tt_version == 0 and (whole or root._tt_owner is None):
        return args, kwargs  # (its value is the storage's tensor itself: an argument as called, or a whole one)
    if not whole or root._tt_view is not None:
        raise TracingError(
            f"thunder.jit cannot run {getattr(func, '__name__', 'as_strided')} reading storage elements past those "
            "of an argument after an in-place update of it or of a view of it, when the argument does not span its "
            "whole storage (its base's elements past it are not the program's): run it before the update, or pass "
            "the base\n  " + describe_location(user_frame(3))
        )
    source = root
    if w._tt_value.requires_grad or root._tt_value.requires_grad:
        source = _whole_storage_with_gradient_of(root, w, rm, wm)
    return (source, *layout), {}


def _whole_storage_with_gradient_of(root: TracingTensor, w: TracingTensor, rm, wm) -> TracingTensor:
    """A stand-in viewing ``root``'s storage whose value is ``root``'s with a gradient path only at ``w``'s
    elements."""
    from thunder.tracing.views import _mark_view

    with _recording_directly():
        masked = gradient_only_at(root._thunder_proxy, rm, (wm,))
    masked.requires_grad = True
    out = TracingTensor(masked)
    out._tt_meta = rm
    _mark_view(out, root, None)
    with torch._C.DisableTorchFunction():
        out._tt_bounds = (*w._tt_bounds, (tuple(wm.shape), tuple(wm.stride()), wm.storage_offset()))
    return out
