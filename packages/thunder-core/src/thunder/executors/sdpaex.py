"""The ``sdpa`` executor: PyTorch's fused attention kernels for ``scaled_dot_product_attention``.

``ltorch.scaled_dot_product_attention`` decomposes into matmuls and a softmax. This executor
replaces it with one call of a fused kernel that also returns the row-wise log-sum-exp of the
attention scores, which the fused backward kernel needs:

- CPU: ``aten._scaled_dot_product_flash_attention_for_cpu`` and its ``_backward``
  (float32/float64/bfloat16/float16, additive or boolean masks);
- CUDA: ``aten._scaled_dot_product_efficient_attention`` and its ``_backward``
  (float32/bfloat16/float16, no mask, head size a multiple of 8).

The trace shows ``(t0, _) = sdpa_fwd(q, k, v, 0.0, True, None, None)`` and, where the inputs need
grad, ``(gq, gk, gv) = sdpa_bwd(g, q, k, v, t0, lse, 0.0, True, None, None)`` in the backward:
``_sdpa_grad`` is the grad transform, so autodiff saves ``(q, k, v, out, logsumexp)`` and calls the
fused backward kernel instead of differentiating the decomposition (whose backward is a chain of
matmuls, a float32 softmax backward and masking ``where`` calls).

Why the memory-efficient pair on CUDA: it takes every dtype and head size up to the alignment, so
its conditions are the fewest of the three fused CUDA backends. Eager's dispatcher may pick another
(cuDNN's kernels on an H200 with torch 2.11, flash attention elsewhere); those need checks on the
GPU generation and library versions that cannot be made on a machine without the GPU. Dropout is
left to the decomposition, so the backward gets the empty random-state tensors eager's kernels
return without dropout.
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder import clang
from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.executors.base import OperatorExecutor

__all__ = ["sdpa_ex", "sdpa_fwd", "sdpa_bwd"]

sdpa_ex = OperatorExecutor("sdpa", version=torch.__version__)

_CPU_DTYPES = (dtypes.float32, dtypes.float64, dtypes.bfloat16, dtypes.float16)
_CUDA_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
_LSE_ALIGN_CUDA = 32  # the efficient-attention kernel pads its log-sum-exp to a multiple of 32 rows
_HEAD_ALIGN_CUDA = 8  # the efficient-attention kernels' head-size alignment for 16-bit dtypes (eager pads others)


def _lse_dtype(dtype):
    return dtypes.float32 if dtype in (dtypes.bfloat16, dtypes.float16) else dtype


# ---------------------------------------------------------------- forward


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t`` with unit stride in its last dim, as the efficient-attention kernels require (eager's
    dispatcher makes them so before calling them)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _sdpa_fwd_impl(q, k, v, dropout_p, is_causal, attn_mask, scale):
    # (the CPU flash kernel, like the efficient ones, reads each row as unit-stride: given a channels-last query it
    # computed wrong values where eager's dispatcher would have run its math kernel)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )
    out, lse, _seed, _offset = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, attn_mask, True, dropout_p, is_causal, scale=scale
    )
    return out, lse


def _sdpa_fwd_meta(q, k, v, dropout_p, is_causal, attn_mask, scale):
    B, H, L, _ = q.shape
    out = TensorProxy(like=q, shape=(B, H, L, v.shape[-1]))
    rows = L
    if q.device.devicetype is DeviceType.CUDA:
        rows = -(-L // _LSE_ALIGN_CUDA) * _LSE_ALIGN_CUDA
    lse = TensorProxy(like=q, shape=(B, H, rows), dtype=_lse_dtype(q.dtype))
    return out, lse


sdpa_fwd = sdpa_ex.register_operator("sdpa_fwd", meta=_sdpa_fwd_meta, fn=_sdpa_fwd_impl)


# ---------------------------------------------------------------- backward


def _sdpa_bwd_impl(grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale):
    grad_out, q, k, v = (_last_dim_contiguous(t) for t in (grad_out, q, k, v))
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )
    # without dropout the forward kernel returns empty 0-d int64 CPU tensors as its random state, which
    # the backward does not read; the mask asks for no bias gradient (the checker takes no mask on CUDA)
    no_rng = torch.empty((), dtype=torch.int64)
    gq, gk, gv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        grad_out,
        q,
        k,
        v,
        attn_mask,
        out,
        lse,
        no_rng,
        no_rng,
        dropout_p,
        [True, True, True, False],
        is_causal,
        scale=scale,
    )
    return gq, gk, gv


def _sdpa_bwd_meta(grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale):
    return TensorProxy(like=q), TensorProxy(like=k), TensorProxy(like=v)


sdpa_bwd = sdpa_ex.register_operator("sdpa_bwd", meta=_sdpa_bwd_meta, fn=_sdpa_bwd_impl)


# ---------------------------------------------------------------- claiming ltorch.scaled_dot_product_attention


def _sdpa_checker(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> bool:
    if not all(isinstance(t, TensorProxy) and t.ndim == 4 for t in (q, k, v)):
        return False
    if not (q.dtype is k.dtype is v.dtype) or not (q.device is k.device is v.device):
        return False
    if dropout_p != 0.0 or (is_causal and attn_mask is not None):
        return False
    if not isinstance(scale, (float, int, type(None))):
        return False
    # same batch and heads (no grouped-query broadcasting), same head size, keys and values aligned
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2] or k.shape[2] != v.shape[2]:
        return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return False
    # the flash kernels divide by these sizes (an empty sequence or zero heads ends the process with SIGFPE
    # on CPU): empty calls stay with PyTorch's composite implementation, which returns an empty tensor
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        return False
    devicetype = q.device.devicetype
    if devicetype is DeviceType.CPU:
        if q.dtype not in _CPU_DTYPES:
            return False
        if attn_mask is None:
            return True
        # the CPU kernel takes additive masks of the query's dtype, and gives no gradient for the mask
        # itself; a boolean mask becomes an additive one first (``_additive_mask``), as eager's does
        return (
            isinstance(attn_mask, TensorProxy)
            and attn_mask.dtype in (q.dtype, dtypes.bool8)
            and attn_mask.ndim <= 4
            and not attn_mask.requires_grad
        )
    if devicetype is DeviceType.CUDA:
        # the efficient-attention pair, forward and backward: no mask, an aligned head size
        return q.dtype in _CUDA_DTYPES and attn_mask is None and q.shape[-1] % _HEAD_ALIGN_CUDA == 0
    return False


def _additive_mask(attn_mask, dtype):
    """A boolean mask (True: attend) as the additive mask the kernels take: 0 where True, -inf where False."""
    if attn_mask is None or attn_mask.dtype is not dtypes.bool8:
        return attn_mask
    return ltorch.where(attn_mask, clang.full_like(attn_mask, 0.0, dtype=dtype), float("-inf"))


def _sdpa_execution(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    attn_mask = _additive_mask(attn_mask, q.dtype)
    out, _ = sdpa_fwd(q, k, v, float(dropout_p), bool(is_causal), attn_mask, scale)
    return out


def _sdpa_grad(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Grad transform: the fused forward, then the fused backward kernel."""
    from thunder.core.transforms import get_grad, put_grads

    attn_mask = _additive_mask(attn_mask, q.dtype)
    out, lse = sdpa_fwd(q, k, v, float(dropout_p), bool(is_causal), attn_mask, scale)
    grad_out = get_grad(out)
    gq, gk, gv = sdpa_bwd(grad_out, q, k, v, out, lse, float(dropout_p), bool(is_causal), attn_mask, scale)
    put_grads((q, k, v), (gq, gk, gv))
    return out


sdpa_ex.register_implementation(
    ltorch.scaled_dot_product_attention,
    checker=_sdpa_checker,
    execution_transform=_sdpa_execution,
    grad_transform=_sdpa_grad,
)
