"""Gradient rules for torch-language operations whose backward is better than their decomposition's.

The forward keeps the single operation; the backward calls a dedicated backward operation
(which the torch executor runs with PyTorch's fused kernel).
"""

from __future__ import annotations

import inspect
import struct

import torch

import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim
from thunder.core.proxies import TensorProxy
from thunder.transforms.autodiff import get_grad, put_grad, register_grad, zeros_like
from thunder.transforms.prim_grads import matmul_backward, prod_backward


@register_grad(ltorch.silu)
def _silu_grad(a, inplace: bool = False):
    out = ltorch.silu(a)
    put_grad(a, ltorch.silu_backward(get_grad(out), a))
    return out


@register_grad(ltorch.gelu)
def _gelu_grad(a, approximate: str = "none"):
    out = ltorch.gelu(a, approximate=approximate)
    put_grad(a, ltorch.gelu_backward(get_grad(out), a, approximate=approximate))
    return out


def _softmax_like(forward, backward):
    def rule(a, dim, dtype=None, _stacklevel: int = 3):
        out = forward(a, dim, dtype=dtype)
        g = backward(get_grad(out), out, dim, out.dtype.torch_dtype)
        put_grad(a, ltorch.to(g, a.dtype.torch_dtype))
        return out

    return rule


register_grad(ltorch.softmax, _softmax_like(ltorch.softmax, ltorch.softmax_backward))
register_grad(ltorch.log_softmax, _softmax_like(ltorch.log_softmax, ltorch.log_softmax_backward))


@register_grad(ltorch.dropout)
def _dropout_grad(a, p: float = 0.5, training: bool = True, inplace: bool = False):
    """PyTorch's ``native_dropout`` returns the mask it drew: the backward scales the cotangent by it."""
    if not training or p == 0.0 or p == 1.0:
        out = ltorch.dropout(a, p, training)
        put_grad(a, get_grad(out) if p != 1.0 or not training else zeros_like(a))
        return out
    from thunder.tracing.fallback import fallback_symbol

    out, mask = fallback_symbol(torch.native_dropout)(a, p, True)
    put_grad(a, ltorch.mul(ltorch.mul(get_grad(out), mask), 1.0 / (1.0 - p)))
    return out


@register_grad(ltorch.matmul)
def _matmul_grad(a, b):
    """Eager's ``torch.matmul`` of two batches runs each argument through its own expand and reshape, the second's
    made last: its gradient reaches the tensor first, which decides the rounding where one tensor is both (``x @
    x``) and receives other gradients (``torch.bmm`` and 2-d products give the first argument's first)."""
    out = ltorch.matmul(a, b)
    ga, gb = matmul_backward(a, b, get_grad(out))
    if a.ndim >= 3 and b.ndim >= 3:
        put_grad(b, gb)
        put_grad(a, ga)
    else:
        put_grad(a, ga)
        put_grad(b, gb)
    return out


@register_grad(ltorch.prod)
def _prod_grad(a, dim=None, keepdim: bool = False, *, dtype=None):
    """Eager's two prod backwards: ``x.prod()`` (zero gradient once two elements are zero, whatever the cotangent)
    and ``x.prod(dim)`` (the product of the others in each slice), computed in the result's dtype as eager."""
    kwargs = {} if dtype is None else {"dtype": dtype}
    out = ltorch.prod(a, **kwargs) if dim is None else ltorch.prod(a, dim, keepdim, **kwargs)
    if not dtypes.is_inexact_dtype(a.dtype) or not dtypes.is_inexact_dtype(out.dtype):
        return out
    g = get_grad(out)
    if a.ndim == 0:
        put_grad(a, ltorch.to(g, a.dtype.torch_dtype))
        return out
    dims = tuple(range(a.ndim)) if dim is None else (canonicalize_dim(a.ndim, dim),)
    kept = tuple(d for d in range(a.ndim) if d not in dims)

    def back(t):  # ``t`` (the reduced shape) broadcast back to ``a``'s
        if keepdim:
            return ltorch.expand(t, a.shape)
        return prims.broadcast_in_dim(t, tuple(a.shape), kept)

    x = a if a.dtype == out.dtype else ltorch.to(a, out.dtype.torch_dtype)
    grad = prod_backward(back(g), x, back(out), dims, full=dim is None)
    put_grad(a, grad if a.dtype == out.dtype else ltorch.to(grad, a.dtype.torch_dtype))
    return out


# ---------------------------------------------------------------- PyTorch's formulas at singular points
# (decompositions differentiated by the chain rule give NaN or split gradients where PyTorch's
# derivatives.yaml gives a finite, specific value)


def _bind(sym, args, kwargs) -> dict:
    """The call's arguments by parameter name, defaults filled in."""
    sig = _signatures.get(sym.id)
    if sig is None:
        sig = _signatures[sym.id] = inspect.signature(sym.__wrapped__)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


_signatures: dict[str, inspect.Signature] = {}


def _hardtanh_like(sym, low_name, high_name, low=None, high=None):
    """hardtanh and relu6: PyTorch's hardtanh_backward kernel, zero at and beyond the bounds (its
    decomposition, for fusion executors, gives zero at a NaN, as eager's vectorised CPU kernel).

    The kernel reads the output, as eager's in-place ``hardtanh_`` does: the output lies strictly between the
    bounds exactly where the input does (and is NaN where it is), so the gradient is the same, and the
    output is what the next layer (a convolution, a linear) saves anyway: the input need not be kept, nor
    the output made again in the backward."""

    def rule(*args, **kwargs):
        bound = _bind(sym, args, kwargs)
        a = next(iter(bound.values()))
        lo = bound[low_name] if low_name else low
        hi = bound[high_name] if high_name else high
        out = sym(*args, **kwargs)
        put_grad(a, ltorch.hardtanh_backward(get_grad(out), out, lo, hi))  # one kernel, as eager's
        return out

    register_grad(sym, rule)


_hardtanh_like(ltorch.hardtanh, "min_val", "max_val")
_hardtanh_like(ltorch.relu6, None, None, 0.0, 6.0)


def _first_arg_rule(sym, derivative):
    """A rule for a one-tensor activation: ``derivative(a, out, g, **params)`` is PyTorch's backward formula
    (derivatives.yaml), exact at the points (NaN, infinities, kinks) where the decomposition's chain rule
    is not."""

    def rule(*args, **kwargs):
        bound = _bind(sym, args, kwargs)
        a = next(iter(bound.values()))
        params = {k: v for k, v in bound.items() if k != "inplace"}
        params.pop(next(iter(bound)))
        out = sym(*args, **kwargs)
        if not isinstance(a, TensorProxy):
            return out
        put_grad(a, derivative(a, out, get_grad(out), **params))
        return out

    register_grad(sym, rule)


_where = ltorch.where
_first_arg_rule(ltorch.relu, lambda a, out, g: ltorch.threshold_backward(g, out, 0))
_first_arg_rule(ltorch.sigmoid, lambda a, out, g: ltorch.sigmoid_backward(g, out))
_first_arg_rule(
    ltorch.hardsigmoid,
    lambda a, out, g: _where(ltorch.logical_and(ltorch.gt(a, -3.0), ltorch.lt(a, 3.0)), ltorch.true_divide(g, 6), 0.0),
)
# eager's one kernel (aten.hardswish_backward), not five; its answer at a NaN is the cotangent
_first_arg_rule(ltorch.hardswish, lambda a, out, g: ltorch.hardswish_backward(g, a))


def _elu_backward(a, g, alpha, scale, input_scale):
    # eager's kernel (aten.elu_backward), exact at a NaN and at a = inf in every dtype
    return ltorch.elu_backward(g, alpha, scale, input_scale, False, a)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
_first_arg_rule(ltorch.elu, lambda a, out, g, alpha=1.0: _elu_backward(a, g, alpha, 1.0, 1.0))
# (derivatives.yaml's ``1.0 / alpha.toFloat()``: alpha rounded to float32 before the division)
_first_arg_rule(
    ltorch.celu,
    lambda a, out, g, alpha=1.0: _elu_backward(a, g, alpha, 1.0, 1.0 / struct.unpack("f", struct.pack("f", alpha))[0]),
)
_first_arg_rule(ltorch.selu, lambda a, out, g: _elu_backward(a, g, _SELU_ALPHA, _SELU_SCALE, 1.0))


def _softplus_grad(a, out, g, beta=1.0, threshold=20.0):
    # softplus_backward: the cotangent itself above the threshold (no inf / inf at a = inf)
    z = ltorch.exp(ltorch.mul(a, beta))
    return _where(ltorch.gt(ltorch.mul(a, beta), threshold), g, ltorch.mul(g, ltorch.true_divide(z, ltorch.add(z, 1))))


_first_arg_rule(ltorch.softplus, _softplus_grad)


@register_grad(ltorch.clamp)
def _clamp_grad(*args, **kwargs):
    """PyTorch's clamp_backward and clamp_backward_min_max: the input gets the gradient where
    ``min <= a <= max`` (not at a NaN), a bound where it is the value taken (``max`` also where
    ``max < min``)."""
    from thunder.transforms.prim_grads import sum_to_shape

    a, lo, hi = list(_bind(ltorch.clamp, args, kwargs).values())[:3]
    out = ltorch.clamp(*args, **kwargs)
    g = get_grad(out)

    def give(x, mask):
        if isinstance(x, TensorProxy) and dtypes.is_inexact_dtype(x.dtype):
            grad = sum_to_shape(_where(mask, g, 0.0), x.shape)
            put_grad(x, ltorch.to(grad, x.dtype.torch_dtype) if grad.dtype is not x.dtype else grad)

    if lo is not None and hi is not None:
        give(a, ltorch.logical_and(ltorch.ge(a, lo), ltorch.le(a, hi)))
        if isinstance(lo, TensorProxy) or isinstance(hi, TensorProxy):
            give(lo, ltorch.logical_and(ltorch.lt(a, lo), ltorch.lt(lo, hi)))
            give(hi, ltorch.logical_or(ltorch.gt(a, hi), ltorch.lt(hi, lo)))
    elif lo is not None:
        give(a, ltorch.ge(a, lo))
        give(lo, ltorch.lt(a, lo))
    else:
        give(a, ltorch.le(a, hi))
        give(hi, ltorch.gt(a, hi))
    return out


def _restore_dims(t: TensorProxy, ndim: int, dims, keepdim: bool) -> TensorProxy:
    """A reduction's result with its reduced dims back (size 1), to broadcast against the input."""
    if keepdim or t.ndim == ndim:
        return t
    shape = list(t.shape)
    for d in sorted(dims):
        shape.insert(d, 1)
    return ltorch.reshape(t, tuple(shape))


def _reduced_dims(a: TensorProxy, dim) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(a.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted({d % a.ndim if a.ndim else 0 for d in dims}))


@register_grad(ltorch.norm)
def _norm_grad(*args, **kwargs):
    """PyTorch's norm_backward for the 2-norm: zero (not NaN) where the norm is zero."""
    bound = _bind(ltorch.norm, args, kwargs)
    values = list(bound.values())
    a, p = values[0], values[1]
    dim, keepdim, dtype = bound.get("dim"), bound.get("keepdim", False), bound.get("dtype")
    out = ltorch.norm(*args, **kwargs)
    if p not in (2, 2.0, "fro"):
        return NotImplemented  # other orders: their decompositions' gradients match PyTorch's
    g = get_grad(out)
    dims = _reduced_dims(a, dim)
    x = ltorch.to(a, dtype) if dtype is not None else a
    go = _restore_dims(g, a.ndim, dims, keepdim)
    no = _restore_dims(out, a.ndim, dims, keepdim)
    grad = ltorch.mul(x, ltorch.where(ltorch.eq(no, 0), 0.0, ltorch.true_divide(go, no)))
    put_grad(a, ltorch.to(grad, a.dtype.torch_dtype))
    return out


@register_grad(ltorch.std)
def _std_grad(*args, **kwargs):
    """PyTorch's std_backward: zero (not NaN) where the deviation is zero."""
    bound = _bind(ltorch.std, args, kwargs)
    a = next(iter(bound.values()))
    out = ltorch.std(*args, **kwargs)
    if a.ndim == 0:
        return NotImplemented
    g = get_grad(out)
    half = ltorch.where(ltorch.eq(out, 0), 0.0, ltorch.true_divide(g, ltorch.mul(out, 2.0)))
    dim, unbiased = bound.get("dim"), bound.get("unbiased")
    if isinstance(dim, bool):  # the overload std(input, unbiased)
        dim, unbiased = None, dim
    dims = _reduced_dims(a, dim)
    n = 1
    for d in dims:
        n *= a.shape[d]
    correction = bound.get("correction")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    mean = ltorch.mean(a, list(dims), keepdim=True)
    scale = 2.0 / (n - correction) if n != correction else float("inf")
    grad = ltorch.mul(
        ltorch.mul(_restore_dims(half, a.ndim, dims, bound.get("keepdim", False)), ltorch.sub(a, mean)), scale
    )
    put_grad(a, grad)
    return out


def _value_selecting(sym):
    """max(dim)/min(dim): the whole gradient goes to the returned index, as in PyTorch (not split among ties)."""

    def rule(*args, **kwargs):
        bound = _bind(sym, args, kwargs)
        values = list(bound.values())
        a, dim = values[0], values[1]
        keepdim = bound.get("keepdim", False)
        if dim is None and isinstance(a, TensorProxy):
            return _evenly_distributed(sym, a)
        if not isinstance(dim, int):
            return NotImplemented
        out = sym(*args, **kwargs)
        vals, idx = out
        g = get_grad(vals)
        if a.ndim == 0:  # the value is the element itself (also a NaN, which no comparison would select)
            put_grad(a, g)
            return out
        d = dim % a.ndim
        if not keepdim:
            g = ltorch.unsqueeze(g, d)
            idx = ltorch.unsqueeze(idx, d)
        put_grad(a, prims.scatter_add(zeros_like(a), idx, g, d))
        return out

    register_grad(sym, rule)


def _evenly_distributed(sym, a):
    """max()/min() of a whole tensor: PyTorch's evenly_distribute_backward, the gradient shared among the
    elements equal to the result, or among the NaNs when the result is NaN."""
    out = sym(a)
    mask = _where(ltorch.isnan(out), ltorch.isnan(a), ltorch.eq(a, out))
    count = ltorch.sum(ltorch.to(mask, a.dtype.torch_dtype))
    put_grad(a, _where(mask, ltorch.true_divide(get_grad(out), count), 0.0))
    return out


_value_selecting(ltorch.max)
_value_selecting(ltorch.min)


@register_grad(ltorch.xlogy)
def _xlogy_grad(*args, **kwargs):
    """PyTorch's xlogy derivatives: ``xlogy(g, b)`` for ``a``, zero where ``a`` is zero and ``b`` not positive."""
    import math

    from thunder.transforms.prim_grads import sum_to_shape

    a, b = list(_bind(ltorch.xlogy, args, kwargs).values())[:2]
    out = ltorch.xlogy(*args, **kwargs)
    g = get_grad(out)
    if isinstance(a, TensorProxy) and dtypes.is_inexact_dtype(a.dtype):
        if isinstance(b, TensorProxy):
            # xlogy(g, b), zero only where a is zero and b is not positive
            singular = ltorch.logical_and(ltorch.eq(a, 0), ltorch.le(b, 0))
            put_grad(a, sum_to_shape(ltorch.where(singular, 0.0, ltorch.xlogy(g, b)), a.shape))
        else:  # xlogy(Tensor, Scalar): PyTorch gives g * log(b), unmasked
            put_grad(a, ltorch.mul(g, math.log(b) if b > 0 else (-math.inf if b == 0 else math.nan)))
    if isinstance(b, TensorProxy) and dtypes.is_inexact_dtype(b.dtype):
        put_grad(b, sum_to_shape(ltorch.true_divide(ltorch.mul(g, a), b), b.shape))
    return out


@register_grad(ltorch.zero)
def _zero_grad(a):
    """As eager's: the result of ``zero_``/``fill`` requires grad when ``a`` does, and ``a`` gets a zero gradient."""
    out = ltorch.zero(a)
    put_grad(a, zeros_like(a))
    return out


@register_grad(ltorch.fill)
def _fill_grad(a, value):
    out = ltorch.fill(a, value)
    put_grad(a, zeros_like(a))
    if isinstance(value, TensorProxy):  # a 0-d value tensor gets the sum of the cotangent
        put_grad(value, ltorch.to(ltorch.sum(get_grad(out)), value.dtype.torch_dtype))
    return out


def _robust_loss_rule(sym, width_name: str, scaled: bool):
    """smooth_l1_loss and huber_loss: PyTorch's backward kernels, ``g * sign(x)`` (times ``delta`` for huber)
    beyond the quadratic zone and ``g * x`` (over ``beta`` for smooth L1) inside it, with ``x = input - target``.
    Differentiating the decomposition's ``where`` gave NaN where ``x`` is infinite (0 times infinity)."""

    def rule(*args, **kwargs):
        from thunder.transforms.prim_grads import sum_to_shape

        bound = _bind(sym, args, kwargs)
        a, target, width = bound["a"], bound["target"], bound[width_name]
        if width == 0.0:  # (smooth L1 with beta 0 is the L1 loss: its decomposition's gradient is eager's)
            return NotImplemented
        out = sym(*args, **kwargs)
        reduction = bound.get("reduction", "mean")
        if bound.get("size_average") is not None or bound.get("reduce") is not None:
            reduction = torch.nn._reduction.legacy_get_string(bound.get("size_average"), bound.get("reduce"))
        x = ltorch.sub(a, target)
        g = get_grad(out)
        if reduction == "mean":
            g = ltorch.true_divide(g, max(x.numel(), 1))
        g = ltorch.expand(g, x.shape) if reduction != "none" else g
        outer = ltorch.mul(g, width) if scaled else g
        inner = ltorch.mul(g, x) if scaled else ltorch.true_divide(ltorch.mul(g, x), width)
        grad = ltorch.where(ltorch.lt(x, -width), ltorch.neg(outer), ltorch.where(ltorch.gt(x, width), outer, inner))
        if isinstance(a, TensorProxy) and dtypes.is_inexact_dtype(a.dtype):
            put_grad(a, sum_to_shape(grad, a.shape))
        if isinstance(target, TensorProxy) and dtypes.is_inexact_dtype(target.dtype):
            put_grad(target, sum_to_shape(ltorch.neg(grad), target.shape))
        return out

    register_grad(sym, rule)


_robust_loss_rule(ltorch.smooth_l1_loss, "beta", scaled=False)
_robust_loss_rule(ltorch.huber_loss, "delta", scaled=True)


@register_grad(ltorch.div)
def _div_grad(a, b, *, rounding_mode=None, out=None):
    """PyTorch's div derivatives: ``g / b`` and ``-g * ((a / b) / b)`` for true division; a zero gradient (never
    NaN, even where ``b`` is zero) for both arguments of a rounding division (``trunc``, ``floor``)."""
    from thunder.transforms.prim_grads import sum_to_shape

    result = ltorch.div(a, b, rounding_mode=rounding_mode, out=out)
    if rounding_mode is not None:
        for x in (a, b):
            if isinstance(x, TensorProxy) and dtypes.is_inexact_dtype(x.dtype):
                put_grad(x, zeros_like(x))
        return result
    g = get_grad(result)
    if isinstance(a, TensorProxy) and dtypes.is_inexact_dtype(a.dtype):
        put_grad(a, sum_to_shape(ltorch.true_divide(g, b), a.shape))
    if isinstance(b, TensorProxy) and dtypes.is_inexact_dtype(b.dtype):
        # div_tensor_other_backward's order, -g * ((a / b) / b): bitwise eager's in bfloat16 and float16
        put_grad(b, sum_to_shape(ltorch.neg(ltorch.mul(g, ltorch.true_divide(result, b))), b.shape))
    return result


@register_grad(ltorch.fmod)
def _fmod_grad(a, b):
    """PyTorch's fmod derivatives (derivatives.yaml): ``g`` for the dividend, ``-g * a.div(b, rounding_mode="trunc")``
    for the divisor, the quotient computed in the arguments' dtype as eager's backward computes it. In bfloat16
    and float16 eager's truncating division rounds the quotient to that dtype before truncating it: for
    3.34375 / 1.1171875 the forward's quotient is 2 (fmod gives 1.109375) but the backward's is 3.0 (2.993
    rounded), which a quotient taken in float32 (2) would not reproduce."""
    from thunder.transforms.prim_grads import sum_to_shape

    out = ltorch.fmod(a, b)
    g = get_grad(out)
    if isinstance(a, TensorProxy) and dtypes.is_inexact_dtype(a.dtype):
        put_grad(a, sum_to_shape(g, a.shape))
    if isinstance(b, TensorProxy) and dtypes.is_inexact_dtype(b.dtype):
        quotient = ltorch.div(a, b, rounding_mode="trunc")
        put_grad(b, sum_to_shape(ltorch.neg(ltorch.mul(g, quotient)), b.shape))
    return out


@register_grad(ltorch.split)
def _split_grad(a, split_size_or_sections, dim: int = 0):
    """PyTorch's split_backward: the pieces' cotangents concatenated (zeros for pieces no gradient reached), one
    ``cat``; differentiating the slices padded every piece to the input's size and added them up."""
    outs = ltorch.split(a, split_size_or_sections, dim)
    if len(outs) < 2 or not dtypes.is_inexact_dtype(a.dtype):
        return NotImplemented
    put_grad(a, ltorch.cat([get_grad(o) for o in outs], dim))
    return outs


_REDUCTION_ENUM = {"none": 0, "mean": 1, "sum": 2}  # ATen's at::Reduction


@register_grad(ltorch.cross_entropy)
def _cross_entropy_grad(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """As eager: ``log_softmax`` then ``nll_loss``, the log-probabilities saved for the backward.

    Differentiating the decomposition would recompute ``log_softmax`` of the logits in the backward, a
    full ``[tokens, vocabulary]`` kernel more than eager runs. The backward scatters the loss's cotangent
    into the log-probabilities' gradient (eager's ``nll_loss_backward``) and runs ``_log_softmax_backward_data``.
    """
    if (
        weight is not None
        or size_average is not None
        or reduce is not None
        or label_smoothing != 0.0
        or reduction not in ("mean", "sum", "none")
        or not isinstance(target, TensorProxy)
        or not dtypes.is_integer_dtype(target.dtype)
        or target.ndim != a.ndim - 1
    ):
        return NotImplemented  # the decomposition raises eager's errors and covers the rest
    class_dim = 0 if a.ndim == 1 else 1
    logp = ltorch.log_softmax(a, class_dim)
    if a.ndim <= 2:  # eager's kernel pair, which also returns the count of targets not ignored
        from thunder.tracing.fallback import fallback_symbol

        enum = _REDUCTION_ENUM[reduction]
        loss, total_weight = fallback_symbol(torch.ops.aten.nll_loss_forward.default)(
            logp, target, None, enum, ignore_index
        )
        g_logp = fallback_symbol(torch.ops.aten.nll_loss_backward.default)(
            get_grad(loss), logp, target, None, enum, ignore_index, total_weight
        )
        put_grad(a, ltorch.log_softmax_backward(g_logp, logp, class_dim, logp.dtype.torch_dtype))
        return loss
    loss = ltorch.nll_loss(logp, target, ignore_index=ignore_index, reduction=reduction)
    g = get_grad(loss)
    valid = ltorch.ne(target, ignore_index)
    if reduction == "mean":
        g = ltorch.true_divide(g, ltorch.sum(ltorch.to(valid, logp.dtype.torch_dtype)))
    if reduction != "none":
        g = ltorch.expand(g, target.shape)
    picked_grad = ltorch.unsqueeze(ltorch.neg(ltorch.where(valid, g, 0.0)), class_dim)
    index = ltorch.unsqueeze(ltorch.where(valid, target, 0), class_dim)
    g_logp = ltorch.scatter_add(zeros_like(logp), class_dim, index, picked_grad)
    put_grad(a, ltorch.log_softmax_backward(g_logp, logp, class_dim, logp.dtype.torch_dtype))
    return loss
