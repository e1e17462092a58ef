"""Shape and view operations: reshape, permute, cat, split, squeeze, expand, flip, tril/triu..."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from thunder import clang
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, canonicalize_dims, check
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_data_dependent
from thunder.torch.indexing import _require_size_at_least
from thunder.torch.registry import register_torch_alias, torchsymbol

T = torch.Tensor


def _shape_args(shape) -> tuple:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all mean the shape ``(2, 3)``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = shape[0]
    return tuple(s if type(s) is torch.SymInt else int(s) for s in shape)


@torchsymbol(T.reshape, torch.reshape, method_name="reshape", tags=("view",))
def reshape(a, *shape):
    return clang.reshape(a, _shape_args(shape))


@torchsymbol(T.view, method_name="view", tags=("view",))
def view(a, *shape):
    check(
        not (len(shape) == 1 and isinstance(shape[0], torch.dtype)),
        "Tensor.view(dtype) is not supported by the torch language",
        NotImplementedError,
    )
    return clang.reshape(a, _shape_args(shape))


@torchsymbol(T.view_as, method_name="view_as", tags=("view",))
def view_as(a, other):
    return clang.reshape(a, other.shape)


@torchsymbol(T.reshape_as, method_name="reshape_as", tags=("view",))
def reshape_as(a, other):
    return clang.reshape(a, other.shape)


@torchsymbol(T.permute, torch.permute, method_name="permute", tags=("view",))
def permute(a, *dims):
    return clang.permute(a, _shape_args(dims))


@torchsymbol(
    torch.transpose,
    T.transpose,
    torch.swapaxes,
    T.swapaxes,
    torch.swapdims,
    T.swapdims,
    method_name="transpose",
    tags=("view",),
)
def transpose(a, dim0: int, dim1: int):
    return clang.transpose(a, dim0, dim1)


@torchsymbol(torch.t, T.t, method_name="t", tags=("view",))
def t(a):
    check(a.ndim <= 2, lambda: f"t() expects a tensor with <= 2 dimensions, but self is {a.ndim}D")
    return clang.transpose(a, 0, 1) if a.ndim == 2 else a


register_torch_alias(T.T.__get__, lambda a: permute(a, *reversed(range(a.ndim))))


def _matrix_transpose(a):
    check(
        a.ndim != 1,
        "tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.",
        RuntimeError,
    )
    return a if a.ndim == 0 else transpose(a, -2, -1)


def _adjoint(a):
    if a.ndim == 0:
        return a
    if a.dtype.kind == "complex":
        raise NotImplementedError("the conjugate transpose of a complex tensor runs as PyTorch's op")
    return transpose(a, -2, -1)


register_torch_alias(T.mT.__get__, _matrix_transpose)
register_torch_alias(T.mH.__get__, _adjoint)


# the stride order (each dim's rank among the strides, the largest stride ranking highest) of a memory format
_CHANNELS_LAST_ORDER = {4: (3, 0, 2, 1), 5: (4, 0, 3, 2, 1)}


@torchsymbol(T.contiguous, method_name="contiguous", tags=("alias",))
def contiguous(a, *, memory_format=torch.contiguous_format):
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        rank = 4 if memory_format is torch.channels_last else 5
        check(
            a.ndim == rank,
            lambda: f"required rank {rank} tensor to use {memory_format} format, got a tensor of rank {a.ndim}",
        )
        return prims.stride_order(a, _CHANNELS_LAST_ORDER[rank])
    check(
        memory_format in (torch.contiguous_format, torch.preserve_format),
        lambda: f"contiguous(memory_format={memory_format}) is not supported",
        NotImplementedError,
    )
    return prims.stride_order(a, tuple(reversed(range(a.ndim))))


@torchsymbol(torch.squeeze, T.squeeze, method_name="squeeze", tags=("view",))
def squeeze(a, dim=None):
    return clang.squeeze(a, dim)


@torchsymbol(torch.unsqueeze, T.unsqueeze, method_name="unsqueeze", tags=("view",))
def unsqueeze(a, dim: int):
    return clang.unsqueeze(a, dim)


@torchsymbol(torch.flatten, T.flatten, method_name="flatten", tags=("view",))
def flatten(a, start_dim: int = 0, end_dim: int = -1):
    return clang.flatten(a, start_dim, end_dim)


@torchsymbol(torch.unflatten, T.unflatten, method_name="unflatten", tags=("view",))
def unflatten(a, dim: int, sizes):
    dim = canonicalize_dim(a.ndim, dim)
    sizes = list(sizes)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = a.shape[dim] // known
    check(
        math.prod(sizes) == a.shape[dim],
        lambda: (
            f"unflatten: Provided sizes {sizes} don't multiply up to the size of dim {dim} ({a.shape[dim]}) in the input tensor"
        ),
    )
    return clang.reshape(a, a.shape[:dim] + tuple(sizes) + a.shape[dim + 1 :])


@torchsymbol(T.expand, method_name="expand", tags=("view",))
def expand(a, *shape):
    return clang.expand(a, _shape_args(shape))


@torchsymbol(T.expand_as, method_name="expand_as", tags=("view",))
def expand_as(a, other):
    return clang.expand(a, other.shape)


@torchsymbol(torch.broadcast_to, method_name="broadcast_to", tags=("view",))
def broadcast_to(a, shape):
    return clang.expand(a, tuple(shape))


@torchsymbol(T.repeat, method_name="repeat")
def repeat(a, *repeats):
    repeats = _shape_args(repeats)
    check(
        len(repeats) >= a.ndim,
        "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor",
    )
    padded = clang.reshape(a, (1,) * (len(repeats) - a.ndim) + a.shape)
    # interleave a unit dim before each dim, expand it to the repeat count, then merge
    expanded_shape, unit_shape = [], []
    for r, s in zip(repeats, padded.shape):
        unit_shape += [1, s]
        expanded_shape += [r, s]
    x = clang.reshape(padded, unit_shape)
    x = clang.expand(x, expanded_shape)
    out = clang.reshape(x, [r * s for r, s in zip(repeats, padded.shape)])
    # eager's repeat always writes new memory: a 0-d tensor repeated () times is a copy, not the tensor itself
    return prims.clone(out) if out is a else out


@torchsymbol(torch.repeat_interleave, T.repeat_interleave, method_name="repeat_interleave")
def repeat_interleave(a, repeats, dim=None, *, output_size=None):
    check(
        isinstance(repeats, (int, torch.SymInt)),
        "repeat_interleave with tensor repeats is not supported",
        NotImplementedError,
    )
    if dim is None:
        a = clang.reshape(a, (a.numel(),))
        dim = 0
    dim = canonicalize_dim(a.ndim, dim)
    x = clang.unsqueeze(a, dim + 1)
    shape = list(x.shape)
    shape[dim + 1] = repeats
    x = clang.expand(x, shape)
    new = list(a.shape)
    new[dim] *= repeats
    return clang.reshape(x, new)


@torchsymbol(torch.cat, torch.concat, torch.concatenate)
def cat(tensors: Sequence[TensorProxy], dim: int = 0):
    return clang.cat(list(tensors), dim)


@torchsymbol(torch.stack)
def stack(tensors: Sequence[TensorProxy], dim: int = 0):
    check(len(tensors) > 0, "stack expects a non-empty TensorList")
    for i, t_ in enumerate(tensors):
        check(
            t_.shape == tensors[0].shape,
            lambda: (
                f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at entry 0 and {list(t_.shape)} at entry {i}"
            ),
        )
    dim = canonicalize_dim(tensors[0].ndim + 1, dim)
    return clang.cat([clang.unsqueeze(t_, dim) for t_ in tensors], dim)


@torchsymbol(torch.split, T.split, method_name="split", tags=("view",))
def split(a, split_size_or_sections, dim: int = 0):
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    if isinstance(split_size_or_sections, (int, torch.SymInt)):
        size = split_size_or_sections
        check(size > 0 or n == 0, "split_size can only be 0 if dimension size is 0")
        sizes = [size] * (n // size) + ([n % size] if n % size else []) if size and n else [0]
    else:
        sizes = list(split_size_or_sections)
        check(
            sum(sizes) == n,
            lambda: (
                f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at dimension {dim}), but got split_sizes={sizes}"
            ),
        )
    out, start = [], 0
    for s in sizes:
        out.append(clang.slice_in_dim(a, start, start + s, 1, dim))
        start += s
    return tuple(out)


@torchsymbol(torch.chunk, T.chunk, method_name="chunk", tags=("view",))
def chunk(a, chunks: int, dim: int = 0):
    check(chunks > 0, "chunk expects `chunks` to be greater than 0")
    dim = canonicalize_dim(a.ndim, dim)
    if not a.shape[dim]:  # (eager gives ``chunks`` empty pieces then, as split_with_sizes does)
        return tuple(clang.slice_in_dim(a, 0, 0, 1, dim) for _ in range(chunks))
    return split(a, math.ceil(a.shape[dim] / chunks), dim)


@torchsymbol(torch.tensor_split, T.tensor_split, method_name="tensor_split", tags=("view",))
def tensor_split(a, indices_or_sections, dim: int = 0):
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    if isinstance(indices_or_sections, (int, torch.SymInt)):
        k = indices_or_sections
        check(k > 0, f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        bounds, start = [], 0
        for i in range(k):
            stop = start + q + (1 if i < r else 0)
            bounds.append((start, stop))
            start = stop
    else:
        idx = [0] + [min(max(i, 0), n) for i in indices_or_sections] + [n]
        bounds = [(idx[i], max(idx[i], idx[i + 1])) for i in range(len(idx) - 1)]
    return tuple(clang.slice_in_dim(a, s, e, 1, dim) for s, e in bounds)


@torchsymbol(torch.unbind, T.unbind, method_name="unbind", tags=("view",))
def unbind(a, dim: int = 0):
    check(a.ndim > 0, "Dimension specified as 0 but tensor has no dimensions", IndexError)
    dim = canonicalize_dim(a.ndim, dim)
    return tuple(clang.squeeze(clang.slice_in_dim(a, i, i + 1, 1, dim), (dim,)) for i in range(a.shape[dim]))


@torchsymbol(torch.narrow, T.narrow, method_name="narrow", tags=("view",))
def narrow(a, dim: int, start: int, length: int):
    check(a.ndim > 0, "narrow() cannot be applied to a 0-dim tensor.", RuntimeError)
    check(length >= 0, "narrow(): length must be non-negative.", RuntimeError)
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    given = start
    if is_data_dependent(n) and type(start) is int:
        # a size known only when the program runs: eager's checks are made then (start in [-n, n], then the end)
        out_of_range = f"start out of range (expected to be in range of [-{{size}}, {{size}}], but got {given})"
        _require_size_at_least(n, abs(start), IndexError, out_of_range)
        if start < 0:
            start = start + n
            check(length <= -given, lambda: f"start ({given}) + length ({length}) exceeds dimension size (...).")
        elif length > 0:
            exceeds = f"start ({start}) + length ({length}) exceeds dimension size ({{size}})."
            _require_size_at_least(n, start + length, RuntimeError, exceeds)
        return clang.slice_in_dim(a, start, start + length, 1, dim)
    check(
        -n <= start <= n,
        lambda: f"start out of range (expected to be in range of [{-n}, {n}], but got {given})",
        IndexError,
    )
    if start < 0:
        start += n
    check(
        start + length <= n,
        lambda: f"start ({start}) + length ({length}) exceeds dimension size ({n}).",
    )
    return clang.slice_in_dim(a, start, start + length, 1, dim)


@torchsymbol(T.flip, torch.flip, method_name="flip")
def flip(a, *dims):
    dims = canonicalize_dims(a.ndim, _shape_args(dims)) if dims else ()
    if not dims:
        return a
    return prims.flip(a, dims)


@torchsymbol(torch.movedim, T.movedim, torch.moveaxis, T.moveaxis, method_name="movedim", tags=("view",))
def movedim(a, source, destination):
    src = canonicalize_dims(a.ndim, source)
    dst = canonicalize_dims(a.ndim, destination)
    check(len(src) == len(dst), "movedim: Invalid source or destination dims")
    if a.ndim == 0:  # dims 0 and -1 name the scalar itself
        return a
    perm = [-1] * a.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(a.ndim) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return clang.permute(a, perm)


def _tri_mask(a, diagonal: int, lower: bool):
    check(a.ndim >= 2, "tril/triu: input tensor must have at least 2 dimensions")
    rows, cols = a.shape[-2], a.shape[-1]
    r = prims.iota(rows, start=0, step=1, device=a.device, dtype=dtypes.int64)
    c = prims.iota(cols, start=0, step=1, device=a.device, dtype=dtypes.int64)
    r = prims.broadcast_in_dim(r, (rows, cols), (0,))
    c = prims.broadcast_in_dim(c, (rows, cols), (1,))
    diff = prims.sub(c, r)
    return prims.le(diff, diagonal) if lower else prims.ge(diff, diagonal)


@torchsymbol(torch.tril, T.tril, method_name="tril")
def tril(a, diagonal: int = 0):
    mask = clang.expand(_tri_mask(a, diagonal, True), a.shape)
    return prims.where(mask, a, clang.maybe_convert_to_dtype(0, a.dtype))


@torchsymbol(torch.triu, T.triu, method_name="triu")
def triu(a, diagonal: int = 0):
    mask = clang.expand(_tri_mask(a, diagonal, False), a.shape)
    return prims.where(mask, a, clang.maybe_convert_to_dtype(0, a.dtype))


@torchsymbol(torch.clone, T.clone, method_name="clone")
def clone(a, *, memory_format=torch.preserve_format):
    return prims.clone(a)


@torchsymbol(torch.detach, T.detach, method_name="detach", tags=("alias",))
def detach(a):
    """A copy as far as values go; autodiff treats it as a gradient barrier."""
    return prims.clone(a)


register_torch_alias(T.data.__get__, detach)


@torchsymbol(torch.roll, T.roll, method_name="roll")
def roll(a, shifts, dims=None):
    if dims is None:
        flat = clang.reshape(a, (a.numel(),))
        return clang.reshape(roll(flat, shifts, 0), a.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    check(len(shifts) == len(dims), "roll: shifts and dims must align")
    for s, d in zip(shifts, dims):
        d = canonicalize_dim(a.ndim, d)
        n = a.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            a = clang.cat([clang.slice_in_dim(a, n - s, n, 1, d), clang.slice_in_dim(a, 0, n - s, 1, d)], d)
    return a


@torchsymbol(T.unfold, method_name="unfold", tags=("view",))
def unfold(a, dimension: int, size: int, step: int):
    return prims.unfold(a, dimension, size, step)


@torchsymbol(torch.diagonal, T.diagonal, method_name="diagonal", tags=("view",))
def diagonal(a, offset: int = 0, dim1: int = 0, dim2: int = 1):
    d1, d2 = canonicalize_dim(a.ndim, dim1), canonicalize_dim(a.ndim, dim2)
    check(d1 != d2, lambda: f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(a.ndim) if d not in (d1, d2)]
    x = clang.permute(a, rest + [d1, d2])
    n1, n2 = a.shape[d1], a.shape[d2]
    if offset >= 0:
        length = max(min(n1, n2 - offset), 0)
        start = offset
    else:
        length = max(min(n1 + offset, n2), 0)
        start = -offset * n2
    batch = x.shape[:-2]
    flat = clang.reshape(x, batch + (n1 * n2,))
    if length == 0:
        return clang.slice_in_dim(flat, 0, 0, 1, len(batch))
    stop = start + (length - 1) * (n2 + 1) + 1
    return clang.slice_in_dim(flat, start, stop, n2 + 1, len(batch))


@torchsymbol(torch.atleast_1d, tags=("view",))
def atleast_1d(*tensors):
    # (of a 0-d tensor a view of it, as eager's reshape; of several tensors or a list, a tuple PyTorch makes: the
    # opaque fallback, whose results may view any argument)
    if len(tensors) != 1 or not isinstance(tensors[0], TensorProxy):
        raise NotImplementedError("atleast_1d of a sequence of tensors")
    a = tensors[0]
    return clang.reshape(a, (1,)) if a.ndim == 0 else a
