"""A view made under ``torch.no_grad()`` of a tensor that requires grad: in eager it is a leaf that requires
grad, what is computed from it requires grad, and no gradient reaches the viewed tensor through it (its
``.grad`` stays None when that is its only use). Thunder let the gradient through to the parameter."""

from __future__ import annotations

import pytest
import torch

import thunder

_VIEWS = {
    "view_same_shape": lambda w: w.view(-1),
    "view_other_shape": lambda w: w.view(3, 1),
    "reshape_same_shape": lambda w: w.reshape(3),
    "slice_all": lambda w: w[:],
    "slice_part": lambda w: w[1:],
    "expand_as": lambda w: w.expand_as(w),
    "view_as": lambda w: w.view_as(w),
    "squeeze": lambda w: w.squeeze(),
    "unsqueeze": lambda w: w.unsqueeze(0),
    "t": lambda w: w.t(),
    "alias": lambda w: torch.ops.aten.alias(w),
    # these return the tensor itself in eager: the gradient does flow
    "contiguous": lambda w: w.contiguous(),
    "to_same_dtype": lambda w: w.to(torch.float32),
    "detach": lambda w: w.detach(),
}


@pytest.mark.parametrize("name", sorted(_VIEWS))
def test_gradient_does_not_flow_through_a_view_made_under_no_grad(name):
    view = _VIEWS[name]

    def f(x, w):
        with torch.no_grad():
            wv = view(w)
        y = x * wv.reshape(-1)[:1].sum()
        return y.sum(), wv * 2

    results = []
    for fn in (f, thunder.jit(f)):
        x = torch.randn(3, requires_grad=True, generator=torch.Generator().manual_seed(0))
        w = torch.linspace(1.0, 2.0, 3, requires_grad=True)
        loss, scaled = fn(x, w)
        loss.backward()
        results.append((loss.detach(), scaled.detach(), scaled.requires_grad, x.grad, w.grad))
    (el, es, erg, exg, ewg), (tl, ts, trg, txg, twg) = results
    torch.testing.assert_close(tl, el)
    torch.testing.assert_close(ts, es)
    assert trg == erg
    torch.testing.assert_close(txg, exg)
    assert (twg is None) == (ewg is None), f"w.grad: eager {ewg}, thunder {twg}"
    if ewg is not None:
        torch.testing.assert_close(twg, ewg)


def test_a_no_grad_view_of_a_module_parameter_gets_no_gradient():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4))
            self.bias = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            with torch.no_grad():
                frozen = self.weight.view(1, 4)  # a frozen copy of the scale, as a user would write it
            return (x * frozen + self.bias).sum()

    eager, jitted = Scale(), Scale()
    jm = thunder.jit(jitted)
    x = torch.randn(2, 4)
    eager(x).backward()
    jm(x).backward()
    assert eager.weight.grad is None
    assert jitted.weight.grad is None, jitted.weight.grad
    torch.testing.assert_close(jitted.bias.grad, eager.bias.grad)
