"""Cache entries: what a call's inputs are checked against, and the three cache options."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.compiler import CacheOption


def _mul_add(a, b):
    return a * b + 1


def _counts(jfn) -> tuple[int, int]:
    return thunder.cache_hits(jfn), thunder.cache_misses(jfn)


def test_first_call_misses_second_hits():
    jfn = thunder.jit(_mul_add)
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jfn(a, b), _mul_add(a, b))
    assert _counts(jfn) == (0, 1)
    a2, b2 = torch.randn(3), torch.randn(3)  # new tensors, same metadata
    torch.testing.assert_close(jfn(a2, b2), _mul_add(a2, b2))
    assert _counts(jfn) == (1, 1)


def test_new_shape_misses():
    jfn = thunder.jit(_mul_add)
    jfn(torch.randn(3), torch.randn(3))
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(jfn(a, b), _mul_add(a, b))
    assert _counts(jfn) == (0, 2)


def test_new_dtype_misses():
    jfn = thunder.jit(_mul_add)
    jfn(torch.randn(3), torch.randn(3))
    a, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    out = jfn(a, b)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _mul_add(a, b))
    assert _counts(jfn) == (0, 2)


def test_requires_grad_change_misses():
    jfn = thunder.jit(_mul_add)
    a, b = torch.randn(3), torch.randn(3)
    jfn(a, b)
    a_rg = a.clone().requires_grad_(True)
    out = jfn(a_rg, b)
    expected = _mul_add(a_rg, b)
    assert _counts(jfn) == (0, 2)
    assert out.requires_grad == expected.requires_grad
    torch.testing.assert_close(out.detach(), expected.detach())


@pytest.mark.parametrize(
    ("first", "second"),
    [(2, 3), (2.0, 3.5), ("double", "triple")],
    ids=["int", "float", "str"],
)
def test_python_value_change_misses(first, second):
    def fn(a, k):
        if isinstance(k, str):
            return a * (2 if k == "double" else 3)
        return a * k

    jfn = thunder.jit(fn)
    a = torch.randn(3)
    torch.testing.assert_close(jfn(a, first), fn(a, first))
    torch.testing.assert_close(jfn(a, second), fn(a, second))
    assert _counts(jfn) == (0, 2)


def test_int_and_equal_float_are_different_entries():
    """2 and 2.0 compare equal but promote differently: the int keeps an int tensor integral."""

    def fn(a, k):
        return a * k

    jfn = thunder.jit(fn)
    a = torch.arange(3)
    out_int = jfn(a, 2)
    out_float = jfn(a, 2.0)
    assert out_int.dtype == fn(a, 2).dtype == torch.int64
    assert out_float.dtype == fn(a, 2.0).dtype == torch.float32
    assert thunder.cache_misses(jfn) == 2


def test_changed_default_argument_misses():
    def fn(a, scale=2.0):
        return a * scale

    jfn = thunder.jit(fn)
    a = torch.ones(3)
    torch.testing.assert_close(jfn(a), fn(a))
    torch.testing.assert_close(jfn(a, 3.0), fn(a, 3.0))
    torch.testing.assert_close(jfn(a, scale=4.0), fn(a, scale=4.0))


def test_module_train_eval_switch_misses():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    for p in m.parameters():
        p.requires_grad_(False)
    tm = thunder.jit(m)
    x = torch.randn(8, 4)
    m.eval()
    torch.testing.assert_close(tm(x), m(x))
    m.train()
    out = tm(x)
    assert _counts(tm) == (0, 2)
    # dropout in train mode zeroes some elements and scales the rest by 2
    eval_out = m.eval()(x)
    kept = out != 0
    assert not kept.all()
    torch.testing.assert_close(out[kept], eval_out[kept] * 2)


def test_grad_mode_change_misses():
    jfn = thunder.jit(_mul_add)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    out = jfn(a, b)
    assert out.requires_grad
    with torch.no_grad():
        out_ng = jfn(a, b)
        expected = _mul_add(a, b)
    assert _counts(jfn) == (0, 2)
    assert out_ng.requires_grad is expected.requires_grad is False
    torch.testing.assert_close(out_ng, expected)


def test_switching_back_hits_old_entry():
    jfn = thunder.jit(_mul_add)
    small = (torch.randn(3), torch.randn(3))
    large = (torch.randn(2, 5), torch.randn(2, 5))
    jfn(*small)
    jfn(*large)
    assert _counts(jfn) == (0, 2)
    torch.testing.assert_close(jfn(*small), _mul_add(*small))
    torch.testing.assert_close(jfn(*large), _mul_add(*large))
    assert _counts(jfn) == (2, 2)


def test_switching_back_restores_last_traces():
    jfn = thunder.jit(_mul_add)
    jfn(torch.randn(3), torch.randn(3))
    jfn(torch.randn(2, 5), torch.randn(2, 5))
    assert '"cpu f32[2, 5]"' in str(thunder.last_traces(jfn)[-1])
    jfn(torch.randn(3), torch.randn(3))
    assert '"cpu f32[3]"' in str(thunder.last_traces(jfn)[-1])


def test_same_input_traces_once_without_checks():
    jfn = thunder.jit(_mul_add, cache="same input")
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jfn(a, b), _mul_add(a, b))
    jfn(torch.randn(4), torch.randn(4))  # new shape: no input checks, the entry is reused
    assert thunder.cache_misses(jfn) == 1
    assert thunder.cache_hits(jfn) == 1
    prologue = str(thunder.last_prologue_traces(jfn)[-1])
    assert "MISS" not in prologue


def test_no_caching_retraces_every_call():
    jfn = thunder.jit(_mul_add, cache="no caching")
    a, b = torch.randn(3), torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(jfn(a, b), _mul_add(a, b))
    assert _counts(jfn) == (0, 3)


def test_invalid_cache_option_names_valid_ones():
    with pytest.raises(ValueError, match="bogus") as info:
        thunder.jit(_mul_add, cache="bogus")
    msg = str(info.value)
    for option in ("constant values", "same input", "no caching"):
        assert option in msg


@pytest.mark.parametrize(
    ("cache", "expected"),
    [
        (None, CacheOption.CONSTANT_VALUES),
        ("constant values", CacheOption.CONSTANT_VALUES),
        ("same input", CacheOption.SAME_INPUT),
        ("no caching", CacheOption.NO_CACHING),
        (CacheOption.NO_CACHING, CacheOption.NO_CACHING),
    ],
)
def test_cache_option_query(cache, expected):
    jfn = thunder.jit(_mul_add) if cache is None else thunder.jit(_mul_add, cache=cache)
    assert thunder.cache_option(jfn) is expected
