"""apex's fused softmax cross-entropy as the implementation of ``ltorch.cross_entropy``.

Two operators are registered on :data:`~thunder_apex.apex_ex`:

- ``apex_cross_entropy(logits, target, reduction, label_smoothing) -> (loss, max_log_sum_exp)``:
  apex's forward kernel (per-row losses and each row's log-sum-exp), reduced as ``reduction`` says;
- ``apex_cross_entropy_backward(grad, logits, *, target, max_log_sum_exp, label_smoothing)``: apex's
  backward kernel, the gradient of the logits from the per-row gradient ``grad``.

``ltorch.cross_entropy`` calls the checker accepts (2-D CUDA logits of float32/float16, 1-D int64
targets, no class weights, a negative ``ignore_index``, a label smoothing in ``[0, 1]``) run
``apex_cross_entropy``; their gradient runs ``apex_cross_entropy_backward`` with the torch
operations that turn the loss's cotangent into per-row gradients between the two::

    (_, t1) = apex_cross_entropy(t_0, t_1, 'mean', 0.0)
    t6 = Tensor.contiguous(t_0, ...)
    ...                                  # expand the loss's cotangent to one value per row
    t7 = apex_cross_entropy_backward(t5, t6, target=t_1, max_log_sum_exp=t1, label_smoothing=0.0)

Ignored targets: apex's kernels have no ``ignore_index``, and a negative label would index out of
bounds. A negative ``ignore_index`` can never be a class, so the kernel wrappers treat rows whose
target is negative as ignored, exactly as PyTorch treats ``target == ignore_index``: their loss and
gradient are zero, and ``"mean"`` divides by the number of the other rows (in the grad trace the
cotangent is divided by that count, computed from ``target != ignore_index``). A non-negative
``ignore_index`` is left to the torch executor.
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grad
from thunder_apex import runtime
from thunder_apex.executor import apex_ex, on_supported_devices

__all__ = ["apex_cross_entropy", "apex_cross_entropy_backward", "SUPPORTED_DTYPES"]

#: logits dtypes the checker accepts (apex's xentropy kernels dispatch on float and half)
SUPPORTED_DTYPES = (dtypes.float32, dtypes.float16)
_REDUCTIONS = ("none", "mean", "sum")


# ---------------------------------------------------------------- forward


def _forward_meta(logits: TensorProxy, target: TensorProxy, reduction: str, label_smoothing: float):
    rows = logits.shape[0]
    loss = TensorProxy(like=logits, shape=(rows,) if reduction == "none" else ())
    # with half_to_float=False the kernel returns the losses and log-sum-exps in the logits' dtype
    max_log_sum_exp = TensorProxy(like=logits, shape=(rows,))
    return loss, max_log_sum_exp


def _forward_impl(logits: torch.Tensor, target: torch.Tensor, reduction: str, label_smoothing: float):
    xentropy = runtime.xentropy_extension()
    ignored = target < 0
    labels = target.masked_fill(ignored, 0).contiguous()
    # the kernel's losses are float32 whatever the logits' dtype (its log-sum-exps are in the logits'
    # dtype): reduce in float32, then return the logits' dtype as eager does
    losses, max_log_sum_exp = xentropy.forward(logits.contiguous(), labels, float(label_smoothing), False)
    losses = losses.masked_fill(ignored, 0)
    if reduction == "none":
        return losses.to(logits.dtype), max_log_sum_exp
    total = losses.sum()
    if reduction == "sum":
        return total.to(logits.dtype), max_log_sum_exp
    return (total / (~ignored).sum()).to(logits.dtype), max_log_sum_exp


apex_cross_entropy = apex_ex.register_operator("apex_cross_entropy", meta=_forward_meta, fn=_forward_impl)


# ---------------------------------------------------------------- backward


def _backward_meta(
    grad: TensorProxy,
    logits: TensorProxy,
    *,
    target: TensorProxy,
    max_log_sum_exp: TensorProxy,
    label_smoothing: float,
) -> TensorProxy:
    return TensorProxy(like=logits)


def _backward_impl(
    grad: torch.Tensor,
    logits: torch.Tensor,
    *,
    target: torch.Tensor,
    max_log_sum_exp: torch.Tensor,
    label_smoothing: float,
) -> torch.Tensor:
    xentropy = runtime.xentropy_extension()
    ignored = target < 0
    grad = grad.to(logits.dtype).masked_fill(ignored, 0).contiguous()
    labels = target.masked_fill(ignored, 0).contiguous()
    return xentropy.backward(grad, logits.contiguous(), max_log_sum_exp, labels, float(label_smoothing))


apex_cross_entropy_backward = apex_ex.register_operator(
    "apex_cross_entropy_backward", meta=_backward_meta, fn=_backward_impl
)


# ---------------------------------------------------------------- claiming ltorch.cross_entropy


def _checker(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> bool:
    if not runtime.xentropy_available():
        return False
    if not on_supported_devices(a, target):
        return False
    if a.ndim != 2 or target.ndim != 1 or a.shape[0] != target.shape[0] or a.numel() == 0:
        return False
    if a.dtype not in SUPPORTED_DTYPES or target.dtype is not dtypes.int64:
        return False
    if weight is not None or size_average is not None or reduce is not None:
        return False
    if reduction not in _REDUCTIONS:
        return False
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool) or ignore_index >= 0:
        return False
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool):
        return False
    return 0.0 <= label_smoothing <= 1.0


def _execution(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    loss, _ = apex_cross_entropy(a, target, reduction, float(label_smoothing))
    return loss


def _grad(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    label_smoothing = float(label_smoothing)
    loss, max_log_sum_exp = apex_cross_entropy(a, target, reduction, label_smoothing)
    logits = ltorch.contiguous(a)
    if reduction == "mean":
        count = ltorch.sum(ltorch.to(ltorch.ne(target, ignore_index), dtypes.to_torch_dtype(a.dtype)))
    g = get_grad(loss)
    if reduction != "none":
        # one value per row: the cotangent of the reduced loss, broadcast (and divided for "mean")
        g = ltorch.expand(ltorch.expand(ltorch.unsqueeze(g, 0), [1]), (a.shape[0],))
        if reduction == "mean":
            g = ltorch.true_divide(g, count)
    grad_logits = apex_cross_entropy_backward(
        g, logits, target=target, max_log_sum_exp=max_log_sum_exp, label_smoothing=label_smoothing
    )
    put_grad(a, grad_logits)
    return loss


apex_ex.register_implementation(
    ltorch.cross_entropy, checker=_checker, execution_transform=_execution, grad_transform=_grad
)
