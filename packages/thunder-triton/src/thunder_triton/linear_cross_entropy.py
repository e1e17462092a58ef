"""Fused linear + cross-entropy: the lm_head matmul and the loss in chunks of rows, never the full logits.

A language model's loss is ``cross_entropy(linear(h, W).reshape(-1, V), targets)``; the
``[N, V]`` logits (and their gradient) are the largest tensors of a training step. When the
logits feed *only* the loss, :func:`match_linear_cross_entropy` replaces ``linear`` (+ an
optional ``reshape``/``view`` to ``[N, V]``) + ``cross_entropy`` by the composite symbol
:data:`linear_cross_entropy_pattern`. Its kernels:

The chain may upcast the logits to float32 before the loss, as HF's ``ForCausalLMLoss`` does
(``logits.float()``): the loss then comes out in float32, and nothing else changes (the kernels'
arithmetic is float32 anyway).

- forward: for each chunk of rows, ``logits = h_chunk @ W.T`` (PyTorch's matmul, ``[chunk, V]``)
  and the cross-entropy forward kernel (:mod:`thunder_triton.cross_entropy`) writes each row's
  loss and log-sum-exp; the chunk's logits are then freed. Only the per-row log-sum-exp
  (float32, ``N`` numbers) is saved for backward;
- backward: for each chunk, the logits are recomputed, the cross-entropy backward kernel turns
  them into their gradient in place of a new buffer, and ``grad_h[chunk] = dlogits @ W``,
  ``grad_W += dlogits.T @ h_chunk`` (``addmm`` into the weight-dtype gradient: float32
  accumulation inside each chunk's product, one rounding per chunk).

Peak extra memory is one ``[chunk, V]`` block instead of ``[N, V]`` logits plus their
gradient; the price is one more matmul (the recomputation) in backward.

When the logits are used elsewhere too (returned, as LitGPT's ``GPT.forward`` does, or logged),
the chain is not *closed* and nothing is fused: the ``cross_entropy`` kernel alone is claimed.

Operators: ``triton_linear_cross_entropy(h, weight, target, ignore_index, reduction,
label_smoothing)`` returns ``(loss, lse)``; ``triton_linear_cross_entropy_backward(grad, h,
weight, target, lse, ignore_index, reduction, label_smoothing)`` returns ``(grad_h, grad_weight)``.

The checker (:func:`linear_cross_entropy_checker`) accepts: ``h`` ``[..., H]`` and ``weight``
``[V, H]`` of one dtype (float32/bfloat16/float16), no bias, integer targets with one entry per
row of ``h``, ``reduction`` mean/sum/none, an integer ``ignore_index``, ``label_smoothing`` in
``[0, 1]``, no class weight; CUDA tensors (CPU too under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.transforms import get_grad, put_grads
from thunder.extend import OperatorExecutor
from thunder_triton import cross_entropy as _ce
from thunder_triton.patterns import Match, TraceGraph, cast_source
from thunder_triton.plugin import accepted_devicetypes

__all__ = [
    "linear_cross_entropy_forward",
    "linear_cross_entropy_backward",
    "linear_cross_entropy_checker",
    "linear_cross_entropy_pattern",
    "match_linear_cross_entropy",
    "register",
]

# Rows per chunk; None chooses about N / ceil(V / H) rows (a power of two), so that a chunk's
# logits are about as large as the hidden states.
CHUNK_ROWS: int | None = None

_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
_REDUCTIONS = ("mean", "sum", "none")


def _chunk_rows(n_rows: int, vocab: int, hidden: int) -> int:
    if CHUNK_ROWS is not None:
        return max(1, CHUNK_ROWS)
    factor = max(1, math.ceil(vocab / max(hidden, 1)))
    return max(1, min(n_rows, triton.next_power_of_2(math.ceil(n_rows / factor))))


def linear_cross_entropy_forward(
    h: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
    loss_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, lse)`` of ``cross_entropy(h @ weight.T, target)``, chunk by chunk (see the module docstring).

    The loss has ``loss_dtype`` (default: ``h``'s dtype; float32 when the model upcasts its logits).
    """
    loss_dtype = loss_dtype or h.dtype
    hidden = h.shape[-1]
    h2 = h.reshape(-1, hidden)
    t = target.reshape(-1)
    n_rows, vocab = h2.shape[0], weight.shape[0]
    losses = torch.empty((n_rows,), dtype=torch.float32, device=h.device)
    lse = torch.empty((n_rows,), dtype=torch.float32, device=h.device)
    block, num_warps = _ce._block(vocab)
    chunk = _chunk_rows(n_rows, vocab, hidden)
    for start in range(0, n_rows, chunk):
        end = min(start + chunk, n_rows)
        logits = F.linear(h2[start:end], weight)
        _ce._ce_forward_kernel[(end - start,)](
            logits,
            t[start:end],
            losses[start:end],
            lse[start:end],
            1,
            logits.stride(0),
            0,
            logits.stride(1),
            t.stride(0),
            0,
            vocab,
            int(ignore_index),
            float(label_smoothing),
            HAS_SMOOTHING=label_smoothing > 0.0,
            BLOCK=block,
            num_warps=num_warps,
        )
        del logits
    if reduction == "none":
        return losses.to(loss_dtype).view(target.shape), lse
    total = losses.sum()
    if reduction == "sum":
        return total.to(loss_dtype), lse
    return (total / (t != ignore_index).sum()).to(loss_dtype), lse


def linear_cross_entropy_backward(
    grad: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    lse: torch.Tensor,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_h, grad_weight)``, recomputing each chunk's logits (see the module docstring)."""
    hidden = h.shape[-1]
    h2 = h.reshape(-1, hidden)
    t = target.reshape(-1)
    n_rows, vocab = h2.shape[0], weight.shape[0]
    if reduction == "none":
        g = grad.reshape(-1)
        g_stride = g.stride(0)
    else:
        g = grad.to(torch.float32)
        if reduction == "mean":
            g = g / (t != ignore_index).sum()
        g = g.reshape(1)
        g_stride = 0
    dh = torch.empty((n_rows, hidden), dtype=h.dtype, device=h.device)
    # the weight's gradient is accumulated in its own dtype by addmm (which accumulates each
    # chunk's product in float32 and rounds once per chunk): no [V, H] temporary per chunk
    dw = torch.zeros(weight.shape, dtype=weight.dtype, device=weight.device)
    block, num_warps = _ce._block(vocab)
    chunk = _chunk_rows(n_rows, vocab, hidden)
    for start in range(0, n_rows, chunk):
        end = min(start + chunk, n_rows)
        h_c = h2[start:end]
        logits = F.linear(h_c, weight)
        dlogits = torch.empty_like(logits)
        _ce._ce_backward_kernel[(end - start,)](
            logits,
            t[start:end],
            lse[start:end],
            g[start:end] if g_stride else g,
            dlogits,
            1,
            logits.stride(0),
            0,
            logits.stride(1),
            t.stride(0),
            0,
            dlogits.stride(0),
            0,
            dlogits.stride(1),
            g_stride,
            vocab,
            int(ignore_index),
            float(label_smoothing),
            HAS_SMOOTHING=label_smoothing > 0.0,
            BLOCK=block,
            num_warps=num_warps,
        )
        del logits
        torch.mm(dlogits, weight, out=dh[start:end])
        dw.addmm_(dlogits.t(), h_c)
    return dh.view(h.shape), dw


def _forward_meta(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype):
    loss_shape = tuple(target.shape) if reduction == "none" else ()
    loss = TensorProxy(like=h, shape=loss_shape, dtype=dtypes.to_dtype(loss_dtype))
    lse = TensorProxy(like=h, shape=(target.numel(),), dtype=dtypes.float32, requires_grad=False)
    return loss, lse


def _backward_meta(grad, h, weight, target, lse, ignore_index, reduction, label_smoothing):
    return TensorProxy(like=h, requires_grad=False), TensorProxy(like=weight, requires_grad=False)


def _reference(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype):
    """What :data:`linear_cross_entropy_pattern` computes, in thunder operations."""
    logits = ltorch.to(ltorch.linear(h, weight), loss_dtype)
    logits = ltorch.reshape(logits, -1, weight.shape[0])
    return ltorch.cross_entropy(
        logits, target, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
    )


linear_cross_entropy_pattern = Symbol(
    "linear_cross_entropy_pattern",
    _reference,
    id="thunder_triton::linear_cross_entropy_pattern",
    print_name="thunder_triton.linear_cross_entropy_pattern",
)
"""``linear_cross_entropy_pattern(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype)``.

``loss_dtype`` is the logits' dtype as the loss sees them: the matmul's, or float32 when the
model upcasts them (HF's ``logits.float()``)."""

_CE_PARAMS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
_CE_DEFAULTS = dict(
    weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean", label_smoothing=0.0
)


def match_linear_cross_entropy(g: TraceGraph, anchor: int) -> Match | None:
    """Recognises ``cross_entropy(linear(h, W)[.reshape(-1, V)], target, ...)`` ending at ``anchor``."""
    b_ce = g.bsyms[anchor]
    if b_ce.sym is not ltorch.cross_entropy or len(b_ce.args) > len(_CE_PARAMS):
        return None
    params = dict(_CE_DEFAULTS)
    params.update(zip(_CE_PARAMS, b_ce.args))
    params.update(b_ce.kwargs)
    if params["weight"] is not None or params["size_average"] is not None or params["reduce"] is not None:
        return None
    logits, target = params.get("input"), params.get("target")
    if not isinstance(logits, TensorProxy) or not isinstance(target, TensorProxy) or logits.ndim != 2:
        return None
    indices = []
    found = g.producer(logits, ltorch.reshape, ltorch.view)
    lin_out = logits
    if found is not None:
        lin_out = found[1].args[0]
        if not isinstance(lin_out, TensorProxy) or lin_out.ndim < 2 or lin_out.shape[-1] != logits.shape[-1]:
            return None
        indices.append(found[0])
    # HF upcasts the logits before the loss (logits.float()): exact, the kernel's arithmetic is float32
    cast = cast_source(g, lin_out)
    if cast is not None:
        if lin_out.dtype is not dtypes.float32:
            return None
        indices.append(cast[0])
        lin_out = cast[1]
    fl = g.producer(lin_out, ltorch.linear)
    if fl is None:
        return None
    b_lin = fl[1]
    lin_args = list(b_lin.args) + [None] * (3 - len(b_lin.args))
    h, w, bias = lin_args[0], lin_args[1], b_lin.kwargs.get("bias", lin_args[2])
    if bias is not None or not isinstance(h, TensorProxy) or not isinstance(w, TensorProxy):
        return None
    indices.append(fl[0])
    loss_dtype = b_ce.output.dtype.torch_dtype if isinstance(b_ce.output, TensorProxy) else None
    args = (h, w, target, params["ignore_index"], params["reduction"], params["label_smoothing"], loss_dtype)
    return Match([anchor, *indices], linear_cross_entropy_pattern, args)


def linear_cross_entropy_checker(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype=None) -> bool:
    """Whether the kernels compute this :data:`linear_cross_entropy_pattern` call (see the module docstring)."""
    if not all(isinstance(x, TensorProxy) for x in (h, weight, target)):
        return False
    if h.dtype not in _DTYPES or weight.dtype is not h.dtype or h.ndim < 2 or weight.ndim != 2:
        return False
    if weight.shape[1] != h.shape[-1] or weight.shape[0] == 0 or weight.shape[0] > 2**31 - 1:
        return False
    if not dtypes.is_integer_dtype(target.dtype) or target.dtype is dtypes.bool8 or target.ndim != 1:
        return False
    if target.shape[0] != h.numel() // max(h.shape[-1], 1) or (h.shape[-1] == 0):
        return False
    if reduction not in _REDUCTIONS or not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        return False
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool):
        return False
    if not 0.0 <= label_smoothing <= 1.0:
        return False
    if loss_dtype is not None and dtypes.to_dtype(loss_dtype) not in (h.dtype, dtypes.float32):
        return False
    devices = {h.device, weight.device, target.device}
    return len(devices) == 1 and h.device.devicetype in accepted_devicetypes()


def register(ex: OperatorExecutor) -> tuple:
    """Registers the fused operators and the implementation of :data:`linear_cross_entropy_pattern`."""
    fwd = ex.register_operator("triton_linear_cross_entropy", meta=_forward_meta, fn=linear_cross_entropy_forward)
    bwd = ex.register_operator(
        "triton_linear_cross_entropy_backward", meta=_backward_meta, fn=linear_cross_entropy_backward
    )

    def execution_transform(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype=None):
        loss, _ = fwd(h, weight, target, int(ignore_index), reduction, float(label_smoothing), loss_dtype)
        return loss

    def grad_transform(h, weight, target, ignore_index, reduction, label_smoothing, loss_dtype=None):
        loss, lse = fwd(h, weight, target, int(ignore_index), reduction, float(label_smoothing), loss_dtype)
        gh, gw = bwd(get_grad(loss), h, weight, target, lse, int(ignore_index), reduction, float(label_smoothing))
        put_grads((h, weight), (gh, gw))
        return loss

    ex.register_implementation(
        linear_cross_entropy_pattern,
        checker=linear_cross_entropy_checker,
        execution_transform=execution_transform,
        grad_transform=grad_transform,
    )
    return fwd, bwd
