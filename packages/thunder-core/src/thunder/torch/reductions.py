"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, logsumexp, any/all, cumsum, topk, sort."""

from __future__ import annotations

import builtins

import torch

from thunder import clang
from thunder.clang import TypePromotionKind as TPK
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, check
from thunder.core.proxies import RuntimeValueProxy
from thunder.torch.registry import register_torch_alias, torchsymbol

T = torch.Tensor


@torchsymbol(torch.sum, T.sum, method_name="sum", tags=("reduction",))
def sum(a, dim=None, keepdim: bool = False, *, dtype=None):
    return clang.sum(a, dim, keepdim, dtype)


@torchsymbol(torch.mean, T.mean, method_name="mean", tags=("reduction",))
def mean(a, dim=None, keepdim: bool = False, *, dtype=None):
    return clang.mean(a, dim, keepdim, dtype)


@torchsymbol(torch.prod, T.prod, method_name="prod", tags=("reduction",))
def prod(a, dim=None, keepdim: bool = False, *, dtype=None):
    return clang.reduction(a, prims.prod, dim, keepdim, clang.sum_result_dtype(a, dtype), TPK.BOOL_TO_LONG)


@torchsymbol(torch.amax, T.amax, method_name="amax", tags=("reduction",))
def amax(a, dim=(), keepdim: bool = False):
    return clang.amax(a, dim, keepdim)


@torchsymbol(torch.amin, T.amin, method_name="amin", tags=("reduction",))
def amin(a, dim=(), keepdim: bool = False):
    return clang.amin(a, dim, keepdim)


def _with_indices(a, dim, keepdim, reduce, arg):
    values = reduce(a, dim, keepdim)
    indices = arg(a, dim, keepdim)
    return values, indices


@torchsymbol(torch.argmax, T.argmax, method_name="argmax", tags=("reduction",))
def argmax(a, dim=None, keepdim: bool = False):
    return _arg(prims.argmax, a, dim, keepdim)


@torchsymbol(torch.argmin, T.argmin, method_name="argmin", tags=("reduction",))
def argmin(a, dim=None, keepdim: bool = False):
    return _arg(prims.argmin, a, dim, keepdim)


def _arg(prim, a, dim, keepdim):
    if dim is None:
        out = prim(clang.reshape(a, (a.numel(),)), 0) if a.ndim != 1 else prim(a, 0)
        if keepdim:
            out = clang.reshape(out, (1,) * a.ndim)
        return out
    dim = canonicalize_dim(a.ndim, dim)
    if a.ndim == 0:
        return prims.full((), 0, device=a.device, dtype=dtypes.int64)
    out = prim(a, dim)
    if keepdim:
        out = clang.unsqueeze(out, dim)
    return out


@torchsymbol(torch.max, T.max, method_name="max", tags=("reduction",))
def max(a, dim=None, keepdim: bool = False):
    if dim is None:
        return clang.amax(a)
    if not isinstance(dim, int):
        return clang.elementwise_binary(a, dim, prims.maximum, TPK.NO_OPMATH)
    return torch.return_types.max((clang.amax(a, dim, keepdim), _arg(prims.argmax, a, dim, keepdim)))


@torchsymbol(torch.min, T.min, method_name="min", tags=("reduction",))
def min(a, dim=None, keepdim: bool = False):
    if dim is None:
        return clang.amin(a)
    if not isinstance(dim, int):
        return clang.elementwise_binary(a, dim, prims.minimum, TPK.NO_OPMATH)
    return torch.return_types.min((clang.amin(a, dim, keepdim), _arg(prims.argmin, a, dim, keepdim)))


def _var_args(dim, unbiased):
    """``var(x, True)`` is the overload ``var(input, unbiased)``: a bool in the place of ``dim`` is ``unbiased``."""
    if isinstance(dim, bool):
        return None, dim
    return dim, unbiased


def _correction(unbiased, correction):
    if correction is None:
        return 1 if unbiased is None or unbiased else 0
    return correction


@torchsymbol(torch.var, T.var, method_name="var", tags=("reduction",))
def var(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    dim, unbiased = _var_args(dim, unbiased)
    return clang.var(a, dim, correction=_correction(unbiased, correction), keepdim=keepdim)


@torchsymbol(torch.std, T.std, method_name="std", tags=("reduction",))
def std(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    dim, unbiased = _var_args(dim, unbiased)
    v = clang.var(a, dim, correction=_correction(unbiased, correction), keepdim=keepdim)
    return clang.elementwise_unary(v, prims.sqrt)


@torchsymbol(torch.var_mean, tags=("reduction",))
def var_mean(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    dim, unbiased = _var_args(dim, unbiased)
    v = clang.var(a, dim, correction=_correction(unbiased, correction), keepdim=keepdim)
    return v, clang.mean(a, dim, keepdim)


@torchsymbol(torch.std_mean, tags=("reduction",))
def std_mean(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    dim, unbiased = _var_args(dim, unbiased)
    v, m = var_mean(a, dim, unbiased, keepdim, correction=correction)
    return clang.elementwise_unary(v, prims.sqrt), m


@torchsymbol(torch.logsumexp, T.logsumexp, method_name="logsumexp", tags=("reduction",))
def logsumexp(a, dim, keepdim: bool = False):
    comp, res = clang.elementwise_type_promotion(a, kind=TPK.INT_TO_FLOAT)
    x = clang.maybe_convert_to_dtype(a, comp)
    if a.ndim == 0:
        # eager's formula on the one element (x itself was the program's tensor: a view where x is one, and -0.0
        # where eager's log(1) + x gives 0.0)
        clang._reduction_dims(a, dim)
        m = clang.where(prims.isinf(x), clang.maybe_convert_to_dtype(0, comp), x)
        out = clang.add(clang.elementwise_unary(clang.elementwise_unary(clang.sub(x, m), prims.exp), prims.log), m)
        return clang.maybe_convert_to_dtype(out, res)
    if 0 in [a.shape[d] for d in clang._reduction_dims(a, dim)]:
        # nothing to reduce: -inf, as eager (amax, which shifts the exponents, has no value over nothing); the sum
        # keeps the result connected to ``a`` (requires_grad as eager's; its gradient is empty)
        out = clang.add(clang.sum(clang.mul(x, 0), dim, keepdim), float("-inf"))
        return clang.maybe_convert_to_dtype(out, res)
    m = clang.amax(x, dim, True)
    m = clang.where(prims.isinf(m), clang.maybe_convert_to_dtype(0, comp), m)
    s = clang.sum(clang.elementwise_unary(clang.sub(x, m), prims.exp), dim, True)
    out = clang.add(clang.elementwise_unary(s, prims.log), m)
    if not keepdim:
        out = clang.squeeze(out, clang._reduction_dims(a, dim))
    return clang.maybe_convert_to_dtype(out, res)


def _to_bool(a):
    return a if a.dtype is dtypes.bool8 else prims.ne(a, clang.maybe_convert_to_dtype(0, a.dtype))


@torchsymbol(torch.any, T.any, method_name="any", tags=("reduction",))
def any(a, dim=None, keepdim: bool = False):
    # counted, not a max: a max has no value over no elements, eager's any of an empty tensor is False
    b = _to_bool(a)
    return _like_eager(prims.gt(clang.sum(b, dim, keepdim), 0) if b.ndim else b, a)


@torchsymbol(torch.all, T.all, method_name="all", tags=("reduction",))
def all(a, dim=None, keepdim: bool = False):
    # no element is false (eager's all of an empty tensor is True)
    b = _to_bool(a)
    if not b.ndim:
        return _like_eager(b, a)
    return _like_eager(prims.eq(clang.sum(prims.eq(b, False), dim, keepdim), 0), a)


def _like_eager(result, a):
    # eager's any/all of a uint8 tensor are uint8 (0 or 1), of every other dtype bool
    return clang.maybe_convert_to_dtype(result, dtypes.uint8) if a.dtype is dtypes.uint8 else result


@torchsymbol(torch.cumsum, T.cumsum, method_name="cumsum")
def cumsum(a, dim: int, *, dtype=None):
    if dtype is None:
        dtype = dtypes.int64 if dtypes.is_integer_dtype(a.dtype) else a.dtype
    a = clang.maybe_convert_to_dtype(a, dtype)
    return prims.cumsum(a, canonicalize_dim(a.ndim, dim)) if a.ndim else a


@torchsymbol(torch.topk, T.topk, method_name="topk")
def topk(a, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    return torch.return_types.topk(prims.topk(a, k, canonicalize_dim(a.ndim, dim), largest, sorted))


@torchsymbol(torch.sort, T.sort, method_name="sort")
def sort(a, dim: int = -1, descending: bool = False, stable: bool = False):
    return torch.return_types.sort(prims.sort(a, canonicalize_dim(a.ndim, dim), descending, stable))


@torchsymbol(torch.norm, T.norm, torch.linalg.vector_norm, method_name="norm")
def norm(a, p=2, dim=None, keepdim: bool = False, dtype=None):
    check(p == 2 or p == "fro", "only the 2-norm is supported", NotImplementedError)
    # (of a complex tensor the norm is real, of |x|: x * x below is neither)
    check(
        not dtypes.is_complex_dtype(a.dtype), "the norm of a complex tensor runs as PyTorch's op", NotImplementedError
    )
    x = clang.maybe_convert_to_dtype(a, dtype) if dtype is not None else a
    return clang.elementwise_unary(clang.sum(clang.mul(x, x), dim, keepdim), prims.sqrt)


register_torch_alias(T.__len__, lambda a: a.shape[0])


# ---------------------------------------------------------------- covariance and correlation


def _check_weights(name: str, w, num_observations: int, integral: bool) -> None:
    check(
        w.ndim <= 1,
        lambda: f"cov(): expected {name} to have one or fewer dimensions but got {name} with {w.ndim} dimensions",
    )
    kind_ok = (
        dtypes.is_integer_dtype(w.dtype) and not dtypes.is_boolean_dtype(w.dtype)
        if integral
        else dtypes.is_float_dtype(w.dtype)
    )
    check(
        kind_ok,
        lambda: (
            f"cov(): expected {name} to have {'integral' if integral else 'floating point'} dtype but got {name} "
            f"with {str(w.dtype.torch_dtype).replace('torch.', '').capitalize()} dtype"
        ),
    )
    check(
        w.numel() == num_observations,
        lambda: (
            f"cov(): expected {name} to have the same numel as there are observations in the input but got "
            f"{w.numel()} != {num_observations}"
        ),
    )


@torchsymbol(torch.cov, T.cov, method_name="cov")
def cov(a, *, correction: int = 1, fweights=None, aweights=None):
    """The covariance matrix of the variables in the rows of ``a`` (observations in its columns), as ``torch.cov``.

    Eager raises when a weight is negative or the weights sum to zero, which needs the weights' values. The torch
    executor runs ``torch.cov`` itself, so the program raises eager's error when it runs; an executor that runs
    this decomposition gives an all-NaN result instead (never a finite wrong value)."""
    check(
        a.ndim <= 2,
        lambda: f"cov(): expected input to have two or fewer dimensions but got an input with {a.ndim} dimensions",
    )
    check(a.dtype is not dtypes.bool8, "cov(): bool dtype is not supported for input")
    check(not dtypes.is_complex_dtype(a.dtype), "cov() of a complex tensor is not supported", NotImplementedError)
    x = clang.reshape(a, (1, a.numel())) if a.ndim < 2 else a
    num_observations = x.shape[1]
    w = invalid = None
    if fweights is not None:
        _check_weights("fweights", fweights, num_observations, integral=True)
        w = fweights
        invalid = (
            prims.lt(clang.amin(fweights), clang.maybe_convert_to_dtype(0, fweights.dtype))
            if fweights.numel()
            else None
        )
    if aweights is not None:
        _check_weights("aweights", aweights, num_observations, integral=False)
        negative = (
            prims.lt(clang.amin(aweights), clang.maybe_convert_to_dtype(0, aweights.dtype))
            if aweights.numel()
            else None
        )
        invalid = (
            negative if invalid is None else (prims.bitwise_or(invalid, negative) if negative is not None else invalid)
        )
        w = aweights if w is None else clang.mul(w, aweights)
    if w is None:
        w_sum = num_observations
        norm_factor = builtins.max(num_observations - correction, 0)
    else:
        w_sum = clang.sum(w)
        zero_sum = prims.eq(w_sum, clang.maybe_convert_to_dtype(0, w_sum.dtype))
        invalid = zero_sum if invalid is None else prims.bitwise_or(invalid, zero_sum)
        if aweights is not None and correction != 0:
            norm_factor = clang.sub(
                w_sum, clang.true_divide(clang.mul(clang.sum(clang.mul(w, aweights)), correction), w_sum)
            )
        else:
            norm_factor = clang.sub(w_sum, correction)
        # eager: degrees of freedom <= 0 become 0 (with a warning), so the result is inf or NaN
        norm_factor = clang.where(
            prims.le(norm_factor, clang.maybe_convert_to_dtype(0, norm_factor.dtype)), 0, norm_factor
        )
    avg = clang.true_divide(clang.sum(x if w is None else clang.mul(x, w), 1), w_sum)
    centred = clang.sub(x, clang.unsqueeze(avg, 1))
    weighted = centred if w is None else clang.mul(centred, w)
    c = clang.true_divide(prims.matmul(centred, clang.transpose(weighted, 0, 1)), norm_factor)
    if invalid is not None:
        c = clang.where(invalid, float("nan"), c)
    ones = tuple(d for d in range(c.ndim) if c.shape[d] == 1)
    return clang.squeeze(c, ones) if ones else c


@torchsymbol(torch.corrcoef, T.corrcoef, method_name="corrcoef")
def corrcoef(a):
    """Pearson correlation coefficients of the rows of ``a``, as ``torch.corrcoef`` (clipped to [-1, 1])."""
    from thunder.torch.elementwise import clamp

    check(
        a.ndim <= 2,
        lambda: f"corrcoef(): expected input to have two or fewer dimensions but got an input with {a.ndim} dimensions",
    )
    c = cov(a)
    if c.ndim == 0:  # one variable: NaN for a variance of 0, inf or NaN, else 1 (as eager's c / c)
        return clang.true_divide(c, c)
    n = c.shape[0]
    stddev = clang.elementwise_unary(clang.slice_in_dim(clang.reshape(c, (n * n,)), 0, n * n, n + 1, 0), prims.sqrt)
    c = clang.true_divide(c, clang.reshape(stddev, (n, 1)))
    c = clang.true_divide(c, clang.reshape(stddev, (1, n)))
    return clamp(c, -1, 1)


# ---------------------------------------------------------------- comparisons whose result is a Python bool


def _same_dtype_check(a, b) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(f"{dtypes.message_name(a.dtype)} did not match {dtypes.message_name(b.dtype)}")


@torchsymbol(torch.allclose, T.allclose, name="allclose")
def allclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """Eager's ``torch.allclose``: a Python bool computed from the values when the program runs (PyTorch's
    kernel). The traced code may return it; branching on it is a data-dependent error naming the line."""
    _same_dtype_check(a, b)
    clang.compute_broadcast_shape(a.shape, b.shape)  # eager's error for shapes that do not broadcast
    return RuntimeValueProxy(python_type=bool, origin="torch.allclose")


@torchsymbol(torch.equal, T.equal, name="equal")
def equal(a, b):
    """Eager's ``torch.equal``: False for different shapes (known while tracing), else a Python bool computed
    from the values when the program runs (PyTorch's kernel), as ``allclose``."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    return RuntimeValueProxy(python_type=bool, origin="torch.equal")


_PYTHON_TYPES = {"bool": bool, "int": int, "float": float, "complex": complex}


@torchsymbol(T.item, name="item")
def item(a):
    """Eager's ``Tensor.item``: the one element of ``a`` as a Python number, read when the program runs. The traced
    code may return it; branching or computing on it in Python is a data-dependent error naming the line."""
    n = 1
    for s in a.shape:
        n *= s
    if n != 1:
        raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
    return RuntimeValueProxy(python_type=_PYTHON_TYPES[a.dtype.kind], origin="Tensor.item")
