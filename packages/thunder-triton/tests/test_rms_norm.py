"""The Triton RMSNorm against eager PyTorch: F.rms_norm, LitGPT's RMSNorm and HF Llama's, values and grads.

Kernels run in Triton's interpreter on CPU tensors (conftest.py), so shapes are small.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _helpers import DEVICE, check_against_eager

from thunder.core import dtypes
from thunder.core.devices import to_device
from thunder.core.proxies import TensorProxy
from thunder_triton import rms_norm as rms_module
from thunder_triton.rms_norm import rms_norm_checker

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
OPS = dict(fwd_ops=["triton_rms_norm"], bwd_ops=["triton_rms_norm_backward"])


class LitGPTRMSNorm(torch.nn.Module):
    """LitGPT's RMSNorm, as litgpt.model writes it (its import is tested in test_litgpt.py)."""

    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=-1, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        return (x_normed * self.weight.float()).to(dtype=dtype)


class HFLlamaRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm, as modeling_llama writes it."""

    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls", [LitGPTRMSNorm, HFLlamaRMSNorm])
def test_rmsnorm_modules(cls, dtype):
    torch.manual_seed(0)
    m = cls(24).to(dtype)
    x = torch.randn(3, 5, 24, dtype=dtype, requires_grad=True)
    check_against_eager(None, x, module=m, **OPS)


def test_litgpt_float32_weight_with_bfloat16_input():
    # mixed precision: a float32 weight, bfloat16 activations (the weight's .float() is a no-op)
    torch.manual_seed(1)
    m = LitGPTRMSNorm(16)
    x = torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True)
    check_against_eager(None, x, module=m, **OPS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_functional_rms_norm(dtype):
    torch.manual_seed(2)
    x = torch.randn(6, 40, dtype=dtype, requires_grad=True)
    w = torch.randn(40, dtype=dtype, requires_grad=True)
    check_against_eager(lambda x, w: F.rms_norm(x, (40,), w, 1e-5), x, w, **OPS)
    check_against_eager(lambda x, w: F.rms_norm(x, [40], w), x, w, **OPS)  # eps=None: finfo(dtype).eps


def test_many_rows_several_backward_programs(monkeypatch):
    monkeypatch.setattr(rms_module, "BACKWARD_ROWS_PER_PROGRAM", 3)
    torch.manual_seed(3)
    m = LitGPTRMSNorm(7)  # odd width: a masked block
    x = torch.randn(2, 11, 7, requires_grad=True)
    check_against_eager(None, x, module=m, **OPS)


def test_strided_input():
    torch.manual_seed(4)

    class Transposed(torch.nn.Module):  # (a module: its norm's weight is an input of the program, which gets its grad)
        def __init__(self):
            super().__init__()
            self.norm = HFLlamaRMSNorm(12)

        def forward(self, x):
            return self.norm(x.transpose(0, 1))  # rows of the transposed view are strided

    x = torch.randn(12, 5, requires_grad=True)
    check_against_eager(None, x, module=Transposed(), **OPS)


def test_kernels_directly_with_a_non_contiguous_last_dimension():
    torch.manual_seed(5)
    x = torch.randn(9, 4).t()  # [4, 9], last-dimension stride 4
    w = torch.randn(9)
    y, rstd = rms_module.rms_norm_forward(x, w, 1e-6, None, torch.float32)
    torch.testing.assert_close(y, F.rms_norm(x, (9,), w, 1e-6))
    torch.testing.assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1) + 1e-6))
    g = torch.randn(4, 9)
    gx, gw = rms_module.rms_norm_backward(g, x, w, rstd, None)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.rms_norm(xr, (9,), wr, 1e-6).backward(g)
    torch.testing.assert_close(gx, xr.grad)
    torch.testing.assert_close(gw, wr.grad)


def test_output_used_twice_and_forward_only():
    torch.manual_seed(6)
    m = LitGPTRMSNorm(8)
    x = torch.randn(3, 8)

    def fn(x):
        y = m(x)
        return y * y + y

    with torch.no_grad():
        check_against_eager(fn, x, fwd_ops=["triton_rms_norm"])


# ---------------------------------------------------------------- what is left to the recorded operations


def test_intermediate_used_elsewhere_is_not_fused():
    # the normalised value escapes: fusing would drop it, so the ops run as recorded
    torch.manual_seed(7)
    w = torch.randn(8)

    def fn(x):
        x32 = x.float()
        n = x32 * torch.rsqrt(torch.mean(x32 * x32, dim=-1, keepdim=True) + 1e-6)
        return n * w, n

    x = torch.randn(2, 8, requires_grad=True)
    check_against_eager(lambda x: sum(o.sum() for o in fn(x)), x, absent=["triton_rms_norm"])


def test_float64_and_other_dims_fall_back():
    torch.manual_seed(8)
    m = LitGPTRMSNorm(8).double()
    check_against_eager(
        None, torch.randn(2, 8, dtype=torch.float64, requires_grad=True), module=m, absent=["triton_rms_norm"]
    )

    def over_dim0(x, w):
        x32 = x.float()
        return x32 * torch.rsqrt(torch.mean(x32 * x32, dim=0, keepdim=True) + 1e-6) * w

    check_against_eager(over_dim0, torch.randn(4, 4, requires_grad=True), torch.randn(4), absent=["triton_rms_norm"])
    # F.rms_norm over two dimensions, or without a weight
    x = torch.randn(3, 4, 5, requires_grad=True)
    check_against_eager(lambda x, w: F.rms_norm(x, (4, 5), w), x, torch.randn(4, 5), absent=["triton_rms_norm"])
    check_against_eager(lambda x: F.rms_norm(x, (5,)), x, absent=["triton_rms_norm"])


def test_bfloat16_arithmetic_without_upcast_falls_back():
    # RMSNorm computed in bfloat16 itself: the kernel's float32 arithmetic would differ, so it declines
    torch.manual_seed(9)
    w = torch.randn(8, dtype=torch.bfloat16)

    def fn(x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6) * w

    check_against_eager(fn, torch.randn(2, 8, dtype=torch.bfloat16, requires_grad=True), absent=["triton_rms_norm"])


def _proxy(shape, dtype=dtypes.float32):
    return TensorProxy(shape=shape, dtype=dtype, device=to_device(DEVICE))


def test_checker():
    x, w = _proxy((4, 10)), _proxy((10,))
    assert rms_norm_checker(x, w, 1e-6, None, torch.float32)
    assert rms_norm_checker(_proxy((2, 3, 10), dtypes.bfloat16), w, 1e-6, torch.bfloat16, torch.bfloat16)
    assert not rms_norm_checker(x, _proxy((11,)), 1e-6, None, torch.float32)
    assert not rms_norm_checker(x, _proxy((1, 10)), 1e-6, None, torch.float32)
    assert not rms_norm_checker(_proxy((4, 10), dtypes.float64), w, 1e-6, None, torch.float64)
    assert not rms_norm_checker(_proxy((4, 0)), _proxy((0,)), 1e-6, None, torch.float32)
    assert not rms_norm_checker(x, w, 1e-6, None, torch.int64)


@pytest.mark.parametrize("grad_of", ["x", "weight"])
def test_only_one_input_requires_grad(grad_of):
    torch.manual_seed(10)
    x = torch.randn(4, 8, requires_grad=grad_of == "x")
    w = torch.randn(8, requires_grad=grad_of == "weight")
    check_against_eager(lambda x, w: F.rms_norm(x, (8,), w), x, w, **OPS)
