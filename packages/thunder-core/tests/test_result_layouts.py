"""Eager's strides for the results of elementwise ops (``thunder/tracing/result_layouts.py``): ``y = x.t() * 2``
is a transposed tensor in eager, so ``y.reshape(-1)`` is a copy and ``y.contiguous()`` a new contiguous tensor.
Tracing used to take such a ``y`` as contiguous: an in-place update of its reshape then reached ``y`` (a silently
wrong value), and ``y.contiguous()`` returned ``y`` itself, transposed (issue 25)."""

from __future__ import annotations

import pytest
import torch

import thunder

# ways to get a strided tensor out of an elementwise op
STRIDED = {
    "transposed_mul": lambda x: x.t() * 2,
    "transposed_sin": lambda x: x.t().sin(),
    "sum_of_transposes": lambda x: x.t() + x.t(),
    "permuted": lambda x: x.unsqueeze(0).permute(2, 0, 1) * 3,
}
# an op reading another op's pending result is taken as contiguous (one meta run per answer, never a chain:
# result_layouts.py); eager's layout of these differs
CHAINED = {
    "chain_of_ops": lambda x: ((x.t() * 2).exp() - 1).tanh(),
    "where": lambda x: torch.where(x.t() > 0, x.t(), 0.5),
}


def _x():
    return torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)


@pytest.mark.parametrize("make", sorted(STRIDED))
def test_update_of_a_reshape_copy_does_not_reach_the_tensor(make):
    def fn(x):
        y = STRIDED[make](x)
        z = y.reshape(-1)  # a copy in eager: y is not contiguous
        z.add_(1)
        return y, z

    expected = fn(_x())
    actual = thunder.jit(fn)(_x())
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("make", sorted(STRIDED))
def test_contiguous_of_a_strided_result_is_contiguous(make):
    def fn(x):
        return STRIDED[make](x).contiguous()

    expected = fn(_x())
    actual = thunder.jit(fn)(_x())
    assert expected.is_contiguous() and actual.is_contiguous()
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)
    actual.view(-1)  # (a view of a transposed tensor would raise)


@pytest.mark.parametrize("make", sorted(CHAINED))
def test_contiguous_of_a_chained_strided_result_is_a_new_tensor(make):
    def fn(x):
        y = CHAINED[make](x)
        z = y.contiguous()  # a new tensor in eager (y is transposed)
        z.add_(1)
        return y

    torch.testing.assert_close(thunder.jit(fn)(_x()), fn(_x()))


def test_update_of_a_view_of_a_contiguous_result_still_reaches_it():
    def fn(x):
        y = x * 2  # contiguous: its reshape is a view
        y.reshape(-1)[0] = 7.0
        return y

    torch.testing.assert_close(thunder.jit(fn)(_x()), fn(_x()))


def test_strided_input_gives_strided_results():
    def fn(x):
        y = x.exp()  # x is transposed: so is y in eager
        z = y.view(-1) if y.is_contiguous() else y.reshape(-1)
        z.mul_(0)
        return y, y.stride()

    x = _x().t()
    (e, e_stride), (a, a_stride) = fn(x), thunder.jit(fn)(x)
    assert a_stride == e_stride
    torch.testing.assert_close(a, e)


def test_layout_change_in_place_after_a_strided_result():
    def fn(x):
        v = x * 1
        y = v.t() * 2  # strided like v.t() when made
        v.t_()  # v's layout changes afterwards: y keeps its own
        return y.reshape(-1).add_(1), y

    for a, e in zip(thunder.jit(fn)(_x()), fn(_x())):
        torch.testing.assert_close(a, e)


# --- outputs that are views of tensors the program computes (issue 25, class 4) ----------------------------------
# Eager returns a view of an intermediate (its _base is set, in-place updates of it with grad are allowed and
# reach the intermediate); an output of thunder's autograd node that is a view refused such an update.
VIEW_OUTPUTS = {
    "transpose": lambda x: (x.t() * 2).t(),
    "reshape_of_contiguous": lambda x: (x.t().contiguous() * 2).reshape(-1),
    "flatten_of_broadcast": lambda x: (x[:, :1] + torch.zeros(1, 3, dtype=x.dtype)).flatten(),
    "slice": lambda x: (x * 3)[:, 1:],
    "select": lambda x: (x * 3)[1],
    "reshape_same_shape": lambda x: (x[:, ::2] * 2).reshape(2, 2),  # eager: a view with the same sizes
    "reshape_copy": lambda x: (x.t() * 2).reshape(-1),  # eager: a fresh tensor (a copy of a strided one)
    "fresh": lambda x: x * 2,
}


def _call(fn, jit: bool, requires_grad: bool = True):
    leaf = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3).requires_grad_(requires_grad)
    return (thunder.jit(fn) if jit else fn)(leaf * 1 if requires_grad else leaf), leaf


@pytest.mark.parametrize("name", sorted(VIEW_OUTPUTS))
def test_output_view_relation_and_inplace_update_after_the_call(name):
    fn = VIEW_OUTPUTS[name]
    results = []
    for jit in (False, True):
        out, leaf = _call(fn, jit)
        is_view = out._base is not None
        out.mul_(2)  # allowed in eager with grad, on a view of an intermediate too
        (grad,) = torch.autograd.grad((out * out).sum(), leaf)
        results.append((is_view, out.detach(), out.stride(), grad))
    (e_view, e_out, e_stride, e_grad), (t_view, t_out, t_stride, t_grad) = results
    assert t_view == e_view
    assert t_stride == e_stride
    torch.testing.assert_close(t_out, e_out)
    torch.testing.assert_close(t_grad, e_grad)


def test_output_viewing_another_output_views_that_output():
    def fn(x):
        y = x * 2
        return y, y.t()

    (y, yt), leaf = _call(fn, jit=True)
    assert yt._base is y
    yt.add_(1)  # reaches y, as in eager
    (e_y, e_yt), e_leaf = _call(fn, jit=False)
    e_yt.add_(1)
    torch.testing.assert_close(y, e_y)
    (grad,) = torch.autograd.grad((y * yt.t()).sum(), leaf)
    (e_grad,) = torch.autograd.grad((e_y * e_yt.t()).sum(), e_leaf)
    torch.testing.assert_close(grad, e_grad)


@pytest.mark.parametrize("name", ["transpose", "slice", "reshape_copy"])
def test_output_view_relation_without_grad(name):
    fn = VIEW_OUTPUTS[name]
    (e, _), (t, _) = _call(fn, jit=False, requires_grad=False), _call(fn, jit=True, requires_grad=False)
    assert (t._base is None) == (e._base is None)
    assert not t.requires_grad
    torch.testing.assert_close(t, e)


def test_views_of_results_are_in_the_aliasing_record():
    jfn = thunder.jit(VIEW_OUTPUTS["transpose"])
    _call(jfn, jit=False)
    assert "is returned as a view of the program's" in str(thunder.last_traces(jfn)[0])


# --- the layout memo (layout_memo.py): a repeated op's layout is answered without a second meta run ---------

_MEMO_CASES = {
    "mul_transposed": (torch.mul, lambda: (torch.empty(3, 4, device="meta").t(), 2.0)),
    "add_broadcast_permuted": (
        torch.add,
        lambda: (torch.empty(2, 3, 4, device="meta").permute(2, 0, 1), torch.empty(1, 3, device="meta")),
    ),
    "pow_int_exponent": (torch.pow, lambda: (torch.empty(4, 3, dtype=torch.float64, device="meta").t(), 2)),
    "cat_of_strided": (
        torch.cat,
        lambda: ([torch.empty(2, 4, device="meta").t(), torch.empty(4, 3, device="meta")[:, 1:]], 1),
    ),
    "sdpa_transposed": (
        torch.nn.functional.scaled_dot_product_attention,
        lambda: tuple(torch.empty(2, 5, 4, 8, device="meta").transpose(1, 2) for _ in range(3)),
    ),
    "max_dim": (torch.max, lambda: (torch.empty(3, 4, device="meta").t(), 0)),
}


@pytest.mark.parametrize("case", sorted(_MEMO_CASES))
def test_a_remembered_layout_is_the_meta_runs(case, monkeypatch):
    from thunder.tracing import layout_memo
    from thunder.tracing.views import run_on_shadows

    func, make = _MEMO_CASES[case]
    runs = []

    def counted(*a):
        runs.append(None)
        return run_on_shadows(*a)

    monkeypatch.setattr(layout_memo, "run_on_shadows", counted)
    monkeypatch.setattr(layout_memo, "_memo", {})
    expected = run_on_shadows(func, make(), {})
    first, again = layout_memo.layout_run(func, make(), {}), layout_memo.layout_run(func, make(), {})
    assert len(runs) == 1  # (the second answer is remembered)
    for got in (first, again):
        got, want = (got, expected) if isinstance(expected, tuple) else ((got,), (expected,))
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert (g.shape, g.stride(), g.dtype, g.device) == (w.shape, w.stride(), w.dtype, w.device)


def test_the_layout_memo_tells_layouts_dtypes_and_scalars_apart(monkeypatch):
    from thunder.tracing import layout_memo

    monkeypatch.setattr(layout_memo, "_memo", {})
    x = torch.empty(3, 4, device="meta")
    answers = [
        layout_memo.layout_run(torch.mul, (x.t(), 2), {}),
        layout_memo.layout_run(torch.mul, (x.t().contiguous(), 2), {}),
        layout_memo.layout_run(torch.mul, (x.t().double(), 2), {}),
        layout_memo.layout_run(torch.mul, (x.t(), 2.5), {}),
        layout_memo.layout_run(torch.mul, (x.t().int(), 2.5), {}),  # (a float scalar makes an int tensor's float)
    ]
    with torch._C.DisableTorchFunction():
        expected = [x.t() * 2, x.t().contiguous() * 2, x.t().double() * 2, x.t() * 2.5, x.t().int() * 2.5]
    for got, want in zip(answers, expected):
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)


def test_repeated_layers_give_eagers_layouts_through_the_memo():
    # (the same transposed elementwise chain in each layer: the later layers' layouts come from the memo)
    def fn(x):
        outs = []
        for k in range(3):
            y = (x.t() * (k + 1)).sin()
            z = y.reshape(-1)  # a copy: y is transposed
            z.add_(1)
            outs += [y, z, y.contiguous()]
        return outs

    expected, actual = fn(_x()), thunder.jit(fn)(_x())
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride()


def test_the_layout_memo_holds_no_function_of_the_users(monkeypatch):
    from thunder.tracing import layout_memo

    monkeypatch.setattr(layout_memo, "_memo", {})
    x = torch.empty(3, 4, device="meta").t()
    for _ in range(2):
        out = layout_memo.layout_run(lambda a: a * 2, (x,), {})
        assert out.stride() == (x * 2).stride()
    assert not layout_memo._memo
