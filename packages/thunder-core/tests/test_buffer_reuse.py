"""Elementwise calls run in place into intermediates nothing reads afterwards (thunder.executors.buffer_reuse).

Each case is checked against eager: values, gradients, the caller's tensors left as eager leaves them,
and whether the final trace writes in place where it may and only there.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import thunder


def _final(jfn) -> str:
    """The final forward trace's code lines (without the comments that show what each call stands for)."""
    lines = str(thunder.last_traces(jfn)[-1]).splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _compare(fn, *inputs, grad=True, grad_tol=None):
    """Runs ``fn`` jitted and eagerly on copies of ``inputs``; compares outputs, gradients and the inputs after."""
    mine = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    ref = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    jfn = thunder.jit(fn)
    out, expected = jfn(*mine), fn(*ref)
    torch.testing.assert_close(out, expected)
    if grad:
        outs, exps = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
        sum(o.float().sum() for o in outs).backward()
        sum(e.float().sum() for e in exps).backward()
        for a, b in zip(mine, ref):
            torch.testing.assert_close(a.grad, b.grad, **(grad_tol or {}))
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b)  # the caller's tensors: untouched by both
    return jfn


class _Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.act(self.bn(self.conv1(x)))
        y = self.conv2(y)
        y += x
        return F.relu(y, inplace=True)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_residual_block_runs_its_activations_and_sum_in_place(train):
    torch.manual_seed(0)
    model = _Residual().train(train)
    reference = copy.deepcopy(model)
    jmodel = thunder.jit(model)
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    for _ in range(2):
        out, expected = jmodel(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        out.square().sum().backward()
        expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    for (name, b), c in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(b, c, msg=name)  # BatchNorm's running statistics
    forward = _final(jmodel)
    assert forward.count("torch.nn.functional.relu(") == 2
    assert forward.count("inplace=True") == 2
    assert "Tensor.add_(" in forward
    assert "inplace=False" not in forward


def test_an_argument_is_never_written():
    x = torch.randn(3, 4)

    def f(x, y):
        return torch.sigmoid(x) + torch.relu(y)

    jfn = _compare(f, x, torch.randn(3, 4))
    assert "Tensor.sigmoid_(" not in _final(jfn) and "inplace=True" not in _final(jfn)


def test_an_intermediate_read_later_is_not_written():
    def f(x):
        t = x * 2
        return torch.relu(t) + t  # t is read after the relu

    jfn = _compare(f, torch.randn(5, 3), grad=False)
    trace = _final(jfn)
    assert "inplace=True" not in trace  # the relu keeps t
    assert "Tensor.add_(" in trace  # relu's own result is dead after the add: written in place
    _compare(f, torch.randn(5, 3))


def test_an_intermediate_read_through_a_view_later_is_not_written():
    def f(x):
        t = x * 2
        v = t.view(-1)
        r = torch.sigmoid(t)
        return r, v

    jfn = _compare(f, torch.randn(2, 3))
    assert "Tensor.sigmoid_(" not in _final(jfn)


def test_a_returned_intermediate_is_not_written():
    def f(x):
        t = x + 1
        return torch.tanh(t), t

    jfn = _compare(f, torch.randn(4))
    assert "Tensor.tanh_(" not in _final(jfn)


def test_a_saved_for_backward_intermediate_is_not_written():
    def f(x):
        t = x * 3
        return torch.sigmoid(t) * t  # the backward of mul reads t

    _compare(f, torch.randn(6))


def test_no_write_where_the_result_is_promoted_or_broadcast():
    def promoted(x):
        t = x * 2  # int64
        return t * 0.5  # float: not into t

    jfn = _compare(promoted, torch.arange(6), grad=False)
    assert "Tensor.mul_(" in _final(jfn) or "torch.mul(" in _final(jfn)
    assert _final(jfn).count("Tensor.mul_(") == 0

    def broadcast(x, y):
        t = x + 1  # [1, 4]
        return t * y  # [3, 4]: larger than t

    jfn = _compare(broadcast, torch.randn(1, 4), torch.randn(3, 4))
    assert "Tensor.mul_(" not in _final(jfn)


def test_second_operand_of_add_and_mul_only():
    def f(x, y):
        t = torch.exp(x)
        a = y - t  # sub: not into its second operand
        b = y * torch.exp(a)  # mul: into its second operand
        return b

    jfn = _compare(f, torch.randn(4), torch.randn(4), grad=False)
    trace = _final(jfn)
    assert "Tensor.sub_(" not in trace
    assert "Tensor.mul_(" in trace
    _compare(f, torch.randn(4), torch.randn(4))  # with grad the backward saves exp(a): no write


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_chain_of_activations_against_eager(dtype):
    def f(x, y):
        a = F.silu(x * 2)
        b = F.hardtanh(a + 1, 0.0, 6.0)
        c = F.leaky_relu(b - y, 0.1)
        d = F.hardswish(c) / 3
        return torch.tanh(torch.sigmoid(d) * 2).exp()

    x, y = torch.randn(8, 5, dtype=dtype), torch.randn(8, 5, dtype=dtype)
    jfn = _compare(f, x, y, grad=False)
    assert _final(jfn).count("inplace=True") >= 3
    # bfloat16 gradients: thunder's backward of these activations rounds differently from eager's, with or
    # without this pass (a pre-existing difference of a few units in the last place)
    _compare(f, x, y, grad=True, grad_tol={"atol": 1e-2, "rtol": 5e-2} if dtype is torch.bfloat16 else None)
