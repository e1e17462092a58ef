"""The "Extending Thunder" tutorial (shared/seeds/extending_thunder.md), cell by cell, on CPU.

The apex cells at the end need CUDA and the apex package (thunder-apex); they are covered there.
"""

from __future__ import annotations

from numbers import Number

import numpy as np
import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor


# the grad cells use thunder.core.transforms.grad/get_grad/put_grads (autodiff, issue 4)
def multimul_impl(
    a: Number | torch.Tensor,
    b: Number | torch.Tensor,
    c: Number | torch.Tensor,
    d: Number | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return np.multiply(a, b), np.multiply(c, d)


def multimul_like(
    a: Number | TensorProxy,
    b: Number | TensorProxy,
    c: Number | TensorProxy,
    d: Number | TensorProxy,
):
    return a * b, c * d


def mul_to_multimul_checker(a: Number | TensorProxy, b: Number | TensorProxy) -> bool:
    def is_cpu(x: Number | TensorProxy) -> bool:
        if isinstance(a, TensorProxy):
            return a.device.devicetype == DeviceType.CPU
        return True

    return all(is_cpu(x) for x in (a, b))


@pytest.fixture
def tutorial():
    """A fresh ``myex`` executor with the ``multimul`` operator (the tutorial's first cells)."""
    myex = OperatorExecutor("myex", version="0.1")
    multimul = myex.register_operator("multimul", like=multimul_like, fn=multimul_impl)

    def mul_to_multimul(a: Number | TensorProxy, b: Number | TensorProxy) -> TensorProxy:
        result, _ = multimul(a, b, 0, 0)
        return result

    def mul_to_contiguous_multimul(a: Number | TensorProxy, b: Number | TensorProxy) -> TensorProxy:
        a = a.contiguous()
        b = b.contiguous()
        result, _ = multimul(a, b, 0, 0)
        return result

    def mymul_grad(a: TensorProxy, b: TensorProxy) -> TensorProxy:
        from thunder.core.transforms import get_grad, put_grads

        fwd = a * b
        g = get_grad(fwd)
        a_grad, b_grad = multimul(b, g, a, g)
        put_grads((a, b), (a_grad, b_grad))
        return fwd

    class T:
        pass

    t = T()
    t.myex, t.multimul = myex, multimul
    t.mul_to_multimul, t.mul_to_contiguous_multimul, t.mymul_grad = (
        mul_to_multimul,
        mul_to_contiguous_multimul,
        mymul_grad,
    )
    t.a, t.b = torch.randn((2, 2)), torch.randn((2, 2))
    return t


def _lines(trace) -> list[str]:
    return [line.rstrip() for line in str(trace).splitlines()]


def _code(trace) -> list[str]:
    return [line.strip() for line in str(trace).splitlines() if line.strip() and not line.strip().startswith("#")]


def _block(lines: list[str], start: str) -> list[str]:
    """The line starting with ``start`` (stripped) and its comment lines below it, de-indented by its indent."""
    k = next(i for i, line in enumerate(lines) if line.strip().startswith(start))
    indent = len(lines[k]) - len(lines[k].lstrip())
    block = [lines[k][indent:]]
    for line in lines[k + 1 :]:
        if not line.strip().startswith("#") or len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line[indent:])
    return block


def test_multimul_impl_runs_on_tensors(tutorial):
    a, b = tutorial.a, tutorial.b
    x, y = multimul_impl(a, b, a, b)
    torch.testing.assert_close(x, a * b)
    torch.testing.assert_close(y, a * b)


def test_multimul_symbol_is_recorded(tutorial):
    multimul, a, b = tutorial.multimul, tutorial.a, tutorial.b

    def foo(a, b, c, d):
        return multimul(a, b, c, d)

    cfoo = thunder.jit(foo, executors=[tutorial.myex])
    x, y = cfoo(a, b, a, b)  # the same tensors twice, as in the tutorial
    torch.testing.assert_close(x, a * b)
    torch.testing.assert_close(y, a * b)
    c, d = torch.randn(2, 2), torch.randn(2, 2)
    x, y = cfoo(a, b, c, d)
    torch.testing.assert_close(y, c * d)

    trace = thunder.last_traces(cfoo)[-1]
    assert _block(_lines(trace), "(t0, t1) = multimul(") == [
        "(t0, t1) = multimul(a, b, c, d)",
        '  # t0 = ltorch.mul(a, b)  # t0: "cpu f32[2, 2]"',
        '    # t0 = prims.mul(a, b)  # t0: "cpu f32[2, 2]"',
        '  # t1 = ltorch.mul(c, d)  # t1: "cpu f32[2, 2]"',
        '    # t1 = prims.mul(c, d)  # t1: "cpu f32[2, 2]"',
    ]
    assert _code(trace)[-2:] == ["del a, b, c, d", "return (t0, t1)"]


def test_multimul_is_differentiable_through_like(tutorial):
    from thunder.core.transforms import grad

    multimul, a, b = tutorial.multimul, tutorial.a, tutorial.b

    def foo(a, b, c, d):
        return multimul(a, b, c, d)

    cfoo = thunder.jit(foo, executors=[tutorial.myex])
    cfoo_grad = grad(cfoo)
    grads = cfoo_grad(a, b, a, b)
    # d(sum(a*b) + sum(c*d)) = (b, a, d, c)
    for g, want in zip(grads, (b, a, b, a)):
        torch.testing.assert_close(g, want)
    code = _code(thunder.last_traces(cfoo_grad)[-1])
    assert sum(line.startswith("t") and "= torch.full((2, 2), 1.0" in line for line in code) == 2
    assert sum("= torch.mul(" in line for line in code) == 4
    assert not [line for line in code if "multimul(" in line]


def test_mul_to_multimul_execution_transform(tutorial):
    myex, a, b = tutorial.myex, tutorial.a, tutorial.b
    myex.register_implementation(
        ltorch.mul, checker=mul_to_multimul_checker, execution_transform=tutorial.mul_to_multimul
    )

    def bar(a, b):
        return a * b

    cbar = thunder.jit(bar, executors=[myex])
    torch.testing.assert_close(cbar(a, b), a * b)
    trace = thunder.last_traces(cbar)[-1]
    assert _block(_lines(trace), "(t0, _) = multimul(") == [
        "(t0, _) = multimul(a, b, 0, 0)",
        '  # t0 = ltorch.mul(a, b)  # t0: "cpu f32[2, 2]"',
        '    # t0 = prims.mul(a, b)  # t0: "cpu f32[2, 2]"',
    ]
    assert _code(trace)[-2:] == ["del a, b", "return t0"]


def test_checker_declines(tutorial):
    """The checker decides: a number times a number is not a tensor multiply multimul takes."""
    myex, a = tutorial.myex, tutorial.a
    calls = []

    def checker(x, y):
        calls.append((type(x).__name__, type(y).__name__))
        return isinstance(x, TensorProxy) and x.shape == (3,)

    myex.register_implementation(ltorch.mul, checker=checker, execution_transform=tutorial.mul_to_multimul)
    cbar = thunder.jit(lambda x, y: x * y, executors=[myex])
    torch.testing.assert_close(cbar(a, a), a * a)
    assert calls == [("TensorProxy", "TensorProxy")]
    code = _code(thunder.last_traces(cbar)[-1])
    assert not [line for line in code if "multimul" in line]
    assert any("= torch.mul(x, y)" in line for line in code)


def test_execution_transform_applies_in_grad_trace(tutorial):
    from thunder.core.transforms import grad

    myex, a, b = tutorial.myex, tutorial.a, tutorial.b
    myex.register_implementation(
        ltorch.mul, checker=mul_to_multimul_checker, execution_transform=tutorial.mul_to_multimul
    )
    cbar = thunder.jit(lambda a, b: a * b, executors=[myex])
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    code = _code(thunder.last_traces(cbar_grad)[-1])
    # two multimuls, each ignoring its second multiplication
    calls = [line for line in code if "multimul(" in line]
    assert len(calls) == 2 and all(line.endswith(", 0, 0)") and "_) = multimul(" in line for line in calls)


def test_grad_transform_uses_one_multimul(tutorial):
    from thunder.core.transforms import grad

    myex, a, b = tutorial.myex, tutorial.a, tutorial.b
    myex.register_implementation(
        ltorch.mul,
        checker=mul_to_multimul_checker,
        execution_transform=tutorial.mul_to_multimul,
        grad_transform=tutorial.mymul_grad,
    )
    cbar = thunder.jit(lambda a, b: a * b, executors=[myex])
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    trace = thunder.last_traces(cbar_grad)[-1]
    calls = [line for line in _code(trace) if "multimul(" in line]
    assert len(calls) == 1
    ones = next(line.split(" = ")[0] for line in _code(trace) if "torch.full((2, 2), 1.0" in line)
    assert calls[0] == f"(t2, t3) = multimul(b, {ones}, a, {ones})"


def test_contiguous_execution_transform(tutorial):
    myex, a, b = tutorial.myex, tutorial.a, tutorial.b
    myex.register_implementation(
        ltorch.mul, checker=mul_to_multimul_checker, execution_transform=tutorial.mul_to_contiguous_multimul
    )

    def caz(a, b):
        return a * b

    ccaz = thunder.jit(caz, executors=[myex])
    torch.testing.assert_close(ccaz(a, b), a * b)
    # a non-contiguous input too
    at = torch.randn(2, 2).t()
    torch.testing.assert_close(ccaz(at, b), at * b)

    trace = thunder.last_traces(ccaz)[-1]
    code = _code(trace)
    # the contiguous calls run with PyTorch (the torch executor), then multimul on their results
    (c1,) = [line for line in code if line.startswith("t1 = Tensor.contiguous(a")]
    (c2,) = [line for line in code if line.startswith("t2 = Tensor.contiguous(b")]
    (mm,) = [line for line in code if "multimul(" in line]
    assert mm == "(t0, _) = multimul(t1, t2, 0, 0)"
    assert code.index(c1) < code.index(c2) < code.index(mm)
    lines = _lines(trace)
    assert _block(lines, "t1 = Tensor.contiguous(a")[1:] == [
        '  # t1 = ltorch.contiguous(a)  # t1: "cpu f32[2, 2]"',
        '    # t1 = prims.stride_order(a, (1, 0))  # t1: "cpu f32[2, 2]"',
    ]
    assert code[-2:] == ["del t1, t2", "return t0"]
