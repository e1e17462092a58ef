"""Gradient rules that run composite operations as PyTorch's native kernel pairs, forward and backward.

Batch norm, layer norm, group norm, pooling and einsum decompose into many prims; differentiating
the decomposition gives a backward of many full-size elementwise operations (batch norm: 18,
its statistics recomputed), and einsum's decomposition materialises the broadcast product of its
operands. These rules keep each operation whole: the forward runs the kernel that also returns
what the backward needs (``native_batch_norm_train`` returns the batch statistics,
``max_pool_with_indices`` the positions of the maxima) and the backward runs PyTorch's backward
kernel (``native_batch_norm_backward``, ``max_pool_with_indices_backward``...), as eager autograd
does. The torch executor runs each as one kernel; a fusion executor fuses the norms' symbols
through their decompositions (see ``thunder.torch.native_kernels``).

A rule returns ``NotImplemented`` for the calls it does not cover (then the decomposition is
differentiated, as before).
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.torch.native_kernels import pool_output_size
from thunder.transforms.autodiff import get_grad, needs_grad, put_grad, register_grad


def _wants(t) -> bool:
    return isinstance(t, TensorProxy) and dtypes.is_inexact_dtype(t.dtype) and needs_grad(t)


def _put(pairs) -> None:
    for x, g in pairs:
        if g is not None and _wants(x):
            put_grad(x, g)


# ---------------------------------------------------------------- norms


@register_grad(ltorch.batch_norm_functional)
def _batch_norm_grad(a, running_mean, running_var, weight, bias, training: bool, momentum: float, eps: float):
    if a.ndim < 2:
        return NotImplemented
    if training and running_mean is not None and running_var is not None:
        out, mean, rstd, new_mean, new_var = ltorch.native_batch_norm_train(
            a, weight, bias, running_mean, running_var, True, momentum, eps
        )
    elif training:
        (out, mean, rstd), new_mean, new_var = (
            ltorch.native_batch_norm_no_stats(a, weight, bias, True, momentum, eps),
            None,
            None,
        )
    else:
        if running_mean is None or running_var is None:
            return NotImplemented
        out, new_mean, new_var = ltorch.batch_norm_functional(
            a, running_mean, running_var, weight, bias, training, momentum, eps
        )
        mean = rstd = None
    mask = [_wants(a), _wants(weight), _wants(bias)]
    # training mode reads the batch statistics only (the running ones, updated in place, are not saved)
    stats = (None, None) if training else (running_mean, running_var)
    grads = ltorch.native_batch_norm_backward(get_grad(out), a, weight, *stats, mean, rstd, training, eps, mask)
    _put(zip((a, weight, bias), grads))
    return out, new_mean, new_var


@register_grad(ltorch.layer_norm)
def _layer_norm_grad(a, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if a.shape[a.ndim - len(shape) :] != shape:
        return NotImplemented  # the decomposition's check gives the error eager gives
    out, mean, rstd = ltorch.native_layer_norm(a, shape, weight, bias, eps)
    mask = [_wants(a), _wants(weight), _wants(bias)]
    grads = ltorch.native_layer_norm_backward(get_grad(out), a, shape, mean, rstd, weight, bias, mask)
    _put(zip((a, weight, bias), grads))
    return out


@register_grad(ltorch.group_norm)
def _group_norm_grad(a, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    if a.ndim < 2 or a.shape[1] % num_groups:
        return NotImplemented
    n, c = a.shape[0], a.shape[1]
    hxw = a.numel() // (n * c) if n * c else 0
    out, mean, rstd = ltorch.native_group_norm(a, weight, bias, n, c, hxw, num_groups, eps)
    mask = [_wants(a), _wants(weight), _wants(bias)]
    grads = ltorch.native_group_norm_backward(get_grad(out), a, mean, rstd, weight, n, c, hxw, num_groups, mask)
    _put(zip((a, weight, bias), grads))
    return out


# ---------------------------------------------------------------- pooling


def _tuple(x, n: int) -> tuple:
    if isinstance(x, (tuple, list)):
        return tuple(x) * n if len(x) == 1 else tuple(x)
    return (x,) * n


def _max_pool_rule(sym, n: int):
    def rule(a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False):
        if return_indices or a.ndim not in (n + 1, n + 2):
            return NotImplemented
        kernel = _tuple(kernel_size, n)
        stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, n)
        padding, dilation = _tuple(padding, n), _tuple(dilation, n)
        if any(p > k // 2 for p, k in zip(padding, kernel)):
            return NotImplemented  # the decomposition gives eager's error
        out, indices = ltorch.max_pool_with_indices(n, a, kernel, stride, padding, dilation, ceil_mode)
        grad = ltorch.max_pool_with_indices_backward(
            n, get_grad(out), a, kernel, stride, padding, dilation, ceil_mode, indices
        )
        put_grad(a, grad)
        return out

    register_grad(sym, rule)


def _avg_pool_rule(sym, n: int):
    def rule(
        a,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override=None,
    ):
        if a.ndim not in (n + 1, n + 2) or not dtypes.is_float_dtype(a.dtype):
            return NotImplemented
        kernel = _tuple(kernel_size, n)
        stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, n)
        padding = _tuple(padding, n)
        out = sym(a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        grad = ltorch.avg_pool_backward(
            n, get_grad(out), a, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
        )
        put_grad(a, grad)
        return out

    register_grad(sym, rule)


def _adaptive_avg_rule(sym, n: int):
    def rule(a, output_size):
        if a.ndim not in (n + 1, n + 2):
            return NotImplemented
        out = sym(a, output_size)
        put_grad(a, ltorch.adaptive_avg_pool_backward(n, get_grad(out), a))
        return out

    register_grad(sym, rule)


def _adaptive_max_rule(sym, n: int):
    def rule(a, output_size, return_indices: bool = False):
        if return_indices or a.ndim not in (n + 1, n + 2):
            return NotImplemented
        size = tuple(a.shape[a.ndim - n + i] if s is None else s for i, s in enumerate(_tuple(output_size, n)))
        out, indices = ltorch.adaptive_max_pool(n, a, size)
        put_grad(a, ltorch.adaptive_max_pool_backward(n, get_grad(out), a, indices))
        return out

    register_grad(sym, rule)


# 1-d pooling runs the 2-d kernels over a height-1 view of the input, as eager does (its 1-d pools
# unsqueeze to 2-d too): max_pool1d's gradient then goes to the one position of each maximum, as eager's.


def _pool1d_args_valid(length: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> bool:
    """Whether a 1-d pooling's arguments are in range; otherwise the decomposition reports eager's error."""
    if kernel <= 0 or stride <= 0 or padding < 0 or dilation <= 0 or padding > kernel // 2:
        return False
    return pool_output_size(length, kernel, stride, padding, dilation, ceil_mode) > 0


def _single(x):
    """The one int of a 1-d pooling argument (an int or a 1-sequence); None if it is something else."""
    if isinstance(x, (tuple, list)):
        return x[0] if len(x) == 1 and isinstance(x[0], int) else None
    return x if isinstance(x, int) else None


def _as_2d(a):
    return ltorch.unsqueeze(a, a.ndim - 1)


def _from_2d(t):
    return ltorch.squeeze(t, t.ndim - 2)


@register_grad(ltorch.max_pool1d)
def _max_pool1d_grad(
    a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False
):
    k = _single(kernel_size)
    s = k if stride is None or stride == [] or stride == () else _single(stride)
    p, d = _single(padding), _single(dilation)
    if return_indices or a.ndim not in (2, 3) or None in (k, s, p, d):
        return NotImplemented
    if not _pool1d_args_valid(a.shape[-1], k, s, p, d, ceil_mode):
        return NotImplemented
    args = ((1, k), (1, s), (0, p), (1, d), ceil_mode)
    a2 = _as_2d(a)
    out2, indices = ltorch.max_pool_with_indices(2, a2, *args)
    out = _from_2d(out2)
    grad = ltorch.max_pool_with_indices_backward(2, _as_2d(get_grad(out)), a2, *args, indices)
    put_grad(a, _from_2d(grad))
    return out


@register_grad(ltorch.avg_pool1d)
def _avg_pool1d_grad(a, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    k = _single(kernel_size)
    s = k if stride is None or stride == [] or stride == () else _single(stride)
    p = _single(padding)
    if a.ndim not in (2, 3) or None in (k, s, p) or not dtypes.is_float_dtype(a.dtype):
        return NotImplemented
    if not _pool1d_args_valid(a.shape[-1], k, s, p, 1, ceil_mode):
        return NotImplemented
    args = ((1, k), (1, s), (0, p), ceil_mode, count_include_pad, None)
    a2 = _as_2d(a)
    out = _from_2d(ltorch.avg_pool2d(a2, *args))
    put_grad(a, _from_2d(ltorch.avg_pool_backward(2, _as_2d(get_grad(out)), a2, *args)))
    return out


@register_grad(ltorch.adaptive_avg_pool1d)
def _adaptive_avg_pool1d_grad(a, output_size):
    size = _single(output_size)
    if a.ndim not in (2, 3) or size is None or size <= 0:
        return NotImplemented
    a2 = _as_2d(a)
    out = _from_2d(ltorch.adaptive_avg_pool2d(a2, (1, size)))
    put_grad(a, _from_2d(ltorch.adaptive_avg_pool_backward(2, _as_2d(get_grad(out)), a2)))
    return out


@register_grad(ltorch.adaptive_max_pool1d)
def _adaptive_max_pool1d_grad(a, output_size, return_indices: bool = False):
    size = _single(output_size)
    if return_indices or a.ndim not in (2, 3) or size is None or size <= 0:
        return NotImplemented
    a2 = _as_2d(a)
    out2, indices = ltorch.adaptive_max_pool(2, a2, (1, size))
    out = _from_2d(out2)
    put_grad(a, _from_2d(ltorch.adaptive_max_pool_backward(2, _as_2d(get_grad(out)), a2, indices)))
    return out


_max_pool_rule(ltorch.max_pool2d, 2)
_max_pool_rule(ltorch.max_pool3d, 3)
_avg_pool_rule(ltorch.avg_pool2d, 2)
_avg_pool_rule(ltorch.avg_pool3d, 3)
_adaptive_avg_rule(ltorch.adaptive_avg_pool2d, 2)
_adaptive_avg_rule(ltorch.adaptive_avg_pool3d, 3)
_adaptive_max_rule(ltorch.adaptive_max_pool2d, 2)


# ---------------------------------------------------------------- einsum


def _einsum_specs(equation: str, operands) -> tuple[list[str], str] | None:
    """The operands' subscripts and the output's, ellipses spelled out as letters; None if not plain."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(operands):
        return None
    free = [chr(c) for c in range(ord("A"), ord("Z") + 1) if chr(c) not in eq]
    n_ell = 0
    expanded = []
    for spec, op in zip(specs, operands):
        if "..." in spec:
            k = op.ndim - (len(spec) - 3)
            if k < 0:
                return None
            n_ell = max(n_ell, k)
            spec = spec.replace("...", "".join(free[n_ell - k : n_ell]))
        if len(spec) != op.ndim or len(set(spec)) != len(spec) or not spec.isalpha() and spec:
            return None
        expanded.append(spec)
    ell = "".join(free[:n_ell])
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts: dict[str, int] = {}
        for spec in expanded:
            for ch in spec:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, k in counts.items() if k == 1 and ch not in ell))
    return expanded, out


@register_grad(ltorch.einsum)
def _einsum_grad(equation, *operands):
    """Each operand's gradient is itself an einsum (of the cotangent and the other operands), as in eager:
    a batched matrix product where the forward was one, never the broadcast product of all subscripts."""
    ops = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (tuple, list)) else operands
    if not isinstance(equation, str) or not all(isinstance(o, TensorProxy) for o in ops):
        return NotImplemented
    parsed = _einsum_specs(equation, ops)
    if parsed is None:
        return NotImplemented
    specs, out_spec = parsed
    sizes: dict[str, int] = {}
    for spec, op in zip(specs, ops):
        for ch, n in zip(spec, op.shape):
            if sizes.setdefault(ch, n) != n:
                return NotImplemented  # broadcast size-1 dims: the decomposition's gradient sums them
    out = ltorch.einsum(equation, *ops)
    g = get_grad(out)
    for i, (spec, op) in enumerate(zip(specs, ops)):
        if not _wants(op):
            continue
        others = [(s, o) for j, (s, o) in enumerate(zip(specs, ops)) if j != i]
        available = set(out_spec).union(*(set(s) for s, _ in others))
        kept = "".join(ch for ch in spec if ch in available)
        sub = ",".join([out_spec] + [s for s, _ in others]) + "->" + kept
        grad = ltorch.einsum(sub, g, *(o for _, o in others))
        if kept != spec:  # subscripts summed within this operand alone: the gradient is the same along them
            shape = tuple(sizes[ch] if ch in kept else 1 for ch in spec)
            grad = ltorch.expand(ltorch.reshape(grad, shape), tuple(sizes[ch] for ch in spec))
        put_grad(op, ltorch.to(grad, op.dtype.torch_dtype) if grad.dtype is not op.dtype else grad)
    return out
