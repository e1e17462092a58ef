"""Rotary embedding forward+backward: eager, torch.compile, thunder + triton, Liger-Kernel.

Two forms, both claimed by thunder as the ``triton_rope`` kernel from the unmodified code:

- ``litgpt``: LitGPT's ``apply_rope(x, cos, sin)`` at the seed tutorial's shape (zero_to_thunder:
  x ``[2, 128, 4096, 16]``, float32 ``cos``/``sin`` ``[1, 4096, 16]``); Liger has no kernel for
  a single tensor, so its column is skipped;
- ``hf``: HF Llama's ``apply_rotary_pos_emb(q, k, cos, sin)`` (``rotate_half``) on q
  ``[B, 32, T, 128]`` and k ``[B, 8, T, 128]``, against ``liger_kernel.transformers.liger_rotary_pos_emb``.

    python benchmarks/triton_rope.py
    python benchmarks/triton_rope.py --smoke

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import torch
from triton_common import Case, main


def _cache(t, d, device, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device).float() / d))
    ang = torch.outer(torch.arange(t, device=device).float(), inv).repeat(1, 2)
    return ang.cos()[None].to(dtype), ang.sin()[None].to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def _litgpt_case(b, h, t, d) -> Case:
    def make(device, dtype):
        from litgpt.model import apply_rope

        cos, sin = _cache(t, d, device, torch.float32)
        x = torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
        return apply_rope, [x, cos, sin]

    return Case(f"litgpt_{b}x{h}x{t}x{d}", make, None, {"form": "litgpt apply_rope", "x": [b, h, t, d]})


def _hf_case(b, hq, hk, t, d) -> Case:
    def make(device, dtype):
        cos, sin = _cache(t, d, device, dtype)
        q = torch.randn(b, hq, t, d, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(b, hk, t, d, device=device, dtype=dtype, requires_grad=True)
        return hf_apply_rotary_pos_emb, [q, k, cos, sin]

    def liger(fn, inputs):
        from liger_kernel.transformers import liger_rotary_pos_emb

        return liger_rotary_pos_emb

    return Case(f"hf_{b}x{hq}/{hk}x{t}x{d}", make, liger, {"form": "hf apply_rotary_pos_emb", "q": [b, hq, t, d]})


def cases(smoke: bool) -> list[Case]:
    if smoke:
        return [_litgpt_case(1, 2, 3, 8), _hf_case(1, 2, 1, 3, 8)]
    return [_litgpt_case(2, 128, 4096, 16), _hf_case(1, 32, 8, 4096, 128), _hf_case(4, 32, 8, 2048, 128)]


if __name__ == "__main__":
    main("triton_rope", __doc__, cases)
