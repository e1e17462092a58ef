"""Compiling (the forward when first called, the backward when it first runs) pauses Python's cyclic garbage collector
and gives back the state it found."""

from __future__ import annotations

import gc

import pytest
import torch

import thunder


def test_collector_paused_while_compiling_and_restored():
    seen = []

    def fn(x):
        seen.append(gc.isenabled())  # runs while thunder traces
        return x * 2

    assert gc.isenabled()
    thunder.jit(fn)(torch.ones(2))
    assert seen == [False]
    assert gc.isenabled()


def test_collector_restored_after_a_failed_compile():
    def fn(x):
        raise ValueError("user error while tracing")

    with pytest.raises(ValueError):
        thunder.jit(fn)(torch.ones(2))
    assert gc.isenabled()


def test_collector_left_disabled_when_the_caller_disabled_it():
    gc.disable()
    try:
        thunder.jit(lambda x: x + 1)(torch.ones(2))
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("outputs_with_gradient", ["all", "some"])
def test_collector_paused_while_the_backward_compiles_at_its_first_call(monkeypatch, outputs_with_gradient):
    # the backward compiles when it first runs (a pruned one for the outputs that got gradients); a full collection
    # triggered there scanned everything the compile held alive (0.19 s of a tiny HF Llama's 0.47 s first step)
    from thunder.core.trace import TraceCtx

    compiled = []
    python_callable = TraceCtx.python_callable

    def recording(self, *args, **kwargs):
        compiled.append((self.fn_name, gc.isenabled()))
        return python_callable(self, *args, **kwargs)

    monkeypatch.setattr(TraceCtx, "python_callable", recording)

    def fn(x):
        return x.sin() * 2, x.cos()

    x = torch.randn(3, requires_grad=True)
    a, b = thunder.jit(fn)(x)
    compiled_before_backward = len(compiled)
    loss = a.sum() + b.sum() if outputs_with_gradient == "all" else a.sum()
    (grad,) = torch.autograd.grad(loss, x)
    expected = 2 * x.cos() - (x.sin() if outputs_with_gradient == "all" else 0)
    torch.testing.assert_close(grad, expected.detach())
    backward = compiled[compiled_before_backward:]
    assert [name for name, _ in backward] == ["backward_fn"]
    assert backward[0][1] is False
    assert gc.isenabled()
