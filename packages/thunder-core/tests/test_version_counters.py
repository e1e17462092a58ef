"""Arguments leave a jitted call with eager's version counters (``x._version``).

Eager bumps a tensor's counter once per in-place op, through the tensor, its views and ``detach()`` (they
share the counter), never through ``x.data`` (which has a counter of its own); ``no_grad``, ``inference_mode``
and ``out=`` forms bump too. Autograd reads the counter, so it is part of the answer.
"""

from __future__ import annotations

import pytest
import torch

import thunder


def _data_mul(x):
    x.data.mul_(2)
    return x * 1


def _detach_mul(x):
    x.detach().mul_(2)
    return x * 1


def _view_add(x):
    x[0].add_(1)
    return x * 1


def _two_updates(x):
    x.add_(1)
    x.mul_(2)
    return x * 1


def _no_grad_add(x):
    with torch.no_grad():
        x.add_(1)
    return x * 1


def _inference_mode_add(x):
    with torch.inference_mode():
        x.add_(1)
    return x * 1


def _out_form(x):
    torch.mul(x, 2, out=x)
    return x * 1


def _copy_of_itself(x):
    x.copy_(x)
    return x * 1


def _layout_change(x):
    x.t_()
    return x * 1


def _read_only(x):
    return x * 2


def _data_update_then_ordinary_update(x):
    x.data.mul_(2)
    with torch.no_grad():
        x.sub_(1)
    return x * 1


PROGRAMS = [
    _data_mul,
    _detach_mul,
    _view_add,
    _two_updates,
    _no_grad_add,
    _inference_mode_add,
    _out_form,
    _copy_of_itself,
    _layout_change,
    _read_only,
    _data_update_then_ordinary_update,
]


# updates autograd records, of a tensor that requires grad
_RECORDED_BY_AUTOGRAD = (_view_add, _two_updates, _data_update_then_ordinary_update, _layout_change, _detach_mul)


def _argument(kind: str):
    """(the argument, its base or None), made the same way for eager and thunder."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 3, generator=g, dtype=torch.float64)
    if kind == "plain":
        return x, None
    if kind == "non-leaf":
        leaf = x.requires_grad_()
        return leaf * 1, None
    base = x * 1
    return base[1:], base  # a view: it shares its base's counter


@pytest.mark.parametrize("kind", ["plain", "non-leaf", "view"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_argument_version_after_the_call_is_eager(fn, kind):
    if kind == "non-leaf" and fn is _copy_of_itself:
        pytest.xfail(
            "issue 25, open: x.copy_(x) of a tensor that requires grad writes nothing, so its version stays; raising it "
            "after the call breaks the views of it the program returns (autograd refuses them)"
        )
    e_x, e_base = _argument(kind)
    t_x, t_base = _argument(kind)
    e_before, t_before = e_x._version, t_x._version
    jf = thunder.jit(fn)
    try:
        expected = fn(e_x)
    except RuntimeError:  # out= into a tensor that requires grad: eager's error, and thunder's
        with pytest.raises(RuntimeError, match="out="):
            jf(t_x)
        return
    actual = jf(t_x)
    torch.testing.assert_close(actual.detach(), expected.detach())
    if kind == "non-leaf" and fn in _RECORDED_BY_AUTOGRAD:
        # the program's write-back gives such a tensor its history at the version it then has: at least one bump, as
        # eager, but not eager's count (a different version would make autograd rebuild or refuse that history)
        assert (t_x._version > t_before) == (e_x._version > e_before)
        return
    assert t_x._version - t_before == e_x._version - e_before
    if e_base is not None:
        assert t_base._version == e_base._version
    # the second call runs the cached program
    e_x2, _ = _argument(kind)
    t_x2, _ = _argument(kind)
    fn(e_x2)
    jf(t_x2)
    assert t_x2._version == e_x2._version


def test_data_update_keeps_a_saved_tensor_usable_as_in_eager():
    # y saved x for its backward before the call; an update through .data is not seen by autograd in eager,
    # so backward still runs (an ordinary in-place update would make it an error)
    def run(f):
        w = torch.randn(3, dtype=torch.float64, requires_grad=True)
        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True) * 1
        y = (x * w).sum()  # saves x
        f(x)
        (g,) = torch.autograd.grad(y, w)
        return g

    torch.testing.assert_close(run(thunder.jit(_data_mul)), run(_data_mul))

    def run_visible(f):
        w = torch.randn(3, dtype=torch.float64, requires_grad=True)
        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True) * 1
        y = (x * w).sum()
        f(x)
        torch.autograd.grad(y, w)

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_visible(_detach_mul)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_visible(thunder.jit(_detach_mul))


def test_inference_tensor_argument_has_no_counter_to_set():
    with torch.inference_mode():
        e_x, t_x = torch.ones(3), torch.ones(3)
    with torch.inference_mode():
        expected = _two_updates(e_x)
        actual = thunder.jit(_two_updates)(t_x)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(t_x, e_x)


def _saved_then_data_mul(x):
    y = x * 2
    z = y.sin()  # saves y
    y.data.mul_(3)
    return z


def _saved_output_then_data_mul(x):
    y = x.exp()  # saves its result
    y.data.mul_(3)
    return y


def _saved_argument_then_data_mul(x):
    z = x.sin()  # saves x
    x.data.mul_(3)
    return z


def _saved_twice_then_data_add(x):
    y = x * 2
    z = y * y
    y.data.add_(1)
    y.data.mul_(2)
    return z, y


def _saved_view_then_data_mul(x):
    y = x * 2
    z = y[1:].sin()  # saves a view of y
    y.data.mul_(3)
    return z


def _saved_then_data_of_a_view_mul(x):
    y = x * 2
    z = y.sin()
    y[1:].data.mul_(3)
    return z


@pytest.mark.parametrize(
    "fn",
    [
        _saved_then_data_mul,
        _saved_output_then_data_mul,
        _saved_argument_then_data_mul,
        _saved_twice_then_data_add,
        _saved_view_then_data_mul,
        _saved_then_data_of_a_view_mul,
    ],
)
@pytest.mark.parametrize("non_leaf", [False, True])
def test_data_update_of_a_saved_tensor_reaches_its_backward_as_in_eager(fn, non_leaf):
    # a tensor saved for backward shares its storage with the tensor .data updated, and autograd does not refuse it:
    # eager's backward reads the updated elements
    leaf = torch.randn(3, dtype=torch.float64, requires_grad=True)
    e_leaf = leaf.detach().clone().requires_grad_()
    x, e_x = (leaf * 1, e_leaf * 1) if non_leaf else (leaf, e_leaf)
    out, expected = thunder.jit(fn)(x), fn(e_x)
    out = out if isinstance(out, tuple) else (out,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, e_x)
    (g,) = torch.autograd.grad(out[0].sum(), leaf)
    (e_g,) = torch.autograd.grad(expected[0].sum(), e_leaf)
    torch.testing.assert_close(g, e_g)
