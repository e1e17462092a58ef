"""SwiGLU: Triton forward and backward kernels for ``silu(a) * b``.

LitGPT's ``LLaMAMLP`` and Hugging Face's ``LlamaMLP`` write the gated activation as
``F.silu(fc_1(x)) * fc_2(x)`` (``act_fn(gate_proj(x)) * up_proj(x)``); the trace records
``silu`` then ``mul``. :func:`match_swiglu` recognises the pair (either operand order, the
``silu`` result used only by the ``mul``) and replaces it by the composite symbol
:data:`swiglu_pattern`. The forward kernel reads ``a`` and ``b`` once and writes the product,
never the ``silu(a)`` intermediate; the backward kernel recomputes ``silu(a)`` from ``a``.

Rounding follows eager: ``silu(a)`` is computed in float32 and rounded to ``a``'s dtype, the
product computed in float32 and rounded.

Operators: ``triton_swiglu(a, b)`` and ``triton_swiglu_backward(grad, a, b)`` (returns
``(grad_a, grad_b)``).

The checker (:func:`swiglu_checker`) accepts ``a`` and ``b`` of one shape (no broadcasting) and
one dtype, float32/bfloat16/float16, on CUDA (CPU too under ``TRITON_INTERPRET=1``); any
strides (non-contiguous operands are copied first). Everything else runs the recorded ops.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.transforms import get_grad, put_grads
from thunder.extend import OperatorExecutor
from thunder_triton.patterns import Match, TraceGraph
from thunder_triton.plugin import accepted_devicetypes

__all__ = ["swiglu_forward", "swiglu_backward", "swiglu_checker", "swiglu_pattern", "match_swiglu", "register"]

BLOCK = 1024
_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)


@triton.jit
def _swiglu_forward_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = (a * tl.sigmoid(a)).to(y_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + offs, (s * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_backward_kernel(g_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    s = (a * sig).to(db_ptr.dtype.element_ty).to(tl.float32)
    tl.store(db_ptr + offs, (g * s).to(db_ptr.dtype.element_ty), mask=mask)
    ds = (g * b).to(da_ptr.dtype.element_ty).to(tl.float32)
    # d silu(a) / da = sig * (1 + a * (1 - sig))
    tl.store(da_ptr + offs, (ds * sig * (1.0 + a * (1.0 - sig))).to(da_ptr.dtype.element_ty), mask=mask)


def swiglu_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` by the forward kernel (contiguous, ``a``'s dtype and shape)."""
    a, b = a.contiguous(), b.contiguous()
    y = torch.empty_like(a)
    n = a.numel()
    if n:
        _swiglu_forward_kernel[(triton.cdiv(n, BLOCK),)](a, b, y, n, BLOCK=BLOCK)
    return y


def swiglu_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_a, grad_b)`` of ``silu(a) * b`` by the backward kernel."""
    grad, a, b = grad.contiguous(), a.contiguous(), b.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = a.numel()
    if n:
        _swiglu_backward_kernel[(triton.cdiv(n, BLOCK),)](grad, a, b, da, db, n, BLOCK=BLOCK)
    return da, db


def _forward_meta(a, b):
    return TensorProxy(like=a)


def _backward_meta(grad, a, b):
    return TensorProxy(like=a, requires_grad=False), TensorProxy(like=b, requires_grad=False)


def _swiglu_reference(a, b):
    """What :data:`swiglu_pattern` computes, in thunder operations."""
    return ltorch.mul(ltorch.silu(a), b)


swiglu_pattern = Symbol(
    "swiglu_pattern", _swiglu_reference, id="thunder_triton::swiglu_pattern", print_name="thunder_triton.swiglu_pattern"
)
"""``swiglu_pattern(a, b)``: a recognised ``silu(a) * b``."""


def match_swiglu(g: TraceGraph, anchor: int) -> Match | None:
    """Recognises ``mul(silu(a), b)`` / ``mul(b, silu(a))`` ending at ``anchor``."""
    b_mul = g.bsyms[anchor]
    if b_mul.sym is not ltorch.mul or b_mul.kwargs or len(b_mul.args) != 2:
        return None
    x, y = b_mul.args
    for s, other in ((x, y), (y, x)):
        found = g.producer(s, ltorch.silu)
        if found is None or not isinstance(other, TensorProxy) or other is s:
            continue
        b_silu = found[1]
        inplace = b_silu.kwargs.get("inplace", b_silu.args[1] if len(b_silu.args) > 1 else False)
        if inplace:
            continue
        return Match([anchor, found[0]], swiglu_pattern, (b_silu.args[0], other))
    return None


def swiglu_checker(a, b) -> bool:
    """Whether the kernels compute this :data:`swiglu_pattern` call (see the module docstring)."""
    if not isinstance(a, TensorProxy) or not isinstance(b, TensorProxy):
        return False
    if a.dtype not in _DTYPES or b.dtype is not a.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    return a.device.devicetype in accepted_devicetypes() and a.device == b.device


def register(ex: OperatorExecutor) -> tuple:
    """Registers the SwiGLU operators and the implementation of :data:`swiglu_pattern`; returns the operators."""
    fwd = ex.register_operator("triton_swiglu", meta=_forward_meta, fn=swiglu_forward)
    bwd = ex.register_operator("triton_swiglu_backward", meta=_backward_meta, fn=swiglu_backward)

    def grad_transform(a, b):
        y = fwd(a, b)
        ga, gb = bwd(get_grad(y), a, b)
        put_grads((a, b), (ga, gb))
        return y

    ex.register_implementation(
        swiglu_pattern, checker=swiglu_checker, execution_transform=fwd, grad_transform=grad_transform
    )
    return fwd, bwd
