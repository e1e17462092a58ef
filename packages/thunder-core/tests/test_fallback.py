"""Operations without a torch-language symbol still run: an opaque symbol executed by PyTorch."""

from __future__ import annotations

import torch

import thunder


def _fallbacks(jfn) -> list[str]:
    return [r["fn"] for r in thunder.last_interpreter_log(jfn) if r["symbol"] == "fallback"]


def test_unknown_op_falls_back_and_matches():
    def f(x):
        return torch.special.bessel_j0(x).cumprod(0) + 1

    x = torch.randn(5)
    jfn = thunder.jit(f)
    torch.testing.assert_close(jfn(x), f(x))
    fbs = _fallbacks(jfn)
    assert len(fbs) == 2 and any("bessel_j0" in name for name in fbs)
    trace = str(thunder.last_traces(jfn)[-1])
    assert "bessel_j0" in trace


def test_inplace_fallback_updates_input():
    def f(x):
        x.cumprod_(0)  # no symbol: run opaquely on a copy, then rebound
        return x * 2

    x = torch.rand(4) + 0.5
    xe = x.clone()
    jfn = thunder.jit(f)
    torch.testing.assert_close(jfn(x), f(xe))
    torch.testing.assert_close(x, xe)
    (fb,) = _fallbacks(jfn)
    assert fb.endswith("cumprod_")


def test_inplace_fallback_through_view():
    def f(x):
        x[1].exponential_()  # random and in place through a view
        return x

    x, xe = torch.zeros(3, 2), torch.zeros(3, 2)
    torch.manual_seed(3)
    f(xe)
    torch.manual_seed(3)
    thunder.jit(f)(x)
    torch.testing.assert_close(x, xe)


def test_unsupported_decomposition_falls_back():
    # max_pool2d with return_indices has no decomposition: it runs through PyTorch
    def f(x):
        out, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        return out, idx

    x = torch.randn(1, 2, 4, 4)
    jfn = thunder.jit(f)
    out, idx = jfn(x)
    eo, ei = f(x)
    torch.testing.assert_close(out, eo)
    assert torch.equal(idx, ei)
    assert _fallbacks(jfn)
