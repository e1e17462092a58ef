"""``thunder.examine`` reports native and fallback operations and whether results match eager."""

from __future__ import annotations

import torch

import thunder


def test_examine_fully_native(capsys):
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1)

    report = thunder.examine(f, torch.randn(3, 4), torch.randn(4, 5))
    assert report.matches is True
    assert report.fully_supported
    assert report.native["torch.nn.functional.gelu"] == 1
    assert not report.fallback
    assert "every torch operation has a native symbol" in capsys.readouterr().out


def test_examine_lists_fallbacks():
    def f(x):
        y = torch.special.bessel_j0(x)
        return torch.special.bessel_j0(y) + x.cumprod(0)

    report = thunder.examine(f, torch.randn(4))
    assert report.matches is True
    assert report.fallback == {"torch.special.special_bessel_j0": 2, "Tensor.cumprod": 1}
    assert report.native["Tensor.__add__"] == 1 or sum(report.native.values()) == 1
    assert "Tensor.cumprod (1 call)" in str(report)


def test_examine_module_with_buffer_update_and_random():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("steps", torch.zeros(()))

        def forward(self, x):
            self.steps += 1
            return torch.nn.functional.dropout(self.lin(x), 0.5) + torch.rand(4)

    report = thunder.examine(M(), torch.randn(2, 4))
    assert report.matches is True and report.error is None


def test_examine_reports_errors():
    def f(x):
        if x.sum() > 0:  # data-dependent control flow cannot be traced
            return x
        return -x

    report = thunder.examine(f, torch.randn(3))
    assert report.error is not None and report.matches is None
    assert isinstance(report.error, thunder.DataDependentControlFlowError)
