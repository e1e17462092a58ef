"""Autocast: thunder applies PyTorch's per-device autocast policy while tracing and matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_autocast_matches_eager_dtypes_and_values(dtype):
    m = _model().requires_grad_(False)  # (read from the closure: thunder.jit refuses to lose its gradients)
    x, y = torch.randn(4, 16), torch.tensor([1, 2, 3, 0])

    def f(x):
        h = m(x)
        return F.softmax(h, -1), F.cross_entropy(h, y), h, (h @ h.t()).sum()

    jf = thunder.jit(f)
    with torch.autocast("cpu", dtype=dtype):
        expected, actual = f(x), jf(x)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype  # linear/matmul in the autocast dtype, cross_entropy in float32
        torch.testing.assert_close(a, e)
    # the casts are in the trace, and the program runs with autocast off (it would cast twice)
    assert "torch.float32" in str(thunder.last_traces(jf)[-1]) or dtype is torch.float32


def test_autocast_state_is_part_of_the_cache_key():
    m = _model()
    x = torch.randn(4, 16)
    jm = thunder.jit(m)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert jm(x).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.float16):
        assert jm(x).dtype == torch.float16
    assert jm(x).dtype == torch.float32
    assert thunder.cache_misses(jm) == 3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        jm(x)
    assert thunder.cache_hits(jm) == 1


def test_autocast_training_gradients_match_eager():
    m = _model()
    x = torch.randn(4, 16, requires_grad=True)
    y = torch.tensor([1, 2, 3, 0])
    jm = thunder.jit(m)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        F.cross_entropy(jm(x), y).backward()
    got = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        F.cross_entropy(m(x), y).backward()
    # bfloat16 backward kernels round differently (thunder accumulates reductions in float32)
    for g, p in zip(got, [*m.parameters(), x]):
        torch.testing.assert_close(g, p.grad, atol=1e-3, rtol=2e-2)


def test_explicit_dtype_is_not_autocast():
    def f(x):
        return F.softmax(x @ x.t(), -1, dtype=torch.float64)

    x = torch.randn(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = f(x), thunder.jit(f)(x)
    assert actual.dtype == expected.dtype == torch.float64
    torch.testing.assert_close(actual, expected)


def test_litgpt_forward_under_autocast_matches_eager():
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    model = GPT(Config.from_name("llama-tiny", n_layer=1)).eval()
    idx = torch.randint(0, 1024, (2, 16))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = model(idx), thunder.jit(model)(idx)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


def test_autocast_entered_inside_the_function():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x @ w
        return h.float().relu() * 2

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(x, w), f(x, w))
    assert "torch.bfloat16" in str(thunder.last_traces(jf)[-1])
