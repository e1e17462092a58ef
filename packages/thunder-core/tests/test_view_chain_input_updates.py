"""An input updated in place through a chain of views of it (a select of a slice, a diagonal of a transpose,
an unsqueeze of a narrow), the input itself a strided view of a tensor that requires grad, against eager:
outputs, the caller's tensor after the call, and the gradients to the leaf through the outputs and through
the updated input used after the call.

The update's gradient reads the value before the write (``pow_``, ``sin_``, ``mul_`` by itself): a view
that a step of the chain computes must be saved as it was before the program writes the input back."""

from __future__ import annotations

import pytest
import torch

import thunder


def _updates():
    return {
        "pow_": lambda v: v.pow_(2),
        "sin_": lambda v: v.sin_(),
        "mul_ by itself": lambda v: v.mul_(v.clone()),
        "exp_": lambda v: v.exp_(),
    }


def _select_of_a_slice(a0):
    v0 = a0[..., 1:]
    return v0, v0.select(-1, 0)


def _diagonal_of_a_transpose(a0):
    v0 = a0.transpose(0, 1)
    return v0, v0.diagonal()


def _unsqueeze_of_a_narrow(a0):
    v0 = a0.narrow(0, 1, 2)
    return v0, v0.unsqueeze(1)


def _select_of_a_select(a0):
    v0 = a0.select(0, 1)
    return v0, v0.select(0, 0)


def _diagonal_of_a_slice_with_steps(a0):
    v0 = a0[::2, :]
    return v0, v0.diagonal(offset=1)


CHAINS = {
    "select of a slice": _select_of_a_slice,
    "diagonal of a transpose": _diagonal_of_a_transpose,
    "unsqueeze of a narrow": _unsqueeze_of_a_narrow,
    "select of a select": _select_of_a_select,
    "diagonal of a slice with steps": _diagonal_of_a_slice_with_steps,
}

# the caller's input: a view of a non-leaf tensor computed from the leaf
INPUTS = {
    "slice with steps of a non-leaf": lambda leaf: (leaf * 1)[::2],
    "transpose of a non-leaf": lambda leaf: (leaf * 1).t(),
    "non-leaf": lambda leaf: leaf * 1,
}


def _leaf():
    return torch.linspace(-1.5, 1.25, 24, dtype=torch.float64).reshape(6, 4).requires_grad_()


def _run(fn, make_input, compiled: bool):
    leaf = _leaf()
    x = make_input(leaf)
    out = (thunder.jit(fn) if compiled else fn)(x)
    return leaf, x, out


@pytest.mark.parametrize("update", list(_updates()))
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("given", list(INPUTS))
def test_update_through_a_view_chain_of_an_input_then_the_outer_view_returned(given, chain, update):
    def fn(a0):
        outer, inner = CHAINS[chain](a0)
        _updates()[update](inner)
        return outer

    e_leaf, e_x, e_out = _run(fn, INPUTS[given], compiled=False)
    t_leaf, t_x, t_out = _run(fn, INPUTS[given], compiled=True)
    torch.testing.assert_close(t_out, e_out)
    assert t_out.requires_grad == e_out.requires_grad
    torch.testing.assert_close(t_x, e_x, msg="the caller's input after the call differs")
    # gradients through the output and through the updated input, as the caller uses it after the call
    (e_grad,) = torch.autograd.grad((e_out * 3).sum() + (e_x * 10).sum(), e_leaf)
    (t_grad,) = torch.autograd.grad((t_out * 3).sum() + (t_x * 10).sum(), t_leaf)
    torch.testing.assert_close(t_grad, e_grad)


@pytest.mark.parametrize("chain", list(CHAINS))
def test_update_through_a_view_chain_with_a_product_of_the_input_returned(chain):
    # the backward needs the input's old values (a0 * 2 before the write) and the updated view's old values
    def fn(a0):
        before = a0 * 2
        outer, inner = CHAINS[chain](a0)
        inner.pow_(3)
        return before, outer * a0.sum()

    e_leaf, e_x, e_out = _run(fn, INPUTS["slice with steps of a non-leaf"], compiled=False)
    t_leaf, t_x, t_out = _run(fn, INPUTS["slice with steps of a non-leaf"], compiled=True)
    for t, e in zip(t_out, e_out):
        torch.testing.assert_close(t, e)
    torch.testing.assert_close(t_x, e_x)
    (e_grad,) = torch.autograd.grad(sum((o * (k + 2)).sum() for k, o in enumerate(e_out)), e_leaf)
    (t_grad,) = torch.autograd.grad(sum((o * (k + 2)).sum() for k, o in enumerate(t_out)), t_leaf)
    torch.testing.assert_close(t_grad, e_grad)
