"""Gradients of a composite operator an executor runs whole (a ``like=`` operator, a declined pattern):
the backward recomputes its decomposition, and the gradient rules inside may save any value of it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
import thunder.torch as ltorch
from thunder.extend import OperatorExecutor, deregister_executor, register_executor


@pytest.fixture
def probe_ex():
    ex = OperatorExecutor("composite_grad_probe", version="0.1")
    register_executor(ex)
    yield ex
    deregister_executor(ex)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_cross_entropy_run_whole(probe_ex, reduction, dtype):
    # cross_entropy's rule saves nll_loss_forward's count of targets not ignored, made by the very
    # operation that makes the composite's result (which the forward computes whole)
    def like(h, w, t):
        return ltorch.cross_entropy(ltorch.linear(h, w), t, reduction=reduction)

    def eager(h, w, t):
        return F.cross_entropy(F.linear(h, w), t, reduction=reduction)

    op = probe_ex.register_operator(f"lin_ce_{reduction}", like=like, fn=eager)
    torch.manual_seed(0)
    h = torch.randn(4, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(9, 8, dtype=dtype, requires_grad=True)
    t = torch.tensor([-100, 3, 8, 6])
    jf = thunder.jit(lambda h, w, t: op(h, w, t), executors=[probe_ex])
    out = jf(h, w, t)
    assert any(b.sym.name == op.name for b in thunder.last_traces(jf)[-1].bound_symbols)  # ran whole
    expected = eager(h, w, t)
    torch.testing.assert_close(out, expected)
    cotangent = torch.randn_like(expected)
    got = torch.autograd.grad(out, (h, w), cotangent)
    want = torch.autograd.grad(expected, (h, w), cotangent)
    torch.testing.assert_close(got, want)
