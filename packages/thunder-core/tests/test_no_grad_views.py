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


@pytest.mark.parametrize("grad_of", range(5))
def test_views_made_under_no_grad_returned_beside_their_base(grad_of):
    def f(a):
        total = a.mean()
        with torch.no_grad():
            squeezed = total.squeeze()  # (a 0-d squeeze gives the value back unchanged)
            viewed = total.view(1)
            arg_view = a.view(-1)  # (of the argument: the same shape, the value given back unchanged)
            arg_part = a[1:]
        return total, squeezed, viewed, arg_view, arg_part

    results = []
    for fn in (f, thunder.jit(f)):
        a = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64, requires_grad=True)
        outs = fn(a)
        facts = [(o.requires_grad, o.is_leaf, o.grad_fn is None) for o in outs]
        weights = torch.linspace(0.5, 1.5, outs[grad_of].numel(), dtype=torch.float64).reshape(outs[grad_of].shape)
        (outs[grad_of] * weights).sum().backward()
        results.append(([o.detach() for o in outs], facts, a.grad))
    (ev, ef, eg), (tv, tf, tg) = results
    torch.testing.assert_close(tv, ev)
    # requires_grad, is_leaf and grad_fn as eager's; for the views of the argument only requires_grad (thunder
    # returns them as outputs of its autograd node: no gradient reaches the argument through them, as in eager)
    assert tf[:3] == ef[:3] and [r for r, _, _ in tf] == [r for r, _, _ in ef], (tf, ef)
    if grad_of >= 3 and eg is None and tg is not None:
        # (thunder's autograd node gives the argument a zero gradient through its own output, where eager's leaf
        # gives none: zeros for None, the one difference left)
        eg = torch.zeros_like(tg)
    assert (tg is None) == (eg is None), f"a.grad: eager {eg}, thunder {tg}"
    if eg is not None:
        torch.testing.assert_close(tg, eg)
