"""Gradient rules for add, sub, mul, true_divide and neg on operands their decomposition converts.

In bfloat16 and float16 (and where operands of different dtypes meet) the torch-language symbol
decomposes into ``convert_element_type`` to the computation dtype (float32), the prim, and a
conversion back. Differentiating that decomposition puts the conversions into the backward as
operations of their own: a bfloat16 ``a * b`` got ``g.to(float32) * b.to(float32)`` and a
``.to(bfloat16)`` per operand, ``a + b`` two round trips of its cotangent through float32, each a
separate kernel where no fusion executor fuses them. These rules differentiate at the torch level
instead, as eager autograd does: the backward of ``a * b`` is ``g * b`` and ``g * a`` in the
operands' dtype (PyTorch's kernel computes each element in float32 and rounds once, exactly what
the decomposition computes), summed over broadcast dims and converted to the operand's dtype
where promotion changed it. Each is one torch-language call: the torch executor runs it as one
kernel and a fusion executor fuses its decomposition.

Where the decomposition converts nothing (every operand already in the computation dtype, e.g.
float32) a rule returns ``NotImplemented`` and the decomposition is differentiated as before;
complex operands (whose gradients need conjugates) are left to it too.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder import clang
from thunder.clang import TypePromotionKind
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.transforms.autodiff import get_grad, needs_grad, put_grad, register_grad
from thunder.transforms.prim_grads import sum_to_shape

__all__ = ["converts_operands"]


def converts_operands(*operands, kind: TypePromotionKind = TypePromotionKind.DEFAULT) -> bool:
    """Whether an elementwise operation over ``operands`` computes in a dtype other than a tensor operand's
    or its result's (a reduced-precision float computed in float32, or mixed dtypes), with real operands only."""
    tensors = [t for t in operands if isinstance(t, TensorProxy)]
    if not tensors or any(dtypes.is_complex_dtype(t.dtype) for t in tensors):
        return False
    if any(isinstance(x, complex) for x in operands):
        return False
    comp, res = clang.elementwise_type_promotion(*operands, kind=kind)
    if not dtypes.is_float_dtype(res):
        return False
    return res is not comp or any(t.dtype is not comp for t in tensors)


def _give(x, grad) -> None:
    """``grad`` (the result's shape and dtype) as ``x``'s gradient: summed over broadcast dims, in ``x``'s dtype."""
    if not (isinstance(x, TensorProxy) and dtypes.is_inexact_dtype(x.dtype) and needs_grad(x)):
        return
    grad = sum_to_shape(grad, x.shape)
    if grad.dtype is not x.dtype:
        grad = ltorch.to(grad, x.dtype.torch_dtype)
    put_grad(x, grad)


def _scaled(g, alpha):
    return g if alpha == 1 else ltorch.mul(g, alpha)


@register_grad(ltorch.add)
def _add_grad(a, b, *, alpha=1, out=None):
    if out is not None or not converts_operands(a, b):
        return NotImplemented
    result = ltorch.add(a, b, alpha=alpha)
    g = get_grad(result)
    _give(a, g)
    _give(b, _scaled(g, alpha))
    return result


@register_grad(ltorch.sub)
def _sub_grad(a, b, *, alpha=1, out=None):
    if out is not None or not converts_operands(a, b):
        return NotImplemented
    result = ltorch.sub(a, b, alpha=alpha)
    g = get_grad(result)
    _give(a, g)
    if isinstance(b, TensorProxy) and needs_grad(b):
        _give(b, ltorch.neg(_scaled(g, alpha)))
    return result


@register_grad(ltorch.mul)
def _mul_grad(a, b):
    if not converts_operands(a, b):
        return NotImplemented
    result = ltorch.mul(a, b)
    g = get_grad(result)
    if isinstance(a, TensorProxy) and needs_grad(a):
        _give(a, ltorch.mul(b, g))
    if isinstance(b, TensorProxy) and needs_grad(b):
        _give(b, ltorch.mul(a, g))
    return result


@register_grad(ltorch.true_divide)
def _true_divide_grad(a, b):
    if not converts_operands(a, b, kind=TypePromotionKind.INT_TO_FLOAT):
        return NotImplemented
    result = ltorch.true_divide(a, b)
    g = get_grad(result)
    if isinstance(a, TensorProxy) and needs_grad(a):
        _give(a, ltorch.true_divide(g, b))
    if isinstance(b, TensorProxy) and needs_grad(b):
        # PyTorch's div_tensor_other_backward: -g * ((a / b) / b), each step rounded as eager rounds it
        _give(b, ltorch.neg(ltorch.mul(g, ltorch.true_divide(result, b))))
    return result


@register_grad(ltorch.neg)
def _neg_grad(a):
    if not converts_operands(a):
        return NotImplemented
    result = ltorch.neg(a)
    _give(a, ltorch.neg(get_grad(result)))
    return result
