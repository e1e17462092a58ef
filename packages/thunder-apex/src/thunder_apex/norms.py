"""apex's fused LayerNorm and RMSNorm (forward and backward) for ``ltorch.layer_norm``/``ltorch.rms_norm``.

The kernels are those of ``apex.normalization.fused_layer_norm`` (its ``fused_layer_norm_cuda``
extension). Each forward returns the statistics its backward takes, so a grad trace saves them
instead of recomputing the normalisation:

==============================  =========================================================
operator                        apex kernel
==============================  =========================================================
``apex_layer_norm_affine_fwd``  ``forward_affine(x, shape, w, b, eps) -> (y, mean, invvar)``
``apex_layer_norm_affine_bwd``  ``backward_affine(g, mean, invvar, x, shape, w, b, eps, False) -> (gx, gw, gb)``
``apex_layer_norm_fwd``         ``forward(x, shape, eps) -> (y, mean, invvar)``
``apex_layer_norm_bwd``         ``backward(g, mean, invvar, x, shape, eps, False) -> gx``
``apex_rms_norm_affine_fwd``    ``rms_forward_affine(x, shape, w, eps) -> (y, invvar)``
``apex_rms_norm_affine_bwd``    ``rms_backward_affine(g, invvar, x, shape, w, eps, False) -> (gx, gw)``
``apex_rms_norm_fwd``           ``rms_forward(x, shape, eps) -> (y, invvar)``
``apex_rms_norm_bwd``           ``rms_backward(g, invvar, x, shape, eps, False) -> gx``
==============================  =========================================================

(``False`` is apex's ``memory_efficient`` flag: the backward gets the input, not the output.)
The checkers accept CUDA inputs of float32/float16/bfloat16 whose weight (and bias) have the
input's dtype, device and the normalized shape; ``layer_norm`` needs both or neither of weight and
bias. Everything else stays with the torch executor.
"""

from __future__ import annotations

import math
from numbers import Number

import torch

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grads
from thunder_apex import runtime
from thunder_apex.executor import apex_ex, on_supported_devices

__all__ = [
    "apex_layer_norm_affine_fwd",
    "apex_layer_norm_affine_bwd",
    "apex_layer_norm_fwd",
    "apex_layer_norm_bwd",
    "apex_rms_norm_affine_fwd",
    "apex_rms_norm_affine_bwd",
    "apex_rms_norm_fwd",
    "apex_rms_norm_bwd",
    "SUPPORTED_DTYPES",
]

#: input dtypes the norm checkers accept
SUPPORTED_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16)


def _stats_proxy(x: TensorProxy, normalized_shape) -> TensorProxy:
    """A per-row statistic (mean or inverse std): one value per normalised row, float32 for half inputs."""
    rows = math.prod(x.shape[: x.ndim - len(normalized_shape)])
    dtype = dtypes.float32 if x.dtype in (dtypes.float16, dtypes.bfloat16) else x.dtype
    return TensorProxy(like=x, shape=(rows,), dtype=dtype)


def _shape(normalized_shape) -> list[int]:
    return [int(s) for s in normalized_shape]


# ---------------------------------------------------------------- LayerNorm operators


def _ln_affine_fwd_meta(x, normalized_shape, weight, bias, eps):
    return TensorProxy(like=x), _stats_proxy(x, normalized_shape), _stats_proxy(x, normalized_shape)


def _ln_affine_fwd_impl(x, normalized_shape, weight, bias, eps):
    return runtime.layer_norm_extension().forward_affine(
        x.contiguous(), _shape(normalized_shape), weight.contiguous(), bias.contiguous(), float(eps)
    )


def _ln_affine_bwd_meta(grad, mean, invvar, x, normalized_shape, weight, bias, eps):
    return TensorProxy(like=x), TensorProxy(like=weight), TensorProxy(like=bias)


def _ln_affine_bwd_impl(grad, mean, invvar, x, normalized_shape, weight, bias, eps):
    return runtime.layer_norm_extension().backward_affine(
        grad.contiguous(),
        mean,
        invvar,
        x.contiguous(),
        _shape(normalized_shape),
        weight.contiguous(),
        bias.contiguous(),
        float(eps),
        False,
    )


def _ln_fwd_meta(x, normalized_shape, eps):
    return TensorProxy(like=x), _stats_proxy(x, normalized_shape), _stats_proxy(x, normalized_shape)


def _ln_fwd_impl(x, normalized_shape, eps):
    return runtime.layer_norm_extension().forward(x.contiguous(), _shape(normalized_shape), float(eps))


def _ln_bwd_meta(grad, mean, invvar, x, normalized_shape, eps):
    return TensorProxy(like=x)


def _ln_bwd_impl(grad, mean, invvar, x, normalized_shape, eps):
    return runtime.layer_norm_extension().backward(
        grad.contiguous(), mean, invvar, x.contiguous(), _shape(normalized_shape), float(eps), False
    )


apex_layer_norm_affine_fwd = apex_ex.register_operator(
    "apex_layer_norm_affine_fwd", meta=_ln_affine_fwd_meta, fn=_ln_affine_fwd_impl
)
apex_layer_norm_affine_bwd = apex_ex.register_operator(
    "apex_layer_norm_affine_bwd", meta=_ln_affine_bwd_meta, fn=_ln_affine_bwd_impl
)
apex_layer_norm_fwd = apex_ex.register_operator("apex_layer_norm_fwd", meta=_ln_fwd_meta, fn=_ln_fwd_impl)
apex_layer_norm_bwd = apex_ex.register_operator("apex_layer_norm_bwd", meta=_ln_bwd_meta, fn=_ln_bwd_impl)


# ---------------------------------------------------------------- RMSNorm operators


def _rms_affine_fwd_meta(x, normalized_shape, weight, eps):
    return TensorProxy(like=x), _stats_proxy(x, normalized_shape)


def _rms_affine_fwd_impl(x, normalized_shape, weight, eps):
    return runtime.layer_norm_extension().rms_forward_affine(
        x.contiguous(), _shape(normalized_shape), weight.contiguous(), float(eps)
    )


def _rms_affine_bwd_meta(grad, invvar, x, normalized_shape, weight, eps):
    return TensorProxy(like=x), TensorProxy(like=weight)


def _rms_affine_bwd_impl(grad, invvar, x, normalized_shape, weight, eps):
    return runtime.layer_norm_extension().rms_backward_affine(
        grad.contiguous(), invvar, x.contiguous(), _shape(normalized_shape), weight.contiguous(), float(eps), False
    )


def _rms_fwd_meta(x, normalized_shape, eps):
    return TensorProxy(like=x), _stats_proxy(x, normalized_shape)


def _rms_fwd_impl(x, normalized_shape, eps):
    return runtime.layer_norm_extension().rms_forward(x.contiguous(), _shape(normalized_shape), float(eps))


def _rms_bwd_meta(grad, invvar, x, normalized_shape, eps):
    return TensorProxy(like=x)


def _rms_bwd_impl(grad, invvar, x, normalized_shape, eps):
    return runtime.layer_norm_extension().rms_backward(
        grad.contiguous(), invvar, x.contiguous(), _shape(normalized_shape), float(eps), False
    )


apex_rms_norm_affine_fwd = apex_ex.register_operator(
    "apex_rms_norm_affine_fwd", meta=_rms_affine_fwd_meta, fn=_rms_affine_fwd_impl
)
apex_rms_norm_affine_bwd = apex_ex.register_operator(
    "apex_rms_norm_affine_bwd", meta=_rms_affine_bwd_meta, fn=_rms_affine_bwd_impl
)
apex_rms_norm_fwd = apex_ex.register_operator("apex_rms_norm_fwd", meta=_rms_fwd_meta, fn=_rms_fwd_impl)
apex_rms_norm_bwd = apex_ex.register_operator("apex_rms_norm_bwd", meta=_rms_bwd_meta, fn=_rms_bwd_impl)


# ---------------------------------------------------------------- checkers


def _normalized_shape_ok(x: TensorProxy, normalized_shape) -> bool:
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        normalized_shape = (normalized_shape,)
    if not isinstance(normalized_shape, (tuple, list)) or not normalized_shape:
        return False
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in normalized_shape):
        return False
    n = len(normalized_shape)
    return n <= x.ndim and tuple(x.shape[x.ndim - n :]) == tuple(normalized_shape)


def _param_ok(p, x: TensorProxy, normalized_shape) -> bool:
    if p is None:
        return True
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return isinstance(p, TensorProxy) and p.dtype is x.dtype and tuple(p.shape) == shape


def _common_ok(x, normalized_shape, eps, *params) -> bool:
    if not runtime.layer_norm_available():
        return False
    if not on_supported_devices(x, *params):
        return False
    if x.dtype not in SUPPORTED_DTYPES or x.numel() == 0 or not _normalized_shape_ok(x, normalized_shape):
        return False
    if eps is not None and (not isinstance(eps, Number) or isinstance(eps, bool)):
        return False
    return all(_param_ok(p, x, normalized_shape) for p in params)


def _layer_norm_checker(a, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> bool:
    if (weight is None) != (bias is None):
        return False
    return eps is not None and _common_ok(a, normalized_shape, eps, weight, bias)


def _rms_norm_checker(a, normalized_shape, weight=None, eps=None) -> bool:
    return _common_ok(a, normalized_shape, eps, weight)


def _tuple_shape(normalized_shape) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _rms_eps(a: TensorProxy, eps) -> float:
    # torch.nn.functional.rms_norm's default: the machine epsilon of the input's dtype
    return float(torch.finfo(dtypes.to_torch_dtype(a.dtype)).eps) if eps is None else float(eps)


# ---------------------------------------------------------------- execution and grad transforms


def _layer_norm_execution(a, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    shape = _tuple_shape(normalized_shape)
    if weight is None:
        out, _, _ = apex_layer_norm_fwd(a, shape, float(eps))
    else:
        out, _, _ = apex_layer_norm_affine_fwd(a, shape, weight, bias, float(eps))
    return out


def _layer_norm_grad(a, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    shape = _tuple_shape(normalized_shape)
    eps = float(eps)
    if weight is None:
        out, mean, invvar = apex_layer_norm_fwd(a, shape, eps)
        grad_a = apex_layer_norm_bwd(get_grad(out), mean, invvar, a, shape, eps)
        put_grads((a,), (grad_a,))
        return out
    out, mean, invvar = apex_layer_norm_affine_fwd(a, shape, weight, bias, eps)
    grads = apex_layer_norm_affine_bwd(get_grad(out), mean, invvar, a, shape, weight, bias, eps)
    put_grads((a, weight, bias), grads)
    return out


def _rms_norm_execution(a, normalized_shape, weight=None, eps=None):
    shape = _tuple_shape(normalized_shape)
    if weight is None:
        out, _ = apex_rms_norm_fwd(a, shape, _rms_eps(a, eps))
    else:
        out, _ = apex_rms_norm_affine_fwd(a, shape, weight, _rms_eps(a, eps))
    return out


def _rms_norm_grad(a, normalized_shape, weight=None, eps=None):
    shape = _tuple_shape(normalized_shape)
    eps = _rms_eps(a, eps)
    if weight is None:
        out, invvar = apex_rms_norm_fwd(a, shape, eps)
        grad_a = apex_rms_norm_bwd(get_grad(out), invvar, a, shape, eps)
        put_grads((a,), (grad_a,))
        return out
    out, invvar = apex_rms_norm_affine_fwd(a, shape, weight, eps)
    grads = apex_rms_norm_affine_bwd(get_grad(out), invvar, a, shape, weight, eps)
    put_grads((a, weight), grads)
    return out


apex_ex.register_implementation(
    ltorch.layer_norm,
    checker=_layer_norm_checker,
    execution_transform=_layer_norm_execution,
    grad_transform=_layer_norm_grad,
)
apex_ex.register_implementation(
    ltorch.rms_norm,
    checker=_rms_norm_checker,
    execution_transform=_rms_norm_execution,
    grad_transform=_rms_norm_grad,
)
