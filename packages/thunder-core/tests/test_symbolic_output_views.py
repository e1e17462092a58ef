"""With symbolic sizes (``cache="symbolic values"``), an output that eager returns as a view of a tensor the
program computes is such a view here too (``_base`` set, the same layout), for every size the program is
called with: the layout is read from the program's own output when it runs, not from the traced numbers."""

from __future__ import annotations

import pytest
import torch

import thunder


def _slice_updated_in_place(a):
    v = (a * 2)[..., 1:]
    v.clamp_(-0.5, 0.5)
    return v


def _slice_updated_in_place_with_its_base(a):
    y = a.sin()
    v = y[..., 1:]
    v.mul_(3)
    return v, y


_PROGRAMS = {
    "slice_updated_in_place": _slice_updated_in_place,
    "slice_updated_in_place_with_its_base": _slice_updated_in_place_with_its_base,
    "t_of_a_vector": lambda a: a.sum(0).t(),  # (an identity view: the program's value is the root itself)
    "t_of_a_matrix": lambda a: (a * 2).t(),
    "slice": lambda a: (a * 2)[1:],
    "flatten": lambda a: (a + 1).view(-1),
    "unsqueeze": lambda a: (a * 3).unsqueeze(0),
    "diagonal": lambda a: (a - 1).diagonal(),
    "view_returned_with_base": lambda a: ((b := a * 2), b.t()),
}


def _facts(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [(o.shape, o.stride(), o.storage_offset(), o._is_view(), o.requires_grad) for o in outs]


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_views_of_results_with_symbolic_sizes_match_eager(name):
    fn = _PROGRAMS[name]
    jfn = thunder.jit(fn, cache="symbolic values")
    for shape in ((2, 3), (4, 5), (5, 7)):  # (one order of the sizes: diagonal specialises on it)
        leaf = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        e_leaf = leaf.detach().clone().requires_grad_()
        out, expected = jfn(leaf), fn(e_leaf)
        assert _facts(out) == _facts(expected), shape
        if isinstance(out, tuple):  # (a view returned with its base: the base is its ``_base``)
            assert [o._base is out[-1] for o in out] == [e._base is expected[-1] for e in expected], shape
        outs = out if isinstance(out, tuple) else (out,)
        e_outs = expected if isinstance(expected, tuple) else (expected,)
        for o, e in zip(outs, e_outs):
            torch.testing.assert_close(o, e)
            if e._is_view():  # a write through the view after the call is allowed with grad, as in eager
                o.mul_(2)
                e.mul_(2)
        (g,) = torch.autograd.grad(sum(o.sum() for o in outs), leaf)
        (e_g,) = torch.autograd.grad(sum(e.sum() for e in e_outs), e_leaf)
        torch.testing.assert_close(g, e_g)
    assert thunder.cache_misses(jfn) == 1


def _no_grad_add(a):
    v = a.sin()
    with torch.no_grad():
        v.add_(a)
    return v.t(), v


def _write_through_flat_view(a):
    v = a * 2
    v.view(-1)[0] = 3
    return v.t(), v


def _no_grad_write_through_flat_view(a):
    v = a * 2
    with torch.no_grad():
        v.view(-1)[1] = 3
    return v[1:], v


def _no_grad_copy(a):
    v = a * 3
    with torch.no_grad():
        v.copy_(a)
    return v.unsqueeze(0), v


# an output updated in place (which the program returns as a copy of its new value) and a view of it the user's code
# made before the program's end
_VIEWS_OF_UPDATED_OUTPUTS = [_no_grad_add, _write_through_flat_view, _no_grad_write_through_flat_view, _no_grad_copy]


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("fn", _VIEWS_OF_UPDATED_OUTPUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_view_of_an_updated_output_is_a_view_of_that_output(fn, cache, requires_grad):
    jfn = thunder.jit(fn, cache=cache)
    for shape in ((3, 2), (4, 5)):
        a = torch.randn(shape, dtype=torch.float64, requires_grad=requires_grad)
        e_a = a.detach().clone().requires_grad_(requires_grad)
        (view, base), (e_view, e_base) = jfn(a), fn(e_a)
        assert e_view._base is e_base
        assert view._base is base, shape
        assert _facts((view, base)) == _facts((e_view, e_base)), shape
        torch.testing.assert_close((view, base), (e_view, e_base))
        # a write through one output reaches the other, as in eager
        with torch.no_grad():
            view.mul_(-1)
            e_view.mul_(-1)
        base.add_(0.5)
        e_base.add_(0.5)
        torch.testing.assert_close((view, base), (e_view, e_base))
        if requires_grad:
            (g,) = torch.autograd.grad(view.sum() + (base * base).sum(), a)
            (e_g,) = torch.autograd.grad(e_view.sum() + (e_base * e_base).sum(), e_a)
            torch.testing.assert_close(g, e_g)
