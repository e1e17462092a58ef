"""Grown-fuzzer classes of in-place layout updates (issue 25), each against eager on the same inputs.

``x.squeeze_()`` with no dim of size 1 writes nothing, so eager allows it on an expanded tensor (thunder raised
the internal-overlap error of a write); its version count is eager's for tensors that do not require grad (for one
requiring grad that the program left unwritten, ``x.t_(); x.t_()``, the caller's count stays as it was: the
program's autograd node may have saved that tensor, and another version would make its backward refuse it).
"""

from __future__ import annotations

import pytest
import torch

import thunder


def _squeeze_without_size_one(a):
    a.squeeze_()
    return a * 1


def _unsqueeze_then_squeeze(a):
    a.unsqueeze_(0)
    a.squeeze_(0)
    return a * 1


def _two_transposes(a):
    a.t_()
    a.t_()
    return a * 2


def _leaf_and(view):
    """(the leaf, the argument ``view(leaf)``); the leaf does not require grad when ``view`` takes no ``*1``."""

    def make():
        leaf = torch.randn(2, 3, requires_grad=True)
        return leaf, view(leaf)

    return make


_INPUTS = {
    "expanded non-leaf requiring grad": _leaf_and(lambda leaf: (leaf * 1).unsqueeze(0).expand(2, 2, 3)),
    "expanded": _leaf_and(lambda leaf: leaf.detach()[0].expand(2, 3)),
    "non-leaf requiring grad": _leaf_and(lambda leaf: leaf * 1),
    "view requiring grad": _leaf_and(lambda leaf: (leaf * 1)[0:1]),
}


@pytest.mark.parametrize("make", _INPUTS.values(), ids=_INPUTS.keys())
@pytest.mark.parametrize("fn", [_squeeze_without_size_one, _unsqueeze_then_squeeze, _two_transposes])
def test_layout_updates_match_eager(fn, make):
    if fn is _two_transposes and make()[1].dim() > 2:
        pytest.skip("t_() of a 3-d tensor raises in eager and in thunder")
    torch.manual_seed(0)
    le, ae = make()
    torch.manual_seed(0)
    lt, at = make()
    expected, actual = fn(ae), thunder.jit(fn)(at)
    torch.testing.assert_close(actual, expected)
    assert (actual.requires_grad, at.shape, at.stride()) == (expected.requires_grad, ae.shape, ae.stride())
    if not ae.requires_grad:
        assert at._version == ae._version
    if expected.requires_grad:
        torch.testing.assert_close(torch.autograd.grad(actual.sum(), lt), torch.autograd.grad(expected.sum(), le))
