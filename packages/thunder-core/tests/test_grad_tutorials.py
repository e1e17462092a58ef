"""The grad cells of extending_thunder.md: gradients through a `like` operator, through an execution
transform, and an executor's grad transform replacing the default rule (one `multimul` call)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, grad, put_grads
from thunder.extend import OperatorExecutor, deregister_executor, register_executor


@pytest.fixture
def myex():
    ex = OperatorExecutor("myex_grad_tutorial", version="0.1")
    register_executor(ex)
    yield ex
    deregister_executor(ex)


def _multimul(ex):
    def multimul_impl(a, b, c, d):
        return np.multiply(a, b), np.multiply(c, d)

    def multimul_like(a, b, c, d):
        return a * b, c * d

    return ex.register_operator("multimul", like=multimul_like, fn=multimul_impl)


def _cpu_checker(a, b):
    return all(not isinstance(x, TensorProxy) or x.device.devicetype == DeviceType.CPU for x in (a, b))


def test_like_operator_is_differentiable(myex):
    multimul = _multimul(myex)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    cfoo = thunder.jit(lambda a, b, c, d: multimul(a, b, c, d), executors=[myex])
    ga, gb, gc, gd = grad(cfoo)(a, b, a, b)
    # d/da sum(a*b) = b, etc.
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    torch.testing.assert_close(gc, b)
    torch.testing.assert_close(gd, a)


def test_execution_transform_applies_in_the_grad_trace(myex):
    multimul = _multimul(myex)

    def mul_to_multimul(a, b):
        result, _ = multimul(a, b, 0, 0)
        return result

    myex.register_implementation(ltorch.mul, checker=_cpu_checker, execution_transform=mul_to_multimul)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    cbar = thunder.jit(lambda a, b: a * b, executors=[myex])
    torch.testing.assert_close(cbar(a, b), a * b)
    assert "multimul(a, b, 0, 0)" in str(thunder.last_traces(cbar)[-1])
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    calls = [line for line in str(thunder.last_traces(cbar_grad)[-1]).splitlines() if "= multimul(" in line]
    assert len(calls) == 2 and all(", 0, 0)" in c for c in calls)


def test_grad_transform_makes_one_multimul_call(myex):
    multimul = _multimul(myex)

    def mul_to_multimul(a, b):
        result, _ = multimul(a, b, 0, 0)
        return result

    def mymul_grad(a, b):
        fwd = a * b
        g = get_grad(fwd)
        a_grad, b_grad = multimul(b, g, a, g)
        put_grads((a, b), (a_grad, b_grad))
        return fwd

    myex.register_implementation(
        ltorch.mul, checker=_cpu_checker, execution_transform=mul_to_multimul, grad_transform=mymul_grad
    )
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    cbar_grad = grad(thunder.jit(lambda a, b: a * b, executors=[myex]))
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    trace = str(thunder.last_traces(cbar_grad)[-1])
    calls = [line.strip() for line in trace.splitlines() if "= multimul(" in line and not line.strip().startswith("#")]
    assert len(calls) == 1
    assert calls[0].startswith("(t") and "multimul(b, t" in calls[0] and ", a, t" in calls[0]
    assert "torch.full((2, 2), 1.0" in trace


def test_grad_transform_is_used_under_torch_autograd_too(myex):
    multimul = _multimul(myex)
    used = []

    def mymul_grad(a, b):
        fwd = a * b
        g = get_grad(fwd)
        used.append(True)
        a_grad, b_grad = multimul(b, g, a, g)
        put_grads((a, b), (a_grad, b_grad))
        return fwd

    myex.register_implementation(ltorch.mul, checker=_cpu_checker, grad_transform=mymul_grad)
    a = torch.randn(2, 2, requires_grad=True)
    b = torch.randn(2, 2)
    jf = thunder.jit(lambda a, b: (a * b).sum(), executors=[myex])
    jf(a, b).backward()
    torch.testing.assert_close(a.grad, b)
    assert used
    assert "multimul(" in str(thunder.last_backward_traces(jf)[-1])
