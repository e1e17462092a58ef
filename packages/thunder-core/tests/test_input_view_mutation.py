"""An input that is a view of a non-leaf tensor requiring grad, updated in place by the program and used by
the caller afterwards: as in eager, the caller's view and its base carry the update's history (CopySlices),
the version counter is bumped, and every later gradient through the view, its base and the outputs equals
eager's. Issue 25, class 1a."""

from __future__ import annotations

import pytest
import torch

import thunder

_UPDATES = {
    "fill_": lambda x: (x.fill_(3), x * 2)[1],
    "reshape_slice_fill_": lambda x: (x.reshape(-1)[:2].fill_(3), x * 2)[1],
    "diagonal_zero_": lambda x: (x.diagonal().zero_(), x * 2)[1],
    "row_mul_": lambda x: (x[0].mul_(2), x * 2)[1],
    "add_then_square": lambda x: (x.add_(1), x * x)[1],
    "view_div_": lambda x: (x[1:].div_(x[0].detach() + 1), x.exp())[1],
    "returned": lambda x: x.mul_(3),
}

_VIEWS = {
    "offset_slice": lambda b: b[1:],
    "transpose": lambda b: b.t(),
    "step_slice": lambda b: b[::2],
    "expanded": lambda b: b[0:1].expand(3, 3),
    "non_contiguous": lambda b: b[:, 1:],
}

# eager runs these forwards but its backward refuses (its CopySlices writes the gradient through the expanded
# view): thunder's backward must refuse too
_EAGER_BACKWARD_REFUSES = {("fill_", "expanded")}


def _run(update, view, jit: bool, refuses: bool = False):
    leaf = torch.arange(12, dtype=torch.float64).reshape(4, 3).requires_grad_()
    base = leaf * 1
    x = view(base)
    version = x._version
    out = (thunder.jit(update) if jit else update)(x)
    # gradients through the output, the updated view used after the call, and its base
    loss = out.sum() + (x * 10).sum() + (base**2).sum()
    if refuses:
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.autograd.grad(loss, leaf)
        grad = None
    else:
        (grad,) = torch.autograd.grad(loss, leaf)
    return out.detach(), x.detach(), base.detach(), grad, x._version > version, type(base.grad_fn).__name__


@pytest.mark.parametrize("view_name", sorted(_VIEWS))
@pytest.mark.parametrize("update_name", sorted(_UPDATES))
def test_updated_view_input_matches_eager(update_name, view_name):
    refuses = (update_name, view_name) in _EAGER_BACKWARD_REFUSES
    try:
        expected = _run(_UPDATES[update_name], _VIEWS[view_name], jit=False, refuses=refuses)
    except RuntimeError as e:  # eager refuses most in-place ops on an expanded tensor: so must we
        with pytest.raises(RuntimeError, match="single memory location"):
            _run(_UPDATES[update_name], _VIEWS[view_name], jit=True)
        assert "single memory location" in str(e)
        return
    actual = _run(_UPDATES[update_name], _VIEWS[view_name], jit=True, refuses=refuses)
    for a, e in zip(actual, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == e


def test_issue_repro_gradient_through_the_updated_view_is_zero():
    """The repro of issue 25: the old history of ``x`` gave 10s where eager gives zeros."""

    def f(x):
        x.fill_(3)
        return x * 2

    leaf = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    base = leaf * 1
    x = base[1:]
    out = thunder.jit(f)(x)
    (grad,) = torch.autograd.grad(out.sum() + (x * 10).sum(), leaf)
    torch.testing.assert_close(grad, torch.zeros_like(leaf))
    assert type(base.grad_fn).__name__ == "CopySlices"


def test_view_of_a_base_not_requiring_grad_updated_with_a_value_that_does():
    """As in eager, the base then requires grad and its gradient reaches the value written."""

    def f(x, y):
        x.copy_(y * 2)
        return x.sum()

    def run(jit):
        base = torch.zeros(3, 2, dtype=torch.float64) * 1
        y = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
        x = base[1:]
        (thunder.jit(f) if jit else f)(x, y)
        assert base.requires_grad
        return torch.autograd.grad((base * 3).sum(), y)[0]

    torch.testing.assert_close(run(True), run(False))
