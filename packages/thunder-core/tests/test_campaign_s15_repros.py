"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 15) found, each against eager."""

from __future__ import annotations

import pytest
import torch

import thunder

NAN = float("nan")


def _fmod_of_an_input_without_grad(take, sort):
    v = torch.sin(take)
    sort.fmod_(take)
    return v


def _unused_output_with_a_nan_derivative(take, sort):
    return torch.sin(take), torch.fmod(sort, take)


def _two_outputs_one_used(take, sort):
    return torch.sin(take), sort * take


def _inputs():
    take = torch.tensor([[1.5, -0.25], [0.5, -1.0]], dtype=torch.float64, requires_grad=True)
    sort = torch.tensor([[NAN, -0.25], [0.5, torch.inf]], dtype=torch.float64)
    return take, sort


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize(
    "fn", [_fmod_of_an_input_without_grad, _unused_output_with_a_nan_derivative, _two_outputs_one_used]
)
def test_a_branch_receiving_no_gradient_adds_nothing_to_the_others(fn):
    # campaign seed 14002: `sort.fmod_(take)` with a NaN in `sort` (which requires no grad): the single backward
    # multiplied the zero cotangent of the updated `sort` by fmod's NaN derivative, giving NaN in take.grad; eager
    # never differentiates a branch whose outputs receive no gradient
    (te, se), (ta, sa) = _inputs(), _inputs()
    expected, actual = fn(te, se), thunder.jit(fn)(ta, sa)
    torch.testing.assert_close(actual, expected, equal_nan=True)
    torch.testing.assert_close(sa, se, equal_nan=True)
    _first(expected).sum().backward()
    _first(actual).sum().backward()
    torch.testing.assert_close(ta.grad, te.grad, equal_nan=True)


def test_each_set_of_outputs_receiving_gradients_gets_its_backward():
    # the same compiled program, differentiated through each output in turn, then through both
    jf = thunder.jit(_unused_output_with_a_nan_derivative)
    for pick in ((0,), (1,), (0, 1)):
        (te, se), (ta, sa) = _inputs(), _inputs()
        expected, actual = _unused_output_with_a_nan_derivative(te, se), jf(ta, sa)
        sum(expected[i].nan_to_num().sum() for i in pick).backward()
        sum(actual[i].nan_to_num().sum() for i in pick).backward()
        torch.testing.assert_close(ta.grad, te.grad, equal_nan=True)


def test_an_updated_input_used_after_the_call_still_gets_its_gradient():
    def fn(take, sort):
        v = torch.sin(take)
        sort.mul_(take)
        return v

    def run(f):
        take = torch.tensor([1.5, -0.25], dtype=torch.float64, requires_grad=True)
        sort = torch.tensor([2.0, 3.0], dtype=torch.float64)
        v = f(take, sort)
        (v.sum() + sort.sum()).backward()
        return take.grad

    torch.testing.assert_close(run(thunder.jit(fn)), run(fn))


def _nonzero_into_empty_out(a):
    out = torch.empty((0, 0), dtype=torch.int64)
    torch.nonzero(a + 1, as_tuple=False, out=out)
    return out, out * 2


def _nonzero_into_empty_out_unused(var):
    out = torch.empty((0,), dtype=torch.int64)
    torch.nonzero(var, as_tuple=False, out=out)
    return var / (var.abs() + 1)


def _masked_plus_one_element(a):
    return a[a > 0] + torch.ones(1)


def _one_element_times_masked(a):
    return torch.ones(1) * a[a > 0]


def _nonzero_plus_a_row(a):
    return torch.nonzero(a > 0).to(a.dtype) + torch.ones(1, 1)


def _two_masks(a):
    return a[a > 0] * a[a < 0]


def _masked_column_against_a_row(a):
    return a[a > 0].unsqueeze(1) + torch.ones(3)


def _masked_reshaped(a):
    return a[a > 0].unsqueeze(1).expand(-1, 3).reshape(-1) * 2


_DATA_DEPENDENT = [
    _nonzero_into_empty_out,
    _nonzero_into_empty_out_unused,
    _masked_plus_one_element,
    _one_element_times_masked,
    _nonzero_plus_a_row,
    _two_masks,
    _masked_column_against_a_row,
    _masked_reshaped,
]


@pytest.mark.parametrize("fn", _DATA_DEPENDENT)
def test_sizes_known_only_at_run_time_trace_where_the_result_does_not_depend_on_them(fn):
    # campaign seeds 14002/14004/14005/14008: nonzero(out=) of an empty tensor, then broadcasts and reshapes of a
    # nonzero's or a boolean mask's size asked Eq(u0, 0) / Eq(u0, 1) / Eq(3*u0, u0) while tracing and were refused
    jf = thunder.jit(fn)
    for a in (
        torch.tensor(-0.0),
        torch.tensor(0.5, dtype=torch.float64),
        torch.tensor([1.0, -2.0]),
        torch.tensor([1.0, -2.0, -3.0]),
        torch.tensor([1.0, 2.0, -3.0, 4.0]),
    ):
        if a.dim() == 0 and fn not in (_nonzero_into_empty_out, _nonzero_into_empty_out_unused):
            continue  # (a 0-d boolean index is refused, naming the line: another limitation)
        try:
            expected = fn(a)
        except RuntimeError:
            continue  # (eager refuses the broadcast: thunder raises too, at run time)
        torch.testing.assert_close(jf(a), expected)


def test_a_masked_broadcast_differentiates_as_eager():
    def fn(a, w):
        return (a[a > 0] * w).sum()

    def run(f):
        a = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
        w = torch.tensor([2.0], requires_grad=True)
        f(a, w).backward()
        return a.grad, w.grad

    torch.testing.assert_close(run(thunder.jit(fn)), run(fn))


def _no_grad_tanh_detached_sliced(a0, a1):
    with torch.no_grad():
        v0 = torch.tanh(a1)
    return v0.detach()[:, :1]


def _detached_reshaped(a0, a1):
    return a0.tanh().detach().view(a0.shape)


def _detached_sliced_twice(a0, a1):
    d = (a0 * 2).detach()
    return d[:, :1], d[:1]


@pytest.mark.parametrize("fn", [_no_grad_tanh_detached_sliced, _detached_reshaped, _detached_sliced_twice])
@pytest.mark.parametrize("rows", [1, 2])
def test_a_view_of_a_detached_result_is_a_view_as_in_eager(fn, rows):
    # campaign seed 14002: a view through detach() of a tensor the program computes came back as the program's
    # own tensor (no ``_base``) where its view op was the identity (a slice of a whole size-1 dimension)
    def make():
        a0 = (torch.tensor([[-0.0], [-0.5]], dtype=torch.bfloat16, requires_grad=True) * 1)[:rows]
        return a0, a0

    expected, actual = fn(*make()), thunder.jit(fn)(*make())
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    torch.testing.assert_close(actual, expected)
    for e, t in zip(expected, actual):
        assert (t._base is None, t.requires_grad) == (e._base is None, e.requires_grad)
    if len(expected) == 2:
        assert (actual[0]._base is actual[1]._base) == (expected[0]._base is expected[1]._base)
        expected[0].fill_(3)
        actual[0].fill_(3)
        torch.testing.assert_close(actual, expected)  # (they share the storage, as eager's)


def _view_of_static_size_updated(a0):
    v0 = a0 * 2
    v2 = v0[..., :3]
    v2.mul_(2)
    return v2


def _view_sized_from_the_shape_updated(a0):
    v0 = torch.nn.functional.log_softmax(a0, dim=0)
    v2 = v0[..., : int(torch.div(v0.shape[-1], 2, rounding_mode="trunc")) + 1]
    v2.mul_(2)
    return v2


@pytest.mark.parametrize("fn", [_view_of_static_size_updated, _view_sized_from_the_shape_updated])
@pytest.mark.parametrize("grad", [False, True])
def test_with_symbolic_sizes_a_view_updated_in_place_is_returned_as_a_view(fn, grad):
    # campaign seeds 14005/14006 (symbolic sizes): a view of static sizes of a tensor of symbolic ones, updated in
    # place through the view, came back as a tensor of its own
    def make():
        return torch.linspace(-1, 1, 20, dtype=torch.float64).requires_grad_(grad)

    expected = fn(make())
    jf = thunder.jit(fn, cache="symbolic values")
    for _ in range(2):  # (the second call: the cached entry)
        actual = jf(make())
        torch.testing.assert_close(actual, expected)
        assert (actual._base is None, actual.requires_grad) == (expected._base is None, expected.requires_grad)
    if grad:
        # eager's backward runs for the first; the other overwrites log_softmax's saved output, which eager's backward
        # refuses, and so must thunder's, with symbolic sizes too (session 16: it computed a gradient)
        a, b = make(), make()
        try:
            fn(a).sum().backward()
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                jf(b).sum().backward()
            return
        jf(b).sum().backward()
        torch.testing.assert_close(b.grad, a.grad)


def _input_detached_sliced(take, var):
    return take.detach()[:, :1]


def _input_detached_viewed(take, var):
    return take.detach().view(take.shape)


def _input_detached(take, var):
    return take.detach()


@pytest.mark.parametrize("fn", [_input_detached_sliced, _input_detached_viewed, _input_detached])
@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("same", [True, False])
def test_an_identity_view_of_a_detached_input_is_a_view_of_it_as_in_eager(fn, step, same):
    # campaign seed 14002 (session 15's run): `take.detach()[:, :1]` of a column came back as detach()'s alias (no
    # ``_base``) where eager's is a view of it
    def make():
        a0 = (torch.tensor([[-0.0], [-0.5]], dtype=torch.bfloat16, requires_grad=True) * 1)[::step]
        return a0, (a0 if same else a0 * 1)

    e_in, t_in = make(), make()
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    torch.testing.assert_close(actual, expected)
    assert (actual._base is None, actual.requires_grad) == (expected._base is None, expected.requires_grad)
    assert actual.untyped_storage().data_ptr() == t_in[0].untyped_storage().data_ptr()
    expected.fill_(2)
    actual.fill_(2)
    torch.testing.assert_close(t_in[0], e_in[0])  # (the caller's tensor sees the write, as eager's)
