"""``thunder.examine`` reports native and fallback operations and whether results match eager."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

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


class _ElementwiseFusion(thunder.extend.FusionExecutor):
    """Fuses runs of mul, add and tanh; a region runs through the torch executor."""

    region_name = "elementwise"

    def can_fuse(self, bsym) -> bool:
        return bsym.sym.name in {"mul", "add", "tanh"} and bsym.sym.id.startswith("torch.")

    def fuse_region(self, region):
        from thunder.executors import pythonex, torchex
        from thunder.executors.fusion import region_trace

        return region_trace(region, [torchex.ex, pythonex.ex]).python_callable()


def test_examine_counts_fusion_regions_forward_and_backward(capsys):
    def f(a, b):
        c = torch.tanh(a * b + 1)  # one region in the forward
        return c.sum(-1) * 2  # (sum is not fused: the region ends; the scalar mul after it is a lone op)

    fuser = _ElementwiseFusion("test_examine_fuser")
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    report = thunder.examine(f, a, b, executors=[fuser])
    assert report.matches is True
    assert report.fusion_regions == {"test_examine_fuser": 2}  # mul+add+tanh, and the lone mul after the sum
    assert report.fusion_states == ["not tiered"]  # (it does not compile slowly: no background tier)
    assert "fusion regions: 2 test_examine_fuser (cached programs: not tiered)" in capsys.readouterr().out

    # with gradients, the backward program's regions count too
    report = thunder.examine(f, a.requires_grad_(), b, executors=[fuser])
    assert report.matches is True
    backward = thunder.jit(f, executors=[fuser])
    backward(a, b)
    expected = sum(
        "fusion" in s.sym.tags
        for t in (thunder.last_traces(backward)[-1], thunder.last_backward_traces(backward)[-1])
        for s in t.bound_symbols
    )
    assert sum(report.fusion_regions.values()) == expected > 2

    # without a fusion executor: nothing to report
    capsys.readouterr()
    report = thunder.examine(f, a, b)
    assert not report.fusion_regions and "fusion regions" not in capsys.readouterr().out


class _Inputs(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class _Holder:
    x: torch.Tensor


def test_examine_copies_tensors_inside_named_tuples_and_dataclasses(capsys):
    # the eager run must update copies: a tensor left shared with the caller was updated by both runs, and
    # the report said thunder differs from eager
    def update_pair(p):
        p.a.add_(1)
        return p.a * p.b

    def update_holder(h):
        h.x.mul_(3)
        return h.x + 1

    a, b = torch.ones(3), torch.full((3,), 2.0)
    report = thunder.examine(update_pair, _Inputs(a, b))
    assert report.matches, report.mismatch
    torch.testing.assert_close(a, torch.full((3,), 2.0))  # updated once, by thunder's run

    x = torch.ones(2)
    report = thunder.examine(update_holder, _Holder(x))
    assert report.matches, report.mismatch
    torch.testing.assert_close(x, torch.full((2,), 3.0))
