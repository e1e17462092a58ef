"""One test per class the grown fuzzer (``grown_fuzz.py``) found, each against eager PyTorch on the same inputs.

Clear errors: data-dependent shapes that even PyTorch's fake tensors cannot describe (a 0-d boolean index)
raise thunder's ``DataDependentControlFlowError`` naming the user's line. Silent differences: the result type of
``addcmul`` on integer tensors, in-place layout changes under ``inference_mode``.
"""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.tracing.errors import DataDependentControlFlowError


def _same(actual, expected) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
        return
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.requires_grad == expected.requires_grad
    torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True)


# --- clear errors ---------------------------------------------------------------------------------


def _index_with_0d_mask(x, mask):
    picked = x[mask]  # the line the error names
    return picked * 2


def _index_with_0d_comparison(x):
    m = x.max()
    picked = m[m > 0]  # the line the error names
    return picked


@pytest.mark.parametrize("value", [True, False])
def test_0d_boolean_index_is_a_clear_data_dependent_error(value):
    x, mask = torch.randn(2, 3), torch.tensor(value)
    eager = _index_with_0d_mask(x, mask)  # eager: shape (1, 2, 3) or (0, 2, 3), known only from the value
    assert eager.shape == ((1, 2, 3) if value else (0, 2, 3))
    with pytest.raises(DataDependentControlFlowError, match=r"(?s)depends on tensor values.*picked = x\[mask\]"):
        thunder.jit(_index_with_0d_mask)(x, mask)


def test_0d_boolean_index_of_a_computed_tensor_is_a_clear_error():
    x = torch.tensor([1, -2, 3])
    assert _index_with_0d_comparison(x).tolist() == [3]
    with pytest.raises(DataDependentControlFlowError, match=r"(?s)depends on tensor values.*picked = m\[m > 0\]"):
        thunder.jit(_index_with_0d_comparison)(x)


def test_boolean_mask_of_the_same_rank_still_traces():
    def f(x, m):
        return x[m] * 2

    x = torch.randn(3, 2)
    m = x > 0
    _same(thunder.jit(f)(x, m), f(x, m))


# --- addcmul's value takes the tensors' result type ----------------------------------------------


@pytest.mark.parametrize("value", [0.1, 0.9, -1.7, 2, True])
def test_addcmul_value_is_cast_to_an_integer_result_type(value):
    def f(a, b):
        v = a.clone()
        v.addcmul_(b, b, value=value)
        return v, torch.addcmul(a, b, b, value=value), torch.addcmul(a.double(), b, b, value=value)

    a, b = torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([2, 3, -4])
    _same(thunder.jit(f)(a, b), f(a, b))


def test_addcmul_in_place_on_an_int_tensor_found_by_the_fuzzer():
    def f(a0):
        v0 = a0.int()
        v2 = a0[..., ::2].amin(0)
        v0.addcmul_(v2, v2, value=0.1)
        return a0, v0, v2

    a0 = torch.tensor([[[3], [-1], [4]]])
    _same(thunder.jit(f)(a0.clone()), f(a0.clone()))


# --- layout changes inside inference_mode -----------------------------------------------------------


def _inputs(kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if kind == "plain":
        return torch.randn(2, 3, generator=g)
    if kind == "transposed view":
        return (torch.randn(3, 2, generator=g) * 1).t()
    return torch.randn(2, 3, generator=g, requires_grad=True) * 1  # a non-leaf that requires grad


@pytest.mark.parametrize("kind", ["plain", "transposed view", "requires grad"])
@pytest.mark.parametrize("update", ["as_strided_", "t_", "unsqueeze_"])
def test_layout_change_inside_inference_mode(kind, update):
    def f(x):
        with torch.inference_mode():
            if update == "as_strided_":
                x.as_strided_((2,), (1,))
            elif update == "t_":
                x.t_()
            else:
                x.unsqueeze_(0)
        return x * 2

    e_in, t_in = _inputs(kind), _inputs(kind)
    expected = f(e_in)
    actual = thunder.jit(f)(t_in)
    _same(actual, expected)
    assert t_in.shape == e_in.shape and t_in.stride() == e_in.stride()
    torch.testing.assert_close(t_in.detach(), e_in.detach())


# --- views made without grad of a tensor that requires grad --------------------------------------


def _no_grad_view(a):
    with torch.no_grad():
        v = a.view(-1)
    return v, v * 2


def _inference_mode_transpose(a):
    with torch.inference_mode():
        v = a.transpose(0, -1)
    return v, v * 2


def _no_grad_index_of_a_non_leaf(a):
    b = a * 1
    with torch.no_grad():
        v = b[1:]
    return v, v * 2


def _no_grad_detach(a):
    with torch.no_grad():
        v = a.detach()
    return v, v * 2


def _inference_mode_product(a):
    with torch.inference_mode():
        v = a * 2
    return (v,)


@pytest.mark.parametrize(
    "fn",
    [_no_grad_view, _inference_mode_transpose, _no_grad_index_of_a_non_leaf, _no_grad_detach, _inference_mode_product],
    ids=lambda f: f.__name__.strip("_"),
)
@pytest.mark.parametrize("leaf", ["plain", "view of a base without grad"])
def test_view_made_without_grad_requires_grad_as_in_eager(fn, leaf):
    # eager: such a view requires grad when its base does (a leaf no gradient flows through), and so does what is
    # computed from it; the base of a leaf made by reshape(...).requires_grad_() is the reshaped tensor, without grad
    def make():
        t = torch.arange(8.0, dtype=torch.float64).reshape(4, 2)
        return (t.clone() if leaf == "plain" else t).requires_grad_()

    e_a, t_a = make(), make()
    expected, actual = fn(e_a), thunder.jit(fn)(t_a)
    _same(actual, expected)
    # no gradient reaches the argument through the view: eager gives none, thunder zeros
    if expected[-1].requires_grad:
        (e_grad,) = torch.autograd.grad(expected[-1].sum(), e_a, allow_unused=True)
        (t_grad,) = torch.autograd.grad(actual[-1].sum(), t_a, allow_unused=True)
        assert e_grad is None
        assert t_grad is None or not t_grad.any()


# --- empty index tensors of any dtype ---------------------------------------------------------------


@pytest.mark.parametrize(
    "x_shape, index_shape, index_dtype",
    [((0, 3), (0, 3), torch.float32), ((2, 3), (0, 3), torch.float64), ((2, 3), (2, 0), torch.bool)],
)
@pytest.mark.parametrize("op", ["gather", "scatter_add"])
def test_empty_index_of_any_dtype_as_in_eager(op, x_shape, index_shape, index_dtype):
    # eager checks the index's dtype only when it has elements
    def f(x, i):
        if op == "gather":
            return torch.gather(x, 0, i) * 2
        return x.scatter_add(0, i, x[: i.shape[0], : i.shape[1]]) * 2  # (src of the index's shape)

    def make():
        return torch.arange(float(torch.Size(x_shape).numel()), dtype=torch.float64).reshape(x_shape).requires_grad_()

    index = torch.zeros(index_shape, dtype=index_dtype)
    e_x, t_x = make(), make()
    expected, actual = f(e_x, index), thunder.jit(f)(t_x, index)
    _same(actual, expected)
    (e_grad,) = torch.autograd.grad(expected.sum(), e_x, allow_unused=True)
    (t_grad,) = torch.autograd.grad(actual.sum(), t_x, allow_unused=True)
    torch.testing.assert_close(t_grad, e_grad)


def test_non_empty_float_index_is_eager_error():
    x, index = torch.randn(2, 3), torch.zeros(1, 3)
    with pytest.raises(RuntimeError, match="gather"):
        torch.gather(x, 0, index)
    with pytest.raises(RuntimeError, match="gather"):
        thunder.jit(lambda x, i: torch.gather(x, 0, i))(x, index)
