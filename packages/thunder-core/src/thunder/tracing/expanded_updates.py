"""``x.index_put_(indices, values, accumulate)`` on an expanded ``x`` (two of its elements one memory location).

Eager runs it (with a deprecation warning). Accumulating, each contribution is added into the memory location its
index reaches, so every element of one location shows the sum of all the contributions to it (``x =
b[:1].expand(4, -1)``: ``x.index_put_((i,), v, accumulate=True)`` adds every ``v`` into ``b[0]``). Not accumulating,
each write lands on its location, the last one written (in the order of the index elements, then of the trailing
elements) staying. Thunder's update computes ``x``'s new elements one by one, then writes them into the storage
(``views.write_into_overlapping_root``), which keeps one element's value per location. So the call is traced as an
update of every element of ``x`` by what its location receives: the contributions put into a tensor with one element
per memory location (the expanded dims of size 1, the indices into them 0; not accumulating, that tensor starts as
``x``'s own values and a trailing expanded dim gives its last contribution), expanded back to ``x``'s shape. Eager's
backward through such an update raises; ``saved_versions`` notes that as for the other updates of an expanded view.
"""

from __future__ import annotations

import torch

from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _expanded_dims, input_shadow, shadow

__all__ = ["EveryElement", "index_put_on_expanded", "setitem_on_expanded"]


class EveryElement(tuple):
    """The indices of every element of the updated tensor: marks the rewritten call, which writes each memory
    location one value (``views.checked_written_region`` lets it through)."""

    __slots__ = ()


def index_put_on_expanded(args, kwargs) -> tuple[tuple, dict] | None:
    """The arguments of ``index_put_`` that give eager's result on an expanded tensor (see the module's docstring),
    or None where the call is another (a tensor without expanded dims, indices that are not integer tensors of the
    leading dims)."""
    w = args[0] if args else None
    given = dict(zip(("indices", "values", "accumulate"), args[1:]), **kwargs)
    indices, values = given.get("indices"), given.get("values")
    accumulate = given.get("accumulate", False)
    if type(w) is not TracingTensor or type(accumulate) is not bool or not isinstance(values, torch.Tensor):
        return None
    if not isinstance(indices, (tuple, list)) or not indices or len(indices) > w.ndim or values.dtype != w.dtype:
        return None
    # (a tensor made outside the function, a closure's, counts too)
    if not all(isinstance(i, torch.Tensor) and i.dtype in (torch.int64, torch.int32) for i in indices):
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
            at = len(leading) + d - k
            last = contributions.narrow(at, contributions.shape[at] - 1, 1)
            contributions = contributions.sum(at, keepdim=True) if accumulate else last
    into = tuple(i * 0 if d in dims else i for d, i in enumerate(indices))
    if accumulate:
        one_per_location = tuple(1 if d in dims else n for d, n in enumerate(w.shape))
        start = torch.zeros(one_per_location, dtype=w.dtype, device=w.device)
    else:  # (the locations no index reaches keep their values)
        start = w
        for d in dims:
            start = start.narrow(d, 0, 1)
    totals = start.index_put(into, contributions, accumulate)
    every = EveryElement(
        torch.arange(n, device=w.device).reshape(tuple(-1 if e == d else 1 for e in range(w.ndim)))
        for d, n in enumerate(w.shape)
    )
    return (w, every, totals.expand(w.shape), accumulate), {}


def setitem_on_expanded(args) -> tuple | None:
    """``x[indices] = values`` with integer index tensors, which eager runs as ``x.index_put_(indices, values)``, on
    an expanded ``x``: the arguments of ``__setitem__`` writing every element of ``x`` what its memory location
    receives (as ``index_put_on_expanded``), or None where the call is another."""
    if len(args) != 3 or type(args[0]) is not TracingTensor:
        return None
    w, key, values = args
    indices = key if isinstance(key, tuple) else (key,)
    if not all(isinstance(i, torch.Tensor) and i.dtype in (torch.int64, torch.int32) for i in indices):
        return None
    if not isinstance(values, torch.Tensor):
        values = torch.full((), values, dtype=w.dtype, device=w.device)
    rewritten = index_put_on_expanded((w, indices, values.to(w.dtype), False), {})
    return None if rewritten is None else rewritten[0][:3]
