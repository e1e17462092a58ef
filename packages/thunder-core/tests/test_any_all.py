"""torch.any / torch.all against eager, empty tensors and reduced dimensions of size zero included."""

import itertools

import pytest
import torch

import thunder

_SHAPES = [(), (0,), (0, 3), (3, 0), (2, 3), (1,)]
_DTYPES = [torch.bool, torch.float32, torch.float16, torch.int64, torch.uint8]


def _input(shape, dtype):
    torch.manual_seed(sum(shape) + len(shape))
    return (torch.rand(shape) > 0.5).to(dtype) if shape else torch.tensor(1.0).to(dtype)


@pytest.mark.parametrize("shape", _SHAPES, ids=str)
@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
@pytest.mark.parametrize("op", ["all", "any"])
def test_any_all_match_eager(shape, dtype, op):
    x = _input(shape, dtype)
    calls = [lambda x: getattr(x, op)()]
    for d, keepdim in itertools.product(range(-len(shape), len(shape)), [False, True]):
        calls.append(lambda x, d=d, k=keepdim: getattr(torch, op)(x, d, keepdim=k))
    for f in calls:
        expected = f(x)
        actual = thunder.jit(f)(x)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert torch.equal(actual, expected)
        # what the trace believes (read inside the function) is what the kernel returns (uint8: uint8)
        assert thunder.jit(lambda x: f(x).dtype)(x) == expected.dtype


def test_all_of_an_empty_tensor_is_true_and_any_false():
    # the repro: these raised "amin(): Expected reduction dim to be specified for input.numel() == 0"
    x = torch.zeros(0, 3, dtype=torch.bool).t()
    got = thunder.jit(lambda x: (x.all(), x.any(), (x * 3).all(), x.all(1)))(x)
    assert [bool(v) for v in got[:3]] == [True, False, True]
    assert torch.equal(got[3], torch.ones(3, dtype=torch.bool))
