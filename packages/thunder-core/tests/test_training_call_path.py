"""A training call's computation calls autograd's C++ ``Function.apply`` itself when ``torch.autograd.Function.apply``'s
Python layer would do nothing but unwrap tensors (no functorch transform active, no symbolic sizes among the inputs),
and that layer otherwise: outputs and gradients are eager's on both paths."""

from __future__ import annotations

import pytest
import torch
import torch._functorch.utils

import thunder


def _fn(a, b):
    return (a * b).sin(), a.exp().sum()


@pytest.fixture
def python_layer_calls(monkeypatch):
    """How many times Function.apply's Python layer ran (it unwraps the arguments on every call)."""
    calls = [0]
    unwrap = torch._functorch.utils.unwrap_dead_wrappers

    def counting(args):
        calls[0] += 1
        return unwrap(args)

    monkeypatch.setattr(torch._functorch.utils, "unwrap_dead_wrappers", counting)
    return calls


def _check_against_eager(jf, shape):
    a = torch.randn(shape, requires_grad=True)
    b = torch.randn(shape, requires_grad=True)
    a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    out, total = jf(a, b)
    ref, ref_total = _fn(a_ref, b_ref)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(total, ref_total)
    assert type(out.grad_fn).__name__ == "ThunderFunctionBackward"
    (out.sum() + total).backward()
    (ref.sum() + ref_total).backward()
    torch.testing.assert_close(a.grad, a_ref.grad)
    torch.testing.assert_close(b.grad, b_ref.grad)


def test_tensor_inputs_skip_the_python_layer(python_layer_calls):
    jf = thunder.jit(_fn)
    for _ in range(2):
        _check_against_eager(jf, (3, 4))
    assert python_layer_calls[0] == 0


def test_symbolic_sizes_go_through_the_python_layer(python_layer_calls):
    jf = thunder.jit(_fn, cache="symbolic values")
    for shape in [(3, 4), (5, 4)]:
        _check_against_eager(jf, shape)
    assert thunder.cache_misses(jf) == 1 and python_layer_calls[0] == 2
