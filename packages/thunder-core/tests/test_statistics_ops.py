"""``torch.cov``, ``torch.corrcoef`` and ``F.gaussian_nll_loss`` as torch-language composites: values,
dtypes and gradients against eager, eager's argument errors, and NaN where eager would read a tensor's values
to raise (negative weights or variances), which a trace cannot do."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from test_grad_semantics import assert_like_eager

import thunder


def _x(*shape, dtype=torch.float64, requires_grad=True):
    return torch.randn(shape, dtype=dtype, generator=_GEN).requires_grad_(requires_grad)


_GEN = torch.Generator().manual_seed(25)


# a 0-d input with weights is left out: eager itself fails on it (an in-place update of a view of a leaf)
_COV_CASES = [(s, w) for s in [(5,), (1, 4), (3, 4), (4, 3)] for w in ["none", "fweights", "aweights", "both"]]


@pytest.mark.parametrize(("shape", "weights"), [*_COV_CASES, ((), "none")], ids=str)
@pytest.mark.parametrize("correction", [0, 1, 2, 5])
def test_cov_matches_eager(shape, correction, weights):
    x = _x(*shape)
    n = x.shape[-1] if x.ndim else 1
    fw = torch.randint(0, 4, (n,), generator=_GEN, dtype=torch.int32) if weights in ("fweights", "both") else None
    aw = (
        torch.rand(n, generator=_GEN, dtype=torch.float64, requires_grad=True)
        if weights in ("aweights", "both")
        else None
    )
    if fw is not None:
        fw[0] = 2  # a nonzero sum (eager raises on a zero sum)

    def f(x, fw, aw):
        return torch.cov(x, correction=correction, fweights=fw, aweights=aw)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's "degrees of freedom is <= 0"
        if aw is None:
            assert_like_eager(lambda x: f(x, fw, None), x)
        else:  # the gradient reaches the aweights too
            assert_like_eager(lambda x, aw: f(x, fw, aw), x, aw)


def test_cov_of_integer_input_is_float_as_eager():
    x = torch.tensor([[1, 4, 2], [3, 3, 9]])
    expected = torch.cov(x)
    actual = thunder.jit(torch.cov)(x)
    assert actual.dtype == expected.dtype == torch.get_default_dtype()
    torch.testing.assert_close(actual, expected)


def test_cov_method_and_float32_with_float64_weights():
    x = torch.randn(2, 5, generator=_GEN)
    aw = torch.rand(5, generator=_GEN, dtype=torch.float64)
    expected = x.cov(aweights=aw)
    actual = thunder.jit(lambda x, aw: x.cov(aweights=aw))(x, aw)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input": torch.ones(2, 2, 2)}, "expected input to have two or fewer dimensions"),
        ({"fweights": torch.ones(1, 3, dtype=torch.int64)}, "expected fweights to have one or fewer dimensions"),
        ({"fweights": torch.ones(3)}, "expected fweights to have integral dtype"),
        ({"aweights": torch.ones(3, dtype=torch.int64)}, "expected aweights to have floating point dtype"),
        ({"aweights": torch.ones(4)}, "expected aweights to have the same numel"),
    ],
)
def test_cov_argument_errors_as_eager(kwargs, message):
    kwargs = {"input": torch.ones(2, 3), **kwargs}
    with pytest.raises(RuntimeError, match=message):
        torch.cov(**kwargs)
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(lambda input, **kw: torch.cov(input, **kw))(**kwargs)


@pytest.mark.parametrize("which", ["fweights", "aweights", "zero_sum"])
def test_cov_weights_eager_rejects_by_value_raise_eagers_error_when_the_program_runs(which):
    """Eager raises on negative weights and on weights summing to zero after reading their values. The trace
    cannot read them while tracing; the torch executor runs ``torch.cov`` itself, which raises eager's error."""
    x = torch.randn(2, 3, generator=_GEN)
    kwargs = {
        "fweights": {"fweights": torch.tensor([1, -1, 2])},
        "aweights": {"aweights": torch.tensor([1.0, -0.5, 2.0])},
        "zero_sum": {"fweights": torch.tensor([0, 0, 0])},
    }[which]
    message = "cannot be negative|sum to zero"
    with pytest.raises(RuntimeError, match=message):
        torch.cov(x, **kwargs)
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(lambda x, **kw: torch.cov(x, **kw))(x, **kwargs)


@pytest.mark.parametrize("shape", [(4,), (1, 4), (3, 5), (5, 3)], ids=str)
def test_corrcoef_matches_eager(shape):
    assert_like_eager(torch.corrcoef, _x(*shape))


def test_corrcoef_of_a_constant_row_is_nan_as_eager():
    x = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(thunder.jit(torch.corrcoef)(x), torch.corrcoef(x), equal_nan=True)
    one = torch.tensor([3.0, 3.0, 3.0])
    torch.testing.assert_close(thunder.jit(torch.corrcoef)(one), torch.corrcoef(one), equal_nan=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize(
    ("shape", "var_shape"),
    [((4, 3), (4, 3)), ((4, 3), (4,)), ((4, 3), (4, 1)), ((4, 3), (1, 3)), ((5,), ()), ((5,), (1,))],
    ids=["heteroscedastic", "per_row", "row_col", "one_row", "0d", "one"],
)
def test_gaussian_nll_loss_matches_eager(reduction, full, shape, var_shape):
    a, t = _x(*shape), _x(*shape)
    var = (_x(*var_shape, requires_grad=False).abs() + 0.1).requires_grad_()
    assert_like_eager(lambda a, t, v: F.gaussian_nll_loss(a, t, v, full=full, reduction=reduction), a, t, var)


def test_gaussian_nll_loss_variance_below_eps_is_clamped_but_passes_its_gradient():
    """Eager clamps a clone of ``var`` under ``no_grad``: the value is clamped, the gradient flows as if it was not."""
    a, t = _x(6), _x(6)
    var = torch.tensor([0.0, 1e-9, 1e-3, 0.5, 2.0, float("inf")], dtype=torch.float64, requires_grad=True)
    assert_like_eager(lambda a, t, v: F.gaussian_nll_loss(a, t, v, eps=1e-2, reduction="none"), a, t, var)


def test_gaussian_nll_loss_float_variance():
    a, t = _x(3, 2), _x(3, 2)
    assert_like_eager(lambda a, t: F.gaussian_nll_loss(a, t, 0.7, full=True), a, t)


@pytest.mark.parametrize(
    ("var", "kwargs", "message"),
    [
        (torch.ones(3), {}, "var is of incorrect size"),
        (torch.ones(4, 2), {}, "var is of incorrect size"),
        (torch.ones(4, 3), {"reduction": "max"}, "max is not valid"),
        (-1.0, {}, "var has negative entry"),
    ],
)
def test_gaussian_nll_loss_argument_errors_as_eager(var, kwargs, message):
    a, t = torch.ones(4, 3), torch.zeros(4, 3)
    with pytest.raises(ValueError, match=message):
        F.gaussian_nll_loss(a, t, var, **kwargs)
    with pytest.raises(ValueError, match=message):
        thunder.jit(lambda a, t: F.gaussian_nll_loss(a, t, var, **kwargs))(a, t)


def test_gaussian_nll_loss_negative_variance_tensor_raises_eagers_error_when_the_program_runs():
    """Eager raises after reading ``var``'s values; the torch executor runs ``F.gaussian_nll_loss`` itself."""
    a, t = torch.ones(3), torch.zeros(3)
    var = torch.tensor([1.0, -1.0, 2.0])
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(a, t, var)
    with pytest.raises(ValueError, match="var has negative entry"):
        thunder.jit(lambda a, t, v: F.gaussian_nll_loss(a, t, v, reduction="none"))(a, t, var)
