"""Gradients of the robust losses (smooth L1, Huber) are PyTorch's backward kernels, at infinities and NaNs
too, for every reduction and with broadcasting between input and target."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_grad_semantics import assert_like_eager

_SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, 1.0, -1.0, 0.5, -0.25, 3.0]


def _pairs():
    pairs = [(a, b) for a in _SPECIAL for b in _SPECIAL]
    a = torch.tensor([a for a, _ in pairs], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([b for _, b in pairs], dtype=torch.float64, requires_grad=True)
    return a, b


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(
    "loss",
    [
        lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r),
        lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.5),
        lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0),
        lambda a, b, r: F.huber_loss(a, b, reduction=r),
        lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=2.5),
    ],
    ids=["smooth_l1", "smooth_l1_beta", "smooth_l1_beta0", "huber", "huber_delta"],
)
def test_robust_losses_at_infinities_and_nans(loss, reduction):
    a, b = _pairs()
    assert_like_eager(lambda x, y: loss(x, y, reduction), a, b)


@pytest.mark.filterwarnings("ignore:Using a target size")  # eager warns about the broadcast
@pytest.mark.parametrize("loss", [F.smooth_l1_loss, F.huber_loss], ids=["smooth_l1", "huber"])
def test_robust_losses_broadcast_target(loss):
    torch.manual_seed(0)
    a = (torch.randn(3, 4, dtype=torch.float64) * 3).requires_grad_(True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert_like_eager(loss, a, b)
