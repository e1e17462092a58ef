"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 18) found, each against eager.

Each program takes the gradient, as the campaign does, to the leaves the inputs are made from, through the outputs and
through the inputs that are views of a non-leaf base (read again after the call)."""

from __future__ import annotations

import torch

import thunder


def _outcome(fn, make_inputs):
    """(outputs, gradients of the leaves) of ``fn`` on fresh inputs, or the RuntimeError its forward or backward
    raised. ``make_inputs()`` gives (the leaves, the inputs)."""
    leaves, args = make_inputs()
    try:
        out = fn(*args)
        seeds = [o for o in out if o.requires_grad]
        seeds += [a for a in args if a.requires_grad and not a.is_leaf]
        gen = torch.Generator().manual_seed(1234)
        cotangents = [torch.randn(s.shape, generator=gen, dtype=s.dtype) for s in seeds]
        grads = torch.autograd.grad(seeds, leaves, cotangents, allow_unused=True) if seeds else ()
        return out, grads
    except RuntimeError as e:
        return e


def _assert_as_eager(fn, make_inputs, *, message: str | None = None) -> None:
    """thunder.jit(fn) gives eager's outputs and gradients, or raises where eager raises (then naming the user's
    line and, where given, with ``message`` in it)."""
    expected = _outcome(fn, make_inputs)
    actual = _outcome(thunder.jit(fn), make_inputs)
    if isinstance(expected, Exception):
        assert isinstance(actual, Exception), f"eager raised {expected!r}, thunder ran"
        if message is not None:
            assert message in str(expected) and message in str(actual), (expected, actual)
            assert f"in {fn.__name__}" in str(actual), actual
        return
    assert not isinstance(actual, Exception), f"thunder raised {actual!r}, eager ran"
    (eo, eg), (ao, ag) = expected, actual
    assert len(eo) == len(ao)
    for e, a in zip(eo, ao):
        assert (a.dtype, a.shape, a.requires_grad) == (e.dtype, e.shape, e.requires_grad)
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True)
    for e, a in zip(eg, ag):
        assert (e is None) == (a is None)
        if e is not None:
            torch.testing.assert_close(a, e, equal_nan=True)


def _view_of_non_leaf(values, dtype=torch.float64, view=lambda b: b[1:]):
    def make():
        leaf = torch.tensor(values, dtype=dtype, requires_grad=True)
        return [leaf], (view(leaf * 1),)

    return make


_MODIFIED = "modified by an inplace operation"


# ---------------------------------------------------------------- saved values updated in place (eager's backward raises)


def _double_then_mul_(add):  # (campaign, old features, seed 14006) x.double() of a float64 x is x itself
    v0 = add.double()
    v0.mul_(add)
    return (v0,)


def test_an_empty_view_updated_in_place_gets_its_history_from_the_program():
    # the empty view was not given the update's history after the call (nothing to copy): its gradient then went
    # around the program's backward, which raises eager's error
    _assert_as_eager(_double_then_mul_, _view_of_non_leaf([]), message=_MODIFIED)
    _assert_as_eager(_double_then_mul_, _view_of_non_leaf([1.0, 2.0]), message=_MODIFIED)
