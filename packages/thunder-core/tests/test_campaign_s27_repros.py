"""Repros of session 27's classes: gradients that are None where eager's are tensors (the differential checker
now tells the two apart), and what that found."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder

# ------------------------------------------ index_copy into a 0-d tensor: thunder returned the source itself, so the
# destination's gradient was None where eager's is zero, and an index out of range was not checked


def _zero_dim_inputs():
    return torch.tensor(1.5, requires_grad=True), torch.tensor([0]), torch.tensor(5.0, requires_grad=True)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i, s: torch.index_copy(x, 0, i, s),
        lambda x, i, s: x.index_copy(0, i.reshape(()), s) * 2,
        lambda x, i, s: x.clone().index_copy_(0, i, s),
    ],
    ids=["function", "method_0d_index", "in_place"],
)
def test_zero_dim_index_copy_gradients_as_eager(fn):
    assert_as_eager(fn, _zero_dim_inputs)


def test_zero_dim_index_copy_gradient_of_the_destination_is_zero_not_none():
    x, i, s = _zero_dim_inputs()
    thunder.jit(lambda x, i, s: torch.index_copy(x, 0, i, s))(x, i, s).backward()
    assert x.grad is not None and x.grad.item() == 0.0 and s.grad.item() == 1.0


@pytest.mark.parametrize("index", [3, -1])
def test_zero_dim_index_copy_index_out_of_range_raises_as_eager(index):
    def fn(x, i, s):
        return torch.index_copy(x, 0, i, s)

    assert_raises_as_eager(fn, lambda: (torch.tensor(1.0), torch.tensor([index]), torch.tensor(5.0)))


# ------------------------------------------ cat skips legacy empty 1-D tensors ([0]) when checking shapes, as eager, but
# left them out of the program: their gradient was None where eager's is an empty tensor (and that of the tensor
# they were sliced from None where eager's is zeros)


def _seeded(*shapes, dtypes=()):
    def make():
        torch.manual_seed(0)
        kinds = list(dtypes) + [torch.float32] * (len(shapes) - len(dtypes))
        return tuple(torch.randn(s, dtype=dt, requires_grad=True) for s, dt in zip(shapes, kinds))

    return make


@pytest.mark.parametrize(
    "fn, make",
    [
        (lambda a, b: torch.cat([a[:0], b]), _seeded(3, 3)),
        (lambda a, b, c: torch.cat([a, b, c], 1), _seeded((2, 3), 0, (2, 4))),
        (lambda a, b: torch.cat([b, a], -1), _seeded((2, 3), 0)),
        (lambda a, b: torch.cat((b, a)), _seeded((1, 5), 0)),
        (lambda a, b: torch.cat([a, b]), _seeded(3, 0, dtypes=(torch.float32, torch.float64))),
        (lambda a, b: torch.concat([a, b, a]), _seeded(0, 4)),
        (lambda a, b: torch.cat([a, b]), _seeded(0, 0)),
    ],
    ids=["sliced_empty", "middle_dim1", "negative_dim", "one_other", "promoting", "twice", "all_empty"],
)
def test_cat_of_legacy_empty_tensors_gradients_as_eager(fn, make):
    assert_as_eager(fn, make)


# ------------------------------------------ cat of one tensor (or of one beside legacy empty pieces) returned that tensor
# itself: a view of the result shared the input's storage where eager's cat writes new memory (fuzz seed 14350, with
# cat in the generator's vocabulary), and a dim out of range was not checked


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: torch.cat([a])[0],
        lambda a: torch.cat([a, a.reshape(-1)[:0]], -1).positive().select(0, -1),
        lambda a: torch.stack([a])[0],
    ],
    ids=["one", "one_and_legacy_empty", "stack_one"],
)
def test_cat_of_one_tensor_is_new_memory_as_eager(fn):
    assert_as_eager(fn, _seeded((2, 3)))


def test_cat_of_one_tensor_checks_the_dim_as_eager():
    assert_raises_as_eager(lambda a: torch.cat([a], 2), _seeded((2, 3)))


# ------------------------------------------ an in-place update through a view saving a tensor it then overwrites
# (``d.index_add_(-1, i, d[-1:])`` on the diagonal of a rounded tensor): eager's backward raises when it reaches the
# update's node, after an op whose gradient is zero too; thunder's backward left that chain out and ran (campaign
# seed 14303)

_STALE = "one of the variables needed for gradient computation has been modified by an inplace operation"


def _update_diagonal_from_itself(v):
    v.diagonal().index_add_(-1, torch.tensor([0]), v.diagonal()[..., -1:], alpha=2)
    return v


@pytest.mark.parametrize(
    "before",
    [torch.round, lambda x: torch.div(x, x, rounding_mode="floor"), lambda x: x * 1],
    ids=["round", "floor_division", "mul"],
)
@pytest.mark.parametrize("expanded", [False, True])
def test_backward_raises_as_eager_after_an_update_through_a_view_overwrites_what_it_saved(before, expanded):
    def fn(x):
        return _update_diagonal_from_itself(before(x))

    def make():
        torch.manual_seed(0)
        if expanded:
            return (torch.randn(8, 16, dtype=torch.float64, requires_grad=True) * 1)[:1].expand(5, -1)
        return torch.randn(5, 8, dtype=torch.float64, requires_grad=True)

    with pytest.raises(RuntimeError, match=_STALE):
        fn(make()).sum().backward()
    out = thunder.jit(fn)(make())
    with pytest.raises(RuntimeError, match=_STALE) as raised:
        out.sum().backward()
    assert __file__ in str(raised.value)
