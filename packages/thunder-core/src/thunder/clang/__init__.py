"""The core language: broadcasting, type promotion and convenience operations over prims.

These are plain functions (not symbols): what they call is recorded, so a torch-language
operation's decomposition goes straight to prims.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from enum import Enum, auto
from numbers import Number

import torch

from thunder.core import devices, dtypes, prims
from thunder.core.checks import canonicalize_dim, canonicalize_dims, check, check_valid_shape
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_data_dependent, known, may_broadcast, same_shape

# ---------------------------------------------------------------- type promotion


class TypePromotionKind(Enum):
    DEFAULT = auto()  # result = promoted type; half types computed in float32
    NO_OPMATH = auto()  # result = promoted type, computed in it
    INT_TO_FLOAT = auto()  # integer and bool results become the default float dtype
    ALWAYS_BOOL = auto()
    COMPLEX_TO_FLOAT = auto()
    BOOL_TO_LONG = auto()


def _category(d: dtypes.dtype) -> int:
    return dtypes.kind_rank(d)


def _number_dtype(x: Number) -> dtypes.dtype:
    if isinstance(x, bool):
        return dtypes.bool8
    if isinstance(x, (int, torch.SymInt)):
        return dtypes.int64
    if isinstance(x, torch.SymFloat):
        return dtypes.to_dtype(torch.get_default_dtype())
    if isinstance(x, float):
        return dtypes.to_dtype(torch.get_default_dtype())
    return dtypes.to_dtype(torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64)


def _promote(a: dtypes.dtype | None, b: dtypes.dtype) -> dtypes.dtype:
    if a is None:
        return b
    return dtypes.to_dtype(torch.promote_types(a.torch_dtype, b.torch_dtype))


def result_dtype(*args) -> dtypes.dtype:
    """PyTorch's ``torch.result_type`` over tensors (proxies) and numbers."""
    dim_t = zero_t = num = None
    for a in args:
        if isinstance(a, TensorProxy):
            if a.ndim:
                dim_t = _promote(dim_t, a.dtype)
            else:
                zero_t = _promote(zero_t, a.dtype)
        elif isinstance(a, (Number, torch.SymInt, torch.SymFloat)):
            num = _promote(num, _number_dtype(a))
        elif a is not None:
            raise TypeError(f"expected a tensor or a number, got {type(a).__name__}")
    result = dim_t
    for lower in (zero_t, num):
        if lower is None:
            continue
        if result is None:
            result = lower
        elif _category(lower) > _category(result):
            if lower is num:
                if lower.kind == "complex" and result.kind == "float":
                    result = dtypes.corresponding_complex_dtype(result)
                elif lower.kind == "float":
                    result = dtypes.to_dtype(torch.get_default_dtype())
                else:
                    result = lower
            else:
                result = lower
    check(result is not None, "type promotion needs at least one tensor or number", TypeError)
    return result


def elementwise_type_promotion(*args, kind: TypePromotionKind):
    """``(computation_dtype, result_dtype)`` for an elementwise operation over ``args``."""
    result = result_dtype(*args)
    if kind is TypePromotionKind.ALWAYS_BOOL:
        comp = result
        if comp in (dtypes.float16, dtypes.bfloat16):
            comp = dtypes.float32
        return comp, dtypes.bool8
    if kind is TypePromotionKind.INT_TO_FLOAT and result.kind in ("bool", "int"):
        result = dtypes.to_dtype(torch.get_default_dtype())
    if kind is TypePromotionKind.BOOL_TO_LONG and result.kind == "bool":
        result = dtypes.int64
    comp = result
    if kind is not TypePromotionKind.NO_OPMATH and result in (dtypes.float16, dtypes.bfloat16):
        comp = dtypes.float32
    if kind is TypePromotionKind.COMPLEX_TO_FLOAT:
        return comp, dtypes.corresponding_real_dtype(result)
    return comp, result


def _python_type_for(d: dtypes.dtype):
    return {"bool": bool, "int": int, "float": float, "complex": complex}[d.kind]


def maybe_convert_to_dtype(a, dtype):
    """``a`` converted to ``dtype``: a ``convert_element_type`` for tensors, a Python cast for numbers."""
    dtype = dtypes.to_dtype(dtype)
    if isinstance(a, TensorProxy):
        if a.dtype is dtype:
            return a
        return prims.convert_element_type(a, dtype)
    if isinstance(a, Number):
        return _python_type_for(dtype)(a)
    if isinstance(a, (torch.SymInt, torch.SymFloat)):  # computed from symbolic sizes: kept when its type fits
        target = _python_type_for(dtype)
        if (target is int and type(a) is torch.SymInt) or (target is float and type(a) is torch.SymFloat):
            return a
        if target is float:
            return torch.sym_float(a)
        return target(int(a) if type(a) is torch.SymInt else float(a))
    return a


# ---------------------------------------------------------------- broadcasting


def compute_broadcast_shape(*shapes) -> tuple[int, ...]:
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        offset = ndim - len(s)
        for i, n in enumerate(s):
            j = offset + i
            if type(n) is not int or type(out[j]) is not int:  # symbolic sizes (see thunder.core.symbolic.known)
                if known(n == out[j]) or known(n == 1):
                    continue
                if known(out[j] == 1):
                    out[j] = n
                    continue
                # a size known only when the program runs against one known not to be 1: the result has the
                # latter either way (the former is 1 or equal to it, else the expand raises at run time as eager)
                if is_data_dependent(n) and known(out[j] != 1):
                    continue
                if is_data_dependent(out[j]) and known(n != 1):
                    out[j] = n
                    continue
                # two sizes, one known only when the program runs, neither known to be 1 or equal to the other: they
                # are taken to be equal (as PyTorch's compilers do); where one is 1 at run time, the expand of the
                # other to this size raises there (never a silently wrong shape)
                check(
                    is_data_dependent(n) or is_data_dependent(out[j]),
                    lambda: f"The size of tensor a ({out[j]}) must match the size of tensor b ({n})",
                )
                out[j] = n
                continue
            if n == out[j] or n == 1:
                continue
            check(
                out[j] == 1,
                lambda: (
                    f"The size of tensor a ({out[j]}) must match the size of tensor b ({n}) at non-singleton "
                    f"dimension {j}"
                ),
            )
            out[j] = n
    return tuple(out)


def expand(a: TensorProxy, shape: Sequence[int]) -> TensorProxy:
    shape = tuple(shape)
    if same_shape(a.shape, shape):
        return a
    check(
        len(shape) >= a.ndim,
        lambda: (
            f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to the number of "
            f"dimensions in the tensor ({a.ndim})"
        ),
    )
    offset = len(shape) - a.ndim
    final = []
    for i, s in enumerate(shape):
        if i < offset:
            check(s >= 0, lambda: f"expand: the expanded size {s} is not allowed in a leading dimension")
            final.append(s)
            continue
        cur = a.shape[i - offset]
        if type(s) is int and s == -1:
            s = cur
        if type(cur) is not int or type(s) is not int:
            # (the result has size s whether cur is s or 1: a size known only when the program runs is not asked;
            # the expand raises at run time where it is neither, as eager's)
            check(
                may_broadcast(cur, s),
                lambda: (
                    f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at non-singleton "
                    f"dimension {i}.  Target sizes: {list(shape)}.  Tensor sizes: {list(a.shape)}"
                ),
            )
            final.append(s)
            continue
        check(
            cur == s or cur == 1,
            lambda: (
                f"The expanded size of the tensor ({s}) must match the existing size ({cur}) at non-singleton "
                f"dimension {i}.  Target sizes: {list(shape)}.  Tensor sizes: {list(a.shape)}"
            ),
        )
        final.append(s)
    return prims.broadcast_in_dim(a, tuple(final), tuple(range(offset, len(final))))


def maybe_broadcast(*args):
    shapes = [a.shape for a in args if isinstance(a, TensorProxy)]
    if len(shapes) < 2:
        return args
    shape = compute_broadcast_shape(*shapes)
    return tuple(expand(a, shape) if isinstance(a, TensorProxy) else a for a in args)


# ---------------------------------------------------------------- elementwise


def elementwise_unary(a, prim, kind=TypePromotionKind.DEFAULT, python_fn=None):
    if not isinstance(a, TensorProxy):
        check(python_fn is not None, lambda: f"{prim.name} needs a tensor", TypeError)
        return python_fn(a)
    comp, res = elementwise_type_promotion(a, kind=kind)
    out = prim(maybe_convert_to_dtype(a, comp))
    if out.dtype is dtypes.bool8:
        return out
    return maybe_convert_to_dtype(out, res)


def elementwise_binary(a, b, prim, kind=TypePromotionKind.DEFAULT, python_fn=None):
    if not isinstance(a, TensorProxy) and not isinstance(b, TensorProxy):
        check(python_fn is not None, lambda: f"{prim.name} needs a tensor", TypeError)
        return python_fn(a, b)
    comp, res = elementwise_type_promotion(a, b, kind=kind)
    a, b = maybe_broadcast(a, b)
    a, b = maybe_convert_to_dtype(a, comp), maybe_convert_to_dtype(b, comp)
    out = prim(a, b)
    if kind is TypePromotionKind.ALWAYS_BOOL:
        return out
    return maybe_convert_to_dtype(out, res)


def add(a, b):
    return elementwise_binary(a, b, prims.add, python_fn=lambda x, y: x + y)


def sub(a, b):
    return elementwise_binary(a, b, prims.sub, python_fn=lambda x, y: x - y)


def mul(a, b):
    return elementwise_binary(a, b, prims.mul, python_fn=lambda x, y: x * y)


def true_divide(a, b):
    return elementwise_binary(a, b, prims.div, TypePromotionKind.INT_TO_FLOAT, python_fn=lambda x, y: x / y)


def neg(a):
    return elementwise_unary(a, prims.neg, python_fn=lambda x: -x)


def where(pred, a, b):
    comp, res = elementwise_type_promotion(a, b, kind=TypePromotionKind.NO_OPMATH)
    pred, a, b = maybe_broadcast(pred, a, b)
    a, b = maybe_convert_to_dtype(a, res), maybe_convert_to_dtype(b, res)
    if not isinstance(pred, TensorProxy):
        # a condition known while tracing picks one side (broadcast to the other's shape)
        chosen, other = (a, b) if pred else (b, a)
        if isinstance(chosen, TensorProxy):
            return chosen
        check(isinstance(other, TensorProxy), "where needs at least one tensor", TypeError)
        return full(other.shape, chosen, device=other.device, dtype=res)
    if isinstance(pred, TensorProxy) and pred.dtype is not dtypes.bool8:
        pred = prims.ne(pred, maybe_convert_to_dtype(0, pred.dtype))
    return prims.where(pred, a, b)


# ---------------------------------------------------------------- shape


def infer_reshape_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    shape = [s if type(s) is torch.SymInt else int(s) for s in shape]
    neg = [i for i, s in enumerate(shape) if s == -1]
    check(len(neg) <= 1, "only one dimension can be inferred")
    for s in shape:
        check(s >= -1, lambda: f"invalid shape dimension {s}")
    if neg:
        known = math.prod(s for s in shape if s != -1)
        check(
            known != 0 and numel % known == 0,
            lambda: f"shape '{list(shape)}' is invalid for input of size {numel}",
        )
        shape[neg[0]] = numel // known
    check(math.prod(shape) == numel, lambda: f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def reshape(a: TensorProxy, shape: Sequence[int]) -> TensorProxy:
    shape = infer_reshape_shape(shape, a.numel())
    # (a size known only when the program runs, nonzero's, is not asked: a reshape to the same shape is the tensor)
    if same_shape(shape, a.shape):
        return a
    return prims.reshape(a, shape)


def transpose(a: TensorProxy, dim0: int, dim1: int) -> TensorProxy:
    dim0, dim1 = canonicalize_dim(a.ndim, dim0), canonicalize_dim(a.ndim, dim1)
    if dim0 == dim1 or a.ndim < 2:
        return a
    perm = list(range(a.ndim))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return prims.transpose(a, tuple(perm))


def permute(a: TensorProxy, dims: Sequence[int]) -> TensorProxy:
    dims = tuple(canonicalize_dim(a.ndim, d) for d in dims)
    check(
        len(dims) == a.ndim,
        lambda: (
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
            f"desired ordering of dimensions i.e. input.dim() = {a.ndim} is not equal to len(dims) = {len(dims)}"
        ),
    )
    check(len(set(dims)) == len(dims), "permute(): duplicate dims are not allowed.")
    if dims == tuple(range(a.ndim)):
        return a
    return prims.transpose(a, dims)


def unsqueeze(a: TensorProxy, dim: int) -> TensorProxy:
    dim = canonicalize_dim(a.ndim + 1, dim)
    shape = list(a.shape)
    shape.insert(dim, 1)
    bdims = [i if i < dim else i + 1 for i in range(a.ndim)]
    return prims.broadcast_in_dim(a, tuple(shape), tuple(bdims))


def squeeze(a: TensorProxy, dims=None) -> TensorProxy:
    if dims is None:
        dims = tuple(i for i, s in enumerate(a.shape) if s == 1)
    else:
        dims = canonicalize_dims(a.ndim, dims)
        dims = tuple(d for d in dims if a.ndim and a.shape[d] == 1)
    if not dims:
        return a
    return prims.squeeze(a, dims)


def slice_in_dim(a: TensorProxy, start: int, stop: int, step: int = 1, dim: int = 0) -> TensorProxy:
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    # (a bound or size known only when the program runs: kept as a slice unless it spans the dim for every value)
    if step == 1 and known(start == 0) and known(stop == n):
        return a
    starts = [0] * a.ndim
    stops = list(a.shape)
    strides = [1] * a.ndim
    starts[dim], stops[dim], strides[dim] = start, stop, step
    return prims.slice(a, starts, stops, strides)


def cat(tensors: Sequence[TensorProxy], dim: int) -> TensorProxy:
    check(len(tensors) > 0, "torch.cat(): expected a non-empty list of Tensors", ValueError)
    # torch skips legacy empty 1-D tensors when checking shapes; they still take part in type promotion, and in
    # the autograd graph (their gradient is an empty tensor, not None), so they join the others reshaped to an
    # empty slice of their shape
    legacy = [t.ndim == 1 and t.shape[0] == 0 for t in tensors]
    res = result_dtype(*tensors)
    if all(legacy):
        kept = list(tensors)
    else:
        like = next(t for t, skip in zip(tensors, legacy) if not skip)
        empty = list(like.shape)
        empty[canonicalize_dim(like.ndim, dim)] = 0
        kept = [reshape(t, empty) if skip else t for t, skip in zip(tensors, legacy)]
    # (one tensor too: the result is new memory in eager, which a view of it must not share with the input)
    return prims.cat([maybe_convert_to_dtype(t, res) for t in kept], dim)


def flatten(a: TensorProxy, start_dim: int = 0, end_dim: int = -1) -> TensorProxy:
    if a.ndim == 0:
        return reshape(a, (1,))
    start, end = canonicalize_dim(a.ndim, start_dim), canonicalize_dim(a.ndim, end_dim)
    check(start <= end, "flatten() has invalid args: start_dim cannot come after end_dim")
    shape = a.shape[:start] + (math.prod(a.shape[start : end + 1]),) + a.shape[end + 1 :]
    return reshape(a, shape)


# ---------------------------------------------------------------- reductions


def _reduction_dims(a: TensorProxy, dim) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(a.ndim))
    return canonicalize_dims(a.ndim, dim)


def _keepdim(out: TensorProxy, a: TensorProxy, dims: tuple[int, ...]) -> TensorProxy:
    shape = [1 if i in dims else s for i, s in enumerate(a.shape)]
    bdims = [i for i in range(a.ndim) if i not in dims]
    return prims.broadcast_in_dim(out, tuple(shape), tuple(bdims))


def reduction(a, prim, dim=None, keepdim=False, dtype=None, kind=TypePromotionKind.DEFAULT):
    dims = _reduction_dims(a, dim)
    if dtype is not None:
        comp = res = dtypes.to_dtype(dtype)
        if res in (dtypes.float16, dtypes.bfloat16):
            comp = dtypes.float32
    else:
        comp, res = elementwise_type_promotion(a, kind=kind)
    out = prim(maybe_convert_to_dtype(a, comp), dims)
    out = maybe_convert_to_dtype(out, res)
    if keepdim:
        out = _keepdim(out, a, dims)
    return out


def sum(a, dim=None, keepdim=False, dtype=None):
    return reduction(a, prims.sum, dim, keepdim, sum_result_dtype(a, dtype), TypePromotionKind.BOOL_TO_LONG)


def sum_result_dtype(a, dtype):
    """The dtype of a sum or product: as eager, int64 for bool and every integer type unless ``dtype`` is given."""
    if dtype is None and dtypes.is_integer_dtype(a.dtype):
        return dtypes.int64
    return dtype


def amax(a, dim=None, keepdim=False):
    # (dim first: the number of elements may be known only when the program runs)
    check(dim is not None or a.numel() > 0, "amax(): Expected reduction dim to be specified for input.numel() == 0.")
    return reduction(a, prims.amax, dim, keepdim, kind=TypePromotionKind.NO_OPMATH)


def amin(a, dim=None, keepdim=False):
    check(dim is not None or a.numel() > 0, "amin(): Expected reduction dim to be specified for input.numel() == 0.")
    return reduction(a, prims.amin, dim, keepdim, kind=TypePromotionKind.NO_OPMATH)


def mean(a, dim=None, keepdim=False, dtype=None):
    dims = _reduction_dims(a, dim)
    res = dtypes.to_dtype(dtype) if dtype is not None else a.dtype
    check(
        dtypes.is_inexact_dtype(res),
        lambda: (
            f"mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
            f"dtype. Got: {str(res.torch_dtype).replace('torch.', '').capitalize()}"
        ),
    )
    comp = dtypes.float32 if res in (dtypes.float16, dtypes.bfloat16) else res
    s = prims.sum(maybe_convert_to_dtype(a, comp), dims)
    n = math.prod(a.shape[d] for d in dims) if a.ndim else 1
    out = prims.div(s, maybe_convert_to_dtype(n, comp))
    out = maybe_convert_to_dtype(out, res)
    if keepdim:
        out = _keepdim(out, a, dims)
    return out


def var(a, dim=None, *, correction=1, keepdim=False):
    dims = _reduction_dims(a, dim)
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    check(dtypes.is_inexact_dtype(comp), "std and var only support floating point and complex dtypes")
    out = prims.var(maybe_convert_to_dtype(a, comp), dims, correction=correction)
    out = maybe_convert_to_dtype(out, dtypes.corresponding_real_dtype(a.dtype))
    if keepdim:
        out = _keepdim(out, a, dims)
    return out


# ---------------------------------------------------------------- factories


def full(shape, fill_value, *, device, dtype) -> TensorProxy:
    shape = tuple(shape)
    check_valid_shape(shape)
    return prims.full(shape, fill_value, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def full_like(a: TensorProxy, fill_value, *, device=None, dtype=None) -> TensorProxy:
    return full(a.shape, fill_value, device=device or a.device, dtype=dtype or a.dtype)


def arange(start, end, step, *, device, dtype) -> TensorProxy:
    check(step != 0, "step must be nonzero")
    length = builtins.max(math.ceil((end - start) / step), 0)
    return prims.iota(length, start=start, step=step, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def matmul(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    return prims.matmul(a, b)
