"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 16) found, each against eager."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from differential.functions import ScaleGrad

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
    # (seed 14001 after the first fix: in bfloat16 the gradient came out float32, which the gather's backward refused)
    "gathered rows": lambda x: x[torch.tensor([0, 0])].prod(-2),
    "gathered, full": lambda x: x[torch.tensor([1, 0, 1])].prod(),
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


@pytest.mark.parametrize("cache", [None, "symbolic values"])
@pytest.mark.parametrize("with_replacement", [False, True])
@pytest.mark.parametrize("r", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_combinations_has_the_size_eager_gives(n, r, with_replacement, cache):
    # campaign seed 14008 (5 programs): torch.combinations ran opaquely, its count unknown until run time (eager's
    # kernel selects with a mask), so a later `.numpy()` of it stopped the program; the count depends on the size only
    def fn(x):
        return torch.combinations(x * 2, r=r, with_replacement=with_replacement)

    def run(f):
        x = torch.arange(1, n + 1, dtype=torch.float64).requires_grad_()
        out = f(x)
        grad = torch.autograd.grad(out.sum(), x)[0] if out.requires_grad else None
        return out, grad, out.requires_grad, out._is_view()

    expected = run(fn)
    actual = run(thunder.jit(fn, **({} if cache is None else {"cache": cache})))
    torch.testing.assert_close(actual[:2], expected[:2])
    assert actual[2:] == expected[2:]


def _combinations_then_numpy(a0, a1):  # the campaign's program
    v0 = torch.combinations(torch.tensor([0.0], dtype=torch.float64) + a1.mean(), r=1, with_replacement=True)
    v2 = v0[..., torch.tensor([0, -1, 0])]
    return torch.from_numpy(np.where(v2.detach().numpy() > 0, v2.detach().numpy(), 0.5) / 3) * v2


def _numpy_of_a_masked_tensor(x):
    m = x[x > 0]
    a = m.detach().numpy()
    return torch.from_numpy(np.where(a > 1, a, 0.5) / 3) * m


def _numpy_stack_of_a_masked_tensor(x):
    m = x[x > 0]
    return torch.from_numpy(np.stack([m.detach().numpy(), m.detach().numpy() * 2]))


@pytest.mark.parametrize(
    "fn, make",
    [
        (_combinations_then_numpy, lambda: (torch.tensor(NAN, dtype=torch.float64),) * 2),
        (_combinations_then_numpy, lambda: (torch.tensor(1.5, dtype=torch.float64),) * 2),
        (_numpy_of_a_masked_tensor, lambda: (torch.tensor([1.5, -1.0, 0.5, 3.0], dtype=torch.float64),)),
        (_numpy_stack_of_a_masked_tensor, lambda: (torch.tensor([1.5, -1.0, 0.5, 3.0], dtype=torch.float64),)),
    ],
)
def test_numpy_calls_on_arrays_of_a_run_time_size_run_as_in_eager(fn, make):
    # NumPy's result dtype and shape are worked out on a stand-in array; a size known only at run time (a mask's)
    # stopped it with "needs whether  holds" (an empty condition); it now stands for any size
    torch.testing.assert_close(thunder.jit(fn)(*make()), fn(*make()), equal_nan=True)


def test_a_numpy_call_refused_on_a_run_time_size_names_the_line():
    def fn(x):
        m = x[x > 0]
        a = m.detach().numpy()
        return torch.from_numpy(np.where(a > 1, a, np.ones(2)))  # the line named

    x = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    fn(x)  # eager runs it
    with pytest.raises(thunder.tracing.errors.TracingError) as info:
        thunder.jit(fn)(x)
    message = str(info.value)
    assert "np.where" in message and "only known when the program runs" in message
    assert "the line named" in message


_MATMUL_SHAPES = [
    ((1, 0), (0, 0, 0)),
    ((1, 0), (2, 0, 3)),
    ((0, 3), (2, 3, 2)),
    ((2, 3), (2, 3, 0)),
    ((1, 3), (2, 3, 4)),
    ((2, 3), (2, 3, 1)),
    ((1, 3), (2, 2, 3, 1)),
    ((2, 3), (2, 3, 2)),
    ((4, 3), (1, 3, 4)),
    ((3,), (2, 3, 4)),
    ((2, 3, 4), (4, 1)),
]


def _layout(t):
    base = t._base
    return t._is_view(), tuple(t.stride()), None if base is None else (tuple(base.shape), tuple(base.stride()))


@pytest.mark.parametrize("intermediate", [False, True])
@pytest.mark.parametrize("a_grad, b_grad", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("shapes", _MATMUL_SHAPES, ids=str)
def test_matmul_returns_a_view_where_eager_does(shapes, a_grad, b_grad, intermediate):
    # campaign seed 14005 (2 programs): eager computes a 2-d `a` that requires grad times a batch `b` as
    # (b.mT @ a.t()).mT and keeps that transposed view where it is contiguous (an empty result, one row or one
    # column); inside the compiled program `a` (an intermediate) no longer requires grad, PyTorch did not fold, and
    # the output was no view
    def fn(a, b):
        if intermediate:
            a, b = a * 1, b * 1
        out = torch.matmul(a, b)
        return out, out.sum()

    def run(f):
        a = torch.arange(math.prod(shapes[0]), dtype=torch.float64).reshape(shapes[0]).requires_grad_(a_grad)
        b = torch.linspace(-1, 1, math.prod(shapes[1]), dtype=torch.float64).reshape(shapes[1]).requires_grad_(b_grad)
        out, total = f(a, b)
        grads = torch.autograd.grad(total, [t for t in (a, b) if t.requires_grad])
        return out, grads, _layout(out)

    expected, actual = run(fn), run(thunder.jit(fn))
    torch.testing.assert_close(actual[:2], expected[:2])
    assert actual[2] == expected[2]


def test_matmul_of_empty_tensors_after_roll_is_a_view_as_in_eager():
    # the campaign's program (seed 14005)
    def fn(x):
        v0 = x.mean(0, keepdim=True)
        v2 = torch.where(x > 0, x, 0.5 * x)
        v3 = torch.roll(torch.empty((0, 0, 0), dtype=torch.float64) + v0.mean(), 1, 2)
        return torch.matmul(v2, v3)

    def make():
        return torch.tensor([[]], dtype=torch.float64, requires_grad=True)

    expected = fn(make())
    for options in ({}, {"recompute": "reshapes"}):
        actual = thunder.jit(fn, **options)(make())
        torch.testing.assert_close(actual, expected)
        assert _layout(actual) == _layout(expected)


def _saved_output_updated_through_a_slice(a0):
    v0 = torch.exp(a0)
    v0[1:4].mul_(2)
    return v0


def _log_softmax_output_updated_through_a_view(a0):
    v0 = torch.nn.functional.log_softmax(a0, dim=0)
    v2 = v0[..., :3]
    v2.mul_(2)
    return v2


def _saved_input_updated(a0):
    v0 = a0 * 1
    v1 = torch.sin(v0)
    v0.add_(1)
    return v1 + v0


@pytest.mark.parametrize(
    "fn", [_saved_output_updated_through_a_slice, _log_softmax_output_updated_through_a_view, _saved_input_updated]
)
@pytest.mark.parametrize("cache", [None, "symbolic values"])
def test_a_backward_reading_a_saved_tensor_updated_in_place_raises_as_eager(fn, cache):
    # with cache="symbolic values" thunder skipped eager's check of saved tensors (any symbolic size) and computed a
    # gradient where eager's backward raises "modified by an inplace operation"
    def make():
        return torch.linspace(-1, 1, 20, dtype=torch.float64).requires_grad_()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fn(make()).sum().backward()
    jf = thunder.jit(fn, **({} if cache is None else {"cache": cache}))
    for _ in range(2):  # (the second call: the cached entry)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            jf(make()).sum().backward()


def _scale_grad_and_square(x):  # the campaign's program (seed 14006)
    return ScaleGrad.apply(x), torch.matmul(x, x)


def _square_then_scale(x):
    return x @ x, x * 3


def _bmm_square_then_scale(x):
    return torch.bmm(x, x), x * 3


_SHAPES = [(3, 3), (2, 3, 3), (1, 3, 3), (2, 2, 3, 3)]


@pytest.mark.parametrize(
    "fn, shape",
    [(f, s) for f in (_scale_grad_and_square, _square_then_scale) for s in _SHAPES]
    + [(_bmm_square_then_scale, s) for s in _SHAPES if len(s) == 3],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_gradients_of_one_tensor_accumulate_in_eagers_order_in_bfloat16(fn, shape):
    # campaign seed 14006 (2 programs): eager's torch.matmul of batches reaches the second argument's gradient first
    # (each argument has its own expand node, the second's made last); summing the first argument's first rounded
    # one bfloat16 element differently where x is both arguments and gets a third gradient
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        x0 = torch.randn(shape, generator=gen).bfloat16()
        cotangents = [torch.randn(shape, generator=gen).bfloat16() for _ in range(2)]

        def grad(f):
            x = x0.clone().requires_grad_()
            return torch.autograd.grad(f(x), x, cotangents)[0]

        assert torch.equal(grad(thunder.jit(fn)), grad(fn))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (log of negative values: NaN, as NumPy warns in eager)
@pytest.mark.parametrize(
    "ufunc", ["exp", "sqrt", "sin", "cos", "tanh", "log", "log1p", "expm1", "arctan", "exp2", "log10", "cosh"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
def test_numpy_ufuncs_on_a_tensors_array_give_numpys_own_values(ufunc, dtype):
    # campaign seed 14004 (2 programs): np.exp of a float32 array ran as torch.exp, whose float32 kernel rounds
    # otherwise than NumPy's (about a third of the values one step off); NumPy now runs it when the program runs
    def fn(x):
        a = x.detach().numpy()
        return torch.from_numpy(getattr(np, ufunc)(np.abs(a) * 0.5 + 0.25)), torch.as_tensor(getattr(np, ufunc)(a[0]))

    def make():
        return torch.linspace(-8, 8, 257, dtype=torch.float64).to(dtype).reshape(1, 257)

    expected, actual = fn(make()), thunder.jit(fn)(make())
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype and a.shape == e.shape
        assert torch.equal(a.nan_to_num(), e.nan_to_num())


def _exp_of_rounded_values(a0):  # the campaign's program (seed 14004)
    v0 = a0 + (torch.round(a0) - a0).detach()
    v2 = torch.from_numpy(np.exp(v0.float().detach().numpy() * 0.1))
    return torch.xlogy(v2.prod(), torch.tensor(0.717997213538933, dtype=torch.float64))


def test_numpy_exp_in_the_campaigns_program_matches_eager():
    def make():
        rows = [[-2.5, -1.0, 1.5], [0.5, -1.5, 0.5], [-0.0, 2.0, 0.5]]
        return torch.tensor(rows, dtype=torch.bfloat16, requires_grad=True) * 1

    assert thunder.jit(_exp_of_rounded_values)(make()).item() == _exp_of_rounded_values(make()).item()


def _numpy_reductions(x):
    a = x.detach().numpy()
    return (
        torch.as_tensor(np.sum(a)),
        torch.from_numpy(a.mean(axis=1, keepdims=True)),
        torch.from_numpy(np.std(a, ddof=1, axis=0)),
        torch.from_numpy(np.cumsum(a, axis=1)),
        torch.as_tensor(a.var()),
        torch.as_tensor(np.prod(a[:3, :5])),
    )


def test_numpy_reductions_on_a_tensors_array_give_numpys_own_values():
    # the same class as np.exp (campaign 14004): NumPy's pairwise float32 sums round otherwise than torch's
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0))
    for e, a in zip(_numpy_reductions(x), thunder.jit(_numpy_reductions)(x)):
        assert a.dtype == e.dtype and a.shape == e.shape
        assert torch.equal(a, e)


def _reshapes_of_an_input_view(a0, a1):  # the campaign's program (seed 14003 on this branch)
    v1 = a1.reshape(-1)
    v3 = v1.reshape(-1)
    return v3, v1


def _no_op_views(a0, a1):
    v1 = a1.reshape(-1)
    return v1.reshape(-1), v1, v1.view(-1), v1.view_as(v1), v1.flatten()


def _no_op_views_of_a_result(a0, a1):
    v1 = a0 * 2
    return v1, v1.view(a0.shape), v1.reshape(a0.shape), v1.flatten() if a0.ndim == 1 else v1


@pytest.mark.parametrize("fn", [_reshapes_of_an_input_view, _no_op_views, _no_op_views_of_a_result])
@pytest.mark.parametrize("grad", [False, True])
def test_views_that_change_no_shape_are_tensors_of_their_own_as_in_eager(fn, grad):
    # `v1.reshape(-1)` of a 1-d v1 holds v1's value: the program returned one object for both, where eager's
    # reshape and view give new tensors (flatten of a 1-d tensor is the tensor itself, in both)
    def make():
        a0 = torch.tensor([-0.5, 2.5, 0.0], dtype=torch.float64, requires_grad=grad)
        return a0, torch.tensor([[True, True, True], [False, False, False]])

    expected, actual = fn(*make()), thunder.jit(fn)(*make())
    torch.testing.assert_close(actual, expected)
    same = [[a is b for b in expected] for a in expected]
    assert [[a is b for b in actual] for a in actual] == same
    for e, a in zip(expected, actual):
        assert (a._is_view(), a.requires_grad) == (e._is_view(), e.requires_grad)
