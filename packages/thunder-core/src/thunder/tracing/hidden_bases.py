"""Outputs that eager returns as views of a tensor its composite op made inside and dropped.

``torch.cov`` of a vector squeezes its 1x1 result, ``torch.tensordot`` and ``einsum`` reshape or permute the
result of a matrix product, ``F.linear`` of a vector squeezes it: eager's output is a view (``_is_view()``,
``_base`` set) of a tensor nobody else holds. The program returns the same view when the executor runs the op
itself, but not once the output was updated in place: the program then computes the new elements as a tensor of
its own. The output's shadow keeps eager's answer (the meta kernel's view, ``result_layouts.py`` asks it for the
ops in ``VIEWS_OF_INTERNAL_RESULTS``), and the step after the call returns such an output as that view of a new
base holding its elements, as eager's is.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from thunder.core import pytree

__all__ = [
    "VIEWS_OF_INTERNAL_RESULTS",
    "eager_view_shadow",
    "HiddenBaseView",
    "hidden_base_view",
    "return_hidden_base_views",
]

# symbols (torch names) whose eager result may be a view of a tensor made inside the op; the others run on the
# shadows already (fallbacks) or return fresh tensors
VIEWS_OF_INTERNAL_RESULTS = frozenset(
    "cov linear bilinear tensordot einsum inner chain_matmul linalg_multi_dot multi_dot conv1d conv2d conv3d "
    "conv_transpose1d".split()
)


def _cov_shadow(args, dtype: torch.dtype) -> torch.Tensor:
    # eager's cov squeezes its (variables x variables) product, a view even where no dimension has size 1
    a = args[0] if args else None
    if not isinstance(a, torch.Tensor):
        return None
    n = a.shape[0] if a.ndim == 2 else 1
    return torch.empty((n, n), dtype=dtype, device="meta").squeeze()


# ops without a meta kernel whose eager result is a view of a tensor made inside: the shadow, by rule
_VIEW_SHADOW_RULES = {"cov": _cov_shadow}


def eager_view_shadow(func, args, outs) -> torch.Tensor | None:
    """The shadow eager's kernel would give the single output of ``func`` (in ``_VIEW_SHADOW_RULES``), else None."""
    rule = _VIEW_SHADOW_RULES.get(getattr(func, "__name__", None))
    if rule is None or len(outs) != 1 or outs[0] is None:
        return None
    with torch._C.DisableTorchFunction():
        m = rule(args, outs[0]._tt_value.dtype.torch_dtype)
    return m


class HiddenBaseView(NamedTuple):
    """Output leaf ``index`` is eager's view ``(size, stride, offset)`` of a base ``(base_size, base_stride)``;
    size None: eager's is no view at all (a view op's result that eager copied, ``reshape`` of a transposed
    tensor, where the program's value may be laid out so that the executor returns a view)."""

    index: int
    size: tuple[int, ...] | None
    stride: tuple[int, ...] | None
    offset: int
    base_size: tuple[int, ...] | None
    base_stride: tuple[int, ...] | None


def hidden_base_view(index: int, m: torch.Tensor | None, input_storages) -> HiddenBaseView | None:
    """The plan for output ``index`` whose shadow is ``m`` when that is a view of a storage no input has."""
    if m is None:
        return None
    with torch._C.DisableTorchFunction():
        base = m._base
        if base is None or m.untyped_storage()._cdata in input_storages or m.is_conj() or m.is_neg():
            return None
        if base.dtype != m.dtype or base.storage_offset() != 0:
            return None
        numbers = (*m.shape, *m.stride(), m.storage_offset(), *base.shape, *base.stride())
        if not all(type(n) is int for n in numbers):
            return None  # (symbolic sizes: left as the program's)
        return HiddenBaseView(
            index, tuple(m.shape), tuple(m.stride()), m.storage_offset(), tuple(base.shape), tuple(base.stride())
        )


def copy_outputs_run_as_views(result, plans: tuple[HiddenBaseView, ...], spec, extra: tuple) -> tuple[Any, tuple]:
    """``(result, extra)`` with each planned output eager computes as a tensor of its own, which the executors ran as
    a view (of a value laid out otherwise than eager's), copied: in ``extra`` too (the values the outputs that view
    it are made from, which then share the copy's storage, as eager's views of it do)."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result, extra
    copies = {}
    for plan in plans:
        out = leaves[plan.index]
        if plan.size is None and isinstance(out, torch.Tensor) and out._base is not None:
            with torch.set_grad_enabled(out.requires_grad):
                copies[id(out)] = leaves[plan.index] = out.clone()
    if not copies:
        return result, extra
    return pytree.tree_unflatten(spec, leaves), tuple(copies.get(id(e), e) for e in extra)


def return_hidden_base_views(result, plans: tuple[HiddenBaseView, ...], spec):
    """``result`` with each planned output that the program returned as a tensor of its own replaced by that view
    of a new base holding its elements (the base's other elements are zeros), with its history through the copy."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for index, size, stride, offset, base_size, base_stride in plans:
        out = leaves[index]
        if size is None:  # (copy_outputs_run_as_views's)
            continue
        if not isinstance(out, torch.Tensor) or out._base is not None or tuple(out.shape) != size:
            continue
        base = torch.empty_strided(base_size, base_stride, dtype=out.dtype, device=out.device)
        with torch.no_grad():
            base.zero_()
        view = base.as_strided(size, stride, offset)
        with torch.set_grad_enabled(out.requires_grad):
            view.copy_(out)
        if view.requires_grad == out.requires_grad:
            leaves[index] = view
    return pytree.tree_unflatten(spec, leaves)
