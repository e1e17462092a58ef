"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 20) found, each against eager.

Besides values, dtypes and gradients, these compare whether each output is a view and which outputs share a storage
with the inputs (what the campaign's ``output_aliasing`` check compares)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from eager_comparison import assert_as_eager

import thunder

# ------------------------------------ outputs eager returns as views of a tensor its composite op made inside


def _matrix():
    return (torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64, requires_grad=True) * 1,)


_COMPOSITES_RETURNING_VIEWS = {
    "cov_vector": lambda a: torch.cov(torch.tensor([-4.8, -7.5], dtype=torch.float64) + a.mean()),  # (campaign, 14001)
    "cov_matrix": lambda a: torch.cov(a + 1),
    "einsum": lambda a: torch.einsum("ij,jk->ki", a, a),
    "tensordot": lambda a: torch.tensordot(a, a, 1),
    "linear_vector": lambda a: F.linear(a[0], a),
    "multi_dot": lambda a: torch.linalg.multi_dot([a, a[0]]),
    "conv1d": lambda a: F.conv1d(a[None], a[:, :, None]),
}


@pytest.mark.parametrize("op", _COMPOSITES_RETURNING_VIEWS.values(), ids=_COMPOSITES_RETURNING_VIEWS.keys())
def test_composite_result_updated_in_place_stays_a_view(op):
    def fn(a):
        v = op(a)
        v.t().pow_(2) if v.ndim <= 2 else v.mul_(2)
        return v

    assert_as_eager(fn, _matrix)


@pytest.mark.parametrize("op", _COMPOSITES_RETURNING_VIEWS.values(), ids=_COMPOSITES_RETURNING_VIEWS.keys())
def test_composite_result_returned_as_eager(op):
    assert_as_eager(lambda a: op(a), _matrix)


# ------------------------------- a view op's result that eager copies, of a value the program lays out otherwise


def _updated_strided_then_flattened(a):  # (campaign, 14003)
    v0 = a.as_strided((2, 2), (1, 2), storage_offset=1)
    v0[0].sigmoid_()  # (the program's new value of v0 is contiguous; eager's keeps v0's column-major strides)
    return (v0.exp().flatten(),)


def _scattered_then_flattened(a):  # (campaign, 14005)
    v0 = a + (torch.round(a) - a).detach()
    v0.scatter_(-2, torch.zeros_like(v0, dtype=torch.int64), 1.5)
    return (v0.exp().flatten(), v0.exp().reshape(3, 2))


def _column_major(requires_grad=False):
    t = torch.tensor([[0.8, 1.07, 0.5], [-0.08, -0.16, 0.25], [0.36, -1.18, 2.0]], requires_grad=requires_grad) * 1
    return (t.t().contiguous().t()[:, :2],) if requires_grad else (t.t().contiguous().t(),)


@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (_updated_strided_then_flattened, _column_major),
        (_scattered_then_flattened, lambda: _column_major(requires_grad=True)),
    ],
)
def test_view_op_that_copies_in_eager_returns_no_view(fn, make_inputs):
    assert_as_eager(fn, make_inputs)


# --------------------------------- detach()'s output updated in place with values requiring grad, then returned


def _detached_then_added(a):  # (campaign, 14004)
    v0 = a.detach()
    v0.add_(a)  # (eager's v0 shares a's storage and now has the add's history)
    return (v0,)


def _aliased_detached_then_added(a0, a1):  # (campaign, 14002)
    v0 = a1.detach()
    v0.add_(a1, alpha=-1)
    return (v0,)


def _data_then_added(a):
    v0 = a.data
    v0.add_(a * 2)
    return (v0,)


def _view_of_detached_then_added(a):
    v0 = a.detach()[:, :1]
    v0.add_(a[:, 1:2])
    return (v0,)


def _sliced(n=1):
    t = (torch.tensor([[2.0, -1.0, -1.5], [0.5, -1.0, -0.5]], dtype=torch.float64, requires_grad=True) * 1)[:, 1:]
    return (t,) * n


@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (_detached_then_added, _sliced),
        (_aliased_detached_then_added, lambda: _sliced(2)),
        (_data_then_added, _sliced),
        (_view_of_detached_then_added, _sliced),
    ],
)
def test_detached_alias_updated_with_grad_shares_the_inputs_storage(fn, make_inputs):
    assert_as_eager(fn, make_inputs)


# ---------------------------------------------- x.copy_(x) of an expanded tensor with grad: eager's backward raises


def _copy_onto_itself(x):  # (campaign, 14008)
    x.copy_(x)
    return (x,)


def _expanded_with_leaf():
    leaf = torch.tensor([[-0.5, 1.5, -0.0], [-1.5, -0.5, 0.5]], requires_grad=True)
    return leaf, (leaf * 1)[0:1].expand(4, -1)


def test_copy_of_an_expanded_tensor_onto_itself_raises_eagers_backward_error():
    cotangent = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    leaf, x = _expanded_with_leaf()
    expected = _copy_onto_itself(x)[0]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as eager_error:
        torch.autograd.grad(expected, leaf, cotangent)
    leaf, x = _expanded_with_leaf()
    actual = thunder.jit(_copy_onto_itself)(x)[0]
    torch.testing.assert_close(actual, expected.detach())
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as thunder_error:
        torch.autograd.grad(actual, leaf, cotangent)
    assert "_copy_onto_itself" in str(thunder_error.value) and eager_error.value is not None


def test_copy_of_an_expanded_tensor_onto_itself_without_grad_runs():
    assert_as_eager(_copy_onto_itself, lambda: (torch.tensor([[1.0, 2.0]]).expand(3, -1),))


# ------------------------------------------------ torch.tensor of a size known only when the program runs


def _tensor_of_data_dependent_sizes(a):
    v = a[a > 0]
    return torch.tensor(v.shape[0]) + 1, torch.tensor([v.shape[0], 2.5]), torch.tensor(v.ndim) / 2


def _tensor_of_unique_size(a0):  # (campaign, 14005, without its new_zeros of a size read from a tensor)
    v0 = torch.index_select(a0, 0, torch.tensor([0]))
    v1 = torch.unique_consecutive(torch.tensor(1.0, dtype=torch.float64) + v0.mean())
    return (torch.tensor(v1.shape[0]) + 1 + v1 * float(torch.tensor(v1.ndim) / 2),)


@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (_tensor_of_data_dependent_sizes, lambda: (torch.tensor([1.0, -1.0, 2.0]),)),
        (_tensor_of_unique_size, lambda: (torch.tensor([[], []], dtype=torch.float64),)),
        (_tensor_of_unique_size, lambda: (torch.tensor([[1.0, 3.0], [2.0, 2.0]], dtype=torch.float64),)),
    ],
)
def test_tensor_literal_of_data_dependent_sizes(fn, make_inputs):
    assert_as_eager(fn, make_inputs)
    jfn = thunder.jit(fn)
    jfn(*make_inputs())
    for a in (torch.tensor([3.0, 1.0, 2.0, 5.0], dtype=make_inputs()[0].dtype),):  # other sizes, same program
        if fn is _tensor_of_data_dependent_sizes:
            for e, t in zip(fn(a), jfn(a)):
                torch.testing.assert_close(t, e)
