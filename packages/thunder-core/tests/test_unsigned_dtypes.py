"""PyTorch's uint16/uint32/uint64 tensors (torch.hash_tensor returns uint64) through thunder.jit: the same
values and dtypes as eager, and an error wherever eager has no kernel or refuses the type promotion."""

from __future__ import annotations

import pytest
import torch

import thunder

_FNS = {
    "hash_tensor": lambda a, b: torch.hash_tensor(a.to(torch.float32)),
    "hash_tensor_dim": lambda a, b: torch.hash_tensor(a.to(torch.float32).view(2, 2), dim=1),
    "add": lambda a, b: a + b,
    "add_int64": lambda a, b: a + b.to(torch.int64),
    "mul_float": lambda a, b: a * 2.5,
    "to_float": lambda a, b: a.to(torch.float32),
    "eq": lambda a, b: a == b,
    "bitwise_and": lambda a, b: a & b,
    "cat_view": lambda a, b: torch.cat([a, b]).view(2, 4),
    "index": lambda a, b: a[[0, 2]],
    "where": lambda a, b: torch.where(a > 1, a, b),
    "fill_": lambda a, b: a.fill_(7),
}


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
@pytest.mark.parametrize("name", list(_FNS))
def test_unsigned_matches_eager(name, dtype):
    fn = _FNS[name]
    a, b = torch.tensor([1, 2, 3, 4], dtype=dtype), torch.tensor([4, 3, 2, 1], dtype=dtype)
    ea, eb, ta, tb = a.clone(), b.clone(), a.clone(), b.clone()
    try:
        expected = fn(ea, eb)
    except (RuntimeError, NotImplementedError, TypeError) as e:
        with pytest.raises(type(e)):
            thunder.jit(fn)(ta, tb)
        return
    actual = thunder.jit(fn)(ta, tb)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(actual.to(torch.float64), expected.to(torch.float64))
    assert torch.equal(ta.to(torch.float64), ea.to(torch.float64))
