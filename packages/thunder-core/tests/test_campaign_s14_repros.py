"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008) found, each against eager."""

from __future__ import annotations

import torch

import thunder


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
