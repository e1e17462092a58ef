"""Custom ``torch.autograd.Function``s the fuzzer's programs call. Their backwards deliberately
differ from the derivative of their forwards, so a compiler that differentiates the forward instead
of calling ``backward`` gives a visibly different gradient."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class ScaleGrad(torch.autograd.Function):
    """Forward: a copy of ``x``. Backward: the incoming gradient times 10."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 10


class MulSaved(torch.autograd.Function):
    """Forward ``x * y`` (same shapes) with both saved; backward gives ``x`` twice its true share."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        gx = g * y * 2 if ctx.needs_input_grad[0] else None
        gy = g * x if ctx.needs_input_grad[1] else None
        return gx, gy


class ClampST(torch.autograd.Function):
    """Forward ``x.clamp(min=lo)`` with a non-tensor argument; a straight-through backward."""

    @staticmethod
    def forward(ctx, x, lo):
        return x.clamp(min=lo)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return g, None


class SinCos(torch.autograd.Function):
    """Two outputs, the second marked non-differentiable; backward uses only the first's gradient."""

    @staticmethod
    def forward(ctx, x):
        s, c = x.sin(), x.cos()
        ctx.mark_non_differentiable(c)
        ctx.save_for_backward(x)
        return s, c

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * x.cos() * 3


FUNCTIONS = {cls.__name__: cls for cls in (ScaleGrad, MulSaved, ClampST, SinCos)}
