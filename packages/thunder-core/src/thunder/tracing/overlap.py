"""In-place ops whose destination shares memory with one of their inputs without being that tensor
(``x[1:].add_(x[:-1])``, ``x.add_(x[:, :1])``), answered as eager answers them.

Eager refuses when it can tell cheaply that the two overlap partly (both non-overlapping and dense, their
memory ranges intersecting, different layouts): thunder raises the same error. Otherwise eager's kernel
reads elements it has already written, in its own order; thunder then runs the same PyTorch call on a
scratch copy of the storage laid out as the real one, so the program gets exactly eager's result (and,
as for any opaque op, its gradient from PyTorch's autograd).
"""

from __future__ import annotations

from itertools import count

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.symbol import Symbol, flat_proxies
from thunder.tracing.storage_geometry import dense_layout, extent

__all__ = ["partial_overlap_error", "overlapping_inputs", "refuse_full_overlap", "update_on_storage"]

_PARTIAL = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)
_counter = count()


def _layout(m: torch.Tensor) -> tuple:
    return tuple(m.shape), tuple(m.stride()), m.storage_offset()


def _positions(m: torch.Tensor) -> set[int] | None:
    if m.numel() > 1 << 16:
        return None
    end = m.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(m.shape, m.stride()))
    with torch._C.DisableTorchFunction():
        return set(torch.as_strided(torch.arange(end), m.shape, m.stride(), m.storage_offset()).reshape(-1).tolist())


def _span(m: torch.Tensor) -> tuple[int, int]:
    """The storage positions ``m`` (not empty) reads lie in ``range(*_span(m))``."""
    first, last = extent(m)
    return first, last + 1


def partial_overlap_error(func_name: str) -> RuntimeError:
    return RuntimeError(f"{func_name}: {_PARTIAL}")


def _setitem_source(dst: torch.Tensor, m: torch.Tensor) -> torch.Tensor | None:
    """What eager's ``x[k] = v`` copies from: ``v`` itself when its shape is the destination's, nothing to
    check for a 0-d ``v`` (a fill with its value), else ``v`` without its leading size-1 dims, expanded."""
    if tuple(m.shape) == tuple(dst.shape):
        return m
    if m.dim() == 0:
        return None
    shape, stride = list(m.shape), list(m.stride())
    while shape and shape[0] == 1:
        shape.pop(0)
        stride.pop(0)
    k = dst.dim() - len(shape)
    if k < 0:
        return m
    new_stride = [0] * k + [s if n == d else 0 for n, s, d in zip(shape, stride, dst.shape[k:])]
    return m.as_strided(tuple(dst.shape), tuple(new_stride), m.storage_offset())


def overlapping_inputs(
    dst: torch.Tensor, candidates: list[tuple[int, torch.Tensor]], func_name: str, *, setitem: bool = False
) -> list[int]:
    """Positions among ``candidates`` (``(position, shadow)`` sharing ``dst``'s storage) whose elements
    overlap ``dst``'s without being ``dst`` itself; raises eager's error where eager refuses. (``setitem``:
    ``x[k] = v`` compares what eager copies from, see ``_setitem_source``.)"""
    found = []
    with torch._C.DisableTorchFunction():
        if dst.numel() == 0:
            return found
        for pos, m in candidates:
            if setitem:
                m = _setitem_source(dst, m)
                if m is None:
                    continue
            if m.numel() == 0 or _layout(m) == _layout(dst):
                continue
            (a0, a1), (b0, b1) = _span(dst), _span(m)
            if a1 <= b0 or b1 <= a0:
                continue
            if dense_layout(dst.shape, dst.stride()) and dense_layout(m.shape, m.stride()):
                raise partial_overlap_error(func_name)
            pd, pm = _positions(dst), _positions(m)
            if pd is None or pm is None or pd & pm:
                found.append(pos)
    return found


def refuse_full_overlap(func, dst: torch.Tensor, same: list[int], args, kwargs) -> None:
    """Eager's error where ``func`` refuses a source laid out exactly as its destination ``dst`` (the arguments at
    ``same``: ``x.scatter_(d, i, x)``; scatter, index and masked updates assert no overlap at all, where elementwise
    updates allow it): PyTorch's own call is run on a scratch storage laid out so, other tensors as zeros."""
    name = getattr(func, "__name__", "")
    with torch._C.DisableTorchFunction(), torch.no_grad():

        def zeros(a):  # (the indices of index_put_ come in a tuple)
            return torch.zeros(tuple(a.shape), dtype=a.dtype) if isinstance(a, torch.Tensor) else a

        if dst.numel() == 0:
            # no element to overlap, but eager's check calls the tensor itself passed as the source a full overlap
            # (x.index_put_(i, x) of an empty x): the same scratch tensor at those positions
            same = [i for i in same if args[i] is dst]
            if not same:
                return
            empty = torch.zeros(tuple(dst.shape), dtype=dst.dtype)

            def scratch(i, a):
                return empty if i == 0 or i in same else tree_map(zeros, a)

        else:
            n = _span(dst)[1]
            if n > 1 << 16:
                return
            storage = torch.zeros((n,), dtype=dst.dtype)

            def scratch(i, a):
                if i == 0 or i in same:
                    return storage.as_strided(*_layout(dst))
                return tree_map(zeros, a)

        values = [scratch(i, a) for i, a in enumerate(args)]
        rest = tree_map(zeros, kwargs)
        try:
            func(*values, **rest)
        except RuntimeError as e:
            if "refer to a single memory location" in str(e):
                raise partial_overlap_error(name) from None


def update_on_storage(func, root_meta: torch.Tensor, root: TensorProxy, views: dict[int, torch.Tensor], args, kwargs):
    """The root's value after ``func(*args, **kwargs)`` where the arguments at ``views``' positions are views
    (of those shadows' layouts) of one storage holding ``root``: PyTorch runs the call on such a storage."""
    with torch._C.DisableTorchFunction():
        n = root_meta.untyped_storage().nbytes() // root_meta.element_size()
        root_layout = _layout(root_meta)
        view_layouts = {pos: _layout(m) for pos, m in views.items()}
    positions = sorted(view_layouts)
    rest = [a for i, a in enumerate(args) if i not in view_layouts]

    def run(root_value, *rest_values, **kw):
        storage = torch.empty((n,), dtype=root_value.dtype, device=root_value.device)
        storage.as_strided(*root_layout).copy_(root_value)
        values = list(rest_values)
        for pos in positions:
            values.insert(pos, storage.as_strided(*view_layouts[pos]))
        func(*values, **kw)
        return storage.as_strided(*root_layout).clone()

    def meta(root_value, *rest_values, **kw):
        grad = torch.is_grad_enabled() and any(
            isinstance(p, TensorProxy) and p.requires_grad for p in flat_proxies((root_value, rest_values, kw))
        )
        return TensorProxy(like=root_value, requires_grad=grad and root_value.dtype.kind in ("float", "complex"))

    name = f"update_on_storage_{next(_counter)}"
    sym = Symbol(
        name, meta, id=f"opaque::{name}", is_prim=True, print_name=name, call_ctx={name: run}, tags=("opaque",)
    )
    sym.torch_fn = run
    sym.inplace = False
    from thunder.executors.torchex import ex as torch_ex

    sym.executor = torch_ex
    return sym(root, *rest, **kwargs)
