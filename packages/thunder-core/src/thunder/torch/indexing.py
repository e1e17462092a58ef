"""Indexing: ``__getitem__`` (basic indexing decomposes to slice/squeeze/broadcast), gather, index_select."""

from __future__ import annotations

import torch

from thunder import clang
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, check
from thunder.core.proxies import TensorProxy
from thunder.torch.registry import torchsymbol

T = torch.Tensor


def _is_basic(key) -> bool:
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice)) and not isinstance(k, bool) for k in key)


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
        if isinstance(k, int):
            check(-n <= k < n, lambda: f"index {k} is out of bounds for dimension {dim} with size {n}", IndexError)
            k = k + n if k < 0 else k
            starts[dim], stops[dim] = k, k + 1
            squeezed.append(dim)
        else:
            step = 1 if k.step is None else k.step
            check(step > 0, "step must be greater than zero", ValueError)
            start, stop, _ = k.indices(n)
            starts[dim], stops[dim], steps[dim] = start, max(stop, start), step
            out_layout.append(dim)
        dim += 1

    result = a
    if starts != [0] * a.ndim or stops != list(a.shape) or steps != [1] * a.ndim:
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
    return prims.take_along_axis(a, index, dim)


@torchsymbol(torch.take_along_dim, T.take_along_dim, method_name="take_along_dim")
def take_along_dim(a, indices, dim=None):
    check(dim is not None, "take_along_dim without dim is not supported", NotImplementedError)
    shape = list(clang.compute_broadcast_shape(a.shape, indices.shape))
    dim = canonicalize_dim(a.ndim, dim)
    a_shape, i_shape = list(shape), list(shape)
    a_shape[dim], i_shape[dim] = a.shape[dim], indices.shape[dim]
    return prims.take_along_axis(clang.expand(a, a_shape), clang.expand(indices, i_shape), dim)


@torchsymbol(torch.scatter_add, T.scatter_add, method_name="scatter_add")
def scatter_add(a, dim: int, index, src):
    return prims.scatter_add(a, index, src, dim)
