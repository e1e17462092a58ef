"""The kernel eager's ``F.scaled_dot_product_attention`` runs on CPU, so the program's result is laid out as eager's.

On CPU eager picks its fused flash kernel where that takes the arguments (no dropout, a unit last stride, equal head
sizes ...) and the kernels enabled allow it (``torch.nn.attention.sdpa_kernel``), else its math kernel. The two lay
their results out differently: flash's follows the query's layout (a query transposed from ``(batch, length, heads,
dim)`` gives a transposed result), math's is contiguous. The layout decides what eager's later ``reshape`` returns, a
view (then an update through it reaches the attention's result) or a copy, and whether ``view`` raises. PyTorch's
``meta`` kernel always answers as math, and the ``sdpa`` executor always runs flash.

So the tracer asks PyTorch which kernel eager runs (``torch._fused_sdp_choice``, on CPU tensors laid out as the
arguments' shadows, never written), and traces the call as that kernel: flash, the usual symbol (the ``sdpa``
executor's), with the flash kernel's layout on ``meta``; math, ``ltorch.scaled_dot_product_attention_math`` (the
same decomposition, which no fused executor claims), with the math layout. Where no kernel is enabled that takes the
arguments, eager's error is raised. The choice rests on the enabled kernels: the prologue checks them
(``enabled_kernels``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunder.torch as ltorch
from thunder.torch.registry import register_torch_alias
from thunder.tracing.errors import describe_location, user_frame
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import shadow

__all__ = ["eager_attention_kernel", "enabled_kernels"]

_SDPA = F.scaled_dot_product_attention
_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_MATH, _FLASH = 0, 1  # (torch.nn.attention.SDPBackend's values, as _fused_sdp_choice returns them)


def enabled_kernels() -> tuple[bool, ...]:
    """The attention kernels enabled now (``torch.nn.attention.sdpa_kernel`` sets them)."""
    b = torch.backends.cuda
    return (b.flash_sdp_enabled(), b.math_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled())


def _math_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> torch.Tensor:
    """Eager's attention on its math kernel (on ``meta``: the math kernel's layout)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return _SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _flash_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> torch.Tensor:
    """Eager's attention on its CPU flash kernel (on ``meta``: that kernel's layout, which follows the query's)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


register_torch_alias(_math_attention, ltorch.scaled_dot_product_attention_math)
register_torch_alias(_flash_attention, ltorch.scaled_dot_product_attention)


def _bound(args, kwargs) -> dict:
    """The arguments by name, defaults filled in (TypeError where they do not fit the signature)."""
    if len(args) > 6 or any(k not in _PARAMS or k in _PARAMS[: len(args)] for k in kwargs):
        raise TypeError("scaled_dot_product_attention: arguments that do not fit its signature")
    bound = dict(zip(_PARAMS, (None, None, None, None, 0.0, False, None, False)))
    bound.update(zip(_PARAMS, args))
    bound.update(kwargs)
    return bound


def _cpu_like(x):
    """A CPU tensor laid out as ``x``'s shadow (its memory allocated, never read or written), or ``x`` itself."""
    if type(x) is not TracingTensor:
        return x
    m = shadow(x)
    with torch._C.DisableTorchFunction():
        return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype)


def eager_attention_kernel(args, kwargs) -> tuple | None:
    """``(callable, args, kwargs)`` to trace eager's attention ``F.scaled_dot_product_attention(*args, **kwargs)``
    on CPU tensors as: the kernel eager runs there (see the module's docstring), the arguments bound by name; None
    where the call is traced as it is (another device, autocast, dropout). Raises eager's error where no enabled
    kernel takes the arguments."""
    try:
        bound = _bound(args, kwargs)
    except TypeError:
        return None
    tensors = [bound.pop(n) for n in ("query", "key", "value")]
    if not all(type(t) is TracingTensor and t.device.type == "cpu" for t in tensors):
        return None
    mask = bound["attn_mask"]
    if (mask is not None and type(mask) is not TracingTensor) or torch._C._is_any_autocast_enabled():
        return None
    if not isinstance(bound["dropout_p"], (int, float)) or bound["dropout_p"] != 0.0 or len(bound) != 5:
        return None
    with torch._C.DisableTorchFunction():
        try:
            choice = torch._fused_sdp_choice(
                *(_cpu_like(t) for t in tensors),
                _cpu_like(mask),
                0.0,
                bool(bound["is_causal"]),
                scale=bound["scale"],
                enable_gqa=bool(bound["enable_gqa"]),
            )
        except TypeError:
            return None  # (arguments of another kind than eager's kernels take: traced as they are)
        except RuntimeError as error:  # (no kernel enabled takes them: eager's error)
            _note_line(error)
            raise
    defaults = dict(zip(_PARAMS[3:], (None, 0.0, False, None, False)))
    given = {k: v for k, v in bound.items() if v is not defaults[k] and v != defaults[k]}
    if choice == _FLASH:
        return _flash_attention, tuple(tensors), given
    if choice == _MATH:
        return _math_attention, tuple(tensors), given
    raise _note_line(RuntimeError("No available kernel. Aborting execution."))  # (eager's words)


def _note_line(error: Exception) -> Exception:
    error.add_note(f"(raised while thunder traced scaled_dot_product_attention at {describe_location(user_frame(2))})")
    error._thunder_noted = True
    return error
