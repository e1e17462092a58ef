"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14024, session 23) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view; and the checker's rules that tell
eager's own rounding and thunder's documented refusals from mismatches."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from differential import check
from differential.check import Divergence, DocumentedRefusal, check_program
from differential.functions import ScaleGrad
from differential.programs import FEATURES, InputSpec, Program
from eager_comparison import assert_as_eager

import thunder
from thunder.tracing.errors import TracingError

# ------------------------------------ select / narrow of a size known only when the program runs (unique, nonzero)


def _select_of_unique_updated(take):  # (campaign, 14007: take a 0-d bfloat16 leaf)
    v0 = ScaleGrad.apply(take)
    v2 = torch.unique_consecutive(v0, return_inverse=False, return_counts=False, dim=None)
    v2.select(-1, 0).add_(v0, alpha=-1)
    return (v2,)


def _last_of_unique_scaled(x, w):
    v = torch.unique_consecutive(x)
    v.select(0, -1).mul_(w[0])
    return v, v.select(0, 0) * w


def _narrow_of_unique_updated(x, w):
    v = torch.unique_consecutive(x)
    v.narrow(0, 1, 2).add_(w[:2])
    return v, v.narrow(-1, -1, 1) * w


def _columns_of_nonzero(x):
    v = torch.nonzero(x).to(x.dtype)
    v.select(1, 0).mul_(2)
    v.narrow(1, -1, 1).add_(1)
    return v, v.select(1, 1) * 1, v.select(-1, 0)


def _bf16_scalar():
    return (torch.tensor(-0.5, dtype=torch.bfloat16, requires_grad=True),)


def _runs():
    return torch.tensor([1.0, 1.0, 2.0, 3.0, 3.0, 4.0]), torch.tensor([3.0, -2.0], requires_grad=True)


def _grid():
    return (torch.tensor([[0.0, 1.0, 2.0], [2.0, 0.0, 0.0]]),)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_last_of_unique_scaled, _runs),
        (_narrow_of_unique_updated, _runs),
        (_columns_of_nonzero, _grid),
    ],
)
def test_select_and_narrow_of_a_size_known_when_the_program_runs(fn, make):
    assert_as_eager(fn, make)


def test_select_of_unique_updated_in_place_as_eager():
    assert_as_eager(_select_of_unique_updated, _bf16_scalar, grads=False)
    for f in (_select_of_unique_updated, thunder.jit(_select_of_unique_updated)):
        (take,) = _bf16_scalar()
        (out,) = f(take)
        with pytest.raises(NotImplementedError, match="unique_consecutive"):  # (eager has no derivative for it)
            torch.autograd.grad(out.sum(), take)


@pytest.mark.parametrize(
    "fn, error",
    [
        (lambda x: torch.unique_consecutive(x).select(0, 4) * 1, IndexError),
        (lambda x: torch.unique_consecutive(x).select(0, -5) * 1, IndexError),
        (lambda x: torch.unique_consecutive(x).narrow(0, 2, 3) * 1, RuntimeError),
        (lambda x: torch.unique_consecutive(x).narrow(0, -5, 1) * 1, IndexError),
    ],
)
def test_select_and_narrow_past_a_size_known_when_the_program_runs_raise_as_eager(fn, error):
    x = torch.tensor([1.0, 1.0, 2.0, 3.0, 3.0, 4.0])  # (4 distinct runs)
    with pytest.raises(error) as expected:
        fn(x)
    with pytest.raises(error) as actual:
        thunder.jit(fn)(x)
    assert str(actual.value).split(" (")[0] == str(expected.value).split(" (")[0]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.narrow(0, -7, 1),
        lambda x: x.narrow(0, 2, -1),
        lambda x: x.narrow(0, 4, 2),
        lambda x: x.sum().select(0, 0),
        lambda x: x.select(0, 5),
    ],
)
def test_select_and_narrow_errors_of_known_sizes_are_eagers(fn):
    x = torch.arange(5.0)
    with pytest.raises(Exception) as expected:
        fn(x)
    with pytest.raises(type(expected.value)) as actual:
        thunder.jit(fn)(x)
    assert str(actual.value).splitlines()[0] == str(expected.value).splitlines()[0]


# ------------------------------------------- a bfloat16 gradient summed from contributions in another order than eager


def _einsum_program() -> Program:  # (campaign, 14010: the leaf's gradient sums five bfloat16 contributions)
    values = [[[[0.5, -1.8984375]], [[0.20703125, -0.5]], [[-0.21484375, -0.828125]]]]
    product = "torch.einsum('ij,jk->ki', a0.reshape(-1, 1), a0.reshape(1, -1))"
    return Program(
        inputs=[InputSpec(values, torch.bfloat16, True, view="{b}")],
        lines=[f"v1 = {product}", f"v2 = {product}"],
        outputs=["v2", "a0", "v1"],
        features=frozenset(FEATURES),
        jit_options={"recompute": "reshapes"},
    )


def test_low_precision_gradient_in_another_summation_order_is_no_mismatch():
    # thunder's gradient is 0.015 from the float64 one at an element where eager's is 0.007, eager's being 0.033 off
    # at another: both sum the same rounded contributions, in their own order
    assert check_program(_einsum_program(), skip={"symbolic"}, output_aliasing=True)


def test_low_precision_gradient_off_by_a_contribution_stays_a_mismatch(monkeypatch):
    # a gradient 10 % off everywhere, beyond any order's rounding, is still reported under the summation-order rule
    jit = thunder.jit
    monkeypatch.setattr(
        thunder, "jit", lambda fn, **kw: lambda *a: tuple(t + (t - t.detach()) * 0.1 for t in jit(fn, **kw)(*a))
    )
    with pytest.raises(Divergence) as info:
        check_program(_einsum_program(), skip={"symbolic", "second_call", "aliasing"})
    assert info.value.kind == "grad"


# ----------------------------------------- an update of an argument restrided past its elements: a documented refusal


def _restrided_past_then_updated(a0):  # (campaign, 14006: a0 a step-2 slice of a non-leaf of 20 elements)
    a0.as_strided_((2, 2), (1, 2))
    v0 = a0 * a0.detach()
    v1 = torch.atleast_2d((a0,))[0]
    v1.mul_(v0)
    return (v0,)


def _restrided_program() -> Program:
    values = [
        0.9,
        0.7,
        -0.7,
        -0.2,
        0.4,
        0.2,
        -0.3,
        1.5,
        1.1,
        -0.2,
        -0.4,
        1.1,
        0.5,
        2.9,
        -0.4,
        -2.3,
        -0.0,
        0.9,
        -1.3,
        0.6,
    ]
    return Program(
        inputs=[InputSpec(values, torch.float32, True, view="{b}[::2]")],
        lines=[
            "a0.as_strided_((2, 2), (1, 2))",
            "v0 = a0 * a0.detach()",
            "v1 = torch.atleast_2d((a0,))[0]",
            "v1.mul_(v0)",
        ],
        outputs=["v0"],
        features=frozenset(FEATURES),
    )


def test_update_of_an_argument_restrided_past_its_elements_is_refused_naming_the_line():
    leaf = torch.randn(20, requires_grad=True)
    _restrided_past_then_updated((leaf * 1)[::2])  # (eager runs it)
    with pytest.raises(TracingError, match="restrided .as_strided_. to storage elements past its own") as info:
        thunder.jit(_restrided_past_then_updated)((leaf * 1)[::2])
    assert "v1.mul_(v0)" in str(info.value)


def test_checker_counts_a_refusal_the_sharp_edges_page_documents_apart_from_mismatches(monkeypatch):
    with pytest.raises(DocumentedRefusal):
        check_program(_restrided_program(), output_aliasing=True)
    monkeypatch.setattr(check, "_DOCUMENTED_REFUSALS", {})  # (a refusal the page does not document is a mismatch)
    with pytest.raises(Divergence) as info:
        check_program(_restrided_program(), output_aliasing=True)
    assert info.value.kind == "error"


def test_every_refusal_the_checker_excuses_is_documented():
    page = " ".join(check._SHARP_EDGES.read_text().split())
    assert check._DOCUMENTED_REFUSALS
    assert all(phrase in page for phrase in check._DOCUMENTED_REFUSALS.values())


# ------------------------------------------------ a tensor read from outside the arguments, with its real layout


def _transposed_global():
    global _g
    base = torch.arange(12.0).reshape(3, 4)
    _g = base.t()  # (a view of base: strides (1, 4))
    return (torch.ones(12),)


def _view_of_the_global(x):
    return (_g.view(-1) + x,)  # (eager: the transposed layout refuses the view)


def _layout_of_the_global(x):
    return (x * _g.stride(0) + _g.storage_offset(), x * int(_g.is_contiguous()))


def _global_reshaped_and_updated(x):
    _g.t()[0].add_(x[:4])
    return _g.t().reshape(-1), _g.reshape(-1) + x, _g.mT


@pytest.mark.parametrize("fn", [_layout_of_the_global, _global_reshaped_and_updated])
def test_a_captured_tensor_has_its_real_layout(fn):
    e_args, e_global = _transposed_global(), _g
    expected = fn(*e_args)
    t_args, t_global = _transposed_global(), _g
    actual = thunder.jit(fn)(*t_args)
    for a, e in zip(actual, expected):
        assert (a.dtype, a.shape, a._is_view(), a._base is t_global._base) == (
            e.dtype,
            e.shape,
            e._is_view(),
            e._base is e_global._base,
        )
        torch.testing.assert_close(a, e)
    torch.testing.assert_close(t_global._base, e_global._base)


def test_a_view_eager_refuses_of_a_captured_tensor_is_refused():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        _view_of_the_global(*_transposed_global())
    with pytest.raises(RuntimeError, match="view size is not compatible") as actual:
        thunder.jit(_view_of_the_global)(*_transposed_global())
    assert "return (_g.view(-1) + x,)" in "".join(getattr(actual.value, "__notes__", ()))  # (the user's line)


# ------------------------------------------ an argument that is a view of a leaf requiring grad, updated in place


def _fill_through_the_aliased_view(a0, a1):  # (campaign, widened with eager_errors: a1 is a0.mT, a0 a leaf)
    a1[..., :1] = 0.5
    return (a0,)


def _scale_the_view(a1):
    a1.mul_(2)
    return (a1,)


def _scale_a_row_of_the_view(a1):
    a1.t()[0].mul_(2)
    return (a1 * 1,)


def _leaf_and_its_transpose():
    a0 = torch.randn(2, 3, requires_grad=True)
    return a0, a0.mT


def _rows_of_a_leaf():
    return (torch.tensor([[-1.0, 0.5], [2.0, -0.25], [0.75, 1.5]], requires_grad=True)[1:],)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_fill_through_the_aliased_view, _leaf_and_its_transpose),
        (_scale_the_view, _rows_of_a_leaf),
        (_scale_a_row_of_the_view, _rows_of_a_leaf),
    ],
)
def test_update_of_an_argument_viewing_a_leaf_that_requires_grad_raises_as_eager(fn, make):
    match = "a view of a leaf Variable that requires grad is being used in an in-place operation"
    with pytest.raises(RuntimeError, match=match):
        fn(*make())
    args = make()
    before = [a.detach().clone() for a in args]
    with pytest.raises(RuntimeError, match=match) as info:
        thunder.jit(fn)(*args)
    assert fn.__name__ in str(info.value)
    for a, b in zip(args, before):  # (nothing written)
        torch.testing.assert_close(a.detach(), b)


def test_update_under_no_grad_of_an_argument_viewing_a_leaf_runs_as_eager():
    def fn(a1):
        with torch.no_grad():
            a1.mul_(2)
        return (a1 * 1,)

    assert_as_eager(fn, _rows_of_a_leaf, grads=False)


# ------------------------------------------------------------- programs eager rejects: thunder must reject them too


def test_checker_reports_a_program_thunder_runs_where_eager_raises(monkeypatch):
    program = Program(
        inputs=[InputSpec([[1.0, 2.0], [3.0, 4.0]], torch.float64, False)],
        lines=["v0 = a0.t().view(-1)"],
        outputs=["v0"],
        raises=True,
    )
    assert check_program(program)  # (thunder raises as eager does)
    monkeypatch.setattr(thunder, "jit", lambda fn, **kw: lambda *a: (a[0].t().reshape(-1),))
    with pytest.raises(Divergence) as info:
        check_program(program)
    assert info.value.kind == "runs where eager raises"


def _raises_as_eager(fn, make):
    with pytest.raises(Exception) as expected:
        fn(*make())
    with pytest.raises(type(expected.value)) as actual:
        thunder.jit(fn)(*make())
    return expected.value, actual.value


# ----------------------------------------------- a view of an output of a view op returning several views, updated


def _transpose_of_a_chunk_scaled(a):  # (campaign, 14002)
    v0 = a.chunk(2, -1)[0]
    v0.t().mul_(2)
    return (v0,)


def _column_of_a_chunk_scaled(a):
    v0 = a.chunk(2, -1)[0]
    v0.select(-1, 0).mul_(2)
    return (v0,)


def _nonleaf_3x2():
    return (torch.arange(6.0).reshape(3, 2).requires_grad_() * 1,)


@pytest.mark.parametrize("fn", [_transpose_of_a_chunk_scaled, _column_of_a_chunk_scaled])
def test_update_of_a_view_of_a_multi_view_output_raises_as_eager(fn):
    expected, actual = _raises_as_eager(fn, _nonleaf_3x2)
    assert str(actual).split(" (as in eager)")[0].rstrip(".") == str(expected).split("\n")[0].rstrip(".")


def test_update_of_a_view_of_a_copy_of_a_multi_view_output_runs_as_eager():
    def fn(a):
        v0 = a.chunk(2, -1)[0]
        (v0 * 1).t().mul_(2)
        return (v0,)

    assert_as_eager(fn, _nonleaf_3x2)


# ------------------------------------------- out= of a view copy, whose out variant requires the result's dtype


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.t_copy(x, out=torch.empty((2,), dtype=torch.float64)),  # (campaign, 14002)
        lambda x: torch.as_strided_copy(x, (2,), (1,), out=torch.empty((2,), dtype=torch.float64)),
    ],
)
def test_out_of_a_view_copy_in_another_dtype_raises_as_eager(fn):
    expected, actual = _raises_as_eager(fn, lambda: (torch.tensor([1.0, 2.0], dtype=torch.float16),))
    assert "Expected out tensor to have dtype" in str(expected) and "Expected out tensor to have dtype" in str(actual)


def test_out_of_an_op_casting_into_another_dtype_runs_as_eager():
    assert_as_eager(lambda x: torch.add(x, 1, out=torch.empty((2,), dtype=torch.float64)), lambda: (torch.ones(2),))


# ------------------------------------------------------------------------- index_copy's checks of its arguments


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.index_copy(0, torch.tensor([0]), a[-2:] * 2),  # (campaign, 14006: more rows than indices)
        lambda a: a.index_copy(0, torch.tensor([0, 1]), torch.tensor(2.0)),
        lambda a: a.index_copy(0, torch.tensor([0]), a[0] * 2),
        lambda a: a.index_copy(1, torch.tensor([0]), a[:2, :1]),
    ],
)
def test_index_copy_of_mismatched_arguments_raises_as_eager(fn):
    expected, actual = _raises_as_eager(fn, lambda: (torch.arange(6.0).reshape(3, 2),))
    assert str(actual).split("\n")[0] in str(expected)


# ------------------------------------------------ a product whose inner size is known only when the program runs


def _product_of_unique(a, b):  # (campaign, 14007: unique of a 0-d tensor, times a matrix of one row)
    v3 = torch.unique(a.detach().sum() + 1.0)
    return torch.matmul(v3, b), b.t() @ v3


def test_product_of_a_size_known_when_the_program_runs_as_eager():
    assert_as_eager(_product_of_unique, lambda: (torch.tensor([1.0, 2.0, 2.0]), torch.ones(1, 2, requires_grad=True)))


def test_product_of_mismatched_inner_sizes_known_when_the_program_runs_raises_as_eager():
    def fn(a, b):
        return (torch.unique(a) @ b,)

    _raises_as_eager(fn, lambda: (torch.tensor([1.0, 2.0, 2.0]), torch.ones(3, 2)))


# ------------------------------------------------ a scatter or index update reading its own destination as source


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[..., :1].scatter_(-1, torch.zeros(1, dtype=torch.int64), x[..., :1].expand_as(x[..., :1])),
        lambda x: x.scatter_add_(0, torch.zeros_like(x, dtype=torch.int64), x),  # (campaign, 14006/14009)
        lambda x: x.index_copy_(0, torch.tensor([0, 1, 2]), x),
        # (campaign, 14036: the indices come in a tuple, which the scratch call passed as stand-ins)
        lambda x: x.index_put_((torch.tensor([0, 0, 1]),), x, accumulate=True),
        lambda x: x.index_put_((torch.tensor([2, 0, 1]),), x),
    ],
)
def test_update_reading_its_destination_as_its_source_raises_as_eager(fn):
    expected, actual = _raises_as_eager(fn, lambda: (torch.tensor([1.0, 2.0, 3.0]),))
    assert "refer to a single memory location" in str(expected) and "refer to a single memory location" in str(actual)


def test_elementwise_update_reading_its_destination_runs_as_eager():
    assert_as_eager(lambda x: (x.add_(x), x.mul_(x.view(-1))), lambda: (torch.tensor([1.0, 2.0, 3.0]),), grads=False)


# ------------------------------------- gelu of infinity: NaN in eager's vectorised loop, infinity in its scalar one


def test_eagers_gelu_of_infinity_depends_on_its_kernels_loop():
    # (the fact the checker's gelu rule rests on: if eager ever answers one way, the rule can go)
    inf = float("inf")
    assert torch.isnan(F.gelu(torch.full((40,), inf))[0])
    assert torch.isinf(F.gelu(torch.full((1,), inf))[0])


def _gelu_program() -> Program:
    return Program(
        inputs=[InputSpec([[0.5, float("inf")], [-2.0, 1.5]], torch.float32, False, view="{b}")],
        lines=["v0 = F.gelu(a0)"],
        outputs=["v0"],
        features=frozenset(FEATURES),
        jit_options={},
    )


def _thunder_answering(monkeypatch, change) -> None:
    jit = thunder.jit
    monkeypatch.setattr(thunder, "jit", lambda fn, **kw: lambda *a: tuple(change(t) for t in jit(fn, **kw)(*a)))


def test_gelu_of_infinity_from_the_other_loop_is_no_mismatch(monkeypatch):
    # eager's vectorised loop answers gelu(inf) NaN here; thunder answering infinity, as eager's scalar loop does
    assert torch.isnan(F.gelu(torch.tensor([[0.5, float("inf")], [-2.0, 1.5]]))[0, 1])
    _thunder_answering(monkeypatch, lambda t: torch.where(torch.isnan(t), float("inf"), t))
    assert check_program(_gelu_program(), skip={"symbolic", "second_call", "aliasing"})


def test_gelu_giving_nan_for_a_finite_value_stays_a_mismatch(monkeypatch):
    # (gelu(1.5), the one finite output above 1, NaN in thunder)
    _thunder_answering(monkeypatch, lambda t: torch.where(torch.isfinite(t) & (t > 1), float("nan"), t))
    with pytest.raises(Divergence) as info:
        check_program(_gelu_program(), skip={"symbolic", "second_call", "aliasing"})
    assert info.value.kind == "value"


# ------------------------------------------------ the gradient of one element of a complex tensor (pad of 0j)


def test_gradient_through_an_element_of_a_complex_view_as_eager():
    """Campaign 14042: the backward of ``select`` on a complex tensor pads its cotangent with ``0j``, which
    ``F.pad`` refused (it takes a real value)."""

    def fn(a):
        z = torch.view_as_complex(torch.ones(5, 2, dtype=torch.float64) + a.mean())
        return z.select(0, -1), z[1:3]

    def make():
        return (torch.randn(1, 3, dtype=torch.float64, requires_grad=True),)

    (ae,) = make()
    at = ae.detach().clone().requires_grad_()
    for out in (fn(ae), thunder.jit(fn)(at)):
        (out[0].abs() + out[1].real.sum() * out[1].imag.sum()).backward()
    torch.testing.assert_close(at.grad, ae.grad)
