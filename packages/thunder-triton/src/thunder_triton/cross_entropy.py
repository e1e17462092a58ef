"""Fused cross-entropy: Triton forward and backward kernels for ``ltorch.cross_entropy``.

The forward kernel reads each row of logits once, in blocks, keeping a running maximum and sum
(an online log-sum-exp); it writes the row's loss and its log-sum-exp (float32), never the
softmax. The backward kernel recomputes ``softmax = exp(logits - lse)`` block by block from the
saved logits and log-sum-exp and writes the gradient of the logits directly: no full-size
softmax or log-softmax is materialised in either pass (eager PyTorch saves the ``[N, V]``
log-softmax for backward and allocates a second ``[N, V]`` buffer for its gradient).

Operators (as they appear in traces):

- ``triton_cross_entropy(logits, target, ignore_index, reduction, label_smoothing)`` returns
  ``(loss, lse)``: the reduced loss in the logits' dtype and the per-row log-sum-exp;
- ``triton_cross_entropy_backward(grad, logits, target, lse, ignore_index, reduction,
  label_smoothing)`` returns the gradient of the logits.

The checker (:func:`cross_entropy_checker`) accepts: float32/bfloat16/float16 logits of shape
``[N, C]`` or ``[N, C, D]`` (class dimension 1, as in PyTorch; any strides), integer targets of
shape ``[N]`` / ``[N, D]``, ``reduction`` mean/sum/none, any integer ``ignore_index`` and
``label_smoothing`` in ``[0, 1]``; no class ``weight``, no deprecated ``size_average``/``reduce``,
no probability targets. Everything else falls back to the next executor (the decomposition).

Targets outside ``[0, C)`` (other than ``ignore_index``) are not checked by the kernel (PyTorch
raises or asserts on the device); their loss is undefined.

Triton is imported when this module is imported, which :mod:`thunder_triton.executor` does
only when the executor is requested.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grad
from thunder.extend import OperatorExecutor
from thunder_triton.plugin import interpret_mode

__all__ = [
    "cross_entropy_forward",
    "cross_entropy_backward",
    "cross_entropy_checker",
    "register",
]

# The largest block of classes one loop iteration handles. Vocabularies larger than this are
# processed in several blocks (the tests lower it to exercise the loop on small vocabularies).
MAX_BLOCK = 4096

_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
_REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------- kernels
#
# A "row" is one prediction: logits[n, :] for 2-D logits, logits[n, :, d] for 3-D ones. Row r
# is (outer, inner) = (r // n_inner, r % n_inner); its classes lie at
# base + c * stride_class with base = outer * stride_outer + inner * stride_inner.


@triton.jit
def _ce_forward_kernel(
    logits_ptr,
    target_ptr,
    loss_ptr,
    lse_ptr,
    n_inner,
    stride_outer,
    stride_inner,
    stride_class,
    t_stride_outer,
    t_stride_inner,
    n_classes,
    ignore_index,
    smoothing,
    HAS_SMOOTHING: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    outer = row // n_inner
    inner = row % n_inner
    base = logits_ptr + outer * stride_outer + inner * stride_inner
    cols = tl.arange(0, BLOCK)

    # online log-sum-exp over the row, in float32
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
    s = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    sum_x = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    for start in range(0, n_classes, BLOCK):
        c = start + cols
        mask = c < n_classes
        x = tl.load(base + c * stride_class, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
        if HAS_SMOOTHING:
            sum_x += tl.sum(tl.where(mask, x, 0.0), 0)
    lse = m + tl.log(s)

    t = tl.load(target_ptr + outer * t_stride_outer + inner * t_stride_inner).to(tl.int64)
    valid = t != ignore_index
    in_range = valid & (t >= 0) & (t < n_classes)
    t_safe = tl.where(in_range, t, 0)
    x_t = tl.load(base + t_safe * stride_class, mask=in_range, other=0.0).to(tl.float32)
    loss = lse - x_t
    if HAS_SMOOTHING:
        # -sum_c log_softmax(x)_c / C = lse - mean(x)
        loss = (1.0 - smoothing) * loss + smoothing * (lse - sum_x / n_classes)
    loss = tl.where(valid, loss, 0.0)
    tl.store(loss_ptr + row, loss)
    tl.store(lse_ptr + row, lse)


@triton.jit
def _ce_backward_kernel(
    logits_ptr,
    target_ptr,
    lse_ptr,
    grad_ptr,
    dlogits_ptr,
    n_inner,
    stride_outer,
    stride_inner,
    stride_class,
    t_stride_outer,
    t_stride_inner,
    d_stride_outer,
    d_stride_inner,
    d_stride_class,
    g_stride,
    n_classes,
    ignore_index,
    smoothing,
    HAS_SMOOTHING: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    outer = row // n_inner
    inner = row % n_inner
    base = logits_ptr + outer * stride_outer + inner * stride_inner
    dbase = dlogits_ptr + outer * d_stride_outer + inner * d_stride_inner
    cols = tl.arange(0, BLOCK)

    t = tl.load(target_ptr + outer * t_stride_outer + inner * t_stride_inner).to(tl.int64)
    valid = t != ignore_index
    g = tl.load(grad_ptr + row * g_stride).to(tl.float32)
    g = tl.where(valid, g, 0.0)
    lse = tl.load(lse_ptr + row)
    for start in range(0, n_classes, BLOCK):
        c = start + cols
        mask = c < n_classes
        x = tl.load(base + c * stride_class, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        if HAS_SMOOTHING:
            d = p - tl.where(c == t, 1.0 - smoothing, 0.0) - smoothing / n_classes
        else:
            d = p - tl.where(c == t, 1.0, 0.0)
        tl.store(dbase + c * d_stride_class, (d * g).to(dlogits_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------- launchers


def _block(n_classes: int) -> tuple[int, int]:
    block = min(triton.next_power_of_2(n_classes), MAX_BLOCK)
    num_warps = 8 if block >= 2048 else 4
    return block, num_warps


def _row_layout(t: torch.Tensor) -> tuple[int, int, int, int]:
    """(n_inner, stride_outer, stride_inner, stride_class) of a [N, C] or [N, C, D] tensor."""
    if t.ndim == 2:
        return 1, t.stride(0), 0, t.stride(1)
    return t.shape[2], t.stride(0), t.stride(2), t.stride(1)


def _target_layout(target: torch.Tensor) -> tuple[int, int]:
    if target.ndim == 1:
        return target.stride(0), 0
    return target.stride(0), target.stride(1)


def cross_entropy_forward(
    logits: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the forward kernel: returns ``(loss, lse)``.

    ``loss`` has the logits' dtype, shape ``target.shape`` for ``reduction="none"`` and ``()``
    otherwise; ``lse`` (float32, shape ``target.shape``) is what the backward kernel needs.
    """
    n_classes = logits.shape[1]
    rows = target.numel()
    losses = torch.empty(target.shape, dtype=torch.float32, device=logits.device)
    lse = torch.empty(target.shape, dtype=torch.float32, device=logits.device)
    if rows > 0:
        n_inner, s_outer, s_inner, s_class = _row_layout(logits)
        t_outer, t_inner = _target_layout(target)
        block, num_warps = _block(n_classes)
        _ce_forward_kernel[(rows,)](
            logits,
            target,
            losses,
            lse,
            n_inner,
            s_outer,
            s_inner,
            s_class,
            t_outer,
            t_inner,
            n_classes,
            int(ignore_index),
            float(label_smoothing),
            HAS_SMOOTHING=label_smoothing > 0.0,
            BLOCK=block,
            num_warps=num_warps,
        )
    if reduction == "none":
        return losses.to(logits.dtype), lse
    total = losses.sum()
    if reduction == "sum":
        return total.to(logits.dtype), lse
    count = (target != ignore_index).sum()
    return (total / count).to(logits.dtype), lse


def cross_entropy_backward(
    grad: torch.Tensor,
    logits: torch.Tensor,
    target: torch.Tensor,
    lse: torch.Tensor,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
) -> torch.Tensor:
    """Runs the backward kernel: the gradient of the logits (contiguous, the logits' dtype)."""
    n_classes = logits.shape[1]
    rows = target.numel()
    dlogits = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    if rows == 0:
        return dlogits
    if reduction == "none":
        g = grad.reshape(-1)
        g_stride = g.stride(0)
    else:
        g = grad.to(torch.float32)
        if reduction == "mean":
            g = g / (target != ignore_index).sum()
        g = g.reshape(1)
        g_stride = 0
    n_inner, s_outer, s_inner, s_class = _row_layout(logits)
    d_inner, d_outer, d_inner_stride, d_class = _row_layout(dlogits)
    t_outer, t_inner = _target_layout(target)
    block, num_warps = _block(n_classes)
    _ce_backward_kernel[(rows,)](
        logits,
        target,
        lse,
        g,
        dlogits,
        n_inner,
        s_outer,
        s_inner,
        s_class,
        t_outer,
        t_inner,
        d_outer,
        d_inner_stride,
        d_class,
        g_stride,
        n_classes,
        int(ignore_index),
        float(label_smoothing),
        HAS_SMOOTHING=label_smoothing > 0.0,
        BLOCK=block,
        num_warps=num_warps,
    )
    return dlogits


# ---------------------------------------------------------------- meta functions


def _forward_meta(logits, target, ignore_index, reduction, label_smoothing):
    loss_shape = target.shape if reduction == "none" else ()
    loss = TensorProxy(like=logits, shape=loss_shape)
    lse = TensorProxy(like=logits, shape=target.shape, dtype=dtypes.float32, requires_grad=False)
    return loss, lse


def _backward_meta(grad, logits, target, lse, ignore_index, reduction, label_smoothing):
    return TensorProxy(like=logits, requires_grad=False)


# ---------------------------------------------------------------- the implementation of ltorch.cross_entropy


def _accepted_devicetypes() -> tuple[DeviceType, ...]:
    # compiled Triton runs on CUDA tensors; the interpreter runs on CPU ones (and copies CUDA ones)
    return (DeviceType.CPU, DeviceType.CUDA) if interpret_mode() else (DeviceType.CUDA,)


_ACCEPTED_DEVICETYPES = _accepted_devicetypes()


def cross_entropy_checker(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,
    reduction="mean",
    label_smoothing=0.0,
) -> bool:
    """Whether the Triton kernels compute this ``cross_entropy`` call (see the module docstring)."""
    if not isinstance(a, TensorProxy) or not isinstance(target, TensorProxy):
        return False
    if weight is not None or size_average is not None or reduce is not None:
        return False
    if reduction not in _REDUCTIONS:
        return False
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        return False
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool):
        return False
    if not 0.0 <= label_smoothing <= 1.0:
        return False
    if a.dtype not in _DTYPES or not dtypes.is_integer_dtype(target.dtype) or target.dtype is dtypes.bool8:
        return False
    if a.device.devicetype not in _ACCEPTED_DEVICETYPES or a.device != target.device:
        return False
    if a.ndim == 2:
        if target.shape != (a.shape[0],):
            return False
    elif a.ndim == 3:
        if target.shape != (a.shape[0], a.shape[2]):
            return False
    else:
        return False
    return a.shape[1] > 0


def _make(ex: OperatorExecutor):
    fwd = ex.register_operator("triton_cross_entropy", meta=_forward_meta, fn=cross_entropy_forward)
    bwd = ex.register_operator("triton_cross_entropy_backward", meta=_backward_meta, fn=cross_entropy_backward)

    def execution_transform(
        a,
        target,
        weight=None,
        size_average=None,
        ignore_index=-100,
        reduce=None,
        reduction="mean",
        label_smoothing=0.0,
    ):
        loss, _ = fwd(a, target, int(ignore_index), reduction, float(label_smoothing))
        return loss

    def grad_transform(
        a,
        target,
        weight=None,
        size_average=None,
        ignore_index=-100,
        reduce=None,
        reduction="mean",
        label_smoothing=0.0,
    ):
        # forward saves the logits and the per-row log-sum-exp; backward recomputes the softmax
        # block by block inside the kernel
        loss, lse = fwd(a, target, int(ignore_index), reduction, float(label_smoothing))
        g = get_grad(loss)
        ga = bwd(g, a, target, lse, int(ignore_index), reduction, float(label_smoothing))
        put_grad(a, ga)
        return loss

    ex.register_implementation(
        ltorch.cross_entropy,
        checker=cross_entropy_checker,
        execution_transform=execution_transform,
        grad_transform=grad_transform,
    )
    return fwd, bwd


def register(ex: OperatorExecutor) -> tuple:
    """Registers the cross-entropy operators and the implementation of ``ltorch.cross_entropy`` on ``ex``.

    Returns the forward and backward operators' symbols.
    """
    return _make(ex)
