"""The strides of pointwise results: TensorIterator's rule (``thunder/tracing/pointwise_layout.py``) against eager's
CPU kernels on random layouts, and thunder's programs reading them (campaign seeds 14039, 14041, 14043, where
PyTorch's meta kernels, which thunder asked before, lay the results out otherwise)."""

from __future__ import annotations

import random

import pytest
import torch

import thunder
from thunder.tracing.pointwise_layout import pointwise_strides

_OPS = {
    "add": (torch.add, 2),
    "mul_number": (torch.mul, "number"),
    "floor_divide": (torch.floor_divide, 2),
    "maximum": (torch.maximum, 2),
    "gt_number": (torch.gt, "number"),
    "exp": (torch.exp, 1),
    "neg": (torch.neg, 1),
    "isnan": (torch.isnan, 1),
    "where": (torch.where, "where"),
}


def _layout(rng: random.Random, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``shape`` laid out at random: a permuted buffer, sliced with steps."""
    order = list(range(len(shape)))
    rng.shuffle(order)
    steps = [rng.choice([1, 1, 2]) for _ in shape]
    buffer = torch.zeros([shape[d] * steps[d] for d in order], dtype=dtype)
    t = buffer.permute(*[order.index(d) for d in range(len(shape))])
    return t[tuple(slice(None, None, s) for s in steps)]


def _meta(t):
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t


@pytest.mark.parametrize("op", sorted(_OPS))
def test_rule_gives_eagers_cpu_strides_on_random_layouts(op):
    func, kind = _OPS[op]
    rng = random.Random(op)
    answered = 0
    for _ in range(250):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        a = _layout(rng, shape, torch.float32)
        other = [n if rng.random() < 0.7 else 1 for n in shape][
            rng.randint(0, len(shape)) if rng.random() < 0.2 else 0 :
        ]
        b = _layout(rng, other, torch.float32) if other else torch.zeros(())
        if kind == 1:
            args = (a,)
        elif kind == "number":
            args = (a, 0.5)
        elif kind == "where":
            args = (a > 0, a, b)
        else:
            args = (a, b)
        expected = func(*args)
        strides = pointwise_strides(func, tuple(_meta(x) for x in args), {}, _meta(expected))
        if strides is not None:
            answered += 1
            assert strides == expected.stride(), (
                op,
                [(tuple(x.shape), x.stride()) for x in args if hasattr(x, "shape")],
            )
    assert answered == 250


def test_rule_leaves_converted_operands_and_empty_results_to_meta():
    a = torch.zeros(2, 3).t()
    i = torch.zeros(3, 2, dtype=torch.int64)
    assert pointwise_strides(torch.add, (_meta(a), _meta(i)), {}, _meta(a + i)) is None  # (i converted first)
    assert pointwise_strides(torch.mul, (_meta(i), 0.5), {}, _meta(i * 0.5)) is None
    e = torch.zeros(0, 3)
    assert pointwise_strides(torch.exp, (_meta(e),), {}, _meta(e.exp())) is None
    assert pointwise_strides(torch.add, (_meta(a), _meta(a)), {"alpha": 2}, _meta(a + a)) is None


def _stride_of_a_scaled_column(a0):  # (campaign, 14043: a column sliced with a step keeps its stride of 2)
    v1 = a0.new_zeros(()).sum() + a0 * 1.5
    return v1 * v1.stride(-1) + v1.storage_offset(), torch.tensor(v1.stride())


def _floor_division_by_a_transposed_copy(a0):  # (campaign, 14041: eager's result is laid out as a0, meta's not)
    v0 = a0 // (a0.mT.abs() + 1)
    return v0.reshape(-1), torch.tensor(v0.stride()), v0.t().contiguous()


def _index_add_from_a_slice_of_an_einsum(a0):  # (campaign, 14039: the einsum's path follows its operands' layout)
    v0 = a0 * 2.0
    v2 = torch.einsum("ij,jk->ki", v0.reshape(-1, 1), v0.reshape(1, -1))
    v2.index_add_(-1, torch.tensor([0]), v2[..., -1:], alpha=2)
    return v2, torch.tensor(v2.stride())


@pytest.mark.parametrize(
    "fn, make",
    [
        (_stride_of_a_scaled_column, lambda: (torch.randn(5, 1, dtype=torch.bfloat16)[:, ::2],)),
        (_floor_division_by_a_transposed_copy, lambda: (torch.randn(3, 3).t().contiguous().t(),)),
        (_index_add_from_a_slice_of_an_einsum, lambda: (torch.randn(2, 1, dtype=torch.bfloat16)[:, ::2],)),
    ],
)
def test_programs_reading_a_pointwise_results_layout_match_eager(fn, make):
    torch.manual_seed(0)
    args = make()
    expected = fn(*args)
    actual = thunder.jit(fn)(*args)
    for e, a in zip(expected, actual):
        assert a.stride() == e.stride()
        torch.testing.assert_close(a, e)
