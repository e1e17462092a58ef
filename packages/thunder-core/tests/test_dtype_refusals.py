"""Eager's refusal of an op on a dtype its CPU kernel lacks is raised where the op is traced, used or not (campaign
seeds 14044, 14035, 14037: ``a0.abs()`` of a bool tensor in a computation nothing used ran where eager raised)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.tracing.dtype_support import refuse_unsupported_dtypes

_UNUSED = {
    "abs_of_bool": lambda x: x.abs(),
    "gelu_of_bool": lambda x: F.gelu(x),
    "softmax_of_bool": lambda x: x.softmax(0),
    "neg_of_bool": lambda x: -x,
    "relu_of_bool": lambda x: F.relu(x),
    "silu_of_int": lambda x: F.silu(x.long()),
    "elu_of_bool": lambda x: F.elu(x),
}


@pytest.mark.parametrize("op", sorted(_UNUSED))
@pytest.mark.parametrize("used", [False, True])
def test_op_on_a_dtype_eager_refuses_raises_as_eager(op, used):
    def fn(x):
        y = _UNUSED[op](x)
        return (x, y) if used else (x,)

    x = torch.tensor([True, False, True])
    with pytest.raises(Exception) as expected:
        fn(x)
    with pytest.raises(type(expected.value)) as actual:
        thunder.jit(fn)(x)
    assert str(actual.value) == str(expected.value)


def test_ops_eager_runs_on_those_dtypes_still_run():
    def fn(b, i):
        return b & b, b.sum(), b.cumsum(0), torch.where(b, 1, 0), i.exp(), i // 2, b[b], (i * 2).abs()

    args = (torch.tensor([True, False, True]), torch.tensor([3, -4, 5]))
    for actual, expected in zip(thunder.jit(fn)(*args), fn(*args)):
        torch.testing.assert_close(actual, expected)


def test_an_empty_tensor_keeps_eagers_answer():
    """Eager's kernel is not reached for an empty tensor: softmax of an empty bool tensor raises no dtype error, of
    a non-empty one it does (the probe's tensors are empty exactly where the arguments are)."""
    with pytest.raises(NotImplementedError) as expected:
        torch.softmax(torch.ones(2, dtype=torch.bool), 0)
    with pytest.raises(NotImplementedError) as actual:
        refuse_unsupported_dtypes(torch.softmax, (torch.ones(2, dtype=torch.bool), 0), {})
    assert str(actual.value) == str(expected.value)
    torch.softmax(torch.ones(0, dtype=torch.bool), 0)
    refuse_unsupported_dtypes(torch.softmax, (torch.ones(0, dtype=torch.bool), 0), {})


def test_the_probe_leaves_the_random_generator_alone():
    def fn(i):
        return torch.rand(3) + i.abs()

    i = torch.tensor([1, -2, 3])
    torch.manual_seed(0)
    expected = fn(i)
    torch.manual_seed(0)
    torch.testing.assert_close(thunder.jit(fn)(i), expected)


def test_the_probe_records_nothing_into_the_program():
    # (a probe that read the generator through torch.get_rng_state recorded a get/set pair into every program with an
    # integer op, a BatchNorm's num_batches_tracked += 1 among them: a side effect fusion regions cannot span)
    def fn(x, n):
        n.add_(1)
        return x * 2

    jfn = thunder.jit(fn)
    n = torch.tensor(0)
    jfn(torch.ones(3), n)
    assert n.item() == 1
    names = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert not [name for name in names if "rng" in name], names
