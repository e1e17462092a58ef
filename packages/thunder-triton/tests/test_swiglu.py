"""The Triton SwiGLU (``silu(a) * b``) against eager PyTorch, values and grads, through thunder.jit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _helpers import DEVICE, check_against_eager

from thunder.core import dtypes
from thunder.core.devices import to_device
from thunder.core.proxies import TensorProxy
from thunder_triton import swiglu as swiglu_module
from thunder_triton.swiglu import swiglu_checker

OPS = dict(fwd_ops=["triton_swiglu"], bwd_ops=["triton_swiglu_backward"])


class LlamaMLP(torch.nn.Module):
    """The MLP of LitGPT's LLaMAMLP / HF's LlamaMLP: proj(silu(fc_1(x)) * fc_2(x))."""

    def __init__(self, n, hidden):
        super().__init__()
        self.fc_1 = torch.nn.Linear(n, hidden, bias=False)
        self.fc_2 = torch.nn.Linear(n, hidden, bias=False)
        self.proj = torch.nn.Linear(hidden, n, bias=False)

    def forward(self, x):
        return self.proj(F.silu(self.fc_1(x)) * self.fc_2(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_llama_mlp(dtype):
    torch.manual_seed(0)
    m = LlamaMLP(16, 44).to(dtype)
    x = torch.randn(2, 3, 16, dtype=dtype, requires_grad=True)
    check_against_eager(None, x, module=m, **OPS)


@pytest.mark.parametrize("order", ["silu_first", "silu_second"])
def test_operand_order_and_several_blocks(monkeypatch, order):
    monkeypatch.setattr(swiglu_module, "BLOCK", 16)  # 5 * 13 elements: several programs, the last partial
    torch.manual_seed(1)

    def fn(a, b):
        return F.silu(a) * b if order == "silu_first" else b * torch.nn.functional.silu(a)

    a = torch.randn(5, 13, requires_grad=True)
    b = torch.randn(5, 13, requires_grad=True)
    check_against_eager(fn, a, b, **OPS)


def test_non_contiguous_operands():
    torch.manual_seed(2)

    def fn(a, b):
        return F.silu(a.t()) * b[:, ::2]

    check_against_eager(fn, torch.randn(6, 4, requires_grad=True), torch.randn(4, 12, requires_grad=True), **OPS)


def test_only_one_operand_requires_grad():
    torch.manual_seed(3)
    a = torch.randn(7, requires_grad=True)
    b = torch.randn(7)
    check_against_eager(lambda a, b: F.silu(a) * b, a, b, **OPS)


def test_fallbacks():
    torch.manual_seed(4)
    a = torch.randn(3, 4, requires_grad=True)
    # broadcasting, mixed dtypes, float64, silu result used twice
    check_against_eager(lambda a, b: F.silu(a) * b, a, torch.randn(4), absent=["triton_swiglu"])
    check_against_eager(lambda a, b: F.silu(a) * b, a, torch.randn(3, 4, dtype=torch.float64), absent=["triton_swiglu"])
    a64 = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    check_against_eager(
        lambda a, b: F.silu(a) * b, a64, torch.randn(3, 4, dtype=torch.float64), absent=["triton_swiglu"]
    )

    def twice(a, b):
        s = F.silu(a)
        return s * b + s

    check_against_eager(twice, a, torch.randn(3, 4), absent=["triton_swiglu"])


def test_checker():
    def p(shape, dtype=dtypes.float32):
        return TensorProxy(shape=shape, dtype=dtype, device=to_device(DEVICE))

    assert swiglu_checker(p((2, 3)), p((2, 3)))
    assert swiglu_checker(p((2, 3), dtypes.bfloat16), p((2, 3), dtypes.bfloat16))
    assert not swiglu_checker(p((2, 3)), p((3,)))
    assert not swiglu_checker(p((2, 3)), p((2, 3), dtypes.bfloat16))
    assert not swiglu_checker(p((2, 3), dtypes.int64), p((2, 3), dtypes.int64))
