"""x.is_leaf, x.grad_fn, x._base and x._is_view() inside a jitted function answer as in eager.

They used to answer from the stand-in (always a leaf, no grad_fn, no base), so code branching on them took
the other branch, silently; an argument's answers are checked on every call (a stale program otherwise).
"""

import pytest
import torch

import thunder
from thunder.tracing.errors import TracingError


def _facts(t):
    return [t.is_leaf, t.grad_fn is None, t._base is None, t._is_view()]


def _program(x):
    y = x * 2
    with torch.no_grad():
        z = x[1:]
    d = y.detach()
    return [_facts(v) for v in (x, y, y.t(), y[::2][1:], z, d, d[1:], x.detach(), x.float(), x[0])]


def _leaf():
    return torch.ones(3, 2, requires_grad=True)


_INPUTS = {
    "leaf requiring grad": _leaf,
    "non-leaf": lambda: _leaf() * 1,
    "tensor without grad": lambda: torch.ones(3, 2),
    "transposed tensor": lambda: torch.ones(2, 3).t(),
    "parameter": lambda: torch.nn.Parameter(torch.ones(3, 2)),
}


@pytest.mark.parametrize("make", _INPUTS.values(), ids=_INPUTS.keys())
def test_answers_match_eager(make):
    assert thunder.jit(_program)(make()) == _program(make())


def test_a_view_argument_reads_a_base_that_is_not_none():
    # eager: the base of an argument that is a view is the caller's tensor, which the function was not given
    def f(x):
        return x * (2 if x._base is None else 3), x._is_view(), x[1:]._base is None

    base = torch.ones(4, 2, requires_grad=True) * 1
    got, expected = thunder.jit(f)(base[1:]), f(base[1:])
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]
    with pytest.raises(TracingError, match=r"_base\.shape.*not given"):
        thunder.jit(lambda x: x._base.shape)(base[1:])


def test_the_answers_are_checked_on_every_call():
    # the repro: a program traced for a tensor owning its storage was reused for a view (2s where eager gave 3s)
    jf = thunder.jit(lambda x: x * (2 if x._base is None else 3))
    assert torch.equal(jf(torch.ones(2)), torch.full((2,), 2.0))
    assert torch.equal(jf(torch.ones(3)[1:]), torch.full((2,), 3.0))
    assert torch.equal(jf(torch.ones(2)), torch.full((2,), 2.0))

    jleaf = thunder.jit(lambda x: x * (2 if x.is_leaf else 3))
    leaf = torch.ones(2, requires_grad=True)
    assert torch.equal(jleaf(leaf).detach(), torch.full((2,), 2.0))
    assert torch.equal(jleaf(leaf * 1).detach(), torch.full((2,), 3.0))


def test_an_argument_updated_with_a_value_requiring_grad_is_no_leaf():
    def f(x, w):
        x.mul_(w)
        return x.is_leaf, x.grad_fn is None

    w = torch.ones(2, requires_grad=True)
    assert thunder.jit(f)(torch.ones(2), w) == f(torch.ones(2), w)


def test_reading_the_grad_fn_beyond_none_raises_a_clear_error():
    def f(x):
        return x.exp().grad_fn.name()

    with pytest.raises(TracingError, match=r"grad_fn\.name.*exists only when the program runs"):
        thunder.jit(f)(torch.ones(2, requires_grad=True))


def test_detach_in_place_of_a_computed_tensor_matches_eager():
    # it used to do nothing: the result still required grad
    def f(a):
        y = a * 2
        y.detach_()
        return y * 3, y.requires_grad, y.is_leaf

    a = torch.ones(2, requires_grad=True)
    expected, actual = f(a), thunder.jit(f)(a)
    assert actual[1:] == expected[1:] and actual[0].requires_grad == expected[0].requires_grad
    torch.testing.assert_close(actual[0], expected[0])
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        thunder.jit(lambda a: (a * 2)[1:].detach_())(a)


_CALLER_STATE_CHANGES = {
    # (the function, an argument): each changed the caller's tensor in eager and was ignored inside jit
    "x.data = y": (lambda x, y: (setattr(x, "data", y), x * 1)[1], torch.zeros(2, dtype=torch.int32)),
    "requires_grad_ of an argument": (lambda x, y: x.requires_grad_() * y, torch.zeros(2)),
    "detach_ of an argument": (lambda x, y: x.detach_() * y, torch.zeros(2, requires_grad=True)),
}


@pytest.mark.parametrize("fn, x", _CALLER_STATE_CHANGES.values(), ids=_CALLER_STATE_CHANGES.keys())
def test_changes_of_the_callers_tensor_beyond_values_raise_a_clear_error(fn, x):
    with pytest.raises(TracingError, match=r"(?s)thunder\.jit cannot .*test_autograd_queries\.py"):
        thunder.jit(fn)(x, torch.ones(2))


def test_requires_grad_that_changes_nothing_is_allowed():
    x = torch.ones(2, requires_grad=True)
    out = thunder.jit(lambda x: x.requires_grad_() * 2)(x)
    assert out.requires_grad and x.requires_grad
