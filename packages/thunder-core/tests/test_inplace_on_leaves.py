"""In-place updates of leaf tensors that require grad: eager refuses them with grad enabled, so does thunder
(naming the user's line); through detach()/.data, under no_grad, and on non-leaf tensors they run as in eager."""

from __future__ import annotations

import pytest
import torch

import thunder

_LINEAR = torch.nn.Linear(2, 2)


def _add(x):
    return x.add_(1)


def _setitem(x):
    x[0] = 1.0
    return x


def _through_view(x):
    x[1:].mul_(2)
    return x


def _through_detach(x):
    x.detach().add_(1)
    return x * 1


def _through_data(x):
    x.data.mul_(3)
    return x * 1


def _under_no_grad(x):
    with torch.no_grad():
        x.add_(1)
    return x * 2


def _global_parameter(x):
    _LINEAR.weight.add_(1)
    return _LINEAR(x)


def _relu_inplace(x):
    return torch.nn.functional.relu(x, inplace=True)


REFUSED = [_add, _setitem, _through_view, _global_parameter, _relu_inplace]
ALLOWED = [_through_detach, _through_data, _under_no_grad]


def _leaf(fn):
    return torch.randn(2, requires_grad=fn is not _global_parameter)


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__)
def test_update_of_a_grad_leaf_is_refused_as_in_eager(fn):
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as eager:
        fn(_leaf(fn))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as jitted:
        thunder.jit(fn)(_leaf(fn))
    assert ("view of a leaf" in str(eager.value)) == ("view of a leaf" in str(jitted.value))
    assert __file__ in str(jitted.value)  # the user's line


@pytest.mark.parametrize("fn", ALLOWED, ids=lambda f: f.__name__)
def test_updates_eager_allows_run_as_in_eager(fn):
    torch.manual_seed(0)
    x_eager = _leaf(fn)
    x_jit = x_eager.detach().clone().requires_grad_(True)
    expected = fn(x_eager)
    got = thunder.jit(fn)(x_jit)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x_jit, x_eager)
    assert got.requires_grad == expected.requires_grad


def test_update_of_a_non_leaf_input_is_allowed():
    def f(x):
        return x.add_(1) * 2

    base = torch.randn(3, requires_grad=True)
    expected = f(base * 1)
    got = thunder.jit(f)(base * 1)
    torch.testing.assert_close(got, expected)
    (g_eager,) = torch.autograd.grad(f(base * 1).sum(), base)
    (g_jit,) = torch.autograd.grad(thunder.jit(f)(base * 1).sum(), base)
    torch.testing.assert_close(g_jit, g_eager)
