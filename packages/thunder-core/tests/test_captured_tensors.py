"""Tensors a jitted function reads from outside its arguments (a global, a closure, an object's attribute).

The program holds such a tensor as a constant, so a gradient reaching it would be lost: where it requires grad and a
result requiring grad is computed from it, thunder.jit raises naming the user's line (silently no gradient before),
and everywhere else it gives eager's answer.
"""

from __future__ import annotations

import pytest
import torch

import thunder

_LINEAR = torch.nn.Linear(3, 3)


def _through_the_global_module(x):
    return _LINEAR(x * 2)


def test_a_closed_over_parameter_reached_by_the_gradient_is_refused_naming_the_line():
    weight = torch.randn(3, requires_grad=True)

    def fn(x):
        return x * weight

    for f, x in ((fn, torch.randn(3)), (_through_the_global_module, torch.randn(2, 3, requires_grad=True))):
        with pytest.raises(Exception, match="reads from outside its arguments") as info:
            thunder.jit(f)(x)
        assert __file__ in str(info.value)
        assert f(x).requires_grad  # (eager's result requires grad, and its backward reaches the captured tensor)


def test_captured_tensors_that_get_no_gradient_give_eagers_answer():
    weight = torch.randn(3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)

    def detached(x):
        return x * weight.detach() + weight.shape[0]

    def under_no_grad(x):
        with torch.no_grad():
            scale = weight.sum()
        return x * scale

    for fn in (detached, under_no_grad):
        expected, actual = fn(x), thunder.jit(fn)(x)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(torch.autograd.grad(actual.sum(), x), torch.autograd.grad(expected.sum(), x))
    with torch.no_grad():
        torch.testing.assert_close(thunder.jit(_through_the_global_module)(x[None]), _LINEAR(x[None] * 2))


def test_the_same_tensor_passed_as_an_argument_gets_eagers_gradient():
    weight = torch.randn(3, requires_grad=True)
    x = torch.randn(3)

    def fn(x, w):
        return (x * w).sin()

    (expected,) = torch.autograd.grad(fn(x, weight).sum(), weight)
    (actual,) = torch.autograd.grad(thunder.jit(fn)(x, weight).sum(), weight)
    torch.testing.assert_close(actual, expected)
