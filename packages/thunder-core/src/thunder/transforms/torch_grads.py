"""Gradient rules for torch-language operations whose backward is better than their decomposition's.

The forward keeps the single operation; the backward calls a dedicated backward operation
(which the torch executor runs with PyTorch's fused kernel).
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder.transforms.autodiff import get_grad, put_grad, register_grad, zeros_like


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
    from thunder.tracing.tracer import fallback_symbol

    out, mask = fallback_symbol(torch.native_dropout)(a, p, True)
    put_grad(a, ltorch.mul(ltorch.mul(get_grad(out), mask), 1.0 / (1.0 - p)))
    return out
