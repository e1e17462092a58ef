"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 16) found, each against eager."""

from __future__ import annotations

import math

import pytest
import torch

import thunder

INF, NAN = math.inf, math.nan

_PROD_INPUTS = {
    "no zero": [[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]],
    "one zero": [[1.5, 0.0, 3.0], [0.5, 4.0, -1.0]],
    "two zeros in a slice": [[0.0, -0.0, 3.0], [0.5, 4.0, -1.0]],
    "two zeros in two slices": [[0.0, 2.0, 3.0], [0.5, -0.0, -1.0]],
    "infinities": [[INF, 2.0, 3.0], [0.5, -INF, -1.0]],
    "inf and zero in a slice": [[INF, 0.0, 3.0], [0.5, 4.0, -1.0]],
    "inf and zero in two slices": [[INF, 2.0, 3.0], [0.0, 4.0, -1.0]],
    "nan": [[NAN, 2.0, 3.0], [0.5, 4.0, -1.0]],
    "nan and zero": [[NAN, 0.0, 3.0], [0.5, 4.0, -1.0]],
    "campaign 14002": [[INF, -0.0, -0.0], [0.0, -0.5, -0.0]],
}

_PROD_FORMS = {
    "full": lambda x: x.prod(),
    "full, NaN cotangent": lambda x: torch.sin(x.prod()),
    "dim 0": lambda x: x.prod(0),
    "dim 1": lambda x: x.prod(1),
    "keepdim": lambda x: x.prod(1, keepdim=True),
    "dim -1, sin": lambda x: torch.sin(x.prod(-1)),
    "1-d along dim 0": lambda x: x.reshape(-1).prod(0),
    "1-d along dim 0, sin": lambda x: torch.sin(x.reshape(-1).prod(0)),
    "a row": lambda x: x[0].prod(),
    "dtype": lambda x: x.float().prod(1, dtype=torch.float64),
}


def _value_and_grad(fn, rows, dtype):
    x = torch.tensor(rows, dtype=dtype, requires_grad=True)
    out = fn(x)
    (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
    return out, g


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("form", list(_PROD_FORMS))
@pytest.mark.parametrize("rows", list(_PROD_INPUTS))
def test_prod_gradient_follows_eager_with_zeros_infinities_and_nans(rows, form, dtype):
    # campaign seed 14002: `sin(var[[-1, 0]].prod())` of an input holding four zeros and an infinity: eager's full
    # prod backward returns zeros_like(input) once two elements are zero (the NaN cotangent never reaches it); thunder
    # multiplied that NaN by zero. `x.reshape(-1).prod(0)` takes eager's per-slice path instead (product of the
    # others, NaN where an infinity meets a zero), which the prim alone could not tell from a full reduction.
    fn = _PROD_FORMS[form]
    expected = _value_and_grad(fn, _PROD_INPUTS[rows], dtype)
    actual = _value_and_grad(thunder.jit(fn), _PROD_INPUTS[rows], dtype)
    torch.testing.assert_close(actual, expected, equal_nan=True)
