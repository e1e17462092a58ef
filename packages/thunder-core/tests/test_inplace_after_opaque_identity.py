"""In-place updates of a tensor that an opaque op (one without a torch-language symbol, run by PyTorch) returned
as its argument itself: ``v.resolve_neg()``, ``v.resolve_conj()`` and ``v.positive()`` of a real tensor are ``v``
in eager. Issue 25 (fuzz campaign seed 9101): updating such a result when it is a view of an input crashed while
tracing (the write into the view's base was recorded as a user call, which hands back a stand-in tensor instead of
the traced value, and the next write scattered a real tensor into a proxy). Eager is the reference for the
outputs, their requires_grad, the caller's tensor after the call and the gradients."""

from __future__ import annotations

import pytest
import torch

import thunder

IDENTITY_OPS = {
    "resolve_neg": lambda v: v.resolve_neg(),
    "resolve_conj": lambda v: v.resolve_conj(),
    "positive": lambda v: v.positive(),
    "torch_positive": torch.positive,
}
UPDATES = {
    "clamp_": lambda v: v.clamp_(min=0),
    "add_": lambda v: v.add_(1),
    "mul_": lambda v: v.mul_(2),
    "fill_": lambda v: v.fill_(3),
    "zero_": lambda v: v.zero_(),
    "setitem": lambda v: v.__setitem__(..., 2.0),
}
VIEWS = {
    "row": lambda a: a[0],
    "zero_dim": lambda a: a[0, 1],
    "transposed": lambda a: a.t(),
    "whole": lambda a: a,
}


def _program(identity, update, view, no_grad: bool):
    def fn(a0):
        v2 = identity(view(a0))
        if no_grad:
            with torch.no_grad():
                update(v2)
        else:
            update(v2)
        return v2 * 1

    return fn


def _run(fn, jit: bool, requires_grad: bool):
    leaf = torch.tensor([[-2.0, 0.5, 1.0], [3.0, -1.0, 0.25]], dtype=torch.float64, requires_grad=requires_grad)
    x = leaf * 1 if requires_grad else leaf.clone()  # a non-leaf input the program updates through a view
    out = (thunder.jit(fn) if jit else fn)(x)
    grad = None
    if requires_grad:
        # through the output and through the updated input used after the call
        (grad,) = torch.autograd.grad(out.sum() + (x * 5).sum(), leaf)
    return out, x, grad


def _assert_matches_eager(fn, requires_grad: bool) -> None:
    e_out, e_x, e_grad = _run(fn, jit=False, requires_grad=requires_grad)
    t_out, t_x, t_grad = _run(fn, jit=True, requires_grad=requires_grad)
    assert t_out.requires_grad == e_out.requires_grad
    assert t_out.dtype == e_out.dtype
    torch.testing.assert_close(t_out.detach(), e_out.detach())
    torch.testing.assert_close(t_x.detach(), e_x.detach(), msg="the caller's tensor after the call differs")
    if requires_grad:
        torch.testing.assert_close(t_grad, e_grad, msg="gradient differs")


@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("identity", sorted(IDENTITY_OPS))
def test_update_under_no_grad_of_a_row_returned_by_an_identity_op(identity, update):
    fn = _program(IDENTITY_OPS[identity], UPDATES[update], VIEWS["row"], no_grad=True)
    _assert_matches_eager(fn, requires_grad=True)


@pytest.mark.parametrize("no_grad", [True, False], ids=["no_grad", "grad"])
@pytest.mark.parametrize("requires_grad", [True, False], ids=["requires_grad", "no_requires_grad"])
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("update", ["clamp_", "add_", "fill_"])
def test_update_of_resolve_neg_of_a_view(update, view, requires_grad, no_grad):
    fn = _program(IDENTITY_OPS["resolve_neg"], UPDATES[update], VIEWS[view], no_grad=no_grad)
    _assert_matches_eager(fn, requires_grad=requires_grad)


@pytest.mark.parametrize("no_grad", [True, False], ids=["no_grad", "grad"])
def test_update_of_a_view_of_a_leaf_that_requires_grad(no_grad):
    """Eager allows the update under no_grad and refuses it with grad enabled (a view of a leaf); so does thunder."""
    fn = _program(IDENTITY_OPS["resolve_neg"], UPDATES["clamp_"], VIEWS["row"], no_grad=no_grad)

    def run(f):
        leaf = torch.tensor([[-2.0, 0.5], [1.0, 3.0]], dtype=torch.float64, requires_grad=True)
        out = f(leaf)
        (grad,) = torch.autograd.grad(out.sum() + (leaf * 2).sum(), leaf)
        return out, leaf, grad

    if not no_grad:
        with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
            run(fn)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
            run(thunder.jit(fn))
        return
    for t, e in zip(run(thunder.jit(fn)), run(fn)):
        assert t.requires_grad == e.requires_grad
        torch.testing.assert_close(t.detach(), e.detach())


@pytest.mark.parametrize("identity", sorted(IDENTITY_OPS))
def test_identity_op_of_a_transposed_view_input_is_returned(identity):
    """Campaign seed 9301 (issue 25): ``a0.resolve_conj()`` of a transposed non-leaf input was taken as an update
    of the input, whose write-back then copied the input onto itself and raised autograd's overlap error."""
    fn = IDENTITY_OPS[identity]

    def run(f):
        leaf = torch.tensor([[-1.5], [1.25]], dtype=torch.float64, requires_grad=True)
        x = (leaf * 1).t()
        out = f(x)
        (grad,) = torch.autograd.grad((out * out).sum() + (x * 3).sum(), leaf)
        return out, x, grad

    (t_out, t_x, t_grad), (e_out, e_x, e_grad) = run(thunder.jit(fn)), run(fn)
    assert t_out.requires_grad == e_out.requires_grad
    for t, e in ((t_out, e_out), (t_x, e_x), (t_grad, e_grad)):
        torch.testing.assert_close(t.detach(), e.detach())
