"""``out=`` arguments: the result is written into ``out`` as eager does (the trace knows out's new value), for
intermediates and for inputs (the caller's tensor is updated); eager's errors for ``out=`` under autograd and
for a dtype the result cannot be cast to; an ``out`` of another shape (eager resizes it) is refused, naming the
line. Found by the fuzzer's op_db vocabulary: an opaque ``torch.acos(x, out=v)`` left ``v`` stale in the trace."""

from __future__ import annotations

import pytest
import torch

import thunder


def _same(actual, expected):
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e)


def _intermediate_out(a, b):
    v = torch.zeros(4, dtype=torch.float64)
    r = torch.acos(a, out=v)
    torch.add(v, b, out=v)
    return v * 2, r


def test_out_of_an_intermediate_is_read_after_the_call():
    a, b = torch.rand(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    _same(thunder.jit(_intermediate_out)(a, b), _intermediate_out(a, b))


@pytest.mark.parametrize("func", [torch.acos, torch.sigmoid, torch.exp])
def test_out_that_is_an_input_updates_the_callers_tensor(func):
    def f(a, out):
        func(a, out=out)
        return out + 1

    a = torch.rand(2, 3, dtype=torch.float64)
    e_out, t_out = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    expected = f(a, e_out)
    actual = thunder.jit(f)(a, t_out)
    _same(actual, expected)
    _same(t_out, e_out)


def test_out_of_a_wider_dtype_holds_the_cast_result():
    def f(a):
        v = torch.zeros(3, dtype=torch.float64)
        torch.mul(a, 3, out=v)
        return v

    a = torch.tensor([1.5, -2.25, 0.1], dtype=torch.float32)
    _same(thunder.jit(f)(a), f(a))


def test_out_tuple_of_a_reduction_with_indices():
    def f(a):
        values, indices = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.int64)
        r = torch.max(a, 1, out=(values, indices))
        return values, indices, r[0], r[1]

    a = torch.randn(2, 5, dtype=torch.float64)
    _same(thunder.jit(f)(a), f(a))


def test_out_under_autograd_raises_eagers_error():
    def f(a):
        v = torch.zeros(3, dtype=torch.float64)
        torch.sin(a, out=v)
        return v

    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    message = "functions with out=... arguments don't support automatic differentiation"
    with pytest.raises(RuntimeError, match=message):
        f(a)
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(f)(a)


def test_out_of_a_dtype_the_result_cannot_be_cast_to_raises_eagers_error():
    def f(a):
        v = torch.zeros(3, dtype=torch.int64)
        torch.sin(a, out=v)
        return v

    a = torch.randn(3)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        f(a)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        thunder.jit(f)(a)


def test_out_of_another_shape_is_resized_as_eager():
    def f(a):
        v = torch.empty(2, dtype=torch.float64)
        torch.acos(a, out=v)  # the resized out
        return v

    a = torch.rand(4, dtype=torch.float64)
    with pytest.warns(UserWarning, match="resized"):
        expected = f(a)  # eager resizes v (its elements were visible)
    with pytest.warns(UserWarning, match="resized"):
        torch.testing.assert_close(thunder.jit(f)(a), expected)


def test_an_empty_out_made_in_the_program_takes_the_result():
    def f(a):
        v = torch.empty(0, dtype=torch.float64)
        torch.acos(a, out=v)
        return v, v + 1

    a = torch.rand(4, dtype=torch.float64)
    torch.testing.assert_close(thunder.jit(f)(a), f(a))  # eager resizes the empty v


def test_out_of_a_comparison_of_tensors_requiring_grad_is_allowed_as_in_eager():
    def f(a, b):
        v = torch.zeros(3, dtype=torch.bool)
        torch.gt(a, b, out=v)
        return v, a * 2

    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64)
    _same(thunder.jit(f)(a, b), f(a, b))
