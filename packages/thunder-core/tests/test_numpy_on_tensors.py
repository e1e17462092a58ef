"""NumPy on tensors inside ``thunder.jit`` (issue 27, 2f): NumPy calls are translated to torch operations.

Each test runs the same function eagerly and jitted: values, dtypes (NumPy's, which differ from torch's for
integers), shapes, gradients (cut by ``.numpy()`` in eager) and in-place effects must match, or the jitted call
is refused naming the user's line.
"""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.tracing.errors import TracingError

np = pytest.importorskip("numpy")


def _assert_same(actual, expected):
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (np.ndarray, np.generic)):  # (float sums may differ in the last bits: pairwise order)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same(a, e)
    else:
        assert actual == expected


def _ufuncs_and_functions(x):
    a = x.numpy()
    b = np.exp(a) + np.maximum(a, 0.5) * 2 - a / 3
    c = np.where(a > 0, a, -a) ** 2
    back = torch.from_numpy(b) + torch.as_tensor(np.sum(c, axis=1, keepdims=True)) + torch.tensor(np.mean(a))
    return (
        back,
        a.shape,
        a.dtype,
        a.ndim,
        b[1:, ::2],
        np.max(a, axis=0),
        np.argmax(a),
        np.std(a, axis=1, ddof=1),
        np.concatenate([a, b], axis=0).T,
        np.clip(a, -0.5, 0.5).reshape(-1),
        a.sum(),
        -a,
        abs(a) >= 0.5,
    )


def test_numpy_calls_on_a_tensor_are_translated():
    jf = thunder.jit(_ufuncs_and_functions)
    for _ in range(2):  # a new call with other values: the program computes them (no value baked in)
        x = torch.randn(3, 4)
        _assert_same(jf(x), _ufuncs_and_functions(x))
    assert thunder.cache_misses(jf) == 1


def _integer_dtypes(i, b):
    a = i.numpy()
    # NumPy: integers divide and average in float64, np.sqrt of int8 is float16, sums of int32/bool are int64
    return (
        a / 2,
        np.mean(a),
        np.sqrt(b.numpy()),
        np.sum(a),
        np.sum(a > 1),
        a // 2,
        torch.from_numpy(a * 3),
        a + np.float32(0.5),
        a + 0.5,
    )


def test_numpy_dtypes_are_numpys():
    i = torch.tensor([[1, 2, 3], [4, 5, 7]], dtype=torch.int32)
    b = torch.tensor([1, 4, 9], dtype=torch.int8)
    expected = _integer_dtypes(i, b)
    assert expected[0].dtype == np.float64 and expected[2].dtype == np.float16  # (what the test is about)
    _assert_same(thunder.jit(_integer_dtypes)(i, b), expected)


def _through_numpy(x, w):
    scale = torch.from_numpy(np.tanh(x.detach().numpy()))  # no gradient through NumPy, as in eager
    return (x * scale * w).sum()


def test_gradient_through_numpy_is_cut_as_in_eager():
    x = torch.randn(4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    expected = _through_numpy(x, w)
    expected_grads = torch.autograd.grad(expected, (x, w))
    actual = thunder.jit(_through_numpy)(x, w)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(torch.autograd.grad(actual, (x, w)), expected_grads):
        torch.testing.assert_close(a, e)


def test_numpy_of_a_tensor_that_requires_grad_is_eagers_error():
    def f(x):
        return torch.from_numpy(x.numpy())

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        f(x)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad") as info:
        thunder.jit(f)(x)
    assert "return torch.from_numpy(x.numpy())" in str(info.value)


def test_from_numpy_shares_the_tensors_values():
    # eager: torch.from_numpy(x.numpy()) is a new tensor over x's memory; updating it updates x
    def f(x):
        t = torch.from_numpy(x.numpy())
        t.add_(1)
        return t is x, t * 2

    x, y = torch.zeros(3), torch.zeros(3)
    expected = f(x)
    actual = thunder.jit(f)(y)
    _assert_same(actual, expected)
    torch.testing.assert_close(y, x)


def test_returned_array_is_a_real_ndarray():
    def f(x):
        return np.exp(x.numpy()), x.numpy()

    x = torch.randn(3)
    actual, expected = thunder.jit(f)(x), f(x)
    _assert_same(actual, expected)


@pytest.mark.parametrize(
    "body, what",
    [
        (lambda a: np.fft.rfft(a), "np.rfft"),
        (lambda a: np.add.reduce(a), "np.add.reduce"),
        (lambda a: float(np.sum(a)), "read an array's values"),
        (lambda a: np.asarray(a).tolist(), "read an array's values"),
        (lambda a: np.exp(a, out=a), "out="),
        (lambda a: a.__setitem__(0, 1.0), "update an array in place"),
        (lambda a: a.__iadd__(1.0), "update an array in place"),
    ],
    ids=["untranslated", "ufunc_method", "value", "tolist", "out", "setitem", "iadd"],
)
def test_numpy_without_a_translation_is_refused_naming_the_line(body, what):
    def f(x):
        return torch.as_tensor(body(x.numpy()))  # the line the error names

    with pytest.raises(TracingError, match=what) as info:
        thunder.jit(f)(torch.randn(4))
    assert "return torch.as_tensor(body(x.numpy()))" in str(info.value) or "lambda a:" in str(info.value)


@pytest.mark.parametrize("shape", [(1, 0), (2, 3)])
@pytest.mark.parametrize("convert", ["from_numpy", "as_tensor"])
def test_tensor_over_an_array_is_no_view_as_in_eager(convert, shape):
    # eager: the tensor shares the array's memory but has no _base (an empty one was returned as a view)
    def f(x):
        array = np.exp(x.detach().numpy() * 0.1)
        return getattr(torch, convert)(array), x

    x = torch.ones(shape, dtype=torch.float64)
    expected, _ = f(x)
    actual, returned = thunder.jit(f)(x)
    torch.testing.assert_close(actual, expected)
    assert actual._is_view() == expected._is_view() is False
    assert returned is x


def _numpy_reductions_to_a_number(x):
    a = x.numpy()
    return x + torch.as_tensor(np.mean(a)) + torch.as_tensor(np.sum(a)) * torch.as_tensor(np.std(a))


def test_numpy_reduction_to_a_number_runs_as_numpy_under_symbolic_sizes():
    """Campaign seed 14030: under ``cache="symbolic values"`` ``np.mean`` of a float32 array ran as ``torch.mean``,
    whose summation order rounds otherwise (one float32 step off NumPy's). A reduction to one number does not
    depend on the sizes for its shape, so NumPy itself runs it when the program runs. (A program calling NumPy is
    still traced once per shape: NumPy's dtype and shape are asked of it for the sizes as numbers.)"""
    jf = thunder.jit(_numpy_reductions_to_a_number, cache="symbolic values")
    g = torch.Generator().manual_seed(0)
    for shape in [(1, 1, 2, 3), (1, 1, 3, 5), (1, 1, 7, 4)]:
        x = torch.randn(shape, generator=g).permute(0, 2, 3, 1)  # (NumPy sums a non-contiguous array its own way)
        actual, expected = jf(x), _numpy_reductions_to_a_number(x)
        assert torch.equal(actual, expected), (shape, (actual - expected).abs().max())
