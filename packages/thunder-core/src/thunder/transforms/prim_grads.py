"""Gradient rules (grad transforms) for the prims.

Each rule computes the forward with the prim, reads the output's cotangent with ``get_grad`` and
gives each tensor input its gradient with ``put_grad``. Backward computations use torch-language
operations, so executors can claim them in backward traces as in forward ones.
"""

from __future__ import annotations

import math

import torch

import thunder.torch as ltorch
from thunder.core import devices, dtypes, prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_data_dependent, known, same_shape
from thunder.transforms.autodiff import get_grad, needs_grad, put_grad, register_grad, zeros_like


def _is_tensor(x) -> bool:
    return isinstance(x, TensorProxy)


def sum_to_shape(g: TensorProxy, shape) -> TensorProxy:
    """Sums ``g`` over the dims broadcasting added or expanded, back to ``shape``: one reduction, as eager's
    ``at::sum_to`` (in bfloat16 a reduction per group of dims would round between them)."""
    shape = tuple(shape)
    if same_shape(g.shape, shape):
        return g
    lead = g.ndim - len(shape)
    dims = list(range(lead)) + [
        lead + i for i, s in enumerate(shape) if known(s == 1) and not known(g.shape[lead + i] == 1)
    ]
    if dims:
        g = ltorch.sum(g, dims, keepdim=True)
    for i, s in enumerate(shape):  # a size known only when the program runs, broadcast to another
        if is_data_dependent(s) and not known(s == 1) and not known(s == g.shape[lead + i]):
            g = _sum_to_run_time_size(g, lead + i, s)
    return ltorch.reshape(g, shape) if not same_shape(g.shape, shape) else g


# ---------------------------------------------------------------- elementwise unary


def _unary(prim, derivative):
    def rule(a):
        out = prim(a)
        g = get_grad(out)
        put_grad(a, derivative(a, out, g))
        return out

    register_grad(prim, rule)


M = ltorch.mul
_LN2, _LN10 = math.log(2.0), math.log(10.0)

_unary(prims.neg, lambda a, out, g: ltorch.neg(g))
_unary(prims.abs, lambda a, out, g: M(g, ltorch.sign(a)))
_unary(prims.exp, lambda a, out, g: M(g, out))
_unary(prims.exp2, lambda a, out, g: M(g, M(out, _LN2)))
_unary(prims.expm1, lambda a, out, g: M(g, ltorch.add(out, 1)))
_unary(prims.log, lambda a, out, g: ltorch.true_divide(g, a))
_unary(prims.log1p, lambda a, out, g: ltorch.true_divide(g, ltorch.add(a, 1)))
_unary(prims.log2, lambda a, out, g: ltorch.true_divide(g, M(a, _LN2)))
_unary(prims.log10, lambda a, out, g: ltorch.true_divide(g, M(a, _LN10)))
_unary(prims.sin, lambda a, out, g: M(g, ltorch.cos(a)))
_unary(prims.cos, lambda a, out, g: ltorch.neg(M(g, ltorch.sin(a))))
_unary(prims.tan, lambda a, out, g: M(g, ltorch.add(M(out, out), 1)))
_unary(prims.asin, lambda a, out, g: ltorch.true_divide(g, ltorch.sqrt(ltorch.sub(1, M(a, a)))))
_unary(prims.acos, lambda a, out, g: ltorch.neg(ltorch.true_divide(g, ltorch.sqrt(ltorch.sub(1, M(a, a))))))
_unary(prims.atan, lambda a, out, g: ltorch.true_divide(g, ltorch.add(M(a, a), 1)))
_unary(prims.sinh, lambda a, out, g: M(g, ltorch.cosh(a)))
_unary(prims.cosh, lambda a, out, g: M(g, ltorch.sinh(a)))
_unary(prims.tanh, lambda a, out, g: M(g, ltorch.sub(1, M(out, out))))
_unary(prims.asinh, lambda a, out, g: ltorch.true_divide(g, ltorch.sqrt(ltorch.add(M(a, a), 1))))
_unary(prims.acosh, lambda a, out, g: ltorch.true_divide(g, ltorch.sqrt(ltorch.sub(M(a, a), 1))))
_unary(prims.atanh, lambda a, out, g: ltorch.true_divide(g, ltorch.sub(1, M(a, a))))
_unary(prims.sqrt, lambda a, out, g: ltorch.true_divide(M(g, 0.5), out))
# eager's rsqrt backward: -0.5 * grad * result.pow(3) (one pow, not two products)
_unary(prims.rsqrt, lambda a, out, g: M(M(g, -0.5), ltorch.pow(out, 3)))
_unary(prims.reciprocal, lambda a, out, g: ltorch.neg(M(g, M(out, out))))
_unary(prims.erf, lambda a, out, g: M(g, M(ltorch.exp(ltorch.neg(M(a, a))), 2 / math.sqrt(math.pi))))
_unary(prims.erfc, lambda a, out, g: M(g, M(ltorch.exp(ltorch.neg(M(a, a))), -2 / math.sqrt(math.pi))))
_unary(prims.erfinv, lambda a, out, g: M(g, M(ltorch.exp(M(out, out)), math.sqrt(math.pi) / 2)))
_unary(prims.lgamma, lambda a, out, g: M(g, ltorch.digamma(a)))


def _trigamma(a):
    from thunder.tracing.fallback import fallback_symbol  # polygamma has no torch-language symbol

    return fallback_symbol(torch.polygamma)(1, a)


_unary(prims.digamma, lambda a, out, g: M(g, _trigamma(a)))
for _p in (prims.sign, prims.floor, prims.ceil, prims.round, prims.trunc):
    _unary(_p, lambda a, out, g: zeros_like(a))


# ---------------------------------------------------------------- elementwise binary


def _binary(prim, grad_a, grad_b):
    def rule(a, b):
        out = prim(a, b)
        g = get_grad(out)
        if _is_tensor(a) and dtypes.is_inexact_dtype(a.dtype):
            put_grad(a, grad_a(a, b, out, g))
        if _is_tensor(b) and dtypes.is_inexact_dtype(b.dtype):
            put_grad(b, grad_b(a, b, out, g))
        return out

    register_grad(prim, rule)


_binary(prims.add, lambda a, b, out, g: g, lambda a, b, out, g: g)
_binary(prims.sub, lambda a, b, out, g: g, lambda a, b, out, g: ltorch.neg(g))
_binary(prims.mul, lambda a, b, out, g: M(b, g), lambda a, b, out, g: M(a, g))
_binary(
    prims.div,
    lambda a, b, out, g: ltorch.true_divide(g, b),
    lambda a, b, out, g: ltorch.neg(ltorch.true_divide(M(g, out), b)),
)


def _pow_grad_base(a, b, out, g):
    # PyTorch's pow_backward_self: zero where the exponent is zero (0 * 0**-1 would be NaN)
    if not _is_tensor(b):
        return zeros_like(a) if b == 0 else M(g, M(b, ltorch.pow(a, b - 1)))
    return ltorch.where(ltorch.eq(b, 0), 0.0, M(g, M(b, ltorch.pow(a, ltorch.sub(b, 1)))))


def _pow_grad_exponent(a, b, out, g):
    # PyTorch's pow_backward_exponent: zero where the base is zero and the exponent is not negative
    if not _is_tensor(a):  # a Python number: log(0) is -inf, log of a negative number NaN
        if a == 0:
            return ltorch.where(ltorch.ge(b, 0), 0.0, M(g, M(out, -math.inf)))
        return M(g, M(out, math.log(a) if a > 0 else math.nan))
    return ltorch.where(ltorch.logical_and(ltorch.eq(a, 0), ltorch.ge(b, 0)), 0.0, M(g, M(out, ltorch.log(a))))


_binary(prims.pow, _pow_grad_base, _pow_grad_exponent)


def _max_min_grad(first: bool, loses):
    """PyTorch's maximum/minimum derivatives: half the gradient to each side at a tie, none to the side
    that loses, and the whole gradient to both sides where a NaN makes every comparison false."""

    def grad(a, b, out, g):
        x, y = (a, b) if first else (b, a)
        return ltorch.where(loses(x, y), 0.0, ltorch.where(ltorch.eq(x, y), M(g, 0.5), g))

    return grad


_binary(prims.maximum, _max_min_grad(True, ltorch.lt), _max_min_grad(False, ltorch.lt))
_binary(prims.minimum, _max_min_grad(True, ltorch.gt), _max_min_grad(False, ltorch.gt))
_binary(
    prims.fmod,
    lambda a, b, out, g: g,
    lambda a, b, out, g: ltorch.neg(M(g, ltorch.trunc(ltorch.true_divide(a, b)))),
)
_binary(
    prims.remainder,
    lambda a, b, out, g: g,
    # PyTorch's -g * a.div(b, rounding_mode="floor"): NaN (not an infinity) where a is infinite
    lambda a, b, out, g: ltorch.neg(M(g, ltorch.floor_divide(a, b))),
)


def _atan2_scale(a, b):
    # 1 / (a² + b²), zero at the origin as PyTorch's atan2_backward gives
    d = ltorch.add(M(a, a), M(b, b))
    return ltorch.where(ltorch.eq(d, 0), 0.0, ltorch.reciprocal(d))


_binary(
    prims.atan2,
    lambda a, b, out, g: M(M(g, b), _atan2_scale(a, b)),
    lambda a, b, out, g: ltorch.neg(M(M(g, a), _atan2_scale(a, b))),
)
_binary(
    prims.copysign,
    lambda a, b, out, g: ltorch.where(ltorch.eq(a, 0), 0.0, M(g, ltorch.true_divide(out, a))),
    lambda a, b, out, g: zeros_like(b),
)
_binary(prims.floor_divide, lambda a, b, out, g: zeros_like(a), lambda a, b, out, g: zeros_like(b))


@register_grad(prims.where)
def _where_grad(pred, a, b):
    out = prims.where(pred, a, b)
    g = get_grad(out)
    if _is_tensor(a):
        put_grad(a, sum_to_shape(ltorch.where(pred, g, 0.0), a.shape))
    if _is_tensor(b):
        put_grad(b, sum_to_shape(ltorch.where(pred, 0.0, g), b.shape))
    return out


@register_grad(prims.convert_element_type)
def _convert_grad(a, dtype):
    out = prims.convert_element_type(a, dtype)
    if dtypes.is_inexact_dtype(a.dtype) and dtypes.is_inexact_dtype(out.dtype):
        put_grad(a, ltorch.to(get_grad(out), a.dtype.torch_dtype))
    return out


@register_grad(prims.device_put)
def _device_put_grad(a, device):
    out = prims.device_put(a, device)
    put_grad(a, ltorch.to(get_grad(out), devices.to_torch_device(a.device)))
    return out


for _p in (prims.clone, prims.stride_order):

    def _identity_grad(a, *args, _p=_p):
        out = _p(a, *args)
        put_grad(a, get_grad(out))
        return out

    register_grad(_p, _identity_grad)


# ---------------------------------------------------------------- shape


@register_grad(prims.broadcast_in_dim)
def _broadcast_in_dim_grad(a, shape, broadcast_dimensions):
    out = prims.broadcast_in_dim(a, shape, broadcast_dimensions)
    g = get_grad(out)
    # the expanded dims and the added ones, summed in one reduction; an added dim of size 1 (an
    # unsqueeze) needs no sum, only the reshape back (a sum over it would copy the whole cotangent)
    summed = [
        d
        for d in range(len(shape))
        if not known(shape[d] == 1)
        and (d not in broadcast_dimensions or known(a.shape[list(broadcast_dimensions).index(d)] == 1))
    ]
    if summed:
        g = ltorch.sum(g, summed, keepdim=True)
    for i, d in enumerate(broadcast_dimensions):
        if is_data_dependent(a.shape[i]) and not known(a.shape[i] == shape[d]) and not known(a.shape[i] == 1):
            g = _sum_to_run_time_size(g, d, a.shape[i])
    put_grad(a, ltorch.reshape(g, a.shape))
    return out


def _sum_to_run_time_size(g, d: int, size):
    """``g`` summed along ``d`` to ``size``, a size known only when the program runs that is 1 or ``g``'s (the
    forward broadcast it): each slot ``k`` of ``g`` is added into slot ``k % size``, the sum where ``size`` is 1,
    ``g`` itself where it is ``g.shape[d]``, with no branch on the size while tracing."""
    device = devices.to_torch_device(g.device)
    count = ltorch.sum(ltorch.full((size,), 1, device=device, dtype=torch.int64))
    index = ltorch.remainder(ltorch.arange(0, g.shape[d], 1, device=device, dtype=torch.int64), count)
    shape = list(g.shape)
    shape[d] = size
    return ltorch.index_add(ltorch.full(shape, 0, device=device, dtype=g.dtype.torch_dtype), d, index, g)


@register_grad(prims.reshape)
def _reshape_grad(a, shape):
    out = prims.reshape(a, shape)
    put_grad(a, ltorch.reshape(get_grad(out), a.shape))
    return out


@register_grad(prims.squeeze)
def _squeeze_grad(a, dims):
    out = prims.squeeze(a, dims)
    put_grad(a, ltorch.reshape(get_grad(out), a.shape))
    return out


@register_grad(prims.transpose)
def _transpose_grad(a, permutation):
    out = prims.transpose(a, permutation)
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    put_grad(a, ltorch.permute(get_grad(out), inverse))
    return out


@register_grad(prims.slice)
def _slice_grad(a, start_indices, end_indices, strides=None):
    out = prims.slice(a, start_indices, end_indices, strides)
    g = get_grad(out)
    strides = strides or [1] * a.ndim
    config = []
    for n, start, step, size in zip(a.shape, start_indices, strides, out.shape):
        if size == 0:
            config.append((0, n, 0))
        else:
            last = start + (size - 1) * step
            config.append((start, n - 1 - last, step - 1))
    put_grad(a, prims.pad(g, _zero(g), config))
    return out


def _zero(p: TensorProxy):
    return {"bool": False, "int": 0, "float": 0.0, "complex": 0j}[p.dtype.kind]


@register_grad(prims.pad)
def _pad_grad(a, padding_value, padding_config):
    out = prims.pad(a, padding_value, padding_config)
    g = get_grad(out)
    # negative padding cropped the input: give the cropped positions back (as zeros) first
    uncrop = [(max(-lo, 0), max(-hi, 0), 0) for lo, hi, _ in padding_config]
    if any(lo or hi for lo, hi, _ in uncrop):
        g = prims.pad(g, _zero(g), uncrop)
    starts, stops, steps = [], [], []
    for n, (lo, _, interior) in zip(a.shape, padding_config):
        lo = max(lo, 0)
        starts.append(lo)
        stops.append(lo + max(n - 1, 0) * (interior + 1) + (1 if n else 0))
        steps.append(interior + 1)
    put_grad(a, prims.slice(g, starts, stops, steps))
    if _is_tensor(padding_value):
        put_grad(padding_value, ltorch.sub(ltorch.sum(g), ltorch.sum(prims.slice(g, starts, stops, steps))))
    return out


@register_grad(prims.cat)
def _cat_grad(tensors, dim):
    out = prims.cat(tensors, dim)
    g = get_grad(out)
    offset = 0
    for t in tensors:
        n = t.shape[dim]
        put_grad(t, ltorch.narrow(g, dim, offset, n))
        offset += n
    return out


@register_grad(prims.flip)
def _flip_grad(a, dims):
    out = prims.flip(a, dims)
    put_grad(a, prims.flip(get_grad(out), dims))
    return out


def _expanded_index(index: TensorProxy, dim: int, like: TensorProxy) -> TensorProxy:
    """A 1-D index along ``dim`` broadcast to ``like``'s shape (for scatter_add)."""
    shape = [1] * like.ndim
    shape[dim] = index.numel()
    return ltorch.expand(ltorch.reshape(index, shape), like.shape)


@register_grad(prims.take)
def _take_grad(a, index, dim):
    out = prims.take(a, index, dim)
    g = get_grad(out)
    if a.ndim == 0:  # every pick is the one element
        put_grad(a, ltorch.sum(g) if g.ndim else g)
        return out
    put_grad(a, prims.scatter_add(zeros_like(a), _expanded_index(index, dim, g), g, dim))
    return out


@register_grad(prims.take_along_axis)
def _take_along_axis_grad(a, index, dim):
    out = prims.take_along_axis(a, index, dim)
    g = get_grad(out)
    put_grad(a, prims.scatter_add(zeros_like(a), index, g, dim))
    return out


@register_grad(prims.scatter_add)
def _scatter_add_grad(a, index, value, dim):
    out = prims.scatter_add(a, index, value, dim)
    g = get_grad(out)
    put_grad(a, g)
    put_grad(value, prims.take_along_axis(g, index, dim))
    return out


# ---------------------------------------------------------------- reductions


def _restore_reduced(g: TensorProxy, a: TensorProxy, dims) -> TensorProxy:
    """``g`` (reduced over ``dims``) broadcast back to ``a``'s shape."""
    kept = [d for d in range(a.ndim) if d not in dims]
    return prims.broadcast_in_dim(g, a.shape, tuple(kept))


@register_grad(prims.sum)
def _sum_grad(a, dims):
    out = prims.sum(a, dims)
    put_grad(a, _restore_reduced(get_grad(out), a, dims))
    return out


def prod_backward(g: TensorProxy, a: TensorProxy, result: TensorProxy, dims, full: bool) -> TensorProxy:
    """PyTorch's prod_backward, with ``g`` and ``result`` already broadcast to ``a``'s shape and in its dtype.

    No zero in the whole input: ``g * (result / a)``. Otherwise each element's gradient is ``g`` times the product
    of the others in its slice (NaN where another is NaN, or an infinity meets a zero). A full reduction
    (``x.prod()``, ``full``) of an input holding two zeros or more has a zero gradient whatever ``g`` is (eager
    returns ``zeros_like``: a NaN cotangent does not reach it); ``x.prod(0)`` of a 1-d input takes the slice path.
    """

    def others_count(mask):  # per element: how many of the other elements of its slice are in ``mask``
        m = ltorch.to(mask, torch.int64)
        return ltorch.sub(ltorch.sum(m, list(dims), keepdim=True), m)

    is_zero = ltorch.eq(a, 0)
    ordinary = ltorch.logical_and(ltorch.isfinite(a), ltorch.logical_not(is_zero))
    safe = ltorch.where(ordinary, a, 1.0)
    kept = tuple(d for d in range(a.ndim) if d not in dims)
    others_product = prims.broadcast_in_dim(prims.prod(safe, tuple(dims)), tuple(a.shape), kept)
    base = ltorch.true_divide(others_product, safe)  # the product of the other ordinary ones
    is_inf = ltorch.isinf(a)
    neg_inf = others_count(ltorch.logical_and(is_inf, ltorch.lt(a, 0)))
    dtype = a.dtype.torch_dtype  # (a where of two numbers is of the default dtype: each is cast back to a's)
    signed_inf = ltorch.to(ltorch.where(ltorch.eq(ltorch.remainder(neg_inf, 2), 1), -math.inf, math.inf), dtype)
    with_inf = M(base, signed_inf)
    zeros, infs = others_count(is_zero), others_count(is_inf)
    others = ltorch.where(ltorch.gt(infs, 0), with_inf, base)
    zero_or_nan = ltorch.to(ltorch.where(ltorch.gt(infs, 0), math.nan, 0.0), dtype)
    others = ltorch.where(ltorch.gt(zeros, 0), zero_or_nan, others)
    others = ltorch.where(ltorch.gt(others_count(ltorch.isnan(a)), 0), math.nan, others)
    # eager decides on the count of zeros in the whole input
    total = ltorch.sum(ltorch.to(is_zero, torch.int64))
    grad = ltorch.where(ltorch.eq(total, 0), M(g, ltorch.true_divide(result, a)), M(g, others))
    if full:
        grad = ltorch.where(ltorch.gt(total, 1), 0.0, grad)
    return grad


@register_grad(prims.prod)
def _prod_grad(a, dims):
    """The prim reducing every dim is taken for a full reduction; ``torch.prod`` has its own rule that knows."""
    out = prims.prod(a, dims)
    g = get_grad(out)
    if not dims:
        put_grad(a, g)
        return out
    full = len(dims) == a.ndim
    put_grad(a, prod_backward(_restore_reduced(g, a, dims), a, _restore_reduced(out, a, dims), dims, full))
    return out


def _extremum_grad(prim):
    def rule(a, dims):
        out = prim(a, dims)
        g = get_grad(out)
        # PyTorch's scale_grad_by_count: (g / count) * mask, so a NaN extremum (no element equals it, the
        # count is zero) gives NaN gradients as in eager
        mask = ltorch.to(ltorch.eq(a, _restore_reduced(out, a, dims)), a.dtype.torch_dtype)
        count = ltorch.sum(mask, list(dims), keepdim=True) if dims else mask
        put_grad(a, M(ltorch.true_divide(_restore_reduced(g, a, dims), count), mask))
        return out

    register_grad(prim, rule)


_extremum_grad(prims.amax)
_extremum_grad(prims.amin)


@register_grad(prims.var)
def _var_grad(a, dims, *, correction):
    out = prims.var(a, dims, correction=correction)
    g = get_grad(out)
    n = 1
    for d in dims:
        n *= a.shape[d] if a.ndim else 1  # a 0-d tensor's dim 0 is itself
    mean = _restore_reduced(ltorch.true_divide(prims.sum(a, dims), n), a, dims)
    scale = 2.0 / (n - correction) if n != correction else float("inf")  # inf * 0 = nan, as PyTorch
    put_grad(a, M(M(_restore_reduced(g, a, dims), ltorch.sub(a, mean)), scale))
    return out


@register_grad(prims.cumsum)
def _cumsum_grad(a, dim):
    out = prims.cumsum(a, dim)
    g = get_grad(out)
    put_grad(a, prims.flip(prims.cumsum(prims.flip(g, (dim,)), dim), (dim,)))
    return out


@register_grad(prims.topk)
def _topk_grad(a, k, dim, largest, sorted):
    values, indices = prims.topk(a, k, dim, largest, sorted)
    g = get_grad(values)
    put_grad(a, prims.scatter_add(zeros_like(a), indices, g, dim))
    return values, indices


@register_grad(prims.sort)
def _sort_grad(a, dim, descending, stable):
    values, indices = prims.sort(a, dim, descending, stable)
    g = get_grad(values)
    put_grad(a, prims.scatter_add(zeros_like(a), indices, g, dim))
    return values, indices


# ---------------------------------------------------------------- linear algebra and embedding


def matmul_backward(a: TensorProxy, b: TensorProxy, g: TensorProxy) -> tuple[TensorProxy, TensorProxy]:
    """The gradients of ``a @ b`` (any ranks) for the cotangent ``g``."""
    if a.ndim == 1 and b.ndim == 1:
        return M(g, b), M(g, a)
    a2 = ltorch.unsqueeze(a, 0) if a.ndim == 1 else a
    b2 = ltorch.unsqueeze(b, -1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = ltorch.unsqueeze(g2, -2)
    if b.ndim == 1:
        g2 = ltorch.unsqueeze(g2, -1)
    ga = ltorch.matmul(g2, ltorch.transpose(b2, -1, -2))
    gb = ltorch.matmul(ltorch.transpose(a2, -1, -2), g2)
    return ltorch.reshape(sum_to_shape(ga, a2.shape), a.shape), ltorch.reshape(sum_to_shape(gb, b2.shape), b.shape)


@register_grad(prims.matmul)
def _matmul_grad(a, b):
    out = prims.matmul(a, b)
    ga, gb = matmul_backward(a, b, get_grad(out))
    put_grad(a, ga)
    put_grad(b, gb)
    return out


@register_grad(prims.linear)
def _linear_grad(a, w, bias):
    out = prims.linear(a, w, bias)
    g = get_grad(out)
    if w.ndim != 2:
        raise NotImplementedError("the gradient of linear with a 1-D weight is not supported")
    # as eager: the cotangent folded to 2-d once, then 2-d products (a product of the 3-d cotangent would
    # copy it again when it is not contiguous, and run a batched product)
    # (the rows counted, not -1: a size 0 in the last dimension leaves -1 undetermined)
    g2 = ltorch.reshape(g, (_leading_elements(g.shape), g.shape[-1]))
    a2 = ltorch.reshape(a, (_leading_elements(a.shape), a.shape[-1]))
    if a.ndim > 2:
        put_grad(a, ltorch.reshape(ltorch.matmul(g2, w), a.shape))
    else:
        put_grad(a, ltorch.matmul(g, w))
    put_grad(w, ltorch.matmul(ltorch.t(g2), a2))
    if bias is not None:
        put_grad(bias, ltorch.sum(g2, 0))
    return out


def _leading_elements(shape) -> int:
    """The number of elements of ``shape`` without its last dimension (symbolic sizes multiply as numbers)."""
    n = 1
    for s in shape[:-1]:
        n = n * s
    return n


@register_grad(prims.embedding)
def _embedding_grad(
    indices, weight, *, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False
):
    out = prims.embedding(
        indices,
        weight,
        padding_idx=padding_idx,
        max_norm=max_norm,
        norm_type=norm_type,
        scale_grad_by_freq=scale_grad_by_freq,
        sparse=sparse,
    )
    if sparse:
        raise NotImplementedError("the gradient of embedding with sparse=True is not supported")
    g = get_grad(out)
    pad = -1 if padding_idx is None else (padding_idx if padding_idx >= 0 else padding_idx + weight.shape[0])
    put_grad(weight, ltorch.embedding_backward(g, indices, weight.shape[0], pad, scale_grad_by_freq))
    return out


@register_grad(prims.scatter)
def _scatter_grad(a, index, src, dim):
    out = prims.scatter(a, index, src, dim)
    g = get_grad(out)
    put_grad(a, prims.scatter(g, index, _zero(g), dim))  # the overwritten positions get no gradient
    if _is_tensor(src):
        put_grad(src, prims.take_along_axis(g, index, dim))
    return out


@register_grad(prims.unfold)
def _unfold_grad(a, dim, size, step):
    out = prims.unfold(a, dim, size, step)
    put_grad(a, ltorch.unfold_backward(get_grad(out), a.shape, dim, size, step))
    return out


@register_grad(prims.convolution)
def _convolution_grad(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = prims.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    g = get_grad(out)
    bias_sizes = [bias.shape[0]] if bias is not None else None
    # as eager: no gradient computed for an operand that needs none (the image of a network's first layer)
    mask = [needs_grad(a), needs_grad(weight), bias is not None and needs_grad(bias)]
    grad_a, grad_w, grad_b = ltorch.convolution_backward(
        g,
        a,
        weight,
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        mask,
    )
    for x, grad in ((a, grad_a), (weight, grad_w), (bias, grad_b)):
        if grad is not None:
            put_grad(x, grad)
    return out


@register_grad(prims.bernoulli)
def _bernoulli_grad(a):
    out = prims.bernoulli(a)  # a sample: no gradient flows to the probabilities
    put_grad(a, zeros_like(a))
    return out


@register_grad(prims.index_put)
def _index_put_grad(a, indices, values, accumulate):
    """``a[indices] = values`` (or ``+=``): ``values`` gets the cotangent at the indexed positions; ``a`` gets
    the rest (all of it when accumulating)."""
    out = prims.index_put(a, indices, values, accumulate)
    g = get_grad(out)
    if any(i.dtype is dtypes.bool8 for i in indices):
        raise NotImplementedError("the gradient of index_put with boolean indices is not supported")
    m = len(indices)
    lead, rest = a.shape[:m], a.shape[m:]
    shape = tuple(torch.broadcast_shapes(*(tuple(i.shape) for i in indices)))
    linear = None
    stride = 1
    for k, n in reversed(list(zip(indices, lead))):
        k = ltorch.expand(k, shape)
        k = ltorch.where(ltorch.lt(k, 0), ltorch.add(k, n), k)
        term = ltorch.mul(k, stride) if stride != 1 else k
        linear = term if linear is None else ltorch.add(linear, term)
        stride *= n
    count = math.prod(shape)
    flat_g = ltorch.reshape(g, (stride, *rest))
    picked = ltorch.reshape(prims.take(flat_g, ltorch.reshape(linear, (count,)), 0), (*shape, *rest))
    if _is_tensor(values) and dtypes.is_inexact_dtype(values.dtype):
        put_grad(values, ltorch.to(sum_to_shape(picked, values.shape), values.dtype.torch_dtype))
    if accumulate:
        put_grad(a, g)
    else:
        put_grad(a, prims.index_put(g, indices, zeros_like(picked), False))
    return out
