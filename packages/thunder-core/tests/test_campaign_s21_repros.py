"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 21) found, each against eager.

Besides values, dtypes and gradients, these compare whether each output is a view and which outputs share a storage
with the inputs and with each other (what the campaign's ``output_aliasing`` check compares)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from eager_comparison import assert_as_eager, shares_storage

import thunder

_MODIFIED = "modified by an inplace operation"


def _assert_backward_raises_as_eager(fn, make_inputs, differentiate) -> None:
    """Eager's backward raises "modified by an inplace operation"; thunder's must too, naming ``fn``'s line.
    ``make_inputs()`` gives (the leaf, the arguments); ``differentiate(outputs, arguments)`` the tensors to
    differentiate."""
    leaf, args = make_inputs()
    targets = differentiate(fn(*args), args)
    with pytest.raises(RuntimeError, match=_MODIFIED):
        torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets])
    leaf, args = make_inputs()
    targets = differentiate(thunder.jit(fn)(*args), args)
    with pytest.raises(RuntimeError, match=_MODIFIED) as error:
        torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets])
    assert fn.__name__ in str(error.value)


# ------------------------------- a call whose saved tensors only a run on real tensors shows, its input then updated


def _combinations_then_relu_(a):  # (campaign, 14002: combinations runs masked_select, which has no meta kernel)
    v0 = a.var(-1)
    v1 = torch.combinations(v0, r=2, with_replacement=False)
    F.relu(v0, inplace=True)
    return (v1,)


def _masked_select_then_exp_(a):
    v0 = a * 1
    v1 = torch.masked_select(v0, v0 > 0)
    v0.exp_()
    return (v1,)


def _row(dtype=torch.float32):
    leaf = torch.tensor([[-2.0, 1.0625, 0.25]], dtype=dtype, requires_grad=True)
    return leaf, (leaf,)


@pytest.mark.parametrize("fn", [_combinations_then_relu_, _masked_select_then_exp_])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_update_of_a_tensor_saved_by_an_op_without_meta_kernel_raises_at_backward(fn, dtype):
    _assert_backward_raises_as_eager(fn, lambda: _row(dtype), lambda outs, args: [outs[0]])


def test_op_without_meta_kernel_whose_input_is_updated_unsaved_runs_backward():
    def fn(a):  # (masked_select saves its argument, v0 * 2, not v0: eager's backward runs)
        v0 = a * 1
        v1 = torch.masked_select(v0 * 2, torch.tensor([[True, False, True]]))
        v0.exp_()
        return v1, v0

    assert_as_eager(fn, lambda: _row()[1])


# ------------------------------------------------- an empty view of another argument, updated in place with grad


def _elu_then_relu_of_empty_view(a0, a1):  # (campaign, 14004)
    F.elu(a1, inplace=True)
    F.relu(a1, inplace=True)  # (overwrites the result elu_ saved: eager's backward through a0 raises)
    return (a1 * 2,)


def _empty_with_view(rows=2):
    leaf = torch.tensor([[]] * rows, requires_grad=True)
    a0 = leaf * 1
    return leaf, (a0, a0[0])


def test_update_of_an_empty_view_reaches_its_base_argument_at_backward():
    _assert_backward_raises_as_eager(_elu_then_relu_of_empty_view, _empty_with_view, lambda outs, args: [args[0]])


def test_update_of_an_empty_view_gives_its_base_argument_the_history():
    def fn(a0, a1):
        a1.mul_(2)
        return (a1 + 1,)

    for f in (fn, thunder.jit(fn)):
        leaf, (a0, a1) = _empty_with_view()
        f(a0, a1)
        assert type(a0.grad_fn).__name__ == "CopySlices"
        (g,) = torch.autograd.grad(a0, leaf, torch.ones_like(a0))
        assert g.shape == leaf.shape


# ------------------------------------------- an output viewing another output that is itself a view (eager's cov)


def _cov_and_its_reshape(a):  # (campaign, 14006)
    v1 = torch.from_numpy(np.exp(a.detach().numpy() * 0.1))
    v6 = torch.cov(v1.reshape(-1))
    return v6.reshape(-1), v6


@pytest.mark.parametrize(
    "fn",
    [
        _cov_and_its_reshape,
        lambda a: (torch.cov(a * 1).reshape(-1), torch.cov(a * 1)),
        lambda a: (lambda v: (v.reshape(-1), v))(torch.cov(a * 1)),
        lambda a: (lambda v: (v[1:], v.t(), v))(torch.cov(a.detach().reshape(2, 2))),
        lambda a: (lambda v: (v[1:], v))(torch.cov(a.reshape(2, 2))[1:]),
    ],
)
def test_view_of_an_output_that_is_a_view_shares_its_storage(fn):
    assert_as_eager(fn, lambda: (torch.tensor([1.5, -0.25, -2.0, 0.5], dtype=torch.float64, requires_grad=True),))


# ------------------------------------ an integer index into a dimension whose size is known only when the program runs


def _unique_assigned_into_its_first_element(a):  # (campaign, 14005)
    v0 = (torch.tensor(0.0, dtype=torch.float64) + a.mean()).unique_consecutive()
    v0[0] = v0  # (eager: a size-1 value drops its dim; any other size raises)
    return (v0,)


def _masked_then_indexed(a):
    v = a[a > 0]
    v[0] = v[-1] * 2
    return v[0] + v[-1], v, v.reshape(-1, 1)[-1, 0]


def _run_as_eager(fn, jfn, a):
    """``fn(a)`` and ``jfn(a)`` give the same values (gradients too), or raise the same error type and message
    (thunder's may name the line after it)."""
    try:
        expected = fn(a.clone().requires_grad_(a.is_floating_point()))
    except (IndexError, RuntimeError) as e:
        with pytest.raises(type(e)) as error:
            jfn(a.clone().requires_grad_(a.is_floating_point()))
        assert str(error.value).startswith(str(e).split("\n")[0])
        return
    leaf = a.clone().requires_grad_(a.is_floating_point())
    actual = jfn(leaf)
    for e, t in zip(expected, actual):
        torch.testing.assert_close(t, e)
    (g,) = torch.autograd.grad(actual[0].sum(), leaf)
    leaf = a.clone().requires_grad_()
    (ge,) = torch.autograd.grad(fn(leaf)[0].sum(), leaf)
    torch.testing.assert_close(g, ge)


def test_integer_index_into_a_unique_result_of_one_element():
    assert_as_eager(_unique_assigned_into_its_first_element, lambda: (torch.tensor([[0.5, -1.5], [2.0, 1.0]]),))


@pytest.mark.parametrize("values", [[1.0, -1.0, 2.0], [-1.0, 3.0, -2.0], [-1.0, -1.0, -2.0], [3.0, 1.0, 2.0]])
def test_integer_index_into_a_masked_selection(values):
    jfn = thunder.jit(_masked_then_indexed)
    for a in (torch.tensor(values), torch.tensor([4.0, 5.0, -1.0])):  # (a first call traces, the next reuses it)
        _run_as_eager(_masked_then_indexed, jfn, a)


@pytest.mark.parametrize("values", [[-1.0, 2.5], [1.0, 2.5], [-1.0, -2.5]])
def test_a_masked_selection_assigned_into_one_element_raises_as_eager_unless_it_has_one(values):
    def fn(a):
        v = a[a > 0]
        v[0] = v  # (eager: runs for one selected element, raises for more, or an IndexError for none)
        return (v * 1,)

    jfn = thunder.jit(fn)
    for a in (torch.tensor(values), torch.tensor([-1.0, 2.5]), torch.tensor([3.0, 2.5])):
        _run_as_eager(fn, jfn, a)


def test_an_index_out_of_a_masked_selection_raises_eagers_index_error_on_a_later_call():
    def fn(a):
        v = torch.exp(a[a > 0])
        return (v[1] * v,)

    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(torch.tensor([1.0, 2.0, -3.0]))[0], fn(torch.tensor([1.0, 2.0, -3.0]))[0])
    a = torch.tensor([1.0, -2.0, -3.0])
    with pytest.raises(IndexError, match="index 1 is out of bounds for dimension 0 with size 1"):
        fn(a)
    with pytest.raises(IndexError, match="index 1 is out of bounds for dimension 0 with size 1"):
        jfn(a)
    assert thunder.cache_misses(jfn) == 1


# ------------------------------------------ index_put_ without accumulating (and x[index_tensors] = v) on an expanded x


def _row_expanded(requires_grad=False):
    leaf = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=requires_grad)
    return leaf, (leaf * 1).expand(2, 3)


def _column_expanded(requires_grad=False):
    leaf = torch.tensor([[1.0], [2.0]], requires_grad=requires_grad)
    return leaf, (leaf * 1).expand(2, 3)


def _put_one(a):  # (campaign, rare: each write lands on its memory location, every row shows it)
    a.index_put_((torch.tensor([0]), torch.tensor([1])), torch.tensor(5.0))
    return (a * 1,)


def _put_rows_last_wins(a):  # (two rows written into one location: the last index element's stays)
    a.index_put_((torch.tensor([1, 0]),), torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]))
    return (a * 1,)


def _put_along_an_expanded_trailing_dim(a):  # (the last of the trailing elements stays)
    a.index_put_((torch.tensor([1]),), torch.tensor([5.0, 6.0, 7.0]))
    return (a * 1,)


def _put_with_closure_indices(a, _index=torch.tensor([1, 1]), _values=torch.tensor([4.0, 5.0])):
    a.index_put_((_index, torch.tensor([0, 2])), _values)
    return (a * 1,)


def _setitem_rows(a):  # (eager's x[index_tensor] = v is x.index_put_((index_tensor,), v))
    a[torch.tensor([1, 0])] = torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]])
    return (a * 1,)


def _setitem_number(a):
    a[torch.tensor([0]), torch.tensor([2])] = 7.5
    return (a * 1,)


_PUTS = [
    (_put_one, _row_expanded),
    (_put_rows_last_wins, _row_expanded),
    (_put_along_an_expanded_trailing_dim, _column_expanded),
    (_put_with_closure_indices, _row_expanded),
    (_put_with_closure_indices, _column_expanded),
    (_setitem_rows, _row_expanded),
    (_setitem_number, _column_expanded),
]


@pytest.mark.parametrize("fn, make", _PUTS, ids=[f"{fn.__name__}-{make.__name__}" for fn, make in _PUTS])
@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors is deprecated")
def test_indexed_write_into_an_expanded_tensor_as_eager(fn, make):
    (eb, e), (tb, t) = make(), make()
    expected, actual = fn(e), thunder.jit(fn)(t)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(t, e)
    torch.testing.assert_close(tb, eb)
    assert t._base is not None and shares_storage(t, t._base)


@pytest.mark.parametrize("fn", [_put_one, _setitem_rows])
@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors is deprecated")
def test_indexed_write_into_an_expanded_tensor_with_grad_raises_eagers_backward_error(fn):
    overlap = "more than one element of the written-to tensor refers to a single memory location"
    results = []
    for f in (fn, thunder.jit(fn)):
        leaf, a = _row_expanded(requires_grad=True)
        (out,) = f(a)
        results.append(out)
        with pytest.raises(RuntimeError, match=overlap) as error:
            torch.autograd.grad(out.sum(), leaf)
    torch.testing.assert_close(results[1], results[0].detach(), check_dtype=True)
    assert fn.__name__ in str(error.value)


# ------------------ an output of unbind/chunk of an argument, returned after the argument was updated in place with grad


def _unbound_then_base_updated(a):  # (campaign, 14012)
    v0 = a.unbind(0)[0]
    a.sin_()
    return (v0.double(),)  # (float64 already: v0 itself, a view of the caller's tensor)


def _chunk_of_view_then_base_updated(a0, a1):  # (campaign, 14010: empty arguments)
    v1 = a1.chunk(2, -1)[0]
    F.hardswish(a0, inplace=True)
    return (v1,)


def _matrix_and_row(rows):
    def make():
        leaf = torch.tensor([[1.0, 2.0], [3.0, 4.0]][:rows], dtype=torch.float64, requires_grad=True)
        a0 = (leaf * 1).reshape(-1)[1:]
        return leaf, (a0, a0[..., :1])

    return make


@pytest.mark.parametrize(
    "fn, make, differentiate",
    [
        (
            _unbound_then_base_updated,
            lambda: (lambda leaf: (leaf, (leaf * 1,)))(
                torch.tensor([[1.0, 2.0]] * 2, dtype=torch.float64, requires_grad=True)
            ),
            lambda outs, args: [outs[0]],
        ),
        (_chunk_of_view_then_base_updated, _matrix_and_row(2), lambda outs, args: [outs[0], args[0]]),
        (_chunk_of_view_then_base_updated, _matrix_and_row(0), lambda outs, args: [outs[0], args[0]]),
    ],
)
def test_multi_output_view_of_an_argument_rebased_refuses_its_history_as_eager(fn, make, differentiate):
    with pytest.raises(RuntimeError, match="returns multiple views"):
        leaf, args = make()
        targets = differentiate(fn(*args), args)
        torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets])
    leaf, args = make()
    outs = thunder.jit(fn)(*args)
    assert outs[0]._is_view() and shares_storage(outs[0], args[0])
    targets = differentiate(outs, args)
    with pytest.raises(RuntimeError, match="returns multiple views") as error:
        torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets])
    assert fn.__name__ in str(error.value)


def test_multi_output_view_of_an_argument_not_rebased_keeps_its_history():
    def unbound_only(a):
        return (a.unbind(0)[1], a * 2)

    assert_as_eager(unbound_only, lambda: (torch.tensor([[1.0, 2.0]] * 2, requires_grad=True) * 1,))
    leaf = torch.tensor([[1.0, 2.0]] * 2, requires_grad=True)
    outs = thunder.jit(unbound_only)(leaf * 1)
    (g,) = torch.autograd.grad(outs[0].sum() + outs[1].sum(), leaf)
    torch.testing.assert_close(g, torch.tensor([[2.0, 2.0], [3.0, 3.0]]))


# --------------------- a computed tensor laid out otherwise than eager's, returned beside a view of it updated in place


def _rounded_then_diagonal_updated(a):  # (campaign, 14009)
    v0 = a + (torch.round(a) - a).detach()
    v1 = v0 + (torch.round(v0) - v0).detach()
    v2 = v1.diagonal()
    v2.abs_()
    return v1, v2


def _no_grad_gelu_then_row_filled(a0):  # (campaign, 14012)
    v0 = a0.detach() * a0
    with torch.no_grad():
        v1 = F.gelu(v0)
    v2 = v1[0]
    v2.fill_(1.5)
    return v1, v2


def _doubled_then_row_viewed(a):
    v1 = a * 2  # (eager's follows a's permuted layout)
    return v1, v1[1], v1.mT


def _permuted(dtype=torch.float32, requires_grad=True):
    t = torch.tensor([[[0.5, -0.5], [1.5, 0.0]], [[-2.0, 0.25], [1.0, -1.5]]], dtype=dtype, requires_grad=requires_grad)
    return ((t * 1).permute(2, 0, 1),)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_rounded_then_diagonal_updated, _permuted),
        (_no_grad_gelu_then_row_filled, lambda: _permuted(torch.float16, requires_grad=False)),
        (_no_grad_gelu_then_row_filled, _permuted),
        (_doubled_then_row_viewed, _permuted),
    ],
)
def test_computed_tensor_returned_beside_its_views_shares_their_storage(fn, make):
    assert_as_eager(fn, make)
    e, t = fn(*make()), thunder.jit(fn)(*make())
    assert [x.stride() for x in t] == [x.stride() for x in e]
