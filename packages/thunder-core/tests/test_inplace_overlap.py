"""In-place ops whose source partly overlaps their destination give eager's result, or eager's error
where eager refuses (both tensors dense, their memory ranges intersecting)."""

from __future__ import annotations

import pytest
import torch

import thunder

CASES = {
    "copy_shifted_1d": lambda x: x.view(-1)[1:].copy_(x.view(-1)[:-1]),
    "add_shifted_1d": lambda x: x.view(-1)[1:].add_(x.view(-1)[:-1]),
    "add_transpose": lambda x: x.add_(x.T),
    "setitem_shifted_1d": lambda x: x.view(-1).__setitem__(slice(1, None), x.view(-1)[:-1]),
    "copy_shifted_columns": lambda x: x[:, 1:].copy_(x[:, :-1]),
    "add_shifted_columns": lambda x: x[:, 1:].add_(x[:, :-1]),
    "add_broadcast_column": lambda x: x.add_(x[..., :1]),
    "copy_broadcast_column": lambda x: x.copy_(x[..., :1]),
    "mul_diagonal": lambda x: x.mul_(x.diagonal()),
    "setitem_shifted_columns": lambda x: x.__setitem__((slice(None), slice(1, None)), x[:, :-1]),
    "add_row_into_rows": lambda x: x[1:].add_(x[0]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_overlapping_source_and_destination(name):
    op = CASES[name]

    def f(x):
        op(x)
        return x * 1

    x_eager, x_thunder = torch.arange(9.0).reshape(3, 3), torch.arange(9.0).reshape(3, 3)
    try:
        expected = f(x_eager)
    except RuntimeError as e:
        assert "single memory location" in str(e)
        with pytest.raises(RuntimeError, match="single memory location"):
            thunder.jit(f)(x_thunder)
        return
    got = thunder.jit(f)(x_thunder)
    assert torch.equal(got, expected)
    assert torch.equal(x_thunder, x_eager)


def test_overlapping_update_between_aliased_arguments_under_no_grad():
    def f(a0, a1):
        with torch.no_grad():
            a0.add_(a1)
        return (a0 * 1,)

    def make():
        a0 = torch.tensor([[2, -3, -3], [-2, -3, 3], [-1, 2, -2]])
        return a0, a0[..., :1]

    e, t = make(), make()
    assert torch.equal(thunder.jit(f)(*t)[0], f(*e)[0])
    assert torch.equal(t[0], e[0])


def test_overlapping_update_gradients_match_eager():
    def f(a):
        x = a * 1
        x[:, 1:].add_(x[:, :-1])
        x[1:].add_(x[0])
        return x * 2

    a = torch.arange(9.0, dtype=torch.float64).reshape(3, 3).requires_grad_()
    b = a.detach().clone().requires_grad_()
    expected, got = f(a), thunder.jit(f)(b)
    assert torch.equal(got, expected)
    g = torch.linspace(-1, 1, 9, dtype=torch.float64).reshape(3, 3)
    torch.testing.assert_close(torch.autograd.grad(got, b, g)[0], torch.autograd.grad(expected, a, g)[0])


def test_setitem_from_an_alias_with_leading_unit_dims_is_not_an_overlap():
    # eager drops the value's leading size-1 dims: a1[0] = a2 writes an element onto itself
    def f(a0, a1, a2):
        a1[0] = a2
        return (a1 * 1,)

    def make():
        a0 = torch.tensor([0.5, 1.5, 2.5])
        return a0, a0, a0[..., :1]

    e, t = make(), make()
    assert torch.equal(thunder.jit(f)(*t)[0], f(*e)[0])


def test_setitem_of_a_tensor_into_its_own_unsqueezed_view():
    def f(a1):
        v0 = a1.unsqueeze(0)
        v0[0] = a1
        return (a1.mean() * 1,)

    x = torch.tensor([[1.0, 2.0, 4.0]])
    assert torch.equal(thunder.jit(f)(x.clone())[0], f(x.clone())[0])
