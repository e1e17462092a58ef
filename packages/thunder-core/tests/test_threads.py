"""Concurrent first calls of one jitted module from several threads, with eager calls beside them."""

from __future__ import annotations

import threading

import torch
from torch import nn

import thunder
from thunder.tracing.tracer import TracingTensor


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


def _run_threads(targets) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrapped(fn):
        try:
            barrier.wait()
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return errors


def test_concurrent_first_calls_and_eager_calls():
    m = _model()
    state_before = {k: v for k, v in m.state_dict(keep_vars=True).items()}
    jm = thunder.jit(m, dynamic=False)  # one program per batch size (sizes as numbers)
    inputs = [torch.randn(n % 3 + 1, 8) for n in range(6)]
    with torch.no_grad():
        expected = [m(x) for x in inputs]
    results: dict[tuple[str, int], torch.Tensor] = {}

    def jitted(i):
        def run():
            for _ in range(5):
                with torch.no_grad():
                    results[("jit", i)] = jm(inputs[i])

        return run

    def eager(i):
        def run():
            for _ in range(20):
                with torch.no_grad():
                    results[("eager", i)] = m(inputs[i])

        return run

    errors = _run_threads([jitted(i) for i in range(6)] + [eager(i) for i in range(3)])
    assert not errors, errors
    for (kind, i), out in results.items():
        torch.testing.assert_close(out, expected[i], msg=f"{kind} call {i}")
    # the user's module holds its own tensors: no stand-in was left behind
    state_after = m.state_dict(keep_vars=True)
    assert all(state_after[k] is v for k, v in state_before.items())
    assert not any(isinstance(t, TracingTensor) for t in state_after.values())
    assert thunder.cache_misses(jm) == 3  # one program per batch size, however many threads asked


def test_concurrent_first_calls_of_a_function_with_grad():
    def f(a, b):
        return (a * b).sin().sum()

    jf = thunder.jit(f)
    pairs = [(torch.randn(4, requires_grad=True), torch.randn(4)) for _ in range(6)]
    grads: dict[int, torch.Tensor] = {}

    def run(i):
        def go():
            a, b = pairs[i]
            out = jf(a, b)
            (g,) = torch.autograd.grad(out, a)
            grads[i] = g

        return go

    errors = _run_threads([run(i) for i in range(6)])
    assert not errors, errors
    for i, (a, b) in enumerate(pairs):
        torch.testing.assert_close(grads[i], b * torch.cos(a * b))
