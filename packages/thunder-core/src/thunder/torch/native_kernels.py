"""PyTorch's native forward/backward kernel pairs of composite operations (norms, pooling).

Autodiff differentiates batch norm, layer norm, group norm and pooling with these (see
``thunder.transforms.native_grads``): the forward runs the kernel that also returns what the
backward needs (the batch statistics, the pooling indices), the backward runs PyTorch's backward
kernel (``native_batch_norm_backward``, ``max_pool2d_with_indices_backward``...), as eager
autograd does. The torch executor runs each symbol as that one kernel. The norms' symbols carry a
decomposition into prims, so a fusion executor can fuse their pieces instead; the pooling symbols
have none (no fusion executor fuses windows), so every executor runs them as PyTorch's kernels.
"""

from __future__ import annotations

import torch

from thunder import clang
from thunder.core import dtypes, prims
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.torch.registry import torchsymbol

__all__ = [
    "native_batch_norm_train",
    "native_batch_norm_no_stats",
    "native_batch_norm_backward",
    "native_layer_norm",
    "native_layer_norm_backward",
    "native_group_norm",
    "native_group_norm_backward",
    "max_pool_with_indices",
    "max_pool_with_indices_backward",
    "avg_pool_backward",
    "adaptive_avg_pool_backward",
    "adaptive_max_pool",
    "adaptive_max_pool_backward",
]

aten = torch.ops.aten


def _acc_dtype(a):
    return dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype


def _as(t, dtype):
    return clang.maybe_convert_to_dtype(t, dtype)


def _nondiff(*ts):
    for t in ts:
        if isinstance(t, TensorProxy):
            t.nondifferentiable = True
    return ts


# ---------------------------------------------------------------- batch norm


def _bn_stats(a):
    """Batch mean and inverse standard deviation of ``a`` per channel (dim 1), in the accumulation dtype."""
    dims = (0,) + tuple(range(2, a.ndim))
    x = _as(a, _acc_dtype(a))
    var = clang.var(x, dims, correction=0)
    mean = clang.mean(x, dims)
    return x, mean, var, dims


def _channel(t, a):
    shape = [1] * a.ndim
    shape[1] = a.shape[1]
    return clang.reshape(t, shape)


def _bn_apply(a, x, mean, rstd, weight, bias):
    out = clang.mul(clang.sub(x, _channel(mean, a)), _channel(rstd, a))
    if weight is not None:
        out = clang.mul(out, _channel(_as(weight, x.dtype), a))
    if bias is not None:
        out = clang.add(out, _channel(_as(bias, x.dtype), a))
    return _as(out, a.dtype)


@torchsymbol(aten._native_batch_norm_legit_functional, name="native_batch_norm_train")
def native_batch_norm_train(a, weight, bias, running_mean, running_var, training: bool, momentum: float, eps: float):
    """Training-mode batch norm: ``(out, batch mean, batch inverse std, new running mean, new running var)``."""
    x, mean, var, dims = _bn_stats(a)
    rstd = prims.rsqrt(clang.add(var, eps))
    n = 1
    for d in dims:
        n *= a.shape[d]
    unbiased = clang.mul(var, n / max(n - 1, 1))
    new_mean = clang.add(clang.mul(running_mean, 1 - momentum), _as(clang.mul(mean, momentum), running_mean.dtype))
    new_var = clang.add(clang.mul(running_var, 1 - momentum), _as(clang.mul(unbiased, momentum), running_var.dtype))
    _nondiff(mean, rstd, new_mean, new_var)
    return _bn_apply(a, x, mean, rstd, weight, bias), mean, rstd, new_mean, new_var


@torchsymbol(aten._native_batch_norm_legit, name="native_batch_norm_no_stats")
def native_batch_norm_no_stats(a, weight, bias, training: bool, momentum: float, eps: float):
    """Batch norm with batch statistics and no running ones: ``(out, batch mean, batch inverse std)``."""
    x, mean, var, _ = _bn_stats(a)
    rstd = prims.rsqrt(clang.add(var, eps))
    _nondiff(mean, rstd)
    return _bn_apply(a, x, mean, rstd, weight, bias), mean, rstd


def _reduce_to_channel(t, a):
    return clang.sum(t, (0,) + tuple(range(2, a.ndim)))


@torchsymbol(aten.native_batch_norm_backward, name="native_batch_norm_backward")
def native_batch_norm_backward(
    grad_out, a, weight, running_mean, running_var, save_mean, save_invstd, train: bool, eps: float, output_mask
):
    """``(grad_input, grad_weight, grad_bias)`` of batch norm (``None`` where ``output_mask`` is False).

    In training mode the statistics are ``save_mean``/``save_invstd`` (the forward's batch statistics), in
    eval mode the running ones.
    """
    comp = _acc_dtype(a)
    x, g = _as(a, comp), _as(grad_out, comp)
    if train:
        mean, rstd = save_mean, save_invstd
    else:
        mean, rstd = running_mean, prims.rsqrt(clang.add(_as(running_var, comp), eps))
    mean, rstd = _as(mean, comp), _as(rstd, comp)
    xhat = clang.mul(clang.sub(x, _channel(mean, a)), _channel(rstd, a))
    sum_g = _reduce_to_channel(g, a)
    sum_g_xhat = _reduce_to_channel(clang.mul(g, xhat), a)
    scale = rstd if weight is None else clang.mul(rstd, _as(weight, comp))
    grad_a = None
    if output_mask[0]:
        if train:
            n = a.numel() // a.shape[1]
            centred = clang.sub(
                clang.sub(g, _channel(clang.true_divide(sum_g, n), a)),
                clang.mul(xhat, _channel(clang.true_divide(sum_g_xhat, n), a)),
            )
            grad_a = _as(clang.mul(centred, _channel(scale, a)), a.dtype)
        else:
            grad_a = _as(clang.mul(g, _channel(scale, a)), a.dtype)
    grad_w = _as(sum_g_xhat, weight.dtype) if output_mask[1] and weight is not None else None
    grad_b = _as(sum_g, weight.dtype if weight is not None else comp) if output_mask[2] else None
    return grad_a, grad_w, grad_b


# ---------------------------------------------------------------- layer norm and group norm


def _stats_dtype(a):
    # PyTorch's CPU kernels keep the statistics in the input's dtype, the CUDA ones in float32
    return _acc_dtype(a) if a.device.devicetype is DeviceType.CUDA else a.dtype


@torchsymbol(aten.native_layer_norm, name="native_layer_norm")
def native_layer_norm(a, normalized_shape, weight, bias, eps: float):
    """Layer norm: ``(out, mean, inverse std)``, the statistics with size 1 in the normalised dims."""
    n = len(normalized_shape)
    dims = tuple(range(a.ndim - n, a.ndim))
    x = _as(a, _acc_dtype(a))
    var = clang.var(x, dims, correction=0, keepdim=True)
    mean = clang.mean(x, dims, keepdim=True)
    rstd = prims.rsqrt(clang.add(var, eps))
    out = clang.mul(clang.sub(x, mean), rstd)
    if weight is not None:
        out = clang.mul(out, weight)
    if bias is not None:
        out = clang.add(out, bias)
    mean, rstd = _as(mean, _stats_dtype(a)), _as(rstd, _stats_dtype(a))
    _nondiff(mean, rstd)
    return _as(out, a.dtype), mean, rstd


@torchsymbol(aten.native_layer_norm_backward, name="native_layer_norm_backward")
def native_layer_norm_backward(grad_out, a, normalized_shape, mean, rstd, weight, bias, output_mask):
    """``(grad_input, grad_weight, grad_bias)`` of layer norm (``None`` where ``output_mask`` is False)."""
    n = len(normalized_shape)
    dims = tuple(range(a.ndim - n, a.ndim))
    outer = tuple(range(a.ndim - n))
    comp = _acc_dtype(a)
    x, g = _as(a, comp), _as(grad_out, comp)
    mean, rstd = _as(mean, comp), _as(rstd, comp)
    xhat = clang.mul(clang.sub(x, mean), rstd)
    grad_a = grad_w = grad_b = None
    if output_mask[0]:
        gw = g if weight is None else clang.mul(g, _as(weight, comp))
        m = 1
        for d in dims:
            m *= a.shape[d]
        mean_gw = clang.mean(gw, dims, keepdim=True)
        mean_gw_xhat = clang.mean(clang.mul(gw, xhat), dims, keepdim=True)
        grad_a = _as(clang.mul(clang.sub(clang.sub(gw, mean_gw), clang.mul(xhat, mean_gw_xhat)), rstd), a.dtype)
    if output_mask[1] and weight is not None:
        grad_w = _as(clang.sum(clang.mul(g, xhat), outer) if outer else clang.mul(g, xhat), weight.dtype)
    if output_mask[2] and bias is not None:
        grad_b = _as(clang.sum(g, outer) if outer else g, bias.dtype)
    return grad_a, grad_w, grad_b


@torchsymbol(aten.native_group_norm, name="native_group_norm")
def native_group_norm(a, weight, bias, N: int, C: int, HxW: int, group: int, eps: float):
    """Group norm: ``(out, mean, inverse std)``, the statistics of shape ``(N, group)``."""
    x = clang.reshape(_as(a, _acc_dtype(a)), (N, group, -1))
    var = clang.var(x, (2,), correction=0, keepdim=True)
    mean = clang.mean(x, (2,), keepdim=True)
    rstd = prims.rsqrt(clang.add(var, eps))
    out = clang.reshape(clang.mul(clang.sub(x, mean), rstd), a.shape)
    if weight is not None:
        out = clang.mul(out, _channel(weight, a))
    if bias is not None:
        out = clang.add(out, _channel(bias, a))
    mean = _as(clang.reshape(mean, (N, group)), _stats_dtype(a))
    rstd = _as(clang.reshape(rstd, (N, group)), _stats_dtype(a))
    _nondiff(mean, rstd)
    return _as(out, a.dtype), mean, rstd


@torchsymbol(aten.native_group_norm_backward, name="native_group_norm_backward")
def native_group_norm_backward(grad_out, a, mean, rstd, weight, N: int, C: int, HxW: int, group: int, output_mask):
    """``(grad_input, grad_weight, grad_bias)`` of group norm (``None`` where ``output_mask`` is False)."""
    comp = _acc_dtype(a)
    per_channel = (N, C, HxW)
    x, g = clang.reshape(_as(a, comp), per_channel), clang.reshape(_as(grad_out, comp), per_channel)
    grouped = (N, group, (C // group) * HxW)
    stat = (N, group, 1)
    m, r = clang.reshape(_as(mean, comp), stat), clang.reshape(_as(rstd, comp), stat)
    xhat = clang.reshape(clang.mul(clang.sub(clang.reshape(x, grouped), m), r), per_channel)
    grad_a = grad_w = grad_b = None
    if output_mask[0]:
        gw = g if weight is None else clang.mul(g, clang.reshape(_as(weight, comp), (1, C, 1)))
        gw_g, xhat_g = clang.reshape(gw, grouped), clang.reshape(xhat, grouped)
        mean_gw = clang.mean(gw_g, (2,), keepdim=True)
        mean_gw_xhat = clang.mean(clang.mul(gw_g, xhat_g), (2,), keepdim=True)
        grad = clang.mul(clang.sub(clang.sub(gw_g, mean_gw), clang.mul(xhat_g, mean_gw_xhat)), r)
        grad_a = _as(clang.reshape(grad, a.shape), a.dtype)
    if output_mask[1] and weight is not None:
        grad_w = _as(clang.sum(clang.mul(g, xhat), (0, 2)), weight.dtype)
    if output_mask[2] and weight is not None:
        grad_b = _as(clang.sum(g, (0, 2)), weight.dtype)
    return grad_a, grad_w, grad_b


# ---------------------------------------------------------------- pooling (PyTorch's kernels only)


def _like(t, shape=None, dtype=None):
    return TensorProxy(like=t, shape=shape, dtype=dtype, requires_grad=False)


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """A pooling window count along one dim, as PyTorch computes it."""
    num = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (num + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


_MAX_POOL = {2: aten.max_pool2d_with_indices, 3: aten.max_pool3d_with_indices}
_MAX_POOL_BACKWARD = {2: aten.max_pool2d_with_indices_backward, 3: aten.max_pool3d_with_indices_backward}
_AVG_POOL_BACKWARD = {2: aten.avg_pool2d_backward, 3: aten.avg_pool3d_backward}
_ADAPTIVE_AVG_BACKWARD = {2: aten._adaptive_avg_pool2d_backward, 3: aten._adaptive_avg_pool3d_backward}
_ADAPTIVE_MAX = {2: aten.adaptive_max_pool2d, 3: aten.adaptive_max_pool3d}
_ADAPTIVE_MAX_BACKWARD = {2: aten.adaptive_max_pool2d_backward, 3: aten.adaptive_max_pool3d_backward}


def run_by_rank(ops: dict):
    """A torch callable choosing the 2-d or 3-d kernel of ``ops`` by the spatial rank (its first argument)."""

    def run(n, *args):
        return ops[n](*args)

    return run


# name -> the kernels by spatial rank, for the torch executor (thunder.executors.torchex)
pool_kernels: dict = {}


def _pool_symbol(name: str, ops: dict, meta):
    """A symbol run by PyTorch's 2-d or 3-d kernel of ``ops`` (chosen by its first argument, the spatial rank)."""
    from thunder.core.symbol import Symbol

    sym = Symbol(name, meta, id=f"torch.{name}", is_prim=True, print_name=name)
    sym.__doc__ = meta.__doc__
    pool_kernels[name] = (sym, ops)
    return sym


def _max_pool_meta(n, a, kernel, stride, padding, dilation, ceil_mode):
    """Max pooling over the last ``n`` dims, with the indices of the maxima: ``(out, indices)``."""
    spatial = a.shape[a.ndim - n :]
    outs = tuple(
        pool_output_size(s, k, st, p, d, ceil_mode)
        for s, k, st, p, d in zip(spatial, kernel, stride, padding, dilation)
    )
    shape = a.shape[: a.ndim - n] + outs
    out = _like(a, shape)
    indices = _like(a, shape, dtypes.int64)
    _nondiff(indices)
    return out, indices


def _same_as_input_meta(n, grad_out, a, *rest):
    """The gradient of a pooling's input, run by PyTorch's backward kernel."""
    return _like(a)


def _adaptive_max_meta(n, a, output_size):
    """Adaptive max pooling over the last ``n`` dims, with the indices of the maxima: ``(out, indices)``."""
    shape = a.shape[: a.ndim - n] + tuple(output_size)
    indices = _like(a, shape, dtypes.int64)
    _nondiff(indices)
    return _like(a, shape), indices


def _max_pool_backward_meta(n, grad_out, a, kernel, stride, padding, dilation, ceil_mode, indices):
    """The gradient of max pooling's input, run by PyTorch's backward kernel."""
    return _like(a)


max_pool_with_indices = _pool_symbol("max_pool_with_indices", _MAX_POOL, _max_pool_meta)
max_pool_with_indices_backward = _pool_symbol(
    "max_pool_with_indices_backward", _MAX_POOL_BACKWARD, _max_pool_backward_meta
)
avg_pool_backward = _pool_symbol("avg_pool_backward", _AVG_POOL_BACKWARD, _same_as_input_meta)
adaptive_avg_pool_backward = _pool_symbol("adaptive_avg_pool_backward", _ADAPTIVE_AVG_BACKWARD, _same_as_input_meta)
adaptive_max_pool = _pool_symbol("adaptive_max_pool", _ADAPTIVE_MAX, _adaptive_max_meta)
adaptive_max_pool_backward = _pool_symbol("adaptive_max_pool_backward", _ADAPTIVE_MAX_BACKWARD, _same_as_input_meta)
