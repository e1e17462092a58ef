"""In-place ops whose out-of-place result is bool (logical ops, comparisons, ``x[...] = True``) on float tensors
that require grad: the updated tensor requires grad as in eager, and gradients through it equal eager's
(a logical op is not recorded by autograd, so the tensor keeps its gradient path; a comparison gives a zero
gradient). Issue 25, class 1c."""

from __future__ import annotations

import pytest
import torch

import thunder

_PROGRAMS = {
    "logical_not_": lambda x: x.logical_not_() * 2,
    "logical_and_": lambda x: x.logical_and_(x > 0) * 2,
    "logical_or_": lambda x: x.logical_or_(torch.zeros(3)) * 2,
    "logical_xor_": lambda x: x.logical_xor_(x) * 2,
    "eq_": lambda x: x.eq_(0) * 2,
    "lt_": lambda x: x.lt_(0.5) * 2,
    "ge_tensor": lambda x: x.ge_(torch.ones(3)) * 2,
    "setitem_all_true": lambda x: (x.__setitem__(..., True), x * 2)[1],
    "setitem_one_true": lambda x: (x.__setitem__(0, True), x * 2)[1],
    "setitem_mask_true": lambda x: (x.__setitem__(x > 0, True), x * 2)[1],
    "view_logical_not_": lambda x: (x[1:].logical_not_(), x * 2)[1],
    "view_eq_": lambda x: (x[:2].eq_(0), x * 2)[1],
    "intermediate_logical_not_": lambda x: (x * 3).logical_not_() * x,
    "returned_logical_not_": lambda x: x.logical_not_(),
}


def _run(fn, jit: bool):
    leaf = torch.tensor([0.0, 1.5, -2.0], dtype=torch.float64, requires_grad=True)
    x = leaf * 3
    out = (thunder.jit(fn) if jit else fn)(x)
    # the gradient through the output and through the updated input used after the call
    (grad,) = torch.autograd.grad(out.sum() + (x * 5).sum(), leaf)
    return out, x, grad


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_requires_grad_and_gradients_match_eager(name):
    fn = _PROGRAMS[name]
    e_out, e_x, e_grad = _run(fn, jit=False)
    t_out, t_x, t_grad = _run(fn, jit=True)
    assert t_out.requires_grad == e_out.requires_grad
    assert t_x.requires_grad == e_x.requires_grad
    assert t_out.dtype == e_out.dtype
    torch.testing.assert_close(t_out.detach(), e_out.detach())
    torch.testing.assert_close(t_x.detach(), e_x.detach())
    torch.testing.assert_close(t_grad, e_grad)


def test_no_grad_update_keeps_requires_grad_false():
    """Under no_grad nothing is recorded: the result of the call does not require grad, as in eager."""
    fn = _PROGRAMS["logical_not_"]
    x = torch.tensor([0.0, 1.5], requires_grad=True) * 1
    with torch.no_grad():
        expected = fn(x.clone())
        actual = thunder.jit(fn)(x.clone())
    assert actual.requires_grad == expected.requires_grad
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("name", ["logical_not_", "logical_and_", "logical_or_"])
def test_logical_update_of_a_leaf_that_requires_grad_runs_as_in_eager(name):
    """Eager lets a logical in-place op update a leaf that requires grad (autograd does not record it); the
    leaf stays a leaf requiring grad, and gradients through it after the call are eager's."""

    def f(x):
        return getattr(x, name)(x > 0) * 3 if name != "logical_not_" else x.logical_not_() * 3

    def run(jit):
        x = torch.tensor([0.0, 1.5, -2.0], dtype=torch.float64, requires_grad=True)
        out = (thunder.jit(f) if jit else f)(x)
        assert x.is_leaf and x.requires_grad
        (grad,) = torch.autograd.grad(out.sum() + (x * 5).sum(), x)
        return out.detach(), x.detach(), grad

    for a, e in zip(run(True), run(False)):
        torch.testing.assert_close(a, e)


# comparisons with a tensor that requires grad (issue 25): eager's autograd records them with a zero gradient for
# both operands, so the updated tensor requires grad even when it did not, and the operand's .grad is zeros
_COMPARISONS = {
    "eq_": lambda x, y: x.eq_(y),
    "ne_": lambda x, y: x.ne_(y),
    "lt_": lambda x, y: x.lt_(y),
    "le_": lambda x, y: x.le_(y),
    "gt_": lambda x, y: x.gt_(y),
    "ge_": lambda x, y: x.ge_(y),
    "view_eq_": lambda x, y: x[1:].eq_(y[1:]),
}
_UPDATED = {
    "intermediate": lambda update: lambda x, y: (lambda v: (update(v, y), v * 2)[1])(x * 1),
    "returned_intermediate": lambda update: lambda x, y: (lambda v: (update(v, y), v)[1])(x * 1),
    "input": lambda update: lambda x, y: (update(x, y), x * 2)[1],
}


def _run_comparison(fn, jit: bool, x_requires_grad: bool):
    x_leaf = torch.tensor([0.0, 1.5, -2.0], dtype=torch.float64, requires_grad=x_requires_grad)
    y_leaf = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64, requires_grad=True)
    x = x_leaf * 1 if x_requires_grad else x_leaf.clone()
    out = (thunder.jit(fn) if jit else fn)(x, y_leaf * 1)
    (out.sum() + (x * 5).sum()).backward()
    return out, x, y_leaf.grad, x_leaf.grad


@pytest.mark.parametrize("x_requires_grad", [True, False], ids=["x_requires_grad", "x_no_grad"])
@pytest.mark.parametrize("updated", sorted(_UPDATED))
@pytest.mark.parametrize("name", sorted(_COMPARISONS))
def test_comparison_with_an_operand_that_requires_grad(name, updated, x_requires_grad):
    fn = _UPDATED[updated](_COMPARISONS[name])
    e_out, e_x, e_ygrad, e_xgrad = _run_comparison(fn, False, x_requires_grad)
    t_out, t_x, t_ygrad, t_xgrad = _run_comparison(fn, True, x_requires_grad)
    assert t_out.requires_grad == e_out.requires_grad
    assert t_x.requires_grad == e_x.requires_grad  # the caller's tensor after the call
    torch.testing.assert_close(t_out.detach(), e_out.detach())
    torch.testing.assert_close(t_x.detach(), e_x.detach())
    assert e_ygrad is not None  # eager: zeros, not "unused"
    torch.testing.assert_close(t_ygrad, e_ygrad)
    if x_requires_grad:
        torch.testing.assert_close(t_xgrad, e_xgrad)


def test_comparison_with_an_operand_that_requires_grad_under_no_grad():
    def fn(x, y):
        v = x * 1
        with torch.no_grad():
            v.eq_(y)
        return v

    y = torch.tensor([0.0, 1.0], requires_grad=True)
    x = torch.tensor([0.0, 1.5])
    assert not fn(x, y).requires_grad
    actual = thunder.jit(fn)(x, y)
    assert not actual.requires_grad
    torch.testing.assert_close(actual, fn(x, y))
