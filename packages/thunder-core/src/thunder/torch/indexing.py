"""Indexing: ``__getitem__`` (basic indexing decomposes to slice/squeeze/broadcast), gather, index_select."""

from __future__ import annotations

import operator

import torch

from thunder import clang
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, check
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_data_dependent, same_shape
from thunder.torch.registry import InplaceOp, register_torch_alias, torchsymbol

T = torch.Tensor


def _is_basic(key) -> bool:
    return all(
        k is None or k is Ellipsis or isinstance(k, (int, slice, torch.SymInt)) and not isinstance(k, bool) for k in key
    )


@torchsymbol(T.__getitem__, method_name="getitem", tags=("view",))
def getitem(a, key):
    key = key if isinstance(key, tuple) else (key,)
    if not _is_basic(key):
        return _advanced_getitem(a, key)
    n_ellipsis = sum(k is Ellipsis for k in key)
    check(n_ellipsis <= 1, "an index can only have a single ellipsis ('...')", IndexError)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    check(consumed <= a.ndim, lambda: f"too many indices for tensor of dimension {a.ndim}", IndexError)
    if n_ellipsis:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (a.ndim - consumed) + key[i + 1 :]
    else:
        key = key + (slice(None),) * (a.ndim - consumed)

    starts, stops, steps = [0] * a.ndim, list(a.shape), [1] * a.ndim
    squeezed, out_layout = [], []  # out_layout: for each output dim, an input dim or None (a new unit dim)
    dim = 0
    for k in key:
        if k is None:
            out_layout.append(None)
            continue
        n = a.shape[dim]
        if isinstance(k, (int, torch.SymInt)):
            if is_data_dependent(n) and type(k) is int:  # (no size to check while tracing: checked when it runs)
                message = f"index {k} is out of bounds for dimension {dim} with size {{size}}"
                _require_size_at_least(n, k + 1 if k >= 0 else -k, IndexError, message)
            else:
                check(-n <= k < n, lambda: f"index {k} is out of bounds for dimension {dim} with size {n}", IndexError)
            k = k + n if k < 0 else k
            starts[dim], stops[dim] = k, k + 1
            squeezed.append(dim)
        else:
            step = 1 if k.step is None else k.step
            check(step > 0, "step must be greater than zero", ValueError)
            start, stop = _slice_bounds(k, n)
            starts[dim], stops[dim], steps[dim] = start, max(stop, start), step
            out_layout.append(dim)
        dim += 1

    result = a
    # (a bound that may differ from the full range, one of a size known only when the program runs: sliced)
    if not (
        same_shape(tuple(starts), (0,) * a.ndim) and same_shape(tuple(stops), tuple(a.shape)) and steps == [1] * a.ndim
    ):
        result = prims.slice(a, starts, stops, steps)
    if squeezed:
        result = prims.squeeze(result, tuple(squeezed))
    if None in out_layout:
        kept = [d for d in out_layout if d is not None]
        shape, bdims = [], []
        for i, d in enumerate(out_layout):
            if d is None:
                shape.append(1)
            else:
                shape.append(result.shape[kept.index(d)])
                bdims.append(i)
        result = prims.broadcast_in_dim(result, tuple(shape), tuple(bdims))
    return result


@torchsymbol(torch.select, T.select, method_name="select", tags=("view",))
def select(a, dim: int, index: int):
    """``a.select(dim, index)``: the elements at ``index`` along ``dim``, as ``a[..., index]`` (where that size is
    known only when the program runs, the index is checked then, as for ``a[index]``)."""
    if type(index) is not int and type(index) is not torch.SymInt:
        raise NotImplementedError("select with an index that is not an integer")  # (a tensor's: PyTorch runs it)
    check(a.ndim > 0, "select() cannot be applied to a 0-dim tensor.", IndexError)
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    if is_data_dependent(n) and type(index) is int:
        message = f"select(): index {index} out of range for tensor of size {{size}} at dimension {dim}"
        _require_size_at_least(n, index + 1 if index >= 0 else -index, IndexError, message)
    else:
        check(
            -n <= index < n,
            lambda: f"select(): index {index} out of range for tensor of size {list(a.shape)} at dimension {dim}",
            IndexError,
        )
    k = index + n if index < 0 else index
    starts, stops = [0] * a.ndim, list(a.shape)
    starts[dim], stops[dim] = k, k + 1
    return prims.squeeze(prims.slice(a, starts, stops, [1] * a.ndim), (dim,))


def _slice_bounds(k: slice, n) -> tuple:
    """``k.indices(n)[:2]`` for a positive step, where ``n`` or the bounds may be symbolic sizes (each
    comparison is then a guard of the trace)."""
    if type(n) is not torch.SymInt and type(k.start) is not torch.SymInt and type(k.stop) is not torch.SymInt:
        return k.indices(n)[:2]

    def bound(v, default):
        if v is None:
            return default
        v = operator.index(v) if type(v) is not torch.SymInt else v
        if v < 0:
            v = v + n
            return 0 if v < 0 else v
        return n if v > n else v

    return bound(k.start, 0), bound(k.stop, n)


def _advanced_getitem(a, key):
    # one integer index tensor on one dim, the rest full slices: index_select semantics
    tensors = [i for i, k in enumerate(key) if isinstance(k, TensorProxy)]
    if len(tensors) == 1 and all(
        isinstance(k, slice) and k == slice(None) for i, k in enumerate(key) if i != tensors[0]
    ):
        dim = tensors[0]
        idx = key[dim]
        if dtypes.is_integer_dtype(idx.dtype) and idx.dtype is not dtypes.bool8:
            flat = clang.reshape(idx, (idx.numel(),))
            n = a.shape[dim]
            flat = clang.where(clang.elementwise_binary(flat, 0, prims.lt), clang.add(flat, n), flat)
            taken = prims.take(a, flat, dim)
            return clang.reshape(taken, a.shape[:dim] + idx.shape + a.shape[dim + 1 :])
    raise NotImplementedError("this form of advanced indexing has no decomposition yet")


@torchsymbol(torch.index_select, T.index_select, method_name="index_select")
def index_select(a, dim: int, index):
    dim = canonicalize_dim(a.ndim, dim)
    return prims.take(a, index, dim)


@torchsymbol(torch.gather, T.gather, method_name="gather")
def gather(a, dim: int, index):
    return prims.take_along_axis(a, _empty_index_as_int64(index), dim)


def _empty_index_as_int64(index):
    """Eager checks an index's dtype only when it has elements: an empty one of any dtype is an int64 index."""
    if isinstance(index, TensorProxy) and not dtypes.is_integer_dtype(index.dtype) and 0 in tuple(index.shape):
        return clang.maybe_convert_to_dtype(index, dtypes.int64)
    return index


@torchsymbol(torch.take_along_dim, T.take_along_dim, method_name="take_along_dim")
def take_along_dim(a, indices, dim=None):
    check(dim is not None, "take_along_dim without dim is not supported", NotImplementedError)
    dim = canonicalize_dim(a.ndim, dim)
    check(
        a.ndim == indices.ndim,
        lambda: (
            f"torch.take_along_dim(): input and indices should have the same number of dimensions, but got {a.ndim} dimensions for input, and {indices.ndim} dimensions for indices"
        ),
        RuntimeError,
    )
    sa, si = list(a.shape), list(indices.shape)
    sa[dim] = si[dim] = 1
    shape = list(clang.compute_broadcast_shape(sa, si))
    a_shape, i_shape = list(shape), list(shape)
    a_shape[dim], i_shape[dim] = a.shape[dim], indices.shape[dim]
    return prims.take_along_axis(clang.expand(a, a_shape), clang.expand(indices, i_shape), dim)


@torchsymbol(torch.scatter_add, T.scatter_add, method_name="scatter_add")
def scatter_add(a, dim: int, index, src):
    return prims.scatter_add(a, _empty_index_as_int64(index), src, dim)


def _index_along(index, dim: int, shape) -> TensorProxy:
    """A 1-D ``index`` for dim ``dim`` shaped and expanded to ``shape`` (index_add/index_copy as scatters)."""
    view = [1] * len(shape)
    view[dim] = index.numel()
    return clang.expand(clang.reshape(index, view), shape)


@torchsymbol(torch.scatter, T.scatter, method_name="scatter")
def scatter(a, dim: int, index, src, *, reduce=None):
    check(reduce is None, "scatter with reduce= has no decomposition", NotImplementedError)
    if not isinstance(src, TensorProxy):
        src = clang.full(index.shape, src, device=a.device, dtype=a.dtype)
    return prims.scatter(a, index, src, dim)


@torchsymbol(torch.index_add, T.index_add, method_name="index_add")
def index_add(a, dim: int, index, source, *, alpha=1):
    dim = canonicalize_dim(a.ndim, dim)
    check(index.ndim <= 1, "index_add_(): Index is supposed to be a vector", IndexError)
    if alpha != 1:
        source = clang.mul(source, alpha)
    source = clang.maybe_convert_to_dtype(source, a.dtype)
    if a.ndim == 0:
        return clang.add(a, clang.reshape(source, ()))
    return prims.scatter_add(a, _index_along(index, dim, source.shape), source, dim)


@torchsymbol(torch.index_copy, T.index_copy, method_name="index_copy")
def index_copy(a, dim: int, index, source):
    # (eager's checks come first, whatever the shapes: a 0-d destination is no scatter, which would check them)
    name = dtypes.message_name
    check(
        index.dtype is dtypes.int64,
        lambda: f"index_copy_(): Expected a long tensor for index, but got {name(index.dtype)}",
    )
    check(
        a.dtype is source.dtype,
        lambda: (
            "index_copy_(): self and source expected to have the same dtype, but got (self) "
            f"{name(a.dtype)} and (source) {name(source.dtype)}"
        ),
    )
    dim = canonicalize_dim(a.ndim, dim)
    check(index.ndim <= 1, "index_copy_(): Index should have dimension 1 or 0", IndexError)
    n = index.numel()
    if source.ndim == 0:
        check(
            n == 1, lambda: f"index_copy_(): When source is scalar, index should have one element (got {n})", IndexError
        )
    elif a.ndim > 0:
        check(
            source.ndim == a.ndim,
            lambda: (
                "index_copy_(): When source and destination are not scalars, their dimensionality must match. "
                f"Source dimensionality ({source.ndim}), destination dimensionality ({a.ndim})"
            ),
            IndexError,
        )
        check(
            n == source.shape[dim],
            lambda: f"index_copy_(): Number of indices ({n}) should be equal to source.size(dim) ({source.shape[dim]})",
            IndexError,
        )
    others = [d for d in range(a.ndim) if d != dim]
    check(
        [a.shape[d] for d in others] == [source.shape[d] for d in others]
        if source.ndim == a.ndim
        else source.ndim > 0 or all(a.shape[d] == 1 for d in others),
        "index_copy_(): Source/destination tensor must have same slice shapes",
    )
    if a.ndim == 0:
        # a scatter into a one-element view, not the source reshaped: a new tensor, which eager's index check and
        # gradient (zero for ``a``, not None) reach as they do any other index_copy
        one = clang.reshape(source, (1,))
        return clang.reshape(prims.scatter(clang.reshape(a, (1,)), clang.reshape(index, (1,)), one, 0), ())
    return prims.scatter(a, _index_along(index, dim, source.shape), source, dim)


@torchsymbol(torch.index_fill, T.index_fill, method_name="index_fill")
def index_fill(a, dim: int, index, value):
    dim = canonicalize_dim(a.ndim, dim)
    if a.ndim == 0:  # the one element, filled when the index names it
        filled = clang.full((), index.numel() > 0, device=a.device, dtype=dtypes.bool8)
        return clang.where(filled, _value_like(value, a, ()), a)
    shape = list(a.shape)
    shape[dim] = index.numel()
    src = _value_like(value, a, shape)  # a tensor value stays differentiable
    return prims.scatter(a, _index_along(index, dim, shape), src, dim)


def _value_like(value, a, shape):
    if isinstance(value, TensorProxy):
        # like eager, a value with more dimensions than the selection may drop leading size-1 ones
        extra = value.ndim - len(shape)
        for s in value.shape[:extra]:  # (a size known only when the program runs: required to be 1 then)
            if is_data_dependent(s):
                message = (
                    f"the value of shape {list(value.shape)} cannot be assigned to a selection of shape {list(shape)}: "
                    "its leading dimension has size {size}, not 1"
                )
                _require_size_at_least(s, 1, RuntimeError, message, below=2)
        if extra > 0 and all(s == 1 for s in value.shape[:extra]):
            value = clang.reshape(value, value.shape[extra:])
        return clang.expand(clang.maybe_convert_to_dtype(value, a.dtype), shape)
    return clang.full(shape, value, device=a.device, dtype=a.dtype)


@torchsymbol(name="setitem")
def setitem(a, key, value):
    """``a`` with ``a[key] = value`` applied (the functional form of ``Tensor.__setitem__``)."""
    tkey = key if isinstance(key, tuple) else (key,)
    if _is_basic(tkey):
        n = a.numel()
        idx = clang.reshape(prims.iota(n, start=0, step=1, device=a.device, dtype=dtypes.int64), a.shape)
        sel = getitem(idx, key)
        m = sel.numel()
        # distinct positions: a scatter (which has a gradient rule) writes them
        flat = prims.scatter(
            clang.reshape(a, (n,)),
            clang.reshape(sel, (m,)),
            clang.reshape(_value_like(value, a, sel.shape), (m,)),
            0,
        )
        return clang.reshape(flat, a.shape)
    if len(tkey) == 1 and isinstance(tkey[0], TensorProxy):
        k = tkey[0]
        if k.dtype is dtypes.bool8 and k.shape == a.shape[: k.ndim]:
            check(
                not isinstance(value, TensorProxy) or value.numel() == 1,
                "setting a boolean-masked selection to a tensor has no decomposition",
                NotImplementedError,
            )
            mask = prims.broadcast_in_dim(k, a.shape, tuple(range(k.ndim)))
            v = clang.reshape(value, ()) if isinstance(value, TensorProxy) else value
            return clang.where(mask, clang.maybe_convert_to_dtype(v, a.dtype), a)
        if dtypes.is_integer_dtype(k.dtype) and k.dtype is not dtypes.bool8 and a.ndim >= 1:
            k = clang.where(clang.elementwise_binary(k, 0, prims.lt), clang.add(k, a.shape[0]), k)
            return prims.index_put(a, (k,), _value_like(value, a, k.shape + a.shape[1:]), False)
    raise NotImplementedError("this form of indexed assignment has no decomposition")


register_torch_alias(T.__setitem__, InplaceOp(setitem))
register_torch_alias(T.scatter_, InplaceOp(scatter))
register_torch_alias(T.scatter_add_, InplaceOp(scatter_add))
register_torch_alias(T.index_add_, InplaceOp(index_add))
register_torch_alias(T.index_copy_, InplaceOp(index_copy))
register_torch_alias(T.index_fill_, InplaceOp(index_fill))


@torchsymbol(torch.combinations)
def combinations(a, r: int = 2, with_replacement: bool = False):
    """The ``r``-element combinations of a 1-d tensor's elements, in eager's order: a pick of ``a`` by a constant
    index, so the count (C(n, r), or C(n + r - 1, r) with replacement) is known from ``a``'s size, where eager's
    kernel selects them with a mask (a size PyTorch's own tracing only learns when the program runs)."""
    check(a.ndim == 1, lambda: f"Expect a 1D vector, but got shape {list(a.shape)}")
    check(r >= 0, lambda: f"Expect a non-negative number, but got {r}")
    if r == 0:  # eager: a new empty tensor, outside the graph
        empty = prims.full((0,), 0, device=a.device, dtype=a.dtype)
        empty.nondifferentiable = True
        return empty
    n = int(a.shape[0])
    # eager's own order, from its kernel run on the positions
    picks = torch.combinations(torch.arange(n), r=r, with_replacement=with_replacement)
    flat = prims.full((0,), 0, device=a.device, dtype=dtypes.int64)
    if picks.numel():
        parts = [prims.full((1,), int(i), device=a.device, dtype=dtypes.int64) for i in picks.reshape(-1).tolist()]
        flat = parts[0] if len(parts) == 1 else prims.cat(parts, 0)
    return clang.reshape(prims.take(a, flat, 0), (picks.shape[0], r))


def _require_size_at_least(n, low: int, error: type[Exception], message: str, below: int | None = None) -> None:
    """Requires the size ``n``, known only when the program runs, to be at least ``low`` (and under ``below``): the
    program checks it then, raising ``error(message)`` (``{size}``: the size) as eager does, and the trace relies on
    it from here on."""
    prims.check_size_in_range(n, low, below, error.__name__, message)
    if below == low + 1:
        torch._check(n == low)  # (a size known exactly from here on)
        return
    torch._check(n >= low)
    if below is not None:
        torch._check(n < below)
