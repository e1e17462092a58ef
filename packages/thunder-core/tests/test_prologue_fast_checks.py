"""Checks the prologue merges for speed still decide as the separate checks did: when the fact one of them
covers changes, the call is re-traced, and every result is eager's.

- autocast: with autocast off when traced, the C++ tensor guard sees it turned on (through the tensors' dispatch
  keys) when a guarded tensor is on each device type autocast rules apply to; otherwise the prologue asks torch;
- the tensor guard's pre-check reads each input's ``is_nested`` without testing its type first: the guard rejects
  other types itself, and an input without ``is_nested`` is a miss like any other object.
"""

from __future__ import annotations

import pytest
import torch

import thunder


def _matmul(a, b):
    return a @ b


def _prologue_src(jfn) -> str:
    return str(thunder.last_prologue_traces(jfn)[-1])


def _cpu_only_torch() -> bool:
    return not torch.backends.cuda.is_built()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_turned_on_after_a_call_without_it_retraces(dtype):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    jf = thunder.jit(_matmul)
    torch.testing.assert_close(jf(a, b), _matmul(a, b))
    with torch.autocast("cpu", dtype=dtype):
        out, expected = jf(a, b), _matmul(a, b)
    assert out.dtype == expected.dtype == dtype
    torch.testing.assert_close(out, expected)
    assert thunder.cache_misses(jf) == 2
    out = jf(a, b)  # autocast off again: the first program
    assert out.dtype == torch.float32 and thunder.cache_misses(jf) == 2 and thunder.cache_hits(jf) == 1
    torch.testing.assert_close(out, _matmul(a, b))


def test_autocast_is_checked_by_the_prologue_when_no_input_is_a_tensor():
    def product(n):
        return torch.ones(n, n) @ torch.full((n, n), 0.5)

    jf = thunder.jit(product)
    assert jf(3).dtype == torch.float32
    assert "_any_autocast_enabled()" in _prologue_src(jf)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = jf(3), product(3)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    assert thunder.cache_misses(jf) == 2


@pytest.mark.skipif(not _cpu_only_torch(), reason="with CUDA built, CPU inputs alone do not show CUDA's autocast")
def test_cpu_inputs_leave_the_autocast_check_to_the_tensor_guard():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    jf = thunder.jit(_matmul)
    jf(a, b)
    src = _prologue_src(jf)
    assert "_any_autocast_enabled" not in src and "_is_grad_enabled()" in src
    # the recompilation warning still names autocast as the check that failed
    builder = thunder.compile_data(jf).cache.mru.builder
    assert builder.first_failing_check(a, b) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "_any_autocast_enabled()" in builder.first_failing_check(a, b)


def test_grad_mode_is_still_checked_when_autocast_is_left_to_the_guard():
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5)
    jf = thunder.jit(_matmul)
    assert jf(a, b).requires_grad
    with torch.no_grad():
        out = jf(a, b)
    assert not out.requires_grad and thunder.cache_misses(jf) == 2
    torch.testing.assert_close(out, _matmul(a, b))


class _Tripled:
    """Not a tensor; ``obj + t`` is ``3 * t``. ``is_nested`` as given (absent, a value, or raising)."""

    def __init__(self, is_nested=None):
        if is_nested is not None:
            self._is_nested = is_nested

    def __getattr__(self, name):
        if name == "is_nested" and "_is_nested" in self.__dict__:
            value = self.__dict__["_is_nested"]
            if isinstance(value, Exception):
                raise value
            return value
        raise AttributeError(name)

    def __add__(self, other):
        return other * 3


def _add(a, b):
    return a + b


def _add_many(a, *rest):  # more than 8 tensors: the prologue's pre-check loops over a tuple of them
    return a + sum(rest)


@pytest.mark.parametrize("is_nested", [None, False, True, RuntimeError("no is_nested here")], ids=repr)
@pytest.mark.parametrize("many", [False, True], ids=["few", "many"])
def test_an_object_where_a_tensor_was_traced_is_a_miss(is_nested, many):
    fn = _add_many if many else _add
    b = torch.randn(3)
    rest = [torch.randn(3) for _ in range(10)] if many else []
    jf = thunder.jit(fn)
    a = torch.randn(3)
    torch.testing.assert_close(jf(a, b, *rest), fn(a, b, *rest))
    obj = _Tripled(is_nested)
    out = jf(obj, b, *rest)
    torch.testing.assert_close(out, fn(obj, b, *rest))
    assert thunder.cache_misses(jf) == 2
