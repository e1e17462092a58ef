"""Which kernel eager's ``torch.matmul`` runs, where that changes its answer: a product of tensors of two dtypes
whose result has no elements or no terms. Eager's batched path (``bmm``) returns at once, before its dtype check,
giving the second operand's dtype; its folded path (``mm``/``mv``) checks the dtypes first and raises. Which path
eager takes depends on the operands' layout (``should_fold`` in ATen's ``LinearAlgebra.cpp``), which the tracer
knows from the shadows. The folded path also decides when eager's product is a transposed view of its result
(``matmul_returning_a_view``)."""

from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import known
from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["matmul_returning_a_view", "unfolded_product_of_nothing"]

T = torch.Tensor
_MATMULS = frozenset((torch.matmul, T.matmul, T.__matmul__))


def _operands(func, args, kwargs) -> tuple[TensorProxy, TensorProxy] | None:
    """The proxies of ``func(*args)``'s two operands where it is a ``matmul`` of two traced tensors, else None."""
    if func not in _MATMULS or kwargs or len(args) != 2:
        return None
    a, b = args
    if type(a) is not TracingTensor or type(b) is not TracingTensor:
        return None
    return a._thunder_proxy, b._thunder_proxy


def unfolded_product_of_nothing(func, args, kwargs) -> bool:
    """Whether ``func(*args)`` is eager's ``matmul`` of a batch (3-d or more) and a vector or matrix, of two dtypes,
    with no element or no term in its product, that eager runs as a ``bmm`` (it does not fold the batch into a
    matrix: the batch's leading dimensions are not laid out as one, and the other operand does not require grad).
    The product of a matrix by a batch, and of two batches, the ``torch.matmul`` symbol decides itself."""
    if (operands := _operands(func, args, kwargs)) is None:
        return False
    a, b = args
    pa, pb = operands
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


def matmul_returning_a_view(func, args, kwargs) -> tuple[TracingTensor, TracingTensor] | None:
    """``(a, b)`` when eager's ``a @ b`` returns a transposed view of a result of its own: a 2-d ``a`` whose
    ``requires_grad`` is set times a batch ``b`` is computed as ``(b.mT @ a.t()).mT`` (PyTorch folds the batch
    into one matrix product), and the view is kept where it is contiguous (an empty result, or a result with one
    row or one column per matrix). The program then computes it so (its tensors inside do not require grad, so
    PyTorch would not fold there); None for every other product, and for sizes known only when the program runs."""
    if (operands := _operands(func, args, kwargs)) is None:
        return None
    a, b = args
    pa, pb = operands
    if pa.ndim != 2 or pb.ndim < 3 or not pa.requires_grad:
        return None
    if not known(pa.shape[1] == pb.shape[-2]):
        return None  # (eager's error for mismatched sizes comes from the product itself)
    # (symbolic sizes: the relations the answer rests on are guarded, as any the trace reads)
    n, p = pa.shape[0], pb.shape[-1]
    empty = known(n == 0) or known(p == 0) or any(known(s == 0) for s in pb.shape[:-2])
    return (a, b) if empty or known(n == 1) or known(p == 1) else None
