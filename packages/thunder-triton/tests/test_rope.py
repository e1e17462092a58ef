"""The Triton rotary embedding against eager PyTorch: LitGPT's apply_rope and HF Llama's rotate_half form."""

from __future__ import annotations

import pytest
import torch
from _helpers import DEVICE, check_against_eager

import thunder
from thunder.core import dtypes
from thunder.core.devices import to_device
from thunder.core.proxies import TensorProxy
from thunder_triton import rope as rope_module
from thunder_triton.rope import rope_checker

OPS = dict(fwd_ops=["triton_rope"], bwd_ops=["triton_rope_backward"])


def litgpt_apply_rope(x, cos, sin):
    """LitGPT's apply_rope for 4-D x and 3-D cos/sin (the library function is used in test_litgpt.py)."""
    head_size_half = x.size(-1) // 2
    x1 = x[..., :head_size_half]
    x2 = x[..., head_size_half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    cos = cos.view(cos.shape[0:1] + (1,) + cos.shape[1:])
    sin = sin.view(sin.shape[0:1] + (1,) + sin.shape[1:])
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin):
    """transformers' apply_rotary_pos_emb (unsqueeze_dim=1)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def _cache(t, d, dtype=torch.float32):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.outer(torch.arange(t).float(), inv).repeat(1, 2)
    return ang.cos()[None].to(dtype), ang.sin()[None].to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_litgpt_rope(dtype):
    torch.manual_seed(0)
    cos, sin = _cache(5, 8)  # float32 caches, as LitGPT keeps them
    x = torch.randn(2, 3, 5, 8, dtype=dtype, requires_grad=True)
    check_against_eager(lambda x: litgpt_apply_rope(x, cos, sin), x, **OPS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_hf_rope_query_and_key(dtype):
    torch.manual_seed(1)
    cos, sin = _cache(6, 10, dtype)
    q = torch.randn(1, 4, 6, 10, dtype=dtype, requires_grad=True)
    k = torch.randn(1, 2, 6, 10, dtype=dtype, requires_grad=True)

    def fn(q, k):
        qe, ke = hf_apply_rotary_pos_emb(q, k, cos, sin)
        return qe.sum(1) + ke.sum(1)

    jfn = check_against_eager(fn, q, k, **OPS)
    assert str(thunder.last_traces(jfn)[-1]).count("triton_rope(") == 2


def test_strided_input_and_odd_half():
    torch.manual_seed(2)
    cos, sin = _cache(4, 6)  # half = 3: a masked block

    def fn(x):
        return litgpt_apply_rope(x.transpose(1, 2), cos, sin)  # [B, H, T, D] view of [B, T, H, D]

    check_against_eager(fn, torch.randn(2, 4, 3, 6, requires_grad=True), **OPS)


def test_partial_rotary_slice():
    # LitGPT applies RoPE to q[..., :rope_n_elem] when rotary_percentage < 1
    torch.manual_seed(3)
    cos, sin = _cache(3, 4)

    def fn(q):
        roped = litgpt_apply_rope(q[..., :4], cos, sin)
        return torch.cat((roped, q[..., 4:]), dim=-1)

    check_against_eager(fn, torch.randn(1, 2, 3, 8, requires_grad=True), **OPS)


def test_kernel_backward_is_the_transpose():
    torch.manual_seed(4)
    cos, sin = _cache(3, 8)
    x = torch.randn(2, 2, 3, 8)
    g = torch.randn(2, 2, 3, 8)
    y = rope_module.rope_forward(x, cos[:, None], sin[:, None], torch.float32)
    dx = rope_module.rope_backward(g, cos[:, None], sin[:, None], torch.float32)
    # <R x, g> == <x, R^T g>
    torch.testing.assert_close((y * g).sum(), (x * dx).sum())


def test_fallbacks():
    torch.manual_seed(5)
    cos, sin = _cache(3, 4)
    absent = ["triton_rope"]
    # cos/sin that need a gradient, float64, 5-D x
    x = torch.randn(1, 2, 3, 4, requires_grad=True)
    c = cos.clone().requires_grad_()
    check_against_eager(lambda x, c: litgpt_apply_rope(x, c, sin), x, c, absent=absent)
    x64 = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    check_against_eager(lambda x: litgpt_apply_rope(x, cos.double(), sin.double()), x64, absent=absent)

    def five_d(x):
        return x * cos + rotate_half(x) * sin

    check_against_eager(five_d, torch.randn(2, 1, 2, 3, 4, requires_grad=True), absent=absent)


def test_checker():
    def p(shape, dtype=dtypes.float32, requires_grad=False):
        return TensorProxy(shape=shape, dtype=dtype, device=to_device(DEVICE), requires_grad=requires_grad)

    x, c = p((2, 3, 5, 8)), p((1, 1, 5, 8))
    assert rope_checker(x, c, c, torch.float32)
    assert rope_checker(p((3, 5, 8), dtypes.bfloat16), p((5, 8)), p((5, 8)), torch.bfloat16)
    assert not rope_checker(p((2, 3, 5, 7)), p((5, 7)), p((5, 7)), torch.float32)
    assert not rope_checker(x, p((2, 3, 6, 8)), p((2, 3, 6, 8)), torch.float32)
    assert not rope_checker(x, c, p((1, 1, 5, 8), dtypes.bfloat16), torch.float32)
    assert not rope_checker(x, p((1, 1, 5, 8), requires_grad=True), c, torch.float32)


def test_tiles_of_several_rows(monkeypatch):
    # 2 * 3 * 5 = 30 rows in tiles of 4 (the last one partial), half-width 3 in a block of 4
    monkeypatch.setattr(rope_module, "TILE", 16)
    torch.manual_seed(6)
    cos, sin = _cache(5, 6)
    check_against_eager(lambda x: litgpt_apply_rope(x, cos, sin), torch.randn(2, 3, 5, 6, requires_grad=True), **OPS)
