"""Repros of session 26's classes (lead engineer): ``out=`` tensors whose dtype is the computation's, and errors a
kernel raises while the compiled program runs, which name the user's line."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder

# ------------------------------------------ out= whose dtype eager computes in, where no dtype= is given (factories,
# sums, means, cumulative sums): the call without out= computed in the default or the input's dtype, then the cast
# into out was refused (float into int) or rounded differently (a float32 mean cast to float64)


def _out(shape, dtype):
    return torch.empty(shape, dtype=dtype)


_DTYPE_FROM_OUT = {
    "linspace_int": lambda x: torch.linspace(0, 10, 5, out=_out(5, torch.int64)),
    "linspace_int32_negative": lambda x: torch.linspace(-1.5, 2.5, 7, out=_out(7, torch.int32)),
    "logspace_int": lambda x: torch.logspace(0, 2, 3, out=_out(3, torch.int64)),
    "arange_fractional_step_int": lambda x: torch.arange(0, 3, 0.5, out=_out(6, torch.int64)),
    "arange_int_into_float": lambda x: torch.arange(0, 3, out=_out(3, torch.float64)),
    "full_float_into_int": lambda x: torch.full((2,), 1.7, out=_out(2, torch.int64)),
    "full_into_bool": lambda x: torch.full((2,), 2, out=_out(2, torch.bool)),
    "zeros_int": lambda x: torch.zeros(2, out=_out(2, torch.int64)),
    "ones_int32": lambda x: torch.ones(2, out=_out(2, torch.int32)),
    "eye_int": lambda x: torch.eye(2, out=_out((2, 2), torch.int64)),
    "sum_float_into_int": lambda x: torch.sum(x, 0, out=_out((), torch.int64)),
    "sum_float_into_bool": lambda x: torch.sum(x, 0, out=_out((), torch.bool)),
    "nansum_float_into_int": lambda x: torch.nansum(x, 0, out=_out((), torch.int64)),
    "prod_float_into_int": lambda x: torch.prod(x, 0, out=_out((), torch.int64)),
    "mean_float32_into_float64": lambda x: torch.mean(x, 0, out=_out((), torch.float64)),
    "mean_float_into_int": lambda x: torch.mean(x, 0, out=_out((), torch.int64)),
    "nansum_float32_into_float64": lambda x: torch.nansum(x, 0, out=_out((), torch.float64)),
    "cumsum_int_into_float": lambda x: torch.cumsum(x.long(), 0, out=_out(3, torch.float64)),
    "cumsum_float_into_int": lambda x: torch.cumsum(x, 0, out=_out(3, torch.int64)),
    "cumprod_float_into_int": lambda x: torch.cumprod(x, 0, out=_out(3, torch.int64)),
    "sum_with_dtype_given": lambda x: torch.sum(x, 0, dtype=torch.float64, out=_out((), torch.float64)),
}


@pytest.mark.parametrize("name", sorted(_DTYPE_FROM_OUT))
def test_out_whose_dtype_eager_computes_in_gives_eagers_answer(name):
    fn = _DTYPE_FROM_OUT[name]

    def make():
        return (torch.tensor([0.1, 1.7, 2.6], dtype=torch.float32),)

    try:
        fn(*make())
    except Exception:  # noqa: BLE001 - eager refuses: thunder raises the same error
        assert_raises_as_eager(fn, make, names_file="test_campaign_s26_lead_repros.py")
        return
    assert_as_eager(fn, make, grads=False)


def test_out_of_a_float_mean_sums_in_the_outs_dtype():
    # (the difference is below assert_close's float32 tolerance, so compared exactly)
    x = torch.tensor([0.1, 0.2, 0.3])

    def fn(x):
        return torch.mean(x, 0, out=torch.empty((), dtype=torch.float64))

    assert thunder.jit(fn)(x).item() == fn(x).item()


# ------------------------------------ an error a kernel raises while the program runs names the user's line (eager's
# traceback shows it; thunder's showed the generated program's line only)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: torch.index_select(x * 2, 0, i),
        lambda x, i: (x.sin() * 1)[i] + 1,
        lambda x, i: F.embedding(i, x[:, None] * 1),
        lambda x, i: torch.arange(0, 3, 0.5, out=torch.empty(6, dtype=torch.int64)) + i,
    ],
    ids=["index_select", "getitem", "embedding", "arange_step_truncated_to_zero"],
)
@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (BaseException.add_note) need Python 3.11")
def test_kernel_error_while_the_program_runs_names_the_users_line(fn):
    def make():
        return torch.tensor([0.5, 1.5, -1.0], requires_grad=True), torch.tensor([7])

    error = assert_raises_as_eager(fn, make, names_file="test_campaign_s26_lead_repros.py")
    # (once: the note is not added again on the way out of a nested call)
    assert sum("test_campaign_s26_lead_repros.py" in n for n in error.__notes__) == 1


class _GradientOutOfBounds(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g[torch.tensor([7, 0, 1])]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes (BaseException.add_note) need Python 3.11")
def test_kernel_error_while_the_backward_runs_names_the_users_line():
    def fn(x):
        return _GradientOutOfBounds.apply(x).sum()

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(IndexError) as expected:
        fn(x).backward()
    out = thunder.jit(fn)(x)
    with pytest.raises(IndexError) as actual:
        out.backward()
    assert str(actual.value) == str(expected.value)
    (note,) = actual.value.__notes__
    assert "test_campaign_s26_lead_repros.py" in note and "g[torch.tensor([7, 0, 1])]" in note


# ---------------------------------------- a matrix product of two dtypes: eager's words, which name the dtypes as the
# kernel matmul dispatches to does (thunder printed its own dtype names: "dtypes.bfloat16 != dtypes.float32")


def _half(*shape):
    return torch.ones(*shape, dtype=torch.float16)


def _float(*shape):
    return torch.ones(*shape)


_MIXED_PRODUCTS = {
    "mm": (torch.mm, lambda: (_half(2, 2), _float(2, 2))),
    "matmul_batched": (torch.matmul, lambda: (_half(3, 2, 2), _float(2, 2))),
    "matmul_dot": (torch.matmul, lambda: (_half(2), _float(2))),
    "matmul_mv": (torch.matmul, lambda: (_float(2, 2), _half(2))),
    "matmul_vector_batch": (torch.matmul, lambda: (_half(2), _float(3, 2, 2))),
    "linear": (F.linear, lambda: (_half(2, 2), _float(2, 2))),
    "linear_weight_half": (F.linear, lambda: (_float(3, 2, 2), _half(2, 2))),
    "linear_vector_weight": (F.linear, lambda: (_half(2, 2), _float(2))),
    "linear_bias_half": (F.linear, lambda: (_float(2, 2), _float(2, 2), _half(2))),
    "linear_input_half_with_bias": (F.linear, lambda: (_half(3, 2, 2), _float(2, 2), _float(2))),
    "bf16_int64": (torch.mm, lambda: (torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.int64))),
}


@pytest.mark.parametrize("name", sorted(_MIXED_PRODUCTS))
def test_matrix_product_of_two_dtypes_raises_eagers_error(name):
    op, make = _MIXED_PRODUCTS[name]

    def fn(*args):
        return op(*args)

    assert_raises_as_eager(fn, make, names_file="test_campaign_s26_lead_repros.py")


# ------------------------ an argument that retains its gradient, updated in place by the function: autograd's own
# bookkeeping failed an internal assert ("out != nullptr"); the gradient eager retains there cannot reach it, so the
# call is refused, naming the argument


def _scaled_in_place(y):
    y.mul_(3)
    return y * 2


def test_update_of_an_argument_retaining_its_gradient_is_refused_naming_it():
    x = torch.randn(2, 3, requires_grad=True)
    y = x * 1
    y.retain_grad()
    with pytest.raises(RuntimeError, match="updates its argument 'y' in place, and that tensor retains its gradient"):
        thunder.jit(_scaled_in_place)(y)
    torch.testing.assert_close(y, x)  # (refused before the update ran)


def test_update_without_grad_of_an_argument_retaining_its_gradient_runs_as_eager():
    def fn(y):
        with torch.no_grad():
            y.mul_(3)
        return y * 2

    grads = []
    for f in (fn, thunder.jit(fn)):
        x = torch.ones(2, 3, requires_grad=True)
        y = x * 1
        y.retain_grad()
        f(y).sum().backward()
        grads.append((y.grad, x.grad))
    torch.testing.assert_close(grads[1], grads[0])
