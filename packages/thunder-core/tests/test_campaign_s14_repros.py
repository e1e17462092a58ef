"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008) found, each against eager."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.tracing.errors import TracingError


def _abs_through_an_empty_view(take, view):
    view.abs_()
    return torch.sin(take)


def test_update_of_an_empty_view_keeps_the_saved_inputs_current():
    # campaign seed 14004: the step after the call copied the (empty) view's new elements into the caller's view,
    # bumping the version of the input the program had saved for sin's backward, which then raised
    def make():
        a0 = (torch.tensor([], dtype=torch.float64, requires_grad=True) * 1)[::2]
        return a0, a0[..., :1]

    (te, ve), (tt, vt) = make(), make()
    expected = _abs_through_an_empty_view(te, ve)
    actual = thunder.jit(_abs_through_an_empty_view)(tt, vt)
    torch.testing.assert_close(actual, expected)
    assert (tt._version, vt._version) == (te._version, ve._version)
    expected.sum().backward()
    actual.sum().backward()


def _as_strided_copy_at_zero(a, b, c):
    return torch.as_strided_copy(c, (2,), (1,), storage_offset=0) * 2


def _as_strided_at_zero(a, b, c):
    return torch.as_strided(c, (2,), (1,), 0) * 2, a * 3


def _as_strided_own_offset(a, b, c):
    return torch.as_strided(b, (3,), (2,)) * 2


def _as_strided_returned(a, b, c):
    return torch.as_strided(c, (2,), (1,), 1)


_STRIDED = [_as_strided_copy_at_zero, _as_strided_at_zero, _as_strided_own_offset, _as_strided_returned]


def _views_of_one_storage(grad: bool):
    leaf = torch.arange(20, dtype=torch.float32, requires_grad=grad)
    a0 = (leaf * 1)[1:]
    return a0, a0[2:], a0[..., :1]


@pytest.mark.parametrize("fn", _STRIDED)
def test_as_strided_of_arguments_sharing_a_storage_addresses_the_storage(fn):
    expected, actual = fn(*_views_of_one_storage(False)), thunder.jit(fn)(*_views_of_one_storage(False))
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
        assert a._base is not None if e._base is not None else True


@pytest.mark.parametrize("fn", [_as_strided_at_zero, _as_strided_returned])
def test_as_strided_of_arguments_sharing_a_storage_and_requiring_grad_is_refused(fn):
    # campaign seed 14007: such arguments are copies of their own elements in the program, and as_strided's offset
    # addressed that copy (the element at the argument's start, not the storage's): silently other values. A view
    # reading past the argument's elements is still refused (eager's gradient reaches its elements only)
    fn(*_views_of_one_storage(True))  # (eager runs it)
    with pytest.raises(TracingError, match=r"(?s)thunder\.jit cannot run .*test_campaign_s14_repros\.py"):
        thunder.jit(fn)(*_views_of_one_storage(True))


@pytest.mark.parametrize("fn", [_as_strided_own_offset, _as_strided_copy_at_zero])
def test_as_strided_of_an_argument_sharing_a_storage_and_requiring_grad_within_its_elements(fn):
    # (session 18) a view reading only the argument's elements, or a copy, comes from the storage; the gradient
    # reaches the argument's elements only
    (leaf_e, *args_e), (leaf_t, *args_t) = _leaf_and_views(), _leaf_and_views()
    expected, actual = fn(*args_e), thunder.jit(fn)(*args_t)
    torch.testing.assert_close(actual, expected)
    weights = torch.arange(1.0, expected.numel() + 1)
    (ge,), (ga,) = torch.autograd.grad(expected, leaf_e, weights), torch.autograd.grad(actual, leaf_t, weights)
    torch.testing.assert_close(ga, ge)


def _leaf_and_views():
    leaf = torch.arange(20, dtype=torch.float32, requires_grad=True)
    a0 = (leaf * 1)[1:]
    return leaf, a0, a0[2:], a0[..., :1]


def _update_of_an_unbind_output(a):
    y = a * 1
    v = y.unbind(0)[0]
    v.add_(1)
    return y


def _update_of_a_split_output(a):
    y = a * 1
    v = y.split(1)[0]
    torch.nn.functional.relu(v, inplace=True)
    return y


def _update_of_a_view_made_under_no_grad(a):
    y = a * 1
    with torch.no_grad():
        v = y.chunk(2)[0]
    v.mul_(2)
    return y


_REFUSED_UPDATES = [_update_of_an_unbind_output, _update_of_a_split_output, _update_of_a_view_made_under_no_grad]


@pytest.mark.parametrize("fn", _REFUSED_UPDATES, ids=[f.__name__ for f in _REFUSED_UPDATES])
@pytest.mark.parametrize("grad", [False, True])
def test_updates_of_views_eager_refuses_with_grad(fn, grad):
    # campaign seed 14006: an in-place update of an output of a view op returning several views (unbind, split,
    # chunk), or of a view made under no_grad, with grad: eager raises, thunder computed a result
    def run(f):
        try:
            return f(torch.arange(6.0).reshape(2, 3).requires_grad_(grad))
        except RuntimeError as e:
            return str(e).splitlines()[0]

    expected, actual = run(fn), run(thunder.jit(fn))
    assert isinstance(expected, str) == grad
    if grad:
        assert isinstance(actual, str) and actual.startswith(expected[:40])
    else:
        torch.testing.assert_close(actual, expected)
