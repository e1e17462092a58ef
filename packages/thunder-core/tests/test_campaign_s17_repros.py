"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 17) found, each against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _run(fn, make_inputs, grad_of=()):
    """``fn``'s outputs on fresh inputs and the gradients of their sum to ``grad_of`` (input indices), or the
    exception it raised."""
    args = make_inputs()
    try:
        out = fn(*args)
        leaves = [args[i] for i in grad_of]
        grads = ()
        if leaves:
            total = sum(o.sum() for o in out if o.requires_grad)
            grads = torch.autograd.grad(total, leaves, allow_unused=True)
        return out, grads
    except RuntimeError as e:
        return e


def _assert_same(expected, actual):
    if isinstance(expected, Exception):
        assert isinstance(actual, Exception), f"eager raised {expected!r}, thunder ran"
        return
    assert not isinstance(actual, Exception), f"thunder raised {actual!r}, eager ran"
    (eo, eg), (ao, ag) = expected, actual
    assert len(eo) == len(ao)
    for e, a in zip(eo, ao):
        assert a.dtype == e.dtype and a.shape == e.shape and a.requires_grad == e.requires_grad
        torch.testing.assert_close(a, e, equal_nan=True)
    for e, a in zip(eg, ag):
        assert (e is None) == (a is None)
        if e is not None:
            torch.testing.assert_close(a, e, equal_nan=True)


# ---------------------------------------------------------------- run-time sizes in broadcasts


def _unique_then_floor_divide(a0):  # the campaign's program (seed 14005)
    v0 = torch.unique(torch.tensor(-4.8, dtype=torch.float64) + a0.mean(), sorted=False)
    return (a0 // (v0.flatten().abs() + 1),)


def _masked_times_square(x, m, y):
    v = x[m]  # a run-time size, 1 or 3 where eager runs
    return ((y * v + v.unsqueeze(-1)).sin(),)


def _masked_plus_row(x, m, y):
    return (y[0] + x[m],)


@pytest.mark.parametrize("mask", [[True, False, False], [True, True, True], [False, True, False], [True, True, False]])
@pytest.mark.parametrize("fn", [_masked_times_square, _masked_plus_row])
def test_a_run_time_size_broadcast_against_a_fixed_one_runs_as_eager(fn, mask):
    # seed 14005: `a0 // unique(...)` broadcast a run-time size u0 against 3: the trace took the result's size to be
    # u0, and the gradient's reshape back to (3, 3) raised deep inside thunder. The result has the fixed size whether
    # u0 is 1 or equal to it; the gradient sums to u0 at run time.
    def make():
        x = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
        y = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
        return x, torch.tensor(mask), y

    _assert_same(_run(fn, make, (0, 2)), _run(thunder.jit(fn), make, (0, 2)))


def test_unique_then_a_broadcast_runs_as_eager():
    def make():
        return (torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_(),)

    _assert_same(_run(_unique_then_floor_divide, make), _run(thunder.jit(_unique_then_floor_divide), make))


def _nonzero_out_added_in_place(a2):  # the campaign's program (seed 14003)
    v0 = torch.tensor(-4.8, dtype=torch.float64) + a2.mean()
    v0.cosh_()
    v1 = torch.empty((0, 0), dtype=torch.int64)
    torch.nonzero(v0, as_tuple=False, out=v1)
    v3 = a2.clone()
    v3.add_(v1, alpha=-1)
    return (v3,)


def _nonzero_added_in_place(x, m):
    v = x * 1
    v.add_(torch.nonzero(m), alpha=-1)
    return (v,)


def test_an_in_place_update_by_a_run_time_size_runs_as_eager():
    # seed 14003: `v3.add_(nonzero(...))` with v3 of size 1: thunder asked whether u0 == 1 while tracing and refused
    def make():
        return (torch.ones(1, 0, dtype=torch.float16),)

    _assert_same(_run(_nonzero_out_added_in_place, make), _run(thunder.jit(_nonzero_out_added_in_place), make))


@pytest.mark.parametrize("mask", [[[0, 1], [0, 0]], [[1, 1], [0, 0]], [[0, 0], [0, 0]]])
def test_an_in_place_update_broadcasting_a_run_time_size_runs_or_raises_as_eager(mask):
    def make():
        return torch.ones(1, 2, dtype=torch.float64, requires_grad=True), torch.tensor(mask)

    _assert_same(_run(_nonzero_added_in_place, make, (0,)), _run(thunder.jit(_nonzero_added_in_place), make, (0,)))


# ---------------------------------------------------------------- out= calls whose arguments require grad


def _linspace_out_then_relu6(a2):  # the campaign's program (seed 14006)
    v0 = torch.empty((0,), dtype=torch.float64)
    torch.linspace(torch.tensor(-2.0) + a2.mean(), torch.tensor(-3), 0, dtype=torch.float64, device="cpu", out=v0)
    return (torch.nn.functional.relu6(v0),)


_OUT_FORMS = {
    "linspace": lambda s, o: torch.linspace(s, 3.0, 4, out=o),
    "linspace, both ends": lambda s, o: torch.linspace(s, s * 2, 5, out=o),
    "logspace": lambda s, o: torch.logspace(s, 3.0, 4, out=o),
    "arange": lambda s, o: torch.arange(0, 4, out=o),
    "expand_copy (seed 14001)": lambda s, o: torch.expand_copy(s.reshape(1), (3,), out=o),
    "diagonal_copy": lambda s, o: torch.diagonal_copy(s.expand(2, 2), out=o),
    "add": lambda s, o: torch.add(s, s, out=o),
    "cat": lambda s, o: torch.cat([s.unsqueeze(0), s.unsqueeze(0)], out=o),
    "mul by a number": lambda s, o: torch.mul(s, 2, out=o),
    "sin": lambda s, o: torch.sin(s, out=o),
}


@pytest.mark.parametrize("form", list(_OUT_FORMS))
def test_out_calls_with_arguments_requiring_grad_match_eager(form):
    # seed 14006: `torch.linspace(start, ..., out=v0)` with a start requiring grad: eager's v0 requires grad (its
    # backward raises: no derivative for linspace), thunder's did not; add/cat/sin out= raise in both
    def fn(a, body=_OUT_FORMS[form]):
        o = torch.empty((0,), dtype=torch.float32)
        r = body(a.mean(), o)
        return r * 1, o

    def make():
        return (torch.linspace(-1, 1, 3, requires_grad=True),)

    expected, actual = _run(fn, make), _run(thunder.jit(fn), make)
    _assert_same(expected, actual)
    if isinstance(expected, Exception) or not expected[0][0].requires_grad:
        return
    errors = []
    for out in (expected[0], actual[0]):
        with pytest.raises(RuntimeError, match="not implemented") as info:
            out[0].sum().backward()
        errors.append(str(info.value))
    # (thunder's names the line too)
    assert errors[1].split(" (eager's backward raises this too)")[0] == errors[0]


def test_linspace_out_in_the_campaigns_program_matches_eager():
    def make():
        return ((torch.tensor([[]], dtype=torch.bfloat16, requires_grad=True) * 1)[0:1].expand(3, -1),)

    _assert_same(_run(_linspace_out_then_relu6, make), _run(thunder.jit(_linspace_out_then_relu6), make))


# ---------------------------------------------------------------- results saved by in-place ops, updated later

_INPLACE_THEN_UPDATE = {
    "relu_, hardswish_ (seed 14001)": lambda v: (F.relu(v, inplace=True), F.hardswish(v, inplace=True)),
    "sigmoid_, mul_": lambda v: (v.sigmoid_(), v.mul_(2)),
    "exp_, index assignment": lambda v: (v.exp_(), v.__setitem__(0, 1.0)),
    "tanh_, through a view": lambda v: (v.tanh_(), v[1:].add_(1)),
    "mul_ by a number, add_": lambda v: (v.mul_(2), v.add_(1)),
    "add_ of a tensor, mul_": lambda v: (v.add_(v.detach()), v.mul_(3)),
    "sin_ then read only": lambda v: (v.sin_(), v * 2),
    "remainder_ by itself (seed 14008)": lambda v: (v.remainder_(v),),
    "mul_ by itself": lambda v: (v.mul_(v),),
    "div_ by itself": lambda v: (v.div_(v),),
    "add_ of itself": lambda v: (v.add_(v),),
    "softmax, sigmoid_ of an empty tensor (seed 14003)": lambda v: (v[:0].softmax(-1).sigmoid_(),),
}


@pytest.mark.parametrize("form", list(_INPLACE_THEN_UPDATE))
def test_a_result_an_in_place_op_saved_then_updated_makes_the_backward_raise_as_eager(form):
    # seed 14001 with the backward check (eager's backward raises, thunder's must): `F.relu(v0, inplace=True)` saves
    # its result, which `F.hardswish(v0, inplace=True)` then updates: eager's backward raises, thunder's computed a
    # gradient (in-place calls were never noted as saving anything)
    def fn(a0, body=_INPLACE_THEN_UPDATE[form]):
        v0 = a0 * 2
        made = body(v0)[0]
        return (made if made is not None and made.numel() == 0 else v0,)

    outcomes = []
    for f in (fn, thunder.jit(fn)):
        a0 = torch.tensor([0.1, -0.3, -1.6], requires_grad=True)
        try:
            f(a0)[0].sum().backward()
            outcomes.append(a0.grad)
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            outcomes.append(None)
    assert (outcomes[0] is None) == (outcomes[1] is None), outcomes
    if outcomes[0] is not None:
        torch.testing.assert_close(outcomes[1], outcomes[0])


# ---------------------------------------------------------------- ops eager has no derivative for

_NO_DERIVATIVE = {
    "// (seed 14008)": lambda x, y: x // (y.abs() + 1),
    "// by a number": lambda x, y: x // 2,
    "floor_divide": lambda x, y: torch.floor_divide(x, y),
    "heaviside": lambda x, y: torch.heaviside(x, y),
    "div floor (has one)": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "remainder (has one)": lambda x, y: torch.remainder(x, y),
}


@pytest.mark.parametrize("form", list(_NO_DERIVATIVE))
def test_the_backward_of_an_op_eager_has_no_derivative_for_raises_as_eager(form):
    # seed 14008 with the backward check: `a0 // (a0.abs() + 1)`: eager's backward raises "derivative for
    # aten::floor_divide is not implemented", thunder's gave zeros; an output that does not reach it still has one
    def fn(x, y, body=_NO_DERIVATIVE[form]):
        return body(x, y), x * y

    outcomes = []
    for f in (fn, thunder.jit(fn)):
        x = torch.tensor([1.5, -0.3, -1.6], dtype=torch.float64, requires_grad=True)
        y = torch.tensor([0.7, 2.0, -1.0], dtype=torch.float64, requires_grad=True)
        out = f(x, y)
        try:
            outcomes.append(torch.autograd.grad(out[0].sum() + out[1].sum(), (x, y)))
        except RuntimeError as e:
            assert "not implemented" in str(e)
            outcomes.append(None)
        x2 = x.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(f(x2, y)[1].sum(), x2)
        torch.testing.assert_close(g, y.detach())
    assert (outcomes[0] is None) == (outcomes[1] is None), outcomes
    if outcomes[0] is not None:
        torch.testing.assert_close(outcomes[1], outcomes[0])


class _MulSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y * 2, g * x


_AFTER_A_FUNCTION = {
    "input updated (seed 14008)": lambda a: (_MulSaved.apply(a, a), a.eq_(0.5)),
    "input updated through a view": lambda a: (_MulSaved.apply(a, a * 2), a[0].zero_()),
    "other input updated": lambda a: (_MulSaved.apply(a * 2, a), a.mul_(3)),
    "unsaved value updated": lambda a: (_MulSaved.apply(a * 2, a * 3), a.mul_(3)),
    "nothing updated": lambda a: (_MulSaved.apply(a, a), a * 2),
}


@pytest.mark.parametrize("form", list(_AFTER_A_FUNCTION))
def test_a_tensor_a_function_saved_then_updated_makes_the_backward_raise_as_eager(form):
    # seed 14008 with the backward check: `MulSaved.apply(a0, a0)` saves a0 (ctx.save_for_backward), then
    # `a0.eq_(v0)`: eager's backward raises, thunder's computed a gradient
    def fn(a, body=_AFTER_A_FUNCTION[form]):
        return (body(a)[0],)

    outcomes = []
    for f in (fn, thunder.jit(fn)):
        leaf = torch.tensor([0.1, -0.3, -1.6], dtype=torch.float64, requires_grad=True)
        try:
            f(leaf * 1)[0].sum().backward()
            outcomes.append(leaf.grad)
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            outcomes.append(None)
    assert (outcomes[0] is None) == (outcomes[1] is None), outcomes
    if outcomes[0] is not None:
        torch.testing.assert_close(outcomes[1], outcomes[0])


def test_what_eager_saves_is_asked_per_argument_pattern_not_per_function():
    # (the answers are kept per call signature: `x.mul_(x)`, whose saved argument is its target, came first in the
    # suite and was taken for `x.mul_(y)`; a probe that could not run is not kept)
    def first(a, b):
        w = (a * 1)[1:]
        w.mul_(w)
        return w + b[1:]

    def second(a, b):
        v = a * 1
        v[1:].mul_(b[1:])
        return v * 1, a // (b.abs() + 1)

    def make():
        return (
            torch.tensor([1.5, -0.3, -1.6], dtype=torch.float64, requires_grad=True),
            torch.tensor([0.7, 2.0, -1.0], dtype=torch.float64, requires_grad=True),
        )

    thunder.jit(first)(*make())
    for outputs in ((0,), (1,)):
        results = []
        for f in (second, thunder.jit(second)):
            a, b = make()
            out = f(a, b)
            try:
                results.append(torch.autograd.grad([out[i].sum() for i in outputs], (a, b)))
            except RuntimeError as e:
                results.append(str(e).split(" (eager")[0])
        assert type(results[0]) is type(results[1]), results
        if isinstance(results[0], str):
            assert results[0] == results[1]
        else:
            torch.testing.assert_close(results[1], results[0])


def test_a_call_with_keyword_arguments_only_that_requires_grad_traces():
    # (transformers 4.x's ALBERT calls scaled_dot_product_attention with keywords only: noting what it saves read
    # args[0] of an empty tuple)
    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(query=q, key=k, value=v).sum()

    q, k, v = (torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    got = thunder.jit(f)(q, k, v)
    want = f(q, k, v)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (q, k, v)), torch.autograd.grad(want, (q, k, v)))
