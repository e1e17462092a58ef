"""Tensors an operation reads as numbers: ``torch.narrow(x, d, start, n)`` with a tensor ``start`` and
``x.tensor_split(indices)`` with a tensor of indices or sections (eager calls ``.item()``/``.tolist()``).

A small integer CPU tensor passed to the program is read while tracing: the trace specialises on its value and
the prologue compares the value on every call, so another value compiles another program and a stale one is
never reused. A tensor whose value comes from tensor data is refused, naming the user's line."""

from __future__ import annotations

import pytest
import torch
from test_grad_semantics import assert_like_eager

import thunder
from thunder.tracing.errors import DataDependentControlFlowError


def _narrow(a, start):
    return torch.narrow(a, 1, start, 2)


def _split_method(a, indices):
    return a.tensor_split(indices, 1)


def _split_function(a, indices):
    return torch.tensor_split(a, indices)


@pytest.mark.parametrize("start", [0, 1, 3, -2, -5])
def test_narrow_with_a_tensor_start_matches_eager_with_gradients(start):
    a = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert_like_eager(lambda a: _narrow(a, torch.tensor(start)), a)
    expected = _narrow(a, torch.tensor(start))
    torch.testing.assert_close(thunder.jit(_narrow)(a, torch.tensor(start)), expected)


@pytest.mark.parametrize("fn", [_split_method, _split_function], ids=["method", "function"])
@pytest.mark.parametrize("indices", [[1, 3], [2], [0, 0, 4], [-1], [3, 1], 2, 3], ids=str)
def test_tensor_split_with_an_index_tensor_matches_eager(fn, indices):
    a = torch.randn(4, 4)
    t = torch.tensor(indices)
    expected = fn(a, t)
    actual = thunder.jit(fn)(a, t)
    assert len(actual) == len(expected)
    for x, y in zip(actual, expected):
        torch.testing.assert_close(x, y)


def test_a_changed_index_value_compiles_again_and_never_reuses_a_stale_program():
    a = torch.arange(12.0).reshape(3, 4)
    jfn = thunder.jit(_narrow)
    for start, misses, hits in [(1, 1, 0), (2, 2, 0), (1, 2, 1), (0, 3, 1), (2, 3, 2)]:
        torch.testing.assert_close(jfn(a, torch.tensor(start)), _narrow(a, torch.tensor(start)))
        assert (thunder.cache_misses(jfn), thunder.cache_hits(jfn)) == (misses, hits)
    jsplit = thunder.jit(_split_function)
    for indices in ([1], [2], [1, 2], [1]):
        t = torch.tensor(indices)
        assert [x.tolist() for x in jsplit(a, t)] == [x.tolist() for x in _split_function(a, t)]
    assert thunder.cache_misses(jsplit) == 3


def test_the_same_tensor_updated_between_calls_is_read_again():
    a = torch.arange(10.0).reshape(2, 5)
    start = torch.tensor(0)
    jfn = thunder.jit(_narrow)
    for _ in range(3):
        torch.testing.assert_close(jfn(a, start), _narrow(a, start))
        start += 1


def test_an_index_tensor_computed_from_data_is_refused_naming_the_line():
    def f(a, s):
        return torch.narrow(a, 1, s.sum(), 2)  # the refused line

    with pytest.raises(DataDependentControlFlowError, match="the refused line"):
        thunder.jit(f)(torch.randn(3, 5), torch.tensor([0, 1]))


def test_an_index_tensor_the_program_updated_is_refused():
    def f(a, s):
        s.add_(1)
        return torch.narrow(a, 1, s, 2)

    with pytest.raises(DataDependentControlFlowError, match="start"):
        thunder.jit(f)(torch.randn(3, 5), torch.tensor(1))


def test_an_index_tensor_computed_from_sizes_is_known():
    def f(a):
        return torch.narrow(a, 1, torch.tensor(a.shape[0]) - 2, 2)

    a = torch.randn(3, 5)
    torch.testing.assert_close(thunder.jit(f)(a), f(a))


@pytest.mark.parametrize(
    ("fn", "index", "message"),
    [
        (_narrow, torch.tensor([1]), "start must be an 0-dim integral Tensor"),
        (_narrow, torch.tensor(1.0), "start must be an 0-dim integral Tensor"),
        (_split_function, torch.tensor([1, 2], dtype=torch.int32), "to have dtype of long, but got Int"),
        (_split_function, torch.tensor([[1, 2]]), "zero-dimensional or one-dimensional tensor"),
    ],
)
def test_bad_index_tensors_raise_eagers_error(fn, index, message):
    a = torch.randn(4, 6)
    with pytest.raises(RuntimeError, match=message):
        fn(a, index)
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(fn)(a, index)
