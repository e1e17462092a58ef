"""Grown-fuzzer classes of in-place layout updates (issue 25), each against eager on the same inputs.

``x.squeeze_()`` with no dim of size 1 writes nothing, so eager allows it on an expanded tensor (thunder raised
the internal-overlap error of a write); its version count is eager's for tensors that do not require grad and for one requiring grad that the program
neither writes back nor restrides (set before the call, at which the program's autograd node saves it; after
``x.t_(); x.t_()``, which the program restrides, the caller's count is still one short of eager's).
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


# (t_() of a 3-d tensor raises, in eager and in thunder)
_LAYOUT_CASES = [
    (fn, name)
    for fn in (_squeeze_without_size_one, _unsqueeze_then_squeeze, _two_transposes)
    for name in _INPUTS
    if fn is not _two_transposes or not name.startswith("expanded non-leaf")
]


@pytest.mark.parametrize("fn, name", _LAYOUT_CASES, ids=[f"{f.__name__}-{n}" for f, n in _LAYOUT_CASES])
def test_layout_updates_match_eager(fn, name):
    make = _INPUTS[name]
    torch.manual_seed(0)
    le, ae = make()
    torch.manual_seed(0)
    lt, at = make()
    expected, actual = fn(ae), thunder.jit(fn)(at)
    torch.testing.assert_close(actual, expected)
    assert (actual.requires_grad, at.shape, at.stride()) == (expected.requires_grad, ae.shape, ae.stride())
    if not ae.requires_grad or fn is _squeeze_without_size_one:
        assert at._version == ae._version
    if expected.requires_grad:
        torch.testing.assert_close(torch.autograd.grad(actual.sum(), lt), torch.autograd.grad(expected.sum(), le))


def _restride_past_then_read(a):
    a.as_strided_((2,), (1,))
    return a * 2


def _restride_past_then_write(x):
    y = x * 1
    v = y[1:2]
    v.as_strided_((2,), (1,), 2)
    v.mul_(10)
    return y, v


_RESTRIDES = {
    "read, empty view": (_restride_past_then_read, lambda: torch.arange(6.0).reshape(2, 1, 3)[:, 1:]),
    "read, one-element view": (_restride_past_then_read, lambda: torch.arange(6.0)[3:4]),
    "write": (_restride_past_then_write, lambda: torch.arange(6.0)),
}


@pytest.mark.parametrize("fn, make", _RESTRIDES.values(), ids=_RESTRIDES.keys())
def test_as_strided_reaching_past_a_views_elements_matches_eager(fn, make):
    # grown fuzzer seed 11: thunder's meta run of as_strided_ had the view's elements alone as its storage and raised
    ae, at = make(), make()
    expected, actual = fn(ae), thunder.jit(fn)(at)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    assert (at.shape, at.stride(), at.storage_offset()) == (ae.shape, ae.stride(), ae.storage_offset())
    torch.testing.assert_close(at._base if at._base is not None else at, ae._base if ae._base is not None else ae)


def test_as_strided_reaching_past_the_elements_of_a_tensor_requiring_grad_gets_eagers_gradient():
    # eager's gradient follows the tensor's former elements (the new ones get none); once refused, now modelled
    # (thunder/tracing/restrided_gradients.py)
    def make():
        leaf = torch.arange(6.0, requires_grad=True)
        return leaf, (leaf * 1)[3:4]

    (le, ae), (lt, at) = make(), make()
    expected, actual = _restride_past_then_read(ae), thunder.jit(_restride_past_then_read)(at)
    torch.testing.assert_close(actual, expected)
    seeds = torch.tensor([3.0, 5.0])
    ge = torch.autograd.grad((expected, ae), le, (seeds, seeds * 7))
    gt = torch.autograd.grad((actual, at), lt, (seeds, seeds * 7))
    torch.testing.assert_close(gt, ge)


def _as_strided_reaching_row_one(x):
    return torch.as_strided(x, (2, 2), (1, 2), 0)


def _as_strided_after_an_update(x):
    x.mul_(2)
    return torch.as_strided(x, (2, 2), (1, 2), 0)


def _as_strided_within_elements(x):
    return torch.as_strided(x, (2,), (2,), 0)


def _as_strided_of_a_computed_row(x):
    return torch.as_strided((x * 3)[0:1], (2, 2), (1, 2), 0)


def _as_strided_of_an_updated_row(x):
    v = x[0:1]
    v.mul_(2)
    return torch.as_strided(v, (2, 2), (1, 2), 0)


def _as_strided_of_an_updated_computed_row(x):
    y = x * 1
    v = y[0:1]
    v.mul_(2)
    return torch.as_strided(v, (2, 2), (1, 2), 0) * 1


_VIEWED_ARGUMENTS = {
    "expanded row": (_as_strided_reaching_row_one, lambda b: b[0:1].expand(3, -1)),
    "row": (_as_strided_reaching_row_one, lambda b: b[0:1]),
    "strided row": (_as_strided_reaching_row_one, lambda b: b[0:1, ::2]),
    "row of a computed tensor": (_as_strided_of_a_computed_row, lambda b: b),
    "updated row of the argument": (_as_strided_of_an_updated_row, lambda b: b),
    "updated row of a computed tensor": (_as_strided_of_an_updated_computed_row, lambda b: b),
    "within the row": (_as_strided_within_elements, lambda b: b[0:1].expand(3, -1)),
}


@pytest.mark.parametrize("fn, view", _VIEWED_ARGUMENTS.values(), ids=_VIEWED_ARGUMENTS.keys())
def test_as_strided_of_a_viewed_argument_reaching_its_bases_elements_gets_eagers_gradient(fn, view):
    # silently wrong before: the output was re-viewed from the argument's base, whose elements past the argument's
    # got a gradient; eager's as_strided backward follows the argument's own geometry and drops theirs
    def make():
        leaf = torch.tensor([[1.5, -0.25, -2.0], [0.5, -1.0, -1.5]], dtype=torch.float64, requires_grad=True)
        return leaf, view(leaf * 1)

    (le, ae), (lt, at) = make(), make()
    expected, actual = fn(ae), thunder.jit(fn)(at)
    torch.testing.assert_close(actual, expected)
    assert (actual._base is None) == (expected._base is None)
    seed = torch.arange(1.0, 1.0 + expected.numel(), dtype=torch.float64).reshape(expected.shape)
    torch.testing.assert_close(torch.autograd.grad(actual, lt, seed), torch.autograd.grad(expected, le, seed))


def test_as_strided_past_an_updated_arguments_elements_is_refused_with_the_users_line():
    # crashed inside the program before (the updated argument's value holds its own elements only)
    x = (torch.randn(2, 3, dtype=torch.float64) * 1)[0:1]
    with pytest.raises(Exception, match="as_strided reading storage elements past") as info:
        thunder.jit(_as_strided_after_an_update)(x)
    assert "_as_strided_after_an_update" in str(info.value) or "test_layout_update_repros" in str(info.value)
