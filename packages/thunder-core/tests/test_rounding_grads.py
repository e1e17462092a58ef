"""Gradients of the rounding operations follow PyTorch's derivatives.yaml: rounding division (``div`` with
``rounding_mode='trunc'``/``'floor'``) has a zero gradient for both arguments, never NaN (not even where the
divisor is zero); ``remainder`` and ``fmod`` pass the gradient to ``a`` and give ``b`` ``-g * a.div(b,
rounding_mode=...)``. Eager PyTorch is the reference."""

from __future__ import annotations

import pytest
import torch

import thunder

# special values: a zero divisor (over a nonzero and a zero numerator), ±inf, negative zero, ties
_A = [1.5, -2.5, 3.0, 0.0, float("inf"), -7.0, 2.0, -0.0]
_B = [0.0, 2.0, -0.5, 0.0, 1.0, 2.0, -0.0, 3.0]

_OPS = {
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_true": lambda a, b: torch.div(a, b),
    "method_div_trunc": lambda a, b: a.div(b, rounding_mode="trunc"),
    "inplace_div_trunc": lambda a, b: (a * 1).div_(b, rounding_mode="trunc"),
    "inplace_div_floor": lambda a, b: (a * 1).div_(b, rounding_mode="floor"),
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "inplace_fmod": lambda a, b: (a * 1).fmod_(b),
    "inplace_remainder": lambda a, b: (a * 1).remainder_(b),
    "trunc_then_mul": lambda a, b: torch.div(a, b, rounding_mode="trunc") * a,
}


def _grads(fn, a, b, shape_b):
    a = a.clone().requires_grad_()
    b = b.reshape(shape_b).clone().requires_grad_()
    out = fn(a, b)
    grads = torch.autograd.grad(out, (a, b), torch.ones_like(out), allow_unused=True)
    return out.detach(), grads


@pytest.mark.parametrize("shape_b", [(8,), (1,)], ids=["same_shape", "broadcast"])
@pytest.mark.parametrize("name", sorted(_OPS))
def test_rounding_op_gradients_match_eager(name, shape_b):
    fn = _OPS[name]
    a = torch.tensor(_A, dtype=torch.float64)
    b = torch.tensor(_B if shape_b == (8,) else [0.0], dtype=torch.float64)
    if shape_b == (1,) and "div" not in name:
        b = torch.tensor([-1.5], dtype=torch.float64)
    expected_out, expected = _grads(fn, a, b, shape_b)
    actual_out, actual = _grads(thunder.jit(fn), a, b, shape_b)
    torch.testing.assert_close(actual_out, expected_out, equal_nan=True)
    for g, e in zip(actual, expected):
        torch.testing.assert_close(g, e, equal_nan=True)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounding_division_by_zero_has_zero_gradient(mode):
    """The repro of issue 25 (1b): ``div(a, b, rounding_mode='trunc')`` at ``b == 0`` gave NaN gradients."""
    a = torch.tensor([1.0, 0.0, -3.0], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    out = thunder.jit(lambda x, y: torch.div(x, y, rounding_mode=mode))(a, b)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    assert not ga.isnan().any() and not gb.isnan().any()
    assert (ga == 0).all() and (gb == 0).all()


@pytest.mark.parametrize("mode", ["trunc", "floor", None])
def test_division_by_a_python_number(mode):
    a = torch.tensor([1.5, -2.5, 7.0], dtype=torch.float64)
    fn = lambda x: torch.div(x, 2.0, rounding_mode=mode) * x  # noqa: E731
    ea = a.clone().requires_grad_()
    (expected,) = torch.autograd.grad(fn(ea).sum(), ea)
    ta = a.clone().requires_grad_()
    (actual,) = torch.autograd.grad(thunder.jit(fn)(ta).sum(), ta)
    torch.testing.assert_close(actual, expected)
