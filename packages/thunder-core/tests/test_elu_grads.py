"""ELU, CELU, SELU and hardswish gradients are eager's kernels' (``aten.elu_backward``, ``aten.hardswish_backward``):
equal at NaN, ±inf and 0 in every floating dtype, where a decomposition differed from eager's dtype-dependent loops
(the fuzzer's float16 ``F.elu`` of a NaN; ``F.hardswish`` of a NaN, whose gradient is the cotangent in eager)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder

_VALUES = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -1.5, -30.0, 1e-3, 3.0, -3.0]

_FNS = {
    "elu": lambda x: F.elu(x),
    "elu_alpha": lambda x: F.elu(x, alpha=0.7),
    "celu": lambda x: F.celu(x, alpha=1.3),
    "selu": lambda x: F.selu(x),
    "hardswish": lambda x: F.hardswish(x),
    "hardswish_inplace": lambda x: F.hardswish(x * 1, inplace=True),
}


def _grad(fn, dtype):
    # 33 elements: a vectorised loop and a scalar tail in eager's kernel alike
    x = torch.tensor(_VALUES * 3 + [0.25] * 6, dtype=dtype).requires_grad_()
    g = torch.linspace(-2, 2, x.numel(), dtype=dtype)
    (gx,) = torch.autograd.grad(fn(x), x, g)
    return gx


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(_FNS))
def test_gradient_equals_eager_bitwise(name, dtype):
    fn = _FNS[name]
    expected = _grad(fn, dtype)
    actual = _grad(thunder.jit(fn), dtype)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def test_backward_runs_eager_kernel():
    jfn = thunder.jit(lambda x: F.elu(x))
    x = torch.randn(5, requires_grad=True)
    jfn(x).sum().backward()
    lines = [ln for ln in str(thunder.last_backward_traces(jfn)[-1]).splitlines() if not ln.lstrip().startswith("#")]
    calls = [
        ln for ln in lines if "=" in ln and "(" in ln and "saved_for_backward" not in ln and "cotangents" not in ln
    ]
    assert len(calls) == 1 and "aten.elu_backward" in calls[0], calls
