"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14024, session 24) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.transforms import split

# ------------------------- symbolic sizes: an output nobody differentiates gets no gradient (not zeros through inf)


def _floor_div_and_detached_product(a0, a1):  # (campaign, 14007/14016: a1 holds inf)
    v1 = torch.div(a1, a0, rounding_mode="floor")
    v3 = a1 * (a1 * 2)
    return v3.detach(), v1


def _product_and_quotient(a0, a1):
    return a1 * a1, torch.div(a1, a0, rounding_mode="floor")


def _with_inf(n):
    a0 = torch.linspace(-1.5, 1.5, n).reshape(1, n)
    a1 = torch.linspace(-1.0, 1.0, n).reshape(1, n)
    a1[0, 0] = float("inf")
    return a0, a1.requires_grad_()


def _grads(f, fn_out, n):
    a0, a1 = _with_inf(n)
    out = f(a0, a1)
    return out, torch.autograd.grad(out[fn_out].sum(), a1, allow_unused=True)


@pytest.mark.parametrize("fn, differentiated", [(_floor_div_and_detached_product, 1), (_product_and_quotient, 1)])
def test_symbolic_sizes_leave_undifferentiated_outputs_out_of_the_backward(fn, differentiated):
    jitted = thunder.jit(fn, cache="symbolic values")
    for n in (3, 5):  # (the second call runs the program of symbolic sizes)
        expected, ge = _grads(fn, differentiated, n)
        actual, ga = _grads(jitted, differentiated, n)
        for e, a in zip(expected, actual):
            assert (a.dtype, a.shape, a.requires_grad, a._is_view()) == (e.dtype, e.shape, e.requires_grad, e._is_view())
            torch.testing.assert_close(a, e, equal_nan=True)
        torch.testing.assert_close(ga, ge, equal_nan=True)


def test_symbolic_sizes_unprunable_backward_gets_zeros_of_the_calls_sizes(monkeypatch):
    # where no pruned backward can be made, the full one gets zeros of this call's sizes, not the traced ones
    monkeypatch.setattr(split, "_pruned_backward", lambda *args: None)
    jitted = thunder.jit(_product_and_quotient, cache="symbolic values")
    for n in (3, 5, 4):
        a0, a1 = torch.randn(1, n), torch.randn(1, n, requires_grad=True)
        (ga,) = torch.autograd.grad(jitted(a0, a1)[0].sum(), a1)
        torch.testing.assert_close(ga, 2 * a1.detach())


# ----------------------------------------------------------- out= eager refuses: another dtype, an input requiring grad


def _round_into_double(x):  # (campaign, 14010: eager's CPU kernel checks the dtype, its meta kernel does not)
    v4 = torch.empty((), dtype=torch.float64)
    torch.round(x.prod(), decimals=0, out=v4)
    return v4


def _diff_into_double(x):  # (campaign, 14012)
    v2 = torch.empty((1,), dtype=torch.float64)
    torch.diff(x, 0, 0, None, None, out=v2)
    return v2


_captured = torch.tensor([-1.5, -1.0, 0.5], dtype=torch.bfloat16, requires_grad=True)


def _sub_of_captured_requiring_grad(x):  # (campaign, 14012: the tensor requiring grad is a global)
    v0 = torch.empty((3,), dtype=torch.float64)
    torch.sub(_captured, torch.tensor(-4.1, dtype=torch.float64), out=v0)
    return v0 + x


@pytest.mark.parametrize(
    "fn, x",
    [
        (_round_into_double, torch.tensor([1.5, 2.0])),
        (_diff_into_double, torch.tensor([[1.5], [2.0]], dtype=torch.float16)),
        (_sub_of_captured_requiring_grad, torch.zeros(3, dtype=torch.float64)),
    ],
)
def test_out_eager_refuses_is_refused_naming_the_line(fn, x):
    with pytest.raises(RuntimeError) as expected:
        fn(x)
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(fn)(x)
    assert str(actual.value).splitlines()[0] == str(expected.value).splitlines()[0]
    assert "test_campaign_s24_repros.py" in str(actual.value)


def test_out_of_another_dtype_eager_casts_into_still_runs():
    def fn(x):
        o = torch.empty((2,), dtype=torch.float64)
        torch.add(x, x, out=o)
        torch.sin(x, out=o[:1])
        return o

    x = torch.tensor([1.5, -2.25])
    torch.testing.assert_close(thunder.jit(fn)(x), fn(x))
