"""A tensor eager's autograd saved for backward, then updated in place (issue 25): eager's backward raises "one of
the variables needed for gradient computation has been modified by an inplace operation"; thunder computed a
gradient from the values it had kept. Its backward now raises the same error, naming the user's lines; programs
whose backward eager runs (the updated tensor was not saved, or its node is not reached) keep working."""

from __future__ import annotations

import pytest
import torch

import thunder

_MODIFIED = "modified by an inplace operation"


def _result_updated_under_no_grad(x):
    y = x.exp()
    with torch.no_grad():
        y.copy_(x)
    return y


def _result_scaled_under_no_grad(x):
    y = x.exp()
    with torch.no_grad():
        y.mul_(2)
    return y * 3


def _result_updated_with_grad(x):
    y = x.sigmoid()
    y.add_(1)
    return y


def _saved_argument_restrided(x):
    y = x * 1
    z = y * y  # (saves y twice)
    y.t_()
    return z


def _result_restrided(x):
    y = x.exp()
    y.t_()
    return y


def _saved_through_a_view(x):
    y = x.exp()
    y[0].mul_(2)
    return y


def _not_saved(x):
    y = x.sin()  # (sin saves x, not its result)
    with torch.no_grad():
        y.mul_(2)
    return y


def _saved_but_not_reached(x):
    y = x.exp()
    y.mul_(2)  # (exp's node is not on the path of the output's gradient)
    return x * 3, y.detach()


def _saved_argument_of_a_matmul(x, w):
    y = x * 1
    out = y @ w
    with torch.no_grad():
        y.zero_()
    return out


_CASES = [
    _result_updated_under_no_grad,
    _result_scaled_under_no_grad,
    _result_updated_with_grad,
    _saved_argument_restrided,
    _result_restrided,
    _saved_through_a_view,
    _not_saved,
    _saved_but_not_reached,
    _saved_argument_of_a_matmul,
]


def _run(fn, args):
    """(outputs, gradients of the arguments) or the error text of the call or of its backward."""
    try:
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in outs if o.requires_grad).backward()
    except RuntimeError as e:
        return str(e)
    return [o.detach() for o in outs], [a.grad for a in args]


@pytest.mark.parametrize("fn", _CASES, ids=[f.__name__ for f in _CASES])
def test_update_of_a_saved_tensor_matches_eager(fn):
    n = fn.__code__.co_argcount
    torch.manual_seed(0)
    make = [torch.randn(3, 3, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    expected = _run(fn, [t.detach().clone().requires_grad_() for t in make])
    actual = _run(thunder.jit(fn), [t.detach().clone().requires_grad_() for t in make])
    if isinstance(expected, str):
        assert _MODIFIED in expected
        assert isinstance(actual, str) and _MODIFIED in actual and "test_saved_tensor_versions.py" in actual
    else:
        assert not isinstance(actual, str), actual
        torch.testing.assert_close(actual, expected)


def test_forward_alone_still_runs():
    """Eager raises at backward only: a call whose backward is never run returns eager's values."""
    x = torch.randn(3, requires_grad=True)
    torch.testing.assert_close(thunder.jit(_result_updated_with_grad)(x), _result_updated_with_grad(x))


def test_backward_through_the_other_outputs_alone_runs():
    """Eager's backward through an output that does not reach the call never unpacks its saved tensor (grown
    fuzzer seed 29): only the gradient of ``x * 3`` is asked for, and the program's backward runs as eager's."""

    def f(x):
        y = x.exp()
        y.mul_(2)
        return y, x * 3

    xe = torch.randn(3, requires_grad=True)
    xt = xe.detach().clone().requires_grad_()
    jf = thunder.jit(f)
    expected, actual = f(xe), jf(xt)
    expected[1].sum().backward()
    actual[1].sum().backward()
    torch.testing.assert_close(xt.grad, xe.grad)
    with pytest.raises(RuntimeError, match=_MODIFIED):
        f(xe)[0].sum().backward()
    with pytest.raises(RuntimeError, match=_MODIFIED):
        jf(xt)[0].sum().backward()


@pytest.mark.parametrize("cache", [None, "symbolic values"])
def test_a_gradient_through_a_detached_value_does_not_reach_the_call(cache):
    """An output computed from a ``detach`` of the call's result carries no gradient back to the call: thunder raised
    eager's error for a backward through it alone, because it followed the values and not the gradients (the
    outputs reaching the call now follow only values a gradient can reach). Through the output that does reach it,
    both raise."""

    def f(x):
        y = x * 3
        q = torch.div(y, y + 1, rounding_mode="floor")  # (saves y)
        y.mul_(2)
        return q.detach() * x, q * x

    kwargs = {} if cache is None else {"cache": cache}
    jf = thunder.jit(f, **kwargs)
    xe = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    xt = xe.detach().clone().requires_grad_()
    f(xe)[0].sum().backward()
    jf(xt)[0].sum().backward()
    torch.testing.assert_close(xt.grad, xe.grad)
    with pytest.raises(RuntimeError, match=_MODIFIED):
        f(xe)[1].sum().backward()
    with pytest.raises(RuntimeError, match=_MODIFIED):
        jf(xt)[1].sum().backward()
