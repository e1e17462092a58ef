"""Which kernel eager's ``torch.matmul`` runs, where that changes its answer: a product of tensors of two dtypes
whose result has no elements or no terms. Eager's batched path (``bmm``) returns at once, before its dtype check,
giving the second operand's dtype; its folded path (``mm``/``mv``) checks the dtypes first and raises. Which path
eager takes depends on the operands' layout (``should_fold`` in ATen's ``LinearAlgebra.cpp``), which the tracer
knows from the shadows."""

from __future__ import annotations

import torch

from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["unfolded_product_of_nothing"]

T = torch.Tensor
_MATMULS = frozenset((torch.matmul, T.matmul, T.__matmul__))


def unfolded_product_of_nothing(func, args, kwargs) -> bool:
    """Whether ``func(*args)`` is eager's ``matmul`` of a batch (3-d or more) and a vector or matrix, of two dtypes,
    with no element or no term in its product, that eager runs as a ``bmm`` (it does not fold the batch into a
    matrix: the batch's leading dimensions are not laid out as one, and the other operand does not require grad).
    The product of a matrix by a batch, and of two batches, the ``torch.matmul`` symbol decides itself."""
    if func not in _MATMULS or kwargs or len(args) != 2:
        return False
    a, b = args
    if type(a) is not TracingTensor or type(b) is not TracingTensor:
        return False
    pa, pb = a._thunder_proxy, b._thunder_proxy
    if pa.dtype is pb.dtype:
        return False
    if pa.ndim >= 3 and pb.ndim in (1, 2):
        large, small = a, pb
    elif pa.ndim == 1 and pb.ndim >= 3:
        large, small = b, pa
    else:
        return False
    sizes = (*pa.shape, *pb.shape)
    if not all(type(n) is int for n in sizes) or 0 not in sizes or small.requires_grad:
        return False
    from thunder.tracing.views import shadow

    with torch._C.DisableTorchFunction():
        m = shadow(large)
        if large is b:
            m = m.mT
        if m.numel() == 0:
            return False  # (eager folds an empty batch)
        shape, strides = m.shape, m.stride()
        return any(strides[i] != strides[i + 1] * shape[i + 1] for i in range(m.dim() - 2))
