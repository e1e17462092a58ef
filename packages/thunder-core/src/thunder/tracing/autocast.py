"""Autocast, applied while tracing: ``torch.autocast`` is invisible to a function-mode tracer, so the
tracer casts the arguments of the operations autocast would cast, following PyTorch's per-device
policy, and the program then runs with autocast disabled (its trace says exactly what it computes).

Operations in a device's lower-precision list run in the autocast dtype; those in its float32
list run in float32. Calls with an explicit ``dtype=`` are not eligible, as in PyTorch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_map

__all__ = ["autocast_policy", "autocast_state", "any_autocast_enabled"]

T = torch.Tensor

_MATMUL_LIKE = {
    F.linear,
    torch.matmul,
    T.matmul,
    T.__matmul__,
    T.__rmatmul__,
    torch.mm,
    T.mm,
    torch.bmm,
    T.bmm,
    torch.addmm,
    T.addmm,
    torch.baddbmm,
    T.baddbmm,
    torch.addbmm,
    torch.mv,
    torch.einsum,
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.conv_transpose3d,
    F.prelu,
}

LOWER_PRECISION = {
    "cuda": _MATMUL_LIKE,
    "cpu": _MATMUL_LIKE | {F.scaled_dot_product_attention},
}

_LOSSES = {
    F.mse_loss,
    F.l1_loss,
    F.smooth_l1_loss,
    F.huber_loss,
    F.nll_loss,
    F.cross_entropy,
    F.kl_div,
    F.binary_cross_entropy_with_logits,
    F.cosine_embedding_loss,
    F.hinge_embedding_loss,
    F.margin_ranking_loss,
    F.soft_margin_loss,
    F.multilabel_margin_loss,
    F.multi_margin_loss,
    F.triplet_margin_loss,
    F.poisson_nll_loss,
}

FLOAT32 = {
    "cuda": _LOSSES
    | {
        torch.acos,
        torch.asin,
        torch.cosh,
        torch.erfinv,
        torch.exp,
        T.exp,
        torch.expm1,
        torch.log,
        T.log,
        torch.log10,
        torch.log2,
        torch.log1p,
        torch.reciprocal,
        torch.rsqrt,
        T.rsqrt,
        torch.sinh,
        torch.tan,
        torch.pow,
        T.pow,
        T.__pow__,
        T.__rpow__,
        F.softplus,
        F.layer_norm,
        F.group_norm,
        torch.norm,
        T.norm,
        F.normalize,
        F.cosine_similarity,
        torch.cdist,
        torch.dist,
        torch.cumprod,
        torch.cumsum,
        T.cumsum,
        torch.prod,
        T.prod,
        torch.sum,
        T.sum,
        torch.logsumexp,
        torch.softmax,
        T.softmax,
        F.softmax,
        torch.log_softmax,
        T.log_softmax,
        F.log_softmax,
        torch.renorm,
    },
    "cpu": _LOSSES | {torch.prod, T.prod, torch.cdist, F.avg_pool3d, F.adaptive_avg_pool3d, F.max_pool3d},
}


if hasattr(torch._C, "_is_any_autocast_enabled"):
    any_autocast_enabled = torch._C._is_any_autocast_enabled
else:  # pragma: no cover - older torch

    def any_autocast_enabled() -> bool:
        """Whether autocast is on for any device type."""
        return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")


def autocast_state() -> tuple:
    """The autocast settings a trace depends on: (enabled, dtype) for each device type."""
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))


def autocast_policy(func, args, kwargs):
    """``args``/``kwargs`` with the casts autocast applies to ``func`` on their device, recorded as ops."""
    tensors = [a for a in args if isinstance(a, TensorProxy)] or [
        v for v in kwargs.values() if isinstance(v, TensorProxy)
    ]
    if not tensors or kwargs.get("dtype") is not None:
        return args, kwargs
    device_type = tensors[0].device.devicetype.value
    if device_type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device_type):
        return args, kwargs
    if func in LOWER_PRECISION[device_type]:
        target = torch.get_autocast_dtype(device_type)
    elif func in FLOAT32[device_type]:
        target = torch.float32
    else:
        return args, kwargs
    from thunder.torch import to as ltorch_to

    def cast(x):
        if isinstance(x, TensorProxy) and dtypes.is_float_dtype(x.dtype) and x.dtype.torch_dtype != target:
            return ltorch_to(x, target)
        return x

    return tree_map(cast, args), tree_map(cast, kwargs)
