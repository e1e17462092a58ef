"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14016, session 22) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager

import thunder

# ------------------------- an empty view updated in place beside another view of its base that the program saves


def _setitem_then_matmul(a0, a1, a2):  # (campaign, 14012: a0 and a1 one empty expanded view, a2 a row of it)
    a1[...] = True
    return (torch.matmul(a1, a2),)


def _mul_then_matmul(a, b):
    a.mul_(2)
    return (torch.matmul(a, b),)


def _mul_then_matmul_of_the_other(a, b):
    a.mul_(2)
    return (torch.matmul(b.unsqueeze(0), b.unsqueeze(1)),)


def _empty_expanded():
    leaf = torch.tensor([], requires_grad=True)
    a0 = (leaf * 1).unsqueeze(0).expand(2, -1)
    return leaf, (a0, a0, a0[0])


def _empty_views():
    leaf = torch.tensor([], requires_grad=True)
    base = leaf * 1
    return leaf, (base.view(2, 0), base[0:0])


def _differentiate_all(fn, make):
    """The gradient of the leaf through the outputs and the arguments after the call (what the campaign takes)."""
    leaf, args = make()
    targets = [*fn(*args), *args]
    return torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets], allow_unused=True)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_setitem_then_matmul, _empty_expanded),
        (_mul_then_matmul, _empty_views),
        (_mul_then_matmul_of_the_other, _empty_views),
    ],
)
def test_saved_view_of_an_argument_sharing_a_counter_with_an_updated_empty_view(fn, make):
    assert_as_eager(fn, lambda: make()[1], grads=False)  # (gradients of the leaf below: the arguments are updated)
    (expected,), (actual,) = _differentiate_all(fn, make), _differentiate_all(thunder.jit(fn), make)
    assert (actual is None) == (expected is None)
    if expected is not None:
        torch.testing.assert_close(actual, expected)


def test_saved_view_of_an_argument_updated_after_the_call_refuses_backward_as_eager():
    for f in (_mul_then_matmul, thunder.jit(_mul_then_matmul)):
        leaf, (a, b) = _empty_views()
        (out,) = f(a, b)
        with torch.no_grad():
            b.add_(1)  # (out's backward needs b, as it was)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(out.sum(), leaf)
