"""The cache is bounded (LRU), warns about a function that keeps recompiling, and finds entries by key."""

from __future__ import annotations

import warnings

import pytest
import torch

import thunder


def _double(x):
    return x * 2


def test_cache_size_limit_evicts_least_recently_used():
    jf = thunder.jit(_double, cache_size_limit=3, recompile_limit=None, dynamic=False)
    xs = {n: torch.randn(n) for n in range(1, 6)}
    for n in (1, 2, 3):
        jf(xs[n])
    jf(xs[1])  # 1 is now the most recently used: 2 is the oldest
    jf(xs[4])  # evicts 2
    cd = thunder.compile_data(jf)
    assert len(cd.cache) == 3
    misses = thunder.cache_misses(jf)
    for n in (1, 3, 4):  # still cached
        torch.testing.assert_close(jf(xs[n]), xs[n] * 2)
    assert thunder.cache_misses(jf) == misses
    torch.testing.assert_close(jf(xs[2]), xs[2] * 2)  # was evicted: compiles again
    assert thunder.cache_misses(jf) == misses + 1
    assert len(cd.cache) == 3


def test_default_cache_is_bounded():
    jf = thunder.jit(_double, recompile_limit=None, dynamic=False)
    cd = thunder.compile_data(jf)
    limit = cd.cache.limit
    assert limit is not None
    for n in range(1, limit + 4):
        jf(torch.randn(n))
    assert len(cd.cache) == limit


def test_recompile_warning_names_the_varying_input():
    def f(x, scale):
        return x * scale

    jf = thunder.jit(f, recompile_limit=3)
    x = torch.randn(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(6):
            torch.testing.assert_close(jf(x, float(i)), x * float(i))
    messages = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert len(messages) == 1
    assert "scale" in messages[0]


def test_recompile_warning_names_a_varying_tensor():
    def f(a, b):
        return a + b

    jf = thunder.jit(f, recompile_limit=2, dynamic=False)
    b = torch.randn(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):
            jf(torch.randn(n), b)
    (message,) = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert "the tensor a" in message


def test_recompile_warning_names_the_module_that_changes():
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Dropout(0.0), torch.nn.Tanh()))
    jm = thunder.jit(m, recompile_limit=1)
    x = torch.randn(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jm(x)
        m[1][0].eval()
        jm(x)
    (message,) = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert ".1.0 (training flag" in message, message


def test_hit_on_an_old_entry_runs_few_prologues():
    jf = thunder.jit(_double, cache_size_limit=100, recompile_limit=None, dynamic=False)
    xs = [torch.randn(n) for n in range(1, 41)]
    for x in xs:
        jf(x)
    cd = thunder.compile_data(jf)
    calls = []
    for entry in cd.cache:
        original = entry.prologue

        def counting(*args, _original=original, **kwargs):
            calls.append(1)
            return _original(*args, **kwargs)

        entry.prologue = counting
    torch.testing.assert_close(jf(xs[0]), xs[0] * 2)  # the oldest entry
    assert len(calls) <= 2  # the last used entry, then the one whose key matches
    assert thunder.cache_misses(jf) == 40


@pytest.mark.parametrize("first, second", [(0.0, -0.0), (-0.0, 0.0)])
def test_signed_zeros_are_different_entries(first, second):
    jf = thunder.jit(lambda x, s: 1 / (x * s))
    x = torch.ones(2)
    torch.testing.assert_close(jf(x, first), 1 / (x * first))
    torch.testing.assert_close(jf(x, second), 1 / (x * second))
    assert thunder.cache_misses(jf) == 2
