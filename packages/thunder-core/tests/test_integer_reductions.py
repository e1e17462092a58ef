"""Sums and products of integer tensors are int64, as in eager, in the trace too (not only in the kernel's result).

The trace said int32/int8/uint8 while PyTorch's kernel returned int64: code reading the dtype inside the function
saw the wrong one, and an executor computing the trace's own decomposition (a fusion) summed in the narrow type.
"""

import pytest
import torch

import thunder

_REDUCTIONS = {
    "sum": lambda x: x.sum(),
    "sum over a dim": lambda x: x.sum(-1),
    "prod": lambda x: x.prod(),
    "nansum of ints": lambda x: torch.sum(x, dim=0, keepdim=True),
    "einsum": lambda x: torch.einsum("ij->i", x),
    "sum with a dtype": lambda x: x.sum(dtype=torch.int16),
}


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("name", _REDUCTIONS)
def test_integer_reductions_have_eagers_dtype_inside_and_out(dtype, name):
    f = _REDUCTIONS[name]
    x = torch.tensor([[100, 27, 3], [90, 120, 1]]).to(dtype)
    expected = f(x)
    actual, seen = thunder.jit(lambda x: (f(x), f(x).dtype))(x)
    assert seen == expected.dtype == actual.dtype
    assert torch.equal(actual, expected)
