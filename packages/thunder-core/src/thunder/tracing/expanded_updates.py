"""``x.index_put_(indices, values, accumulate=True)`` on an expanded ``x`` (two of its elements one memory location).

Eager runs it (with a deprecation warning): each contribution is added into the memory location its index reaches,
so every element of one location shows the sum of all the contributions to it (``x = b[:1].expand(4, -1)``:
``x.index_put_((i,), v, accumulate=True)`` adds every ``v`` into ``b[0]``). Thunder's update computes ``x``'s new
elements one by one, then writes them into the storage (``views.write_into_overlapping_root``), which keeps one
element's value per location. So the call is traced as an update of every element of ``x`` by the total its
location receives: the contributions accumulated into a tensor with one element per memory location (the expanded
dims of size 1, the indices into them 0), expanded back to ``x``'s shape. Eager's backward through such an update
raises; ``saved_versions`` notes that as for the other updates of an expanded view.
"""

from __future__ import annotations

import torch

from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _expanded_dims, input_shadow, shadow

__all__ = ["EveryElement", "index_put_on_expanded"]


class EveryElement(tuple):
    """The indices of every element of the updated tensor: marks the rewritten call, which writes each memory
    location one value (``views.checked_written_region`` lets it through)."""

    __slots__ = ()


def index_put_on_expanded(args, kwargs) -> tuple[tuple, dict] | None:
    """The arguments of ``index_put_`` that give eager's result on an expanded tensor (see the module's docstring),
    or None where the call is another (not accumulating, a tensor without expanded dims, indices that are not
    integer tensors of the leading dims)."""
    w = args[0] if args else None
    given = dict(zip(("indices", "values", "accumulate"), args[1:]), **kwargs)
    indices, values = given.get("indices"), given.get("values")
    if type(w) is not TracingTensor or given.get("accumulate", False) is not True or type(values) is not TracingTensor:
        return None
    if not isinstance(indices, (tuple, list)) or not indices or len(indices) > w.ndim or values.dtype != w.dtype:
        return None
    if not all(type(i) is TracingTensor and i.dtype in (torch.int64, torch.int32) for i in indices):
        return None
    if w._tt_view is None:
        input_shadow(w)
    dims = _expanded_dims(shadow(w))
    if dims is None:
        return None
    k = len(indices)
    leading = torch.broadcast_shapes(*(tuple(i.shape) for i in indices))
    contributions = values.expand((*leading, *w.shape[k:]))
    for d in dims:  # (a sliced expanded dim: its contributions reach one location)
        if d >= k:
            contributions = contributions.sum(len(leading) + d - k, keepdim=True)
    one_per_location = tuple(1 if d in dims else n for d, n in enumerate(w.shape))
    into = tuple(i * 0 if d in dims else i for d, i in enumerate(indices))
    totals = torch.zeros(one_per_location, dtype=w.dtype, device=w.device).index_put(into, contributions, True)
    every = EveryElement(
        torch.arange(n, device=w.device).reshape(tuple(-1 if e == d else 1 for e in range(w.ndim)))
        for d, n in enumerate(w.shape)
    )
    return (w, every, totals.expand(w.shape), True), {}
