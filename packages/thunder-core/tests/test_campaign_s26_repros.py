"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14201..14215, session 26, with the generator's
``wide_inputs``: complex and narrow integer dtypes, sizes past 3, ranks 5 and 6) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view; where eager raises, thunder
raises too."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder

# ------------------------- gradients of complex tensors are PyTorch's (conjugate Wirtinger), not the real rules'


def _complex_matrix():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(3, 3, dtype=torch.complex128, generator=gen).requires_grad_(),)


@pytest.mark.parametrize(
    "fn",
    [
        torch.cos,  # (campaign 14201: cos of a permuted complex input)
        torch.exp,
        torch.tanh,
        torch.rsqrt,
        torch.reciprocal,
        lambda a: a * a,
        lambda a: a @ a,
        lambda a: a.pow(3),
        lambda a: a.expand(2, 3, 3) * a,
        lambda a: torch.logsumexp(a, 0),
    ],
    ids=["cos", "exp", "tanh", "rsqrt", "reciprocal", "mul", "matmul", "pow", "broadcast_mul", "logsumexp"],
)
def test_gradient_of_holomorphic_function_of_complex_input_is_eagers(fn):
    assert_as_eager(fn, _complex_matrix)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.abs(),  # (campaign 14202: thunder's backward called sign, which refuses complex numbers)
        lambda a: a / (a.abs() + 1),
        lambda a: a.prod(),
        lambda a: torch.angle(a) * a.real,
        lambda a: torch.sin(a.permute(1, 0)).sum(0),
    ],
    ids=["abs", "div_by_abs", "prod", "angle_times_real", "sin_of_permuted"],
)
def test_gradient_of_non_holomorphic_function_of_complex_input_is_eagers(fn):
    assert_as_eager(fn, _complex_matrix)


def test_gradient_of_real_input_through_complex_values_is_eagers():
    def fn(x):
        z = x * (1 + 2j)
        return torch.exp(z).abs() + (z * z).real

    assert_as_eager(fn, lambda: (torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True),))


# ------------------------- index_copy of a 0-d destination checks the index's and the source's dtypes as eager


def _index_copy_into_0d(a, b):  # (campaign 14201: a bfloat16 0-d destination, a float64 source)
    return torch.index_copy(a, 0, torch.tensor([0]), b)


def _index_copy_into_0d_with_int32_index(a, b):
    return torch.index_copy(a, 0, torch.tensor([0], dtype=torch.int32), b.to(a.dtype))


@pytest.mark.parametrize("fn", [_index_copy_into_0d, _index_copy_into_0d_with_int32_index])
@pytest.mark.parametrize(
    "dtypes", [(torch.bfloat16, torch.float64), (torch.int32, torch.int64), (torch.complex64, torch.float32)], ids=str
)
def test_index_copy_into_a_0d_tensor_refuses_dtypes_as_eager(fn, dtypes):
    assert_raises_as_eager(fn, lambda: (torch.tensor(1, dtype=dtypes[0]), torch.tensor(2, dtype=dtypes[1])))


def test_index_copy_into_a_0d_tensor_of_the_same_dtype_is_eagers():
    assert_as_eager(
        _index_copy_into_0d,
        lambda: (torch.tensor(1.0), torch.tensor(2.5, requires_grad=True)),
    )


# ------------------------- an argument copied into itself (x.copy_(x)) and then read by a gradient is saved at eager's
# version: the copy changes nothing but bumps the version, and eager's nodes after it save the bumped tensor


def _copied_into_itself_under_no_grad(w, x):  # (campaign 14204: an int64 argument)
    with torch.no_grad():
        x.copy_(x)
    return x * w


def _copied_into_itself(w, x):
    x.copy_(x)
    return x * w


def _read_then_copied_into_itself(w, x):  # (eager's node saved x before the bump: its backward refuses, so must ours)
    y = x * w
    with torch.no_grad():
        x.copy_(x)
    return y


@pytest.mark.parametrize("fn", [_copied_into_itself_under_no_grad, _copied_into_itself])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64], ids=str)
def test_argument_copied_into_itself_then_saved_backward_runs_as_eager(fn, dtype):
    def make():
        return torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True), torch.tensor([1, 3], dtype=dtype)

    assert_as_eager(fn, make)
    (w, x), (w2, x2) = make(), make()
    fn(w, x)
    thunder.jit(fn)(w2, x2)
    assert x2._version == x._version


def test_argument_saved_then_copied_into_itself_backward_refuses_as_eager():
    def make():
        return torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True), torch.tensor([1.0, 3.0])

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _read_then_copied_into_itself(*make()).sum().backward()
    actual = thunder.jit(_read_then_copied_into_itself)(*make())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        actual.sum().backward()


# ------------------------- a fusion region does not take over the write-back into an argument sharing its storage
# with another: the write would land before a later read of the other argument (campaign 14205, fused only)


def _read_of_one_view_then_write_through_another(a1, a2):
    v = a1[..., torch.tensor([0, -1, 0])]  # (an opaque read of a1, scheduled after the region)
    a2[0] = a1 + 1
    return v


def _views_of_one_storage():
    base = torch.tensor([[1.0579]]) * 1
    return base[0], base.mT


def test_write_through_an_argument_sharing_storage_stays_after_reads_of_the_other_in_fused_programs():
    from differential.check import _fusing_executors

    fused = thunder.jit(_read_of_one_view_then_write_through_another, executors=_fusing_executors())
    e_in, t_in = _views_of_one_storage(), _views_of_one_storage()
    expected = _read_of_one_view_then_write_through_another(*e_in)
    torch.testing.assert_close(fused(*t_in), expected)
    for t, e in zip(t_in, e_in):
        torch.testing.assert_close(t, e)
    assert_as_eager(_read_of_one_view_then_write_through_another, _views_of_one_storage)


# ------------------------- one expanded tensor given as two arguments and copied into itself runs as in eager: the
# first tracing, with a stand-in per argument, saw a copy between two tensors into an expanded one (campaign 14208)


def _copy_second_into_first(a, b):
    a.copy_(b)
    return a * 2, b[:1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64], ids=str)
def test_expanded_tensor_given_twice_copied_into_itself_runs_as_eager(dtype):
    def make():
        x = torch.tensor([1.5, -2.0], dtype=dtype)[:1].expand(6)
        return x, x

    assert_as_eager(_copy_second_into_first, make)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64], ids=str)
def test_expanded_view_requiring_grad_given_twice_copied_into_itself_runs_as_eager(dtype):
    def make():
        leaf = torch.tensor([1.5, -2.0], dtype=dtype, requires_grad=True)
        x = (leaf * 1)[:1].expand(6)
        return leaf, x

    (e_leaf, e_x), (t_leaf, t_x) = make(), make()
    expected = _copy_second_into_first(e_x, e_x)
    actual = thunder.jit(_copy_second_into_first)(t_x, t_x)
    for a, e in zip(actual, expected):
        assert (a.dtype, a.shape, a.requires_grad) == (e.dtype, e.shape, e.requires_grad)
        torch.testing.assert_close(a, e)
    # (the gradient reaches the leaf through the outputs: eager's backward of a copy into an expanded tensor)
    try:
        e_grad = torch.autograd.grad([torch.view_as_real(o.to(torch.complex128)).sum() for o in expected], e_leaf)
    except RuntimeError as refusal:
        with pytest.raises(RuntimeError, match=str(refusal).split(":")[0][:40]):
            torch.autograd.grad([torch.view_as_real(o.to(torch.complex128)).sum() for o in actual], t_leaf)
        return
    t_grad = torch.autograd.grad([torch.view_as_real(o.to(torch.complex128)).sum() for o in actual], t_leaf)
    torch.testing.assert_close(t_grad, e_grad)


def test_copy_between_two_arguments_into_an_expanded_one_still_refused_as_eager():
    def make():
        return torch.tensor([1.5]).expand(3), torch.tensor([1.0, 2.0, 3.0])

    assert_raises_as_eager(_copy_second_into_first, make)


# ------------------------- out= of a reduction or scan computes in the out= tensor's dtype, as eager's kernels do
# (a complex cumsum into a float64 tensor, campaign 14209): thunder refused the cast of its complex result


@pytest.mark.parametrize(
    "op",
    [
        lambda p, o: torch.cumsum(p, 0, out=o),
        lambda p, o: torch.cumprod(p, 0, out=o),
        lambda p, o: torch.sum(p, 0, out=o[0]),
        lambda p, o: torch.prod(p, 0, out=o[0]),
        lambda p, o: torch.mean(p, 0, out=o[0]),
    ],
    ids=["cumsum", "cumprod", "sum", "prod", "mean"],
)
@pytest.mark.parametrize(
    "dtypes", [(torch.complex128, torch.float64), (torch.float64, torch.int64), (torch.complex64, torch.int32)], ids=str
)
def test_out_of_a_reduction_of_another_dtype_computes_in_its_dtype_as_eager(op, dtypes):
    def fn(p, o):
        op(p, o)
        return o

    def make():
        return torch.tensor([1.5 + 2j, -0.5j, 2.75]).to(dtypes[0]), torch.zeros(3, dtype=dtypes[1])

    try:
        fn(*make())
    except RuntimeError:
        assert_raises_as_eager(fn, make)  # (mean into an integer tensor: refused by both)
        return
    assert_as_eager(fn, make, grads=False)


# ------------------------- cov and corrcoef of complex tensors run as eager's (their decompositions take real
# inputs; run opaquely, eager's kernel checks weights' values, which the meta device lacks): thunder raised a
# data-dependent error (campaign 14204, 14207, 14209, 14210)


@pytest.mark.parametrize(
    "fn",
    [
        torch.cov,
        lambda a: a.corrcoef(),
        lambda a: torch.cov(a.reshape(2, 2), correction=0),
        lambda a: torch.corrcoef(a.reshape(2, 2)) * 2,
        lambda a: torch.cov(a.reshape(2, 2), fweights=torch.tensor([1, 2])),
    ],
    ids=["cov", "corrcoef", "cov_rows", "corrcoef_rows", "cov_fweights"],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_covariance_of_complex_tensor_is_eagers(fn, requires_grad):
    def make():
        a = torch.tensor([1 + 2j, 3j, 1, 0.5 - 1j], dtype=torch.complex64)
        return (a.requires_grad_(requires_grad),)

    assert_as_eager(fn, make)


def test_covariance_of_a_complex_tensor_of_three_dims_is_refused_as_eager():
    def fn(a):
        return torch.cov(a)

    assert_raises_as_eager(fn, lambda: (torch.ones(2, 2, 1, dtype=torch.complex64),))


# ------------------------- as_strided of an argument sharing its storage with another, one requiring grad, reading
# storage elements past its own: a refusal naming the line, documented in docs/sharp_edges.md (campaign 14207)


def test_as_strided_past_an_aliased_argument_requiring_grad_is_a_documented_refusal():
    from differential.check import DocumentedRefusal, check_program
    from differential.programs import InputSpec, Program

    values = [-1.4, -0.7, -1.2, 1.1, 1.2, -2.0, -0.7, 2.3]
    program = Program(
        inputs=[
            InputSpec(values, torch.float32, True, view="{b}[2::3]"),
            InputSpec(None, torch.float32, True, alias="a0[..., :1]"),
        ],
        lines=["v0 = torch.as_strided(a1, (1,), (1,), storage_offset=0)", "v1 = a0 * 2"],
        outputs=["v1"],
    )
    with pytest.raises(DocumentedRefusal, match="<differential program>"):
        check_program(program)


# ------------------------- an op without a complex derivative (silu) refuses a complex argument requiring grad, as
# eager's autograd does at the call; without grad it runs


@pytest.mark.parametrize("requires_grad", [False, True])
def test_silu_of_complex_tensor_requiring_grad_is_refused_as_eager(requires_grad):
    def fn(a):
        return torch.nn.functional.silu(a) * 2

    def make():
        return (torch.tensor([0.5 + 1j, -1j], requires_grad=requires_grad),)

    if requires_grad:
        assert_raises_as_eager(fn, make)
    else:
        assert_as_eager(fn, make)


def test_inplace_silu_of_complex_tensor_requiring_grad_runs_with_eagers_gradient():
    # (eager lets the in-place form run and differentiates it by the real formula; campaign 14208, once complex
    # gradients were PyTorch's: thunder's backward re-ran the functional silu, which autograd refuses)
    def fn(a):
        b = a * 1
        torch.nn.functional.silu(b, inplace=True)
        return b

    assert_as_eager(fn, lambda: (torch.tensor([0.5 + 1j, -1j, 2 - 0.5j], requires_grad=True),))


def _restrided_then_read_through_the_other_name(a, b):  # (campaign 14212: the same tensor given twice)
    b.as_strided_((2, 2), (1, 2), storage_offset=1)
    return a + b.amax(0)


def test_tensor_given_twice_restrided_through_one_name_is_restrided_under_the_other_as_eager():
    def make():
        x = torch.tensor([[1.25, -0.75, -0.5], [1.0, 1.5, -0.25], [0.125, -0.5, 0.25]]).t().contiguous().t()
        return x, x

    assert_as_eager(_restrided_then_read_through_the_other_name, make)


# ------------------------- the 2-norm of a complex tensor is real in the trace too (its decomposition, sqrt(sum(x * x)),
# typed it complex: code reading its dtype, and out= of float dtype, saw another tensor than eager's)


@pytest.mark.parametrize(
    "fn",
    [
        lambda p: torch.zeros(2, dtype=p.norm().dtype) + p.norm(),
        lambda p: torch.linalg.vector_norm(p.detach(), out=torch.zeros(3, dtype=torch.float64)[0]),
        lambda p: torch.linalg.vector_norm(p, dim=0) * p.abs(),
    ],
    ids=["dtype_read", "out_float64", "times_abs"],
)
def test_norm_of_complex_tensor_is_real_as_eager(fn):
    assert_as_eager(fn, lambda: (torch.tensor([1 + 2j, 3j, 1], dtype=torch.complex128, requires_grad=True),))
