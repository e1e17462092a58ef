"""A training step of a jitted module checked against the same step of an eager copy."""

from __future__ import annotations

import torch


def assert_step_like_eager(model: torch.nn.Module, ref: torch.nn.Module, actual: torch.Tensor, expected: torch.Tensor):
    """``actual`` (from thunder.jit(model)) equals ``expected`` (from ``ref``, an eager copy of ``model``), and so do
    the parameters' gradients of the loss ``out.square().mean()``; both modules' gradients are reset after."""
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    actual.square().mean().backward()
    expected.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
    model.zero_grad()
    ref.zero_grad()
