"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 19) found, each against eager.

Besides values, dtypes and gradients, these compare what the campaign's ``output_aliasing`` check compares: whether
each output is a view and which outputs share a storage (an in-place update of a copy must not reach the tensor it
was made from, nor miss it when eager's result is a view)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.tracing.errors import TracingError

_CACHES = ("constant values", "symbolic values")


def _relations(out) -> set:
    """Which outputs are views and which share an earlier output's storage, and their strides (but for dimensions
    of size 1, whose strides no index reads)."""
    rel = set()
    for i, o in enumerate(out):
        strides = tuple(s if n != 1 else None for n, s in zip(o.shape, o.stride()))
        rel.add(("view", i, o._is_view(), strides))
        for j in range(i):
            if o.untyped_storage().data_ptr() == out[j].untyped_storage().data_ptr():
                rel.add(("shares", i, j))
    return rel


def _assert_layouts_as_eager(fn, make_inputs, cache: str) -> None:
    expected = fn(*make_inputs())
    actual = thunder.jit(fn, cache=cache)(*make_inputs())
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        assert (a.dtype, a.shape, a.requires_grad) == (e.dtype, e.shape, e.requires_grad)
        torch.testing.assert_close(a, e, equal_nan=True)
    assert _relations(actual) == _relations(expected)


# ------------------------------------------- the layout of a result computed from another pending result (TensorIterator)


def _transposed(dtype=torch.float16):
    return (torch.arange(6, dtype=dtype).reshape(1, 3, 1, 2) / 7).transpose(1, 3)


def _clamp_then_flatten(x, lo):  # (campaign, widened, seed 14007)
    v = torch.clamp(x, lo, lo + 1)  # lo + 1 has x's order; clamp follows it: flatten copies in eager
    return (v.flatten(),)


def _exp_of_scaled_then_reshape(x):
    return ((x * 2).exp().reshape(-1),)


def _add_then_select(x):  # (campaign, widened, seed 14006)
    v = x.new_zeros((3,)).sum() + x * 2.0
    return v.select(0, -1), v


def _chain_then_view_updated(x):
    v = ((x + 1) * 3).sin()
    w = v.reshape(-1)  # a copy in eager: the update below must not reach v
    w.mul_(2)
    return v, w


def _chain_then_contiguous(x):
    v = (x - 1).abs().neg()
    return v, v.contiguous()


@pytest.mark.parametrize("cache", _CACHES)
@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (_clamp_then_flatten, lambda: (_transposed(), _transposed())),
        (_exp_of_scaled_then_reshape, lambda: (_transposed(torch.float32),)),
        (_add_then_select, lambda: (_transposed(torch.bfloat16),)),
        (_chain_then_view_updated, lambda: (_transposed(torch.float64),)),
        (_chain_then_contiguous, lambda: (torch.arange(12.0).reshape(3, 4)[:, ::2],)),
    ],
)
def test_a_result_of_a_pending_result_has_eagers_layout(fn, make_inputs, cache):
    # the layout run of a result whose arguments' layouts were themselves pending was skipped (the result was taken
    # as contiguous): reshapes of it were views in thunder and copies in eager, and its strides differed
    _assert_layouts_as_eager(fn, make_inputs, cache)


def _product_of_a_chain_then_copy_into_itself(x):  # (campaign, widened, seed 14007, after the chain of layout runs)
    v = (torch.arange(3.0, dtype=x.dtype) + x.mean()).cos()
    w = v * v
    w.copy_(w)  # (its shadow is asked for: the chain's runs resolve, one of them meanwhile through another's)
    return (w,)


@pytest.mark.parametrize("cache", _CACHES)
def test_a_chain_of_layout_runs_resolved_through_a_deferred_view_runs_each_once(cache):
    # a pending run resolved while the chain was resolving (a deferred view's run read its shadow) ran again, without
    # its outputs: its layouts became empty and the run reading them raised IndexError
    def make():
        return (torch.arange(24.0, dtype=torch.float64).reshape(4, 6)[:, ::2],)

    _assert_layouts_as_eager(_product_of_a_chain_then_copy_into_itself, make, cache)


# ------------------------------------------- a returned view of a result updated after it, with symbolic sizes


def _mT_then_update(x):  # (campaign, widened, seed 14005, symbolic sizes)
    v = x * 1
    w = v.double().mT  # (double() of a float64 tensor is the tensor itself)
    v *= 0.5
    return w, v


def _select_then_update(x):
    v = x + 1
    w = v[1:].transpose(0, 1)
    v.add_(2)
    return w, v


@pytest.mark.parametrize("cache", _CACHES)
@pytest.mark.parametrize("fn", [_mT_then_update, _select_then_update])
def test_a_returned_view_of_a_result_updated_later_views_it_with_symbolic_sizes(fn, cache):
    # the view, re-derived from the updated result by a gather (which specialises the sizes), was returned as the
    # gather's copy with symbolic sizes: it shared no storage with the result it views in eager
    jfn = thunder.jit(fn, cache=cache)
    for shape in ((3, 2, 2), (3, 1, 2), (4, 3, 2)):  # (other sizes: the specialised trace is not reused for them)
        x = torch.randn(shape, dtype=torch.float64)
        expected, actual = fn(x.clone()), jfn(x.clone())
        for e, a in zip(expected, actual):
            torch.testing.assert_close(a, e)
        assert _relations(actual) == _relations(expected)


# ------------------------------------------- as_strided_ past a tensor's elements while it requires grad (eager's
# AsStridedBackward1: the gradient reaches the former elements only)


def _strided_inputs():
    leaf, scale = torch.arange(20.0, requires_grad=True), torch.tensor([-0.5, 2.0, 3.0, 1.5], requires_grad=True)
    return [leaf, scale], ((leaf * 1)[::2], (scale * 1).reshape(2, 2))


def _own_storage_inputs():  # (a tensor of its own over a larger storage: restrided in place before the call)
    leaf, scale = torch.arange(20.0, requires_grad=True), torch.tensor([-0.5, 2.0, 3.0, 1.5], requires_grad=True)
    x = leaf * 1
    x.as_strided_((5,), (2,))
    return [leaf, scale], (x, (scale * 1).reshape(2, 2))


def _restride_then_masked_fill(where, m):  # (campaign, old features, seed 14008)
    v = m.masked_fill(m > 0, 0.25)
    where.as_strided_((2, 2), (1, 2))
    return (v,)


def _restride_then_mul(where, m):
    where.as_strided_((2, 2), (1, 2))
    return (where * m,)


def _restride_with_offset_then_read(where, m):
    where.as_strided_((3,), (1,), 1)
    return where.exp(), where[1:] * m[0, 0]


def _contiguous_inputs():
    leaf, scale = torch.arange(20.0, requires_grad=True), torch.tensor([-0.5, 2.0, 3.0, 1.5], requires_grad=True)
    return [leaf, scale], (leaf * 1, (scale * 1).reshape(2, 2))


def _restride_view_then_mul(b, m):
    w = b[::2]
    w.as_strided_((2, 2), (1, 2))
    return (w * m,)


def _restride_view_twice_then_update_base(b, m):
    w = b[::2]
    w.as_strided_((3,), (1,), 1)
    w.as_strided_((2,), (2,), 1)
    r = w.exp()
    b.mul_(m[0, 0])  # (eager makes w's history again from its base: all of it)
    return r, w * 2, b


_PAST_ELEMENTS = [
    (fn, make)
    for fn in (_restride_then_masked_fill, _restride_then_mul, _restride_with_offset_then_read)
    for make in (_strided_inputs, _own_storage_inputs)
] + [(fn, _contiguous_inputs) for fn in (_restride_view_then_mul, _restride_view_twice_then_update_base)]


@pytest.mark.parametrize("fn, make_inputs", _PAST_ELEMENTS)
def test_as_strided_past_a_tensors_elements_gives_eagers_gradient(fn, make_inputs):
    # refused before ("eager's gradient follows its former elements"); the campaign takes the gradient through the
    # restrided input after the call too
    from test_campaign_s18_repros import _assert_as_eager

    _assert_as_eager(fn, make_inputs)


def _restride_then_update(where, m):
    where.as_strided_((2, 2), (1, 2))
    where.mul_(m)
    return (where.sum(0),)


def _restride_view_then_update(b, m):
    w = b[::2]
    w.as_strided_((2, 2), (1, 2))
    w.mul_(m)
    return w.sum(0), b


def _no_grad_inputs():
    return [], (torch.arange(20.0)[::2], torch.tensor([[-0.5, 2.0], [3.0, 1.5]]))


@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (_restride_then_update, _strided_inputs),
        (_restride_then_update, _no_grad_inputs),  # (wrote the wrong elements of the caller's base, silently)
        (_restride_view_then_update, _contiguous_inputs),
    ],
)
def test_an_update_through_a_tensor_restrided_past_its_elements_is_refused(fn, make_inputs):
    # its root holds its former elements only (or eager's CopySlices routes the update's gradient to the storage's
    # elements under the new layout): it wrote wrong elements and gradients before; refused, naming the line
    _, args = make_inputs()
    fn(*args)  # (eager runs it)
    _, args = make_inputs()
    with pytest.raises(TracingError, match=rf"(?s)cannot update in place .*in {fn.__name__}"):
        thunder.jit(fn)(*args)


# ------------------------------------------- index_put_(accumulate=True) on an expanded tensor: every contribution
# is added into the memory location it reaches (eager runs it, with a deprecation warning)


def _fmod_then_index_put_(x, unused):  # (campaign, widened, seed 14001)
    v = torch.fmod(x, x).detach()
    x.index_put_((torch.tensor([-1, 0, -1]),), x[:1] * 3, accumulate=True)
    return (v,)


def _index_put_rows(x, v):
    x.index_put_((torch.tensor([0, 2, 0]),), v, accumulate=True)
    return (x * 1,)


def _index_put_both_dims(x, v):
    x.index_put_((torch.tensor([1, 0, 1]), torch.tensor([3, 3, 0])), v[0], accumulate=True)
    return (x + 0,)


def _expanded_rows(expand=(4, -1)):
    def make():
        leaf = torch.tensor([[-2.5], [-0.0], [-2.5], [1.5], [-0.0]], dtype=torch.float16, requires_grad=True)
        return [leaf], ((leaf * 1)[0:1].expand(*expand), torch.zeros(3))

    return make


@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors is deprecated")
def test_index_put_accumulating_into_an_expanded_view_with_grad_matches_eager():
    # refused in forward with eager's backward error ("more than one element ... single memory location"): eager runs
    # the forward and raises in backward
    from test_campaign_s18_repros import _assert_as_eager

    _assert_as_eager(_fmod_then_index_put_, _expanded_rows(), message="single memory location")


@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors is deprecated")
@pytest.mark.parametrize(
    "fn, make",
    [
        (_index_put_rows, lambda: (torch.arange(3.0).reshape(3, 1).expand(3, 4), torch.arange(12.0).reshape(3, 4))),
        (_index_put_rows, lambda: (torch.arange(4.0)[None].expand(3, 4), torch.arange(12.0).reshape(3, 4))),
        (_index_put_both_dims, lambda: (torch.arange(2.0)[:, None].expand(2, 5), torch.tensor([[1.0, 10.0, 100.0]]))),
        (_index_put_both_dims, lambda: (torch.tensor([[7.0]]).expand(2, 5), torch.tensor([[1.0, 10.0, 100.0]]))),
    ],
)
def test_index_put_accumulating_into_an_expanded_tensor_adds_every_contribution_to_its_location(fn, make):
    xe, ve = make()
    xt, vt = make()
    expected, actual = fn(xe, ve), thunder.jit(fn)(xt, vt)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(xt, xe)
    torch.testing.assert_close(xt._base, xe._base)


# ------------------------------------------- an out= tensor of another shape is resized as eager resizes it


def _add_into_a_row_of_itself(a0, a1):  # (campaign, widened, seed 14002)
    v1 = torch.sin(a0)
    v2 = torch.sin(a1)
    torch.add(v2[0], v1, out=v2[0])  # (the resized v2[0] covers its argument v2[0]: eager reads what it wrote)
    return v1, v2


def _add_into_a_row_of_another(a0, a1):
    v1 = torch.sin(a0)
    v2 = torch.sin(a1)
    torch.add(v1[1], v1, out=v2[0])  # (grows the view v2[0] within v2's storage: v2 sees the result)
    return v1, v2


def _add_of_transposed_into_other_shape(x, o):
    torch.add(x.t(), 1, out=o)  # (TensorIterator gives the resized output its input's memory order)
    return (o,)


def _mul_into_smaller(x, o):
    torch.mul(x, 2, out=o)  # (grows o's storage)
    return (o * 1,)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize(
    "fn, make",
    [
        (_add_into_a_row_of_another, lambda: ((torch.arange(18.0).reshape(2, 3, 3) / 5)[:, ::2],) * 2),
        (_add_of_transposed_into_other_shape, lambda: (torch.arange(6.0).reshape(2, 3), torch.zeros(2, 3))),
        (_mul_into_smaller, lambda: (torch.arange(6.0).reshape(2, 3), torch.zeros(2))),
    ],
)
def test_an_out_tensor_of_another_shape_is_resized_as_eager(fn, make):
    # refused before ("thunder.jit does not resize an out= tensor")
    ae, at = make(), make()
    expected, actual = fn(*ae), thunder.jit(fn)(*at)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    assert _relations(actual) == _relations(expected)
    for e, a in zip(ae, at):
        torch.testing.assert_close(a, e)
        assert (a.shape, a.stride()) == (e.shape, e.stride())


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_an_out_tensor_resized_over_an_argument_is_refused_naming_the_line():
    # eager's kernel reads the argument's elements after writing some of them (an answer of its loop order)
    args = ((torch.arange(18.0).reshape(2, 3, 3) / 5)[:, ::2],) * 2
    with pytest.raises(
        NotImplementedError, match=r"(?s)resizes over one of its arguments.*in _add_into_a_row_of_itself"
    ):
        thunder.jit(_add_into_a_row_of_itself)(*args)


# ------------------------------------------- softmax over a size known only when the program runs


def _log_softmax_of_unique_mean(x, unused):  # (campaign, widened, seed 14005)
    v = torch.unique(torch.tensor(0.0, dtype=torch.float64) + x.mean(), sorted=False)
    return (F.log_softmax(v, dim=0),)


def _softmaxes_of_unique(x):
    v = torch.unique(x)
    return F.log_softmax(v, dim=0), F.softmax(v * 2, dim=0), torch.amax(v, 0, keepdim=True) if len(x) else v


def test_log_softmax_over_a_data_dependent_size_matches_eager():
    # amax's check asked whether the number of elements (data-dependent) is > 0 before whether a dim was given:
    # refused with "thunder.jit needs whether u0 > 0 holds"
    from test_campaign_s18_repros import _assert_as_eager

    def make():
        leaf = torch.zeros(2, 0, dtype=torch.float64, requires_grad=True)
        return [leaf], (leaf * 1, torch.zeros(2, dtype=torch.int64))

    _assert_as_eager(_log_softmax_of_unique_mean, make)
    jfn = thunder.jit(_softmaxes_of_unique)
    for x in (torch.tensor([1.0, 2.0, 2.0, -1.0]), torch.tensor([3.0, 3.0])):
        for e, a in zip(_softmaxes_of_unique(x), jfn(x)):
            torch.testing.assert_close(a, e)


# ------------------------------------------- factories from a tensor (x.new_zeros, zeros_like ...) take no gradient


_FACTORIES = {
    "new_zeros": lambda a: a.new_zeros(1),
    "new_ones": lambda a: a.new_ones(2, 1),
    "new_empty": lambda a: a.new_empty(2),
    "new_full": lambda a: a.new_full((2,), 1.5),
    "zeros_like": torch.zeros_like,
    "ones_like": torch.ones_like,
    "empty_like": torch.empty_like,
    "full_like": lambda a: torch.full_like(a, 2.0),
}


@pytest.mark.parametrize("name", sorted(_FACTORIES))
def test_a_tensor_made_from_anothers_metadata_does_not_require_grad_inside_the_program(name):
    # (found by the widened generator's out= statements) the new tensor's requires_grad, read inside the program,
    # was its argument's: a branch on it took the other way (silently), and out= into it was refused
    make = _FACTORIES[name]

    def fn(a):
        return a * 2 if make(a).requires_grad else a * 3

    def out_into(a):
        torch.mul(a.detach(), 2, out=make(a))
        return (a * 2,)

    a = torch.ones(2, requires_grad=True)
    torch.testing.assert_close(thunder.jit(fn)(a), fn(a))
    torch.testing.assert_close(thunder.jit(out_into)(a), out_into(a))


# ------------------------------------------- an explicit all-zero cotangent reaches the backward (eager raises)


def _sin_then_update_of_its_input(x):
    y = x * 1
    z = y.sin()  # (saves y)
    y.mul_(2)
    return z, y * 1


def test_an_explicit_zero_cotangent_reaches_a_stale_save_as_in_eager():
    # the check for eager's error took an all-zero cotangent for one autograd materialised (an output not
    # differentiated), so the backward ran where eager raises
    for fn in (_sin_then_update_of_its_input, thunder.jit(_sin_then_update_of_its_input)):
        x = torch.randn(3, dtype=torch.float64, requires_grad=True)
        z, w = fn(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad((z, w), x, (torch.zeros_like(z), torch.ones_like(w)))
        z, w = fn(x)
        torch.autograd.grad(w, x, torch.ones_like(w))  # (z not differentiated: no error, as in eager)


# ------------------------------------------- as_strided_copy(out=) of an argument sharing its storage reads the storage


def _as_strided_copy_into_out(a0, a1):  # (campaign, widened generator of this session, seed 19002)
    v0 = torch.empty((2, 2), dtype=torch.float64)
    torch.as_strided_copy(a1, (2, 2), (1, 2), storage_offset=1, out=v0)  # (storage elements outside a0 and a1)
    return (v0 * 1,)


def test_as_strided_copy_into_out_of_an_aliased_argument_reads_the_storage():
    # with out=, the call went around the rewrite that makes it read the storage (the program reads a copy of the
    # argument's own elements): silently wrong values
    from test_campaign_s18_repros import _assert_as_eager

    def make():
        base = torch.arange(18.0, dtype=torch.float64).reshape(2, 3, 3).requires_grad_()
        a0 = (base * 1)[1:]
        return [base], (a0, a0[0])

    _assert_as_eager(_as_strided_copy_into_out, make)  # (eager's backward raises: out= has no derivative)
    _, args = make()
    expected = _as_strided_copy_into_out(*args)
    _, args = make()
    torch.testing.assert_close(thunder.jit(_as_strided_copy_into_out)(*args), expected)


def _mul_into_new_zeros(a0):  # (campaign, widened generator of this session, seed 19002)
    return (torch.mul(a0.detach(), 2, out=a0.new_zeros(1)),)


def _add_of_transposed_into_new_zeros(a0):
    o = a0.new_zeros(1)
    v = torch.add(a0.detach().t(), 1, out=o)
    return v, o


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("fn", [_mul_into_new_zeros, _add_of_transposed_into_new_zeros])
def test_an_out_tensor_of_the_program_outgrowing_its_storage_is_no_view(fn):
    # resized through resize_, the program's tensor became a view of a fresh root (an output "is a view" in thunder
    # only); eager gives it a storage of its own with the result's layout
    a = torch.randn(2, 3, requires_grad=True)
    expected, actual = fn(a), thunder.jit(fn)(a)
    for e, t in zip(expected, actual):
        torch.testing.assert_close(t, e)
    assert _relations(actual) == _relations(expected)


def _add_into_a_row_growing_the_storage(t, b):
    x = t * 1
    torch.add(x[0], b, out=x[0])  # (the result outgrows x's storage: eager grows it, x sees the result)
    return (x,)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_an_out_view_resized_past_its_storage_is_refused_naming_the_line():
    # the resize_ that grows a storage is traced as a new storage: x kept its old values, silently
    make = lambda: (torch.arange(6.0).reshape(2, 3), torch.ones(4, 2, 3))  # noqa: E731
    _add_into_a_row_growing_the_storage(*make())  # (eager runs it)
    with pytest.raises(
        NotImplementedError, match=r"(?s)past that storage's end.*in _add_into_a_row_growing_the_storage"
    ):
        thunder.jit(_add_into_a_row_growing_the_storage)(*make())


def _expanded_row(*, requires_grad: bool = False):
    leaf = torch.tensor([[0.5, -1.5, 2.0]], requires_grad=requires_grad)
    return leaf, (leaf * 1).expand(4, -1)


def _rows_where_first_is_positive(x):
    x[x[:, 0] > 0] = 3.0
    return x.sum(0)


def _elements_over_zero(x):
    x[x > 0] = 7.0
    return x * 2


def _elements_under_zero_by_a_tuple_key(x):
    x[(x < 0,)] = torch.tensor(0.25)
    return x + 1


def _one_element_by_a_one_element_vector(x):
    m = torch.zeros(4, 3, dtype=torch.bool)
    m[1, 0] = True
    x[m] = torch.tensor([5.0])
    return x * 1


def _trailing_mask_fill(x):
    x.masked_fill_(torch.tensor([True, False, True]), -2.0)  # (masked_fill_'s mask broadcasts from the right)
    return x * 3


@pytest.mark.filterwarnings("ignore:Use of (masked_fill_|index_put_) on expanded tensors is deprecated")
@pytest.mark.parametrize(
    "fn",
    [
        _rows_where_first_is_positive,
        _elements_over_zero,
        _elements_under_zero_by_a_tuple_key,
        _one_element_by_a_one_element_vector,
        _trailing_mask_fill,
    ],
)
def test_a_boolean_masked_assignment_of_one_value_to_an_expanded_tensor_runs_as_eagers_masked_fill(fn):
    # eager runs x[mask] = v (one value) as x.masked_fill_(mask, v), which it allows on an expanded x: every memory
    # location whose elements the mask selects any of takes v. Thunder refused it as an index_put_ into overlapping
    # memory (campaign widened 14006/14007)
    _, want_x = _expanded_row()
    want = fn(want_x)
    _, got_x = _expanded_row()
    got = thunder.jit(fn)(got_x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x, want_x)  # (the caller's base row, through the expanded view)


def test_a_boolean_masked_assignment_to_a_plain_tensor_still_indexes_its_leading_dims():
    def f(x, m):
        x[m] = 9.0
        return x * 2

    x, m = torch.randn(4, 3), torch.tensor([True, False, False, True])
    want_x = x.clone()
    torch.testing.assert_close(thunder.jit(f)(x, m), f(want_x, m))
    torch.testing.assert_close(x, want_x)


@pytest.mark.filterwarnings("ignore:Use of masked_fill_ on expanded tensors is deprecated")
def test_a_boolean_masked_assignment_to_an_expanded_view_with_grad_raises_eagers_backward_error():
    # eager's backward reaches the masked_fill_'s copy into the expanded view and raises; thunder's computed one
    def run(f):
        leaf, x = _expanded_row(requires_grad=True)
        out = f(x)
        with pytest.raises(RuntimeError, match="single memory location") as info:
            (out.sum() + x.sum()).backward()
        return out.detach(), type(info.value)

    want, want_type = run(_elements_over_zero)
    got, got_type = run(thunder.jit(_elements_over_zero))
    torch.testing.assert_close(got, want)
    assert got_type is want_type
