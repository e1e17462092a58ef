"""Repros of the classes campaign seeds 14101-14110 found (session 25, the lead's share), each against eager."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager

import thunder


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 10


def _permuted():
    return (
        torch.tensor([[[[0.25, -0.5]], [[1.0, 0.75]], [[-1.0, -0.5]]]], dtype=torch.float64, requires_grad=True) * 1
    ).permute(0, 2, 3, 1)


def test_function_apply_output_keeps_its_forwards_layout():
    # (14103: the output was laid out contiguously, so a .view(-1) eager refuses ran)
    assert_as_eager(lambda x: (_ScaleGrad.apply(x), _ScaleGrad.apply(x).sigmoid() + 1), lambda: (_permuted(),))

    def viewed(x):
        return _ScaleGrad.apply(x).view(-1)

    with pytest.raises(RuntimeError) as expected:
        viewed(_permuted())
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(viewed)(_permuted())
    assert str(actual.value).split("\n")[0] == str(expected.value).split("\n")[0]
