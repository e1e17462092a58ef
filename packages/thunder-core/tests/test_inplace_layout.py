"""In-place ops that change an input's sizes or strides (``unsqueeze_``, ``t_``, ``resize_``, ``set_`` ...):
after the call the caller's tensor has eager's sizes, strides, storage offset and values, on the first call
and on later calls with fresh tensors."""

from __future__ import annotations

import pytest
import torch

import thunder


def _layout(t: torch.Tensor):
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def _assert_same_tensor(got: torch.Tensor, expected: torch.Tensor, what: str, *, layout: bool = True) -> None:
    """Equal values, shape and dtype; with ``layout`` also strides and storage offset (a caller's tensor)."""
    if layout:
        assert _layout(got) == _layout(expected), (what, _layout(got), _layout(expected))
    assert got.shape == expected.shape and got.dtype == expected.dtype, (what, got, expected)
    assert torch.equal(got, expected), (what, got, expected)


def _unsqueeze(x, y):
    x.unsqueeze_(1)
    return x * 2


def _squeeze_then_write(x, y):
    x = x[:1]
    x.squeeze_(0)
    x.add_(10)
    return x + 1


def _t_then_write_row(x, y):
    x.t_()
    x[0].fill_(-1)
    return x * 1


def _transpose_then_read_view(x, y):
    v = x[1]
    x.transpose_(0, 1)
    x[0].mul_(3)
    return v + 0, x.shape


def _swapdims(x, y):
    x.swapdims_(0, 1)
    return x.sum(0)


def _resize_smaller(x, y):
    x.resize_(2, 2)
    x.add_(1)
    return x * 1


def _resize_as(x, y):
    x.resize_as_(y[:2])
    return x.sum()


def _set_other_input(x, y):
    x.set_(y)
    x.add_(1)
    return x * 2


def _set_computed(x, y):
    z = x * 3
    x.set_(z)
    x.sub_(1)
    return z * 1


def _as_strided(x, y):
    x.as_strided_((2, 2), (1, 3), 1)
    x.fill_(0)
    return x + 1


def _two_changes(x, y):
    x.t_()
    x.unsqueeze_(0)
    x[0, 1].zero_()
    return x * 1


CASES = [
    _unsqueeze,
    _squeeze_then_write,
    _t_then_write_row,
    _transpose_then_read_view,
    _swapdims,
    _resize_smaller,
    _resize_as,
    _set_other_input,
    _set_computed,
    _as_strided,
    _two_changes,
]


def _inputs():
    return torch.arange(12.0).reshape(3, 4), torch.arange(5.0) - 10


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__.strip("_"))
def test_layout_changing_inplace_on_inputs(fn):
    jfn = thunder.jit(fn)
    for call in range(2):  # the cached program must change the fresh tensors of a second call too
        expected_inputs, inputs = _inputs(), _inputs()
        expected = fn(*expected_inputs)
        got = jfn(*inputs)
        expected, got = (expected, got) if isinstance(expected, tuple) else ((expected,), (got,))
        for g, e in zip(got, expected):
            if isinstance(e, torch.Tensor):
                _assert_same_tensor(g, e, f"output (call {call + 1})", layout=False)
            else:
                assert g == e
        for i, (g, e) in enumerate(zip(inputs, expected_inputs)):
            _assert_same_tensor(g, e, f"input {i} after call {call + 1}")
    assert thunder.cache_misses(jfn) == 1


def test_resize_past_the_storage_keeps_the_prefix():
    def f(x):
        x.resize_(20)
        x[12:].fill_(7)
        return x[:12] * 1

    x, expected_x = torch.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    expected = f(expected_x)
    got = thunder.jit(f)(x)
    assert torch.equal(got, expected)
    assert _layout(x) == _layout(expected_x)
    assert torch.equal(x, expected_x)  # the 8 new elements were written by the program


def test_set_shares_storage_with_the_other_input():
    def f(x, y):
        x.set_(y)
        return x * 1

    x, y = _inputs()
    thunder.jit(f)(x, y)
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    y.add_(1)  # as in eager, x and y are now one tensor
    assert torch.equal(x, y)


class _Buffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.arange(6.0).reshape(2, 3))
        self.w = torch.nn.Parameter(torch.arange(4.0))

    def forward(self, x):
        self.b.t_()
        with torch.no_grad():
            self.w.unsqueeze_(0)
        return x + self.b, self.w * 1


def test_layout_changing_inplace_on_module_state():
    eager, jitted = _Buffers(), _Buffers()
    jm = thunder.jit(jitted)
    for call in range(2):
        x = torch.ones(3, 2) if call == 0 else torch.ones(2, 3)
        expected = eager(x)
        got = jm(x)
        for g, e in zip(got, expected):
            _assert_same_tensor(g.detach(), e.detach(), f"output (call {call + 1})", layout=False)
        _assert_same_tensor(jitted.b, eager.b, f"buffer after call {call + 1}")
        _assert_same_tensor(jitted.w.detach(), eager.w.detach(), f"parameter after call {call + 1}")
        assert isinstance(jitted.w, torch.nn.Parameter) and jitted.w.requires_grad


def test_layout_change_of_a_non_leaf_input_keeps_its_gradient_path():
    def f(x):
        x.t_()
        x.mul_(2)
        return x.sum(0)

    a_e, a_t = torch.arange(6.0).reshape(2, 3).requires_grad_(), torch.arange(6.0).reshape(2, 3).requires_grad_()
    x_e, x_t = a_e * 1, a_t * 1
    out_e, out_t = f(x_e), thunder.jit(f)(x_t)
    assert torch.equal(out_t.detach(), out_e.detach())
    _assert_same_tensor(x_t.detach(), x_e.detach(), "input after call")
    g = torch.arange(2.0) + 1
    (ge,) = torch.autograd.grad(out_e, a_e, g, retain_graph=True)
    (gt,) = torch.autograd.grad(out_t, a_t, g, retain_graph=True)
    assert torch.equal(gt, ge)
    (ge,) = torch.autograd.grad((x_e * g).sum(), a_e)
    (gt,) = torch.autograd.grad((x_t * g).sum(), a_t)
    assert torch.equal(gt, ge)


class _SavesItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def _t_then_sin(x):
    x.t_()
    return x.sin()


def _unsqueeze_then_square(x):
    x.unsqueeze_(0)
    return x * x


def _as_strided_then_sin(x):
    x.as_strided_((2, 3), (1, 0))
    return x.sin()


def _as_strided_then_function_saving_it(x):
    x.as_strided_((2, 3), (1, 0))
    return _SavesItsInput.apply(x)


@pytest.mark.parametrize(
    "fn", [_t_then_sin, _unsqueeze_then_square, _as_strided_then_sin, _as_strided_then_function_saving_it]
)
@pytest.mark.parametrize("expanded", [False, True])
def test_values_saved_after_a_layout_change_of_a_non_leaf_input(fn, expanded):
    """The step after the call restrides the caller's tensor, bumping its version, after the compiled forward saved
    values viewing it: the backward needs them as the forward read them, and autograd must not refuse them (eager
    saved them after the layout change)."""
    leaf = torch.randn((3,) if expanded else (4, 3), dtype=torch.float64, requires_grad=True)
    e_leaf = leaf.detach().clone().requires_grad_()

    def argument(a):
        base = a * 1
        return base.expand(4, 3) if expanded else base

    x, e_x = argument(leaf), argument(e_leaf)
    out, expected = thunder.jit(fn)(x), fn(e_x)
    _assert_same_tensor(out.detach(), expected.detach(), "output", layout=False)
    _assert_same_tensor(x.detach(), e_x.detach(), "input after call")
    assert x._version == e_x._version
    (g,) = torch.autograd.grad(out.sum(), leaf)
    (e_g,) = torch.autograd.grad(expected.sum(), e_leaf)
    torch.testing.assert_close(g, e_g)


def _add_under_inference_mode(x, y):
    with torch.inference_mode():
        x.add_(y)
    return x * 2


def _t_under_inference_mode(x, y):
    with torch.inference_mode():
        x.t_()
    return x * 2


def _set_under_inference_mode(x, y):
    with torch.inference_mode():
        x.set_(y)
    return x * 2


def _set_of_a_view_under_inference_mode(x, y):
    with torch.inference_mode():
        x[0].mul_(3)
        x.set_(y[:, :2])
    return x + 1


def _add_outside_inference_mode(x, y):
    x.add_(y)
    return x * 2


@pytest.mark.parametrize(
    "fn",
    [
        _add_under_inference_mode,
        _t_under_inference_mode,
        _set_under_inference_mode,
        _set_of_a_view_under_inference_mode,
        _add_outside_inference_mode,
    ],
)
def test_inplace_updates_of_an_inference_tensor_argument(fn):
    """An inference tensor takes in-place updates (values, layout, ``set_``) under ``inference_mode`` only, where
    the program's write-back and the step after the call make them too; outside it eager's error is raised."""
    with torch.inference_mode():
        x = torch.randn(2, 6, dtype=torch.float64)
        t_x, e_x = x.clone(), x.clone()
    y = torch.randn(2, 6, dtype=torch.float64)
    try:
        expected = fn(e_x, y)
    except RuntimeError as e:
        assert "inference tensor outside InferenceMode" in str(e)
        with pytest.raises(RuntimeError, match="inference tensor outside InferenceMode"):
            thunder.jit(fn)(t_x, y)
        return
    out = thunder.jit(fn)(t_x, y)
    _assert_same_tensor(out, expected, "output", layout=False)
    _assert_same_tensor(t_x, e_x, "input after call")
    assert t_x.is_inference()
    assert (t_x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()) == (
        e_x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    )


def _set_to_itself_then_zero(x):
    x.set_(x)
    x.zero_()
    return x * 2


def _t_twice(x):
    x.t_()
    x.t_()
    return x + 1


@pytest.mark.parametrize(
    "fn, requires_grad",
    # (eager's backward refuses a zero_ of an expanded tensor with grad)
    [(_set_to_itself_then_zero, False), (_t_twice, False), (_t_twice, True)],
)
def test_layout_ops_leaving_an_expanded_argument_as_it_was(fn, requires_grad):
    """``x.set_(x)`` writes no element and ``t_()`` twice gives the layout back: on an expanded ``x`` (whose elements
    share memory) eager allows both, so no write and no restriding step after the call (which would raise)."""
    leaf = torch.randn(3, dtype=torch.float64, requires_grad=requires_grad)
    e_leaf = leaf.detach().clone().requires_grad_(requires_grad)
    x, e_x = (leaf * 1).expand(3, 3), (e_leaf * 1).expand(3, 3)
    out, expected = thunder.jit(fn)(x), fn(e_x)
    _assert_same_tensor(out.detach(), expected.detach(), "output", layout=False)
    _assert_same_tensor(x.detach(), e_x.detach(), "input after call")
    assert requires_grad or x._version == e_x._version
    if requires_grad:  # (the caller's tensor keeps its history and version: eager's gets t_()'s, same gradients)
        (g,) = torch.autograd.grad(out.sum(), leaf)
        (e_g,) = torch.autograd.grad(expected.sum(), e_leaf)
        torch.testing.assert_close(g, e_g)
