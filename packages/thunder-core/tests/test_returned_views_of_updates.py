"""An output that is a view of an input the program updates in place (``y.add_(1); return y.t()``) is, as in
eager, a view of the caller's tensor: a later write through the output reaches the input and the other way
round, and its values, ``requires_grad``, ``grad_fn`` presence and gradients (through the output and through
the updated input used after the call) are eager's. Issue 25, part 1."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.core import pytree


def _update_under_no_grad_then_view(y):
    with torch.no_grad():
        y.mul_(3)  # (invisible to autograd: y keeps its history)
    return y.t(), y[1]


_PROGRAMS = {
    "update_then_detached_view": lambda y: (y.add_(1), y.detach().t())[1],
    "update_under_no_grad_then_view": _update_under_no_grad_then_view,
    "add_then_t": lambda y: (y.add_(1), y.t())[1],
    "add_then_row_t": lambda y: (y.add_(1), y[0].t())[1],
    "mul_then_reshape_and_unsqueeze": lambda y: (y.mul_(2), (y.reshape(-1), y.unsqueeze(0)))[1],
    "row_update_then_t": lambda y: (y[0].mul_(3), y.t())[1],
    "update_then_diagonal_and_value": lambda y: (y.sub_(0.5), (y.diagonal(), y * 2))[1],
    "update_then_strided_slice": lambda y: (y.add_(y.detach() * 0 + 2), y[:, ::2])[1],
    "update_then_view_of_view": lambda y: (y.mul_(-1), y.t()[1:].unsqueeze(-1))[1],
}

_INPUTS = {
    "plain": lambda b: b,
    "offset_slice": lambda b: b[1:],
    "transpose": lambda b: b.t(),
    "column_slice": lambda b: b[:, 1:],
}


def _make(view, requires_grad: bool):
    leaf = torch.arange(16, dtype=torch.float64).reshape(4, 4).requires_grad_(requires_grad)
    base = leaf * 1 if requires_grad else leaf.clone()
    return leaf, base, view(base)


def _outputs(out) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _run(program, view, requires_grad: bool, jit: bool):
    leaf, base, y = _make(view, requires_grad)
    out = _outputs((thunder.jit(program) if jit else program)(y))
    storage = y.untyped_storage().data_ptr()
    facts = [(o.requires_grad, o.grad_fn is not None, o.untyped_storage().data_ptr() == storage) for o in out]
    grad = None
    if requires_grad:
        # gradients through every output and through the updated input used after the call
        loss = sum((o * (k + 2)).sum() for k, o in enumerate(out)) + (y * 10).sum()
        (grad,) = torch.autograd.grad(loss, leaf)
    return out, y, base, facts, grad


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("input_name", sorted(_INPUTS))
@pytest.mark.parametrize("program_name", sorted(_PROGRAMS))
def test_view_of_updated_input_matches_eager(program_name, input_name, requires_grad):
    program, view = _PROGRAMS[program_name], _INPUTS[input_name]
    e_out, e_y, e_base, e_facts, e_grad = _run(program, view, requires_grad, jit=False)
    t_out, t_y, t_base, t_facts, t_grad = _run(program, view, requires_grad, jit=True)
    for e, t in zip(e_out, t_out, strict=True):
        torch.testing.assert_close(t, e)
        assert t.dtype == e.dtype
    torch.testing.assert_close(t_y, e_y)
    torch.testing.assert_close(t_base, e_base)
    assert t_facts == e_facts
    if requires_grad:
        torch.testing.assert_close(t_grad, e_grad)
    # the outputs share the caller's storage exactly where eager's do: a write through each reaches the input
    # (values compared detached: the writes are made under no_grad, after the gradients)
    for e, t in zip(e_out, t_out):
        with torch.no_grad():
            e.mul_(7)
            t.mul_(7)
        torch.testing.assert_close(t_y.detach(), e_y.detach())
        torch.testing.assert_close(t_base.detach(), e_base.detach())
    # and a write into the input reaches the outputs
    with torch.no_grad():
        e_y.add_(100)
        t_y.add_(100)
    for e, t in zip(e_out, t_out):
        torch.testing.assert_close(t.detach(), e.detach())


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("input_name", ["plain", "offset_slice"])  # (view(-1) needs a contiguous input)
def test_flat_view_and_unsqueeze_of_updated_input_match_eager(input_name, requires_grad):
    def program(y):
        y.mul_(2)
        return y.view(-1), y.unsqueeze(0)

    view = _INPUTS[input_name]
    e_out, e_y, _, e_facts, e_grad = _run(program, view, requires_grad, jit=False)
    t_out, t_y, _, t_facts, t_grad = _run(program, view, requires_grad, jit=True)
    torch.testing.assert_close(t_out, e_out)
    assert t_facts == e_facts and all(shares for _, _, shares in t_facts)
    if requires_grad:
        torch.testing.assert_close(t_grad, e_grad)
    with torch.no_grad():
        t_out[0][0] = -1.0
        e_out[0][0] = -1.0
        t_out[1][0, -1, -1] = -3.0
        e_out[1][0, -1, -1] = -3.0
    torch.testing.assert_close(t_y.detach(), e_y.detach())


def test_returned_view_shares_the_callers_storage():
    def f(y):
        y.add_(1)
        return y.t()

    y = torch.randn(2, 3)
    out = thunder.jit(f)(y)
    assert out._base is y
    assert out.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    out.mul_(2)  # (no autograd here: eager allows the write)
    torch.testing.assert_close(y, out.t())


def test_returned_view_is_remade_on_every_call_with_the_new_callers_tensor():
    def f(y):
        y.mul_(2)
        return y[1:].t()

    jf = thunder.jit(f)
    for _ in range(3):
        y = torch.randn(3, 2)
        expected = f(y.clone())
        out = jf(y)
        torch.testing.assert_close(out, expected)
        assert out._base is y
    assert thunder.cache_misses(jf) == 1


def test_a_different_layout_of_the_input_recompiles():
    """The view is made again from the caller's storage where the trace found it: an input with other strides
    or another storage offset must not reuse that layout."""

    def f(y):
        y.add_(1)
        return y[0]

    jf = thunder.jit(f)
    first = torch.zeros(2, 3)
    torch.testing.assert_close(jf(first), f(torch.zeros(2, 3)))
    for make in (lambda b: b.t(), lambda b: b[1:]):
        y = make(torch.arange(12.0).reshape(3, 4).t().contiguous().t())
        expected = f(y.clone())
        out = jf(y)
        torch.testing.assert_close(out, expected)
        out.fill_(-5)
        assert (y[0] == -5).all()


def test_view_of_updated_module_buffer_is_a_view_of_the_buffer():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(2, 3))

        def forward(self, x):
            self.count.add_(x)
            return self.count.t()

    m = M()
    x = torch.ones(2, 3)
    out = thunder.jit(m)(x)
    expected = M()(x)
    torch.testing.assert_close(out, expected)
    out.mul_(4)
    torch.testing.assert_close(m.count, torch.full((2, 3), 4.0))


def test_aliasing_record_lists_the_returned_views():
    def f(y):
        y.add_(1)
        return y.t(), y * 2

    jf = thunder.jit(f)
    jf(torch.randn(2, 3))
    record = thunder.last_aliasing(jf)
    (view,) = record.returned_views
    assert view[1] == "y"
    trace = thunder.last_traces(jf)[-1]
    assert f"output {view[0]} is returned as a view of the caller's y" in str(trace)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
def test_view_of_arguments_sharing_a_storage_is_a_view_of_the_callers_tensor(requires_grad):
    """Arguments passed as views of one storage are read as copies when one requires grad; an output viewing
    that storage is still a view of the caller's tensor, with eager's gradient."""

    def f(a, b, c):
        return a[0], b * 2

    def run(jit: bool):
        a = torch.arange(18, dtype=torch.float64).reshape(2, 3, 3).requires_grad_(requires_grad)
        out = (thunder.jit(f) if jit else f)(a, a[0], a)
        shares = out[0].untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        grad = torch.autograd.grad((out[0] * 3).sum() + out[1].sum(), a) if requires_grad else None
        return out, shares, grad

    (e_out, e_shares, e_grad), (t_out, t_shares, t_grad) = run(False), run(True)
    torch.testing.assert_close(t_out, e_out)
    assert t_shares == e_shares is True
    assert t_out[0].requires_grad == e_out[0].requires_grad
    if requires_grad:
        torch.testing.assert_close(t_grad, e_grad)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
def test_view_of_an_input_copied_into_itself_stays_a_view(requires_grad):
    """``x.copy_(x)`` changes nothing in eager: a view taken before it is still a view of the caller's tensor
    (the differential fuzzer's campaign found it returned as a copy)."""

    def f(x):
        v = x.mT
        x.copy_(x)
        return v, x * 2

    def run(jit: bool):
        leaf = torch.tensor([[1.0, 0.0, -3.0], [-1.0, -2.0, -1.0]], dtype=torch.float64, requires_grad=requires_grad)
        x = leaf * 1 if requires_grad else leaf
        out = (thunder.jit(f) if jit else f)(x)
        shares = out[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        grad = torch.autograd.grad((out[0] * 3).sum() + out[1].sum(), leaf) if requires_grad else None
        return out, shares, grad

    (e_out, e_shares, e_grad), (t_out, t_shares, t_grad) = run(False), run(True)
    torch.testing.assert_close(t_out, e_out)
    assert t_shares == e_shares is True
    if requires_grad:
        torch.testing.assert_close(t_grad, e_grad)
