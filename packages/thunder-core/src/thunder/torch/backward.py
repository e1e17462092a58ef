"""Backward operations of the torch language (``silu_backward``...): symbols with a decomposition
(for fusion executors and autodiff) that the torch executor runs with PyTorch's own kernels.
"""

from __future__ import annotations

import torch

from thunder import clang
from thunder.core import dtypes, prims
from thunder.torch.registry import torchsymbol

aten = torch.ops.aten


@torchsymbol(aten.silu_backward, name="silu_backward")
def silu_backward(grad_output, a):
    s = clang.elementwise_unary(a, prims.neg)
    s = prims.reciprocal(prims.add(prims.exp(s), 1.0))
    one_minus = clang.sub(1.0, s)
    return clang.mul(grad_output, clang.mul(s, clang.add(clang.mul(a, one_minus), 1.0)))


@torchsymbol(aten.gelu_backward, name="gelu_backward")
def gelu_backward(grad_output, a, *, approximate: str = "none"):
    import math

    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        a3 = clang.mul(clang.mul(a, a), a)
        inner = clang.mul(clang.add(a, clang.mul(a3, 0.044715)), k)
        t = clang.elementwise_unary(inner, prims.tanh)
        left = clang.mul(clang.add(t, 1.0), 0.5)
        dinner = clang.mul(clang.add(clang.mul(clang.mul(a, a), 3 * 0.044715), 1.0), k)
        right = clang.mul(clang.mul(clang.mul(a, 0.5), clang.sub(1.0, clang.mul(t, t))), dinner)
        return clang.mul(grad_output, clang.add(left, right))
    cdf = clang.mul(clang.add(clang.elementwise_unary(clang.mul(a, 1 / math.sqrt(2)), prims.erf), 1.0), 0.5)
    pdf = clang.mul(clang.elementwise_unary(clang.mul(clang.mul(a, a), -0.5), prims.exp), 1 / math.sqrt(2 * math.pi))
    return clang.mul(grad_output, clang.add(cdf, clang.mul(a, pdf)))


@torchsymbol(torch._softmax_backward_data, name="softmax_backward")
def softmax_backward(grad_output, output, dim: int, input_dtype):
    s = clang.sum(clang.mul(grad_output, output), dim, keepdim=True)
    out = clang.mul(output, clang.sub(grad_output, s))
    return clang.maybe_convert_to_dtype(out, dtypes.to_dtype(input_dtype))


@torchsymbol(torch._log_softmax_backward_data, name="log_softmax_backward")
def log_softmax_backward(grad_output, output, dim: int, input_dtype):
    s = clang.sum(grad_output, dim, keepdim=True)
    out = clang.sub(grad_output, clang.mul(clang.elementwise_unary(output, prims.exp), s))
    return clang.maybe_convert_to_dtype(out, dtypes.to_dtype(input_dtype))


@torchsymbol(aten.embedding_dense_backward, name="embedding_backward")
def embedding_backward(grad_output, indices, num_weights: int, padding_idx: int, scale_grad_by_freq: bool):
    """The gradient of ``embedding``'s weight (``padding_idx`` -1 for none)."""
    dim = grad_output.shape[-1]
    flat_idx = clang.reshape(indices, (indices.numel(),))
    flat_g = clang.reshape(grad_output, (indices.numel(), dim))
    if padding_idx >= 0:
        is_pad = clang.unsqueeze(clang.elementwise_binary(flat_idx, padding_idx, prims.eq), 1)
        flat_g = clang.where(is_pad, 0.0, flat_g)
    index = clang.expand(clang.unsqueeze(flat_idx, 1), flat_g.shape)
    zeros = clang.full((num_weights, dim), 0, device=grad_output.device, dtype=grad_output.dtype)
    return prims.scatter_add(zeros, index, flat_g, 0)


def _like(t, shape=None):
    from thunder.core.proxies import TensorProxy

    return TensorProxy(like=t, shape=shape, requires_grad=False)


@torchsymbol(aten.convolution_backward, name="convolution_backward")
def convolution_backward(
    grad_output, a, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """``(grad_input, grad_weight, grad_bias)`` of ``convolution``; run by PyTorch's kernel (no decomposition)."""
    grad_bias = _like(grad_output, (bias_sizes[0],)) if output_mask[2] else None
    return (_like(a) if output_mask[0] else None, _like(weight) if output_mask[1] else None, grad_bias)


@torchsymbol(aten.unfold_backward, name="unfold_backward")
def unfold_backward(grad_output, input_sizes, dim: int, size: int, step: int):
    """The gradient of ``Tensor.unfold`` w.r.t. its input; run by PyTorch's kernel (no decomposition)."""
    return _like(grad_output, tuple(input_sizes))


# ---------------------------------------------------------------- activations (eager's one-kernel backwards)


def _where_zero(mask, g):
    return clang.where(mask, clang.maybe_convert_to_dtype(0, g.dtype), g)


@torchsymbol(aten.threshold_backward, name="threshold_backward")
def threshold_backward(grad_output, a, threshold):
    """The gradient of ``relu``/``threshold`` (``a`` is relu's output): zero where ``a <= threshold``."""
    return _where_zero(clang.elementwise_binary(a, threshold, prims.le), grad_output)


@torchsymbol(aten.hardtanh_backward, name="hardtanh_backward")
def hardtanh_backward(grad_output, a, min_val, max_val):
    """The gradient of ``hardtanh``: the cotangent strictly inside ``(min_val, max_val)``, zero elsewhere."""
    inside = clang.elementwise_binary(
        clang.elementwise_binary(a, min_val, prims.gt),
        clang.elementwise_binary(a, max_val, prims.lt),
        prims.bitwise_and,
    )
    return clang.where(inside, grad_output, clang.maybe_convert_to_dtype(0, grad_output.dtype))


@torchsymbol(aten.sigmoid_backward, name="sigmoid_backward")
def sigmoid_backward(grad_output, out):
    """The gradient of ``sigmoid`` from its output: ``g * out * (1 - out)``."""
    return clang.mul(grad_output, clang.mul(out, clang.sub(1, out)))


@torchsymbol(aten.elu_backward, name="elu_backward")
def elu_backward(grad_output, alpha, scale, input_scale, is_result: bool, self_or_result):
    """The gradient of ``elu``/``celu``/``selu`` (``self_or_result``: the input, or with ``is_result`` the
    output): ``scale`` times the cotangent where it is positive, the exponential's derivative where it is not.
    The torch executor runs eager's kernel, whose answer at a NaN depends on the dtype (its vectorised and
    scalar loops differ); this decomposition, for fusion executors, gives the scalar loop's."""
    a = self_or_result
    negcoef = alpha * scale
    if is_result:
        neg = clang.mul(grad_output, clang.mul(clang.add(a, negcoef), input_scale))
    else:
        e = clang.elementwise_unary(clang.mul(a, input_scale), prims.exp)
        neg = clang.mul(grad_output, clang.mul(e, negcoef * input_scale))
    pos = clang.mul(grad_output, scale) if scale != 1 else grad_output
    return clang.where(clang.elementwise_binary(a, 0.0, prims.le), neg, pos)


@torchsymbol(aten.hardswish_backward, name="hardswish_backward")
def hardswish_backward(grad_output, a):
    """The gradient of ``hardswish``: zero below -3, the cotangent times ``a / 3 + 0.5`` up to 3, the cotangent
    above (and at a NaN, where both comparisons are false). The torch executor runs eager's kernel."""
    below = clang.elementwise_binary(a, -3.0, prims.lt)
    middle = clang.elementwise_binary(a, 3.0, prims.le)
    slope = clang.mul(grad_output, clang.add(clang.true_divide(a, 3.0), 0.5))
    zero = clang.maybe_convert_to_dtype(0, grad_output.dtype)
    return clang.where(below, zero, clang.where(middle, slope, grad_output))
