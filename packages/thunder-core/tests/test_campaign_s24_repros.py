"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14024, session 24) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder
from thunder.tracing.errors import TracingError
from thunder.transforms import split

# ------------------------- symbolic sizes: an output nobody differentiates gets no gradient (not zeros through inf)


def _floor_div_and_detached_product(a0, a1):  # (campaign, 14007/14016: a1 holds inf)
    v1 = torch.div(a1, a0, rounding_mode="floor")
    v3 = a1 * (a1 * 2)
    return v3.detach(), v1


def _product_and_quotient(a0, a1):
    return a1 * a1, torch.div(a1, a0, rounding_mode="floor")


def _with_inf(n):
    a0 = torch.linspace(-1.5, 1.5, n).reshape(1, n)
    a1 = torch.linspace(-1.0, 1.0, n).reshape(1, n)
    a1[0, 0] = float("inf")
    return a0, a1.requires_grad_()


def _grads(f, fn_out, n):
    a0, a1 = _with_inf(n)
    out = f(a0, a1)
    return out, torch.autograd.grad(out[fn_out].sum(), a1, allow_unused=True)


@pytest.mark.parametrize("fn, differentiated", [(_floor_div_and_detached_product, 1), (_product_and_quotient, 1)])
def test_symbolic_sizes_leave_undifferentiated_outputs_out_of_the_backward(fn, differentiated):
    jitted = thunder.jit(fn, cache="symbolic values")
    for n in (3, 5):  # (the second call runs the program of symbolic sizes)
        expected, ge = _grads(fn, differentiated, n)
        actual, ga = _grads(jitted, differentiated, n)
        for e, a in zip(expected, actual):
            assert (a.dtype, a.shape, a.requires_grad, a._is_view()) == (
                e.dtype,
                e.shape,
                e.requires_grad,
                e._is_view(),
            )
            torch.testing.assert_close(a, e, equal_nan=True)
        torch.testing.assert_close(ga, ge, equal_nan=True)


def test_symbolic_sizes_unprunable_backward_gets_zeros_of_the_calls_sizes(monkeypatch):
    # where no pruned backward can be made, the full one gets zeros of this call's sizes, not the traced ones
    monkeypatch.setattr(split, "_pruned_backward", lambda *args: None)
    jitted = thunder.jit(_product_and_quotient, cache="symbolic values")
    for n in (3, 5, 4):
        a0, a1 = torch.randn(1, n), torch.randn(1, n, requires_grad=True)
        (ga,) = torch.autograd.grad(jitted(a0, a1)[0].sum(), a1)
        torch.testing.assert_close(ga, 2 * a1.detach())


# ----------------------------------------------------------- out= eager refuses: another dtype, an input requiring grad


def _round_into_double(x):  # (campaign, 14010: eager's CPU kernel checks the dtype, its meta kernel does not)
    v4 = torch.empty((), dtype=torch.float64)
    torch.round(x.prod(), decimals=0, out=v4)
    return v4


def _diff_into_double(x):  # (campaign, 14012)
    v2 = torch.empty((1,), dtype=torch.float64)
    torch.diff(x, 0, 0, None, None, out=v2)
    return v2


_captured = torch.tensor([-1.5, -1.0, 0.5], dtype=torch.bfloat16, requires_grad=True)


def _sub_of_captured_requiring_grad(x):  # (campaign, 14012: the tensor requiring grad is a global)
    v0 = torch.empty((3,), dtype=torch.float64)
    torch.sub(_captured, torch.tensor(-4.1, dtype=torch.float64), out=v0)
    return v0 + x


@pytest.mark.parametrize(
    "fn, x",
    [
        (_round_into_double, torch.tensor([1.5, 2.0])),
        (_diff_into_double, torch.tensor([[1.5], [2.0]], dtype=torch.float16)),
        (_sub_of_captured_requiring_grad, torch.zeros(3, dtype=torch.float64)),
    ],
)
def test_out_eager_refuses_is_refused_naming_the_line(fn, x):
    assert_raises_as_eager(fn, lambda: (x,), names_file="test_campaign_s24_repros.py")


def test_out_of_another_dtype_eager_casts_into_still_runs():
    def fn(x):
        o = torch.empty((2,), dtype=torch.float64)
        torch.add(x, x, out=o)
        torch.sin(x, out=o[:1])
        return o

    x = torch.tensor([1.5, -2.25])
    torch.testing.assert_close(thunder.jit(fn)(x), fn(x))


# ---------------------- an output of a view op returning several views, used after its base was updated in place


def _gathered_unbound_then_updated(a0):  # (campaign, 14010)
    v0 = a0.gather(1, torch.zeros_like(a0, dtype=torch.int64))
    v1 = v0.unbind(0)[0]
    v0.diagonal().sigmoid_()
    return v1.transpose(0, -1)


_PARTS = {
    "unbind": lambda v: v.unbind(0)[1],
    "chunk": lambda v: v.chunk(2)[1],
    "split_sizes": lambda v: v.split([1, 1])[0],
    "unbind_t": lambda v: v.unbind(0)[0].t(),
}


def _used_after_update(part, use):
    def fn(a0):
        v0 = a0 * 1
        v1 = part(v0)
        v0.mul_(2)
        return use(v1)

    return fn


def _leaf():
    return (torch.linspace(-2.0, 3.0, 12).reshape(2, 3, 2).requires_grad_(),)


@pytest.mark.parametrize("part", sorted(_PARTS))
@pytest.mark.parametrize("use", [lambda v: v.sum(), lambda v: v.clone(), lambda v: v.transpose(0, -1) * 1])
def test_multi_view_output_read_with_grad_after_its_base_was_updated_raises_as_eager(part, use):
    fn = _used_after_update(_PARTS[part], use)
    assert_raises_as_eager(fn, _leaf, names_file="test_campaign_s24_repros.py")


def test_gathered_unbound_then_updated_raises_as_eager():
    x = (torch.randn(2, 3, 2, 2, dtype=torch.float16, requires_grad=True) * 1)[:, :, ::2]
    with pytest.raises(RuntimeError, match="Output 0 of Unbind is a view and its base") as expected:
        _gathered_unbound_then_updated(x)
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(_gathered_unbound_then_updated)(x)
    assert str(actual.value).splitlines()[0] == str(expected.value).splitlines()[0]


@pytest.mark.parametrize("part", sorted(_PARTS))
@pytest.mark.parametrize(
    "use",
    [lambda v: v > 0, lambda v: v.detach() * 2, lambda v: v.argmax(), torch.no_grad()(lambda v: v * 2)],
)
def test_multi_view_output_read_without_its_history_after_its_base_was_updated_runs_as_eager(part, use):
    assert_as_eager(_used_after_update(_PARTS[part], use), _leaf)


@pytest.mark.parametrize("split", [lambda v: v.tensor_split(2)[0], lambda v: v.hsplit(3)[1]])
def test_tensor_split_outputs_are_ordinary_views_as_in_eager(split):
    def updated(a):
        a = a * 1
        split(a).mul_(2)
        return a

    def read_after_update(a):
        a = a * 1
        v = split(a)
        a.mul_(2)
        return v * 2

    assert_as_eager(updated, _leaf)
    assert_as_eager(read_after_update, _leaf)


# ------------------------------------------- a layout update or a resize of a tensor requiring grad, refused as eager


def _restrided_leaf(a0):  # (campaign, 14014: a0 a leaf requiring grad)
    a0.as_strided_((2, 2), (1, 2), storage_offset=1)
    return a0


@pytest.mark.parametrize(
    "update",
    [
        _restrided_leaf,
        lambda x: x.unsqueeze_(0),
        lambda x: x.squeeze_(),
        lambda x: x[0].as_strided_((2,), (1,)),
        lambda x: x.resize_(9),
        lambda x: (x * 1).resize_(3, 3),
        lambda x: (x * 1).resize_as_(x),
        torch.no_grad()(lambda x: x.resize_(9)),
    ],
)
def test_layout_update_or_resize_of_a_tensor_requiring_grad_raises_as_eager(update):
    def fn(x):
        return update(x) * 1

    def make():
        return torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5], [3.0, 1.0, -2.0]], requires_grad=True)

    with pytest.raises(RuntimeError) as expected:
        fn(make())
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(fn)(make())
    first = str(expected.value).splitlines()[0].rstrip(".")
    assert str(actual.value).splitlines()[0].split(" (")[0] == first
    assert "test_campaign_s24_repros.py" in str(actual.value)


def test_out_requiring_grad_resized_under_no_grad_runs_as_eager():
    def fn(x):
        o = (x * 0)[0]
        with torch.no_grad():
            torch.add(x, x, out=o)  # (its kernel resizes o below autograd: no "cannot resize" refusal)
        return o.detach(), x * 2

    assert_as_eager(fn, lambda: (torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], requires_grad=True),))


# --------------------------------------------- a factory's requires_grad=True makes a leaf requiring grad, as eager


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (torch.zeros(3, requires_grad=True) * 2, x * 2),
        lambda x: (torch.tensor([1.0, 2.0, 3.0], requires_grad=True) * x, x.new_ones(3, requires_grad=True) + 1),
        lambda x: (torch.no_grad()(lambda: torch.full((3,), 2.0, requires_grad=True))() * x,),
    ],
)
def test_factory_requiring_grad_makes_a_leaf_requiring_grad(fn):
    assert_as_eager(fn, lambda: (torch.tensor([0.5, -1.0, 2.0]),), grads=False)


def test_factory_leaf_requiring_grad_returned_is_refused_naming_the_line():
    def fn(x):
        with torch.no_grad():
            o = torch.zeros(3, requires_grad=True)
        return o, x * 2

    assert fn(torch.ones(3))[0].requires_grad
    with pytest.raises(TracingError, match="cannot return a tensor made a leaf requiring grad") as info:
        thunder.jit(fn)(torch.ones(3))
    assert "test_campaign_s24_repros.py" in str(info.value)


# ------------------ a saved view of an argument whose base the program updates without grad (an empty shared base)


def _clamped_without_grad_then_multiplied(sort, copy_, prod):  # (campaign, 14004: empty aliased arguments)
    v0 = copy_.narrow(-1, 0, 1)
    with torch.no_grad():
        v0.clamp_(min=0)
    v2 = copy_.reshape(-1)
    return (sort @ v2,)


@pytest.mark.parametrize("rows", [0, 3])
def test_saved_view_of_an_argument_updated_without_grad_gives_eagers_gradient(rows):
    def make():
        leaf = torch.linspace(-1.0, 1.0, rows).reshape(1, rows).to(torch.float16).requires_grad_()
        a0 = (leaf * 1)[::2]
        return leaf, (a0, a0.mT, a0)

    grads = []
    for f in (_clamped_without_grad_then_multiplied, thunder.jit(_clamped_without_grad_then_multiplied)):
        leaf, inputs = make()
        (out,) = f(*inputs)
        grads.append((out, torch.autograd.grad(out.sum(), leaf), inputs[0]))
    (e, ge, xe), (a, ga, xa) = grads
    torch.testing.assert_close(a, e)
    torch.testing.assert_close(ga, ge)
    torch.testing.assert_close(xa, xe)


# ------------------------------------ a subtraction with a bool operand whose result is unused (eager's check raises)


_captured_scalar = torch.tensor(0.05, dtype=torch.float64, requires_grad=True) * 1


def _unused_bool_subtraction(a0, a1):  # (campaign, 14020: eager raises at the dead line)
    v1 = _captured_scalar.view(-1)
    with torch.no_grad():
        v2 = _captured_scalar - a1  # noqa: F841
    return (v1,)


@pytest.mark.parametrize(
    "fn",
    [
        _unused_bool_subtraction,
        lambda a0, a1: (a1 - a1, a0)[1] * 1,
        lambda a0, a1: (1 - a1, a0)[1] * 1,
        lambda a0, a1: (torch.sub(a0, True, alpha=2), a0)[1] * 1,
    ],
)
def test_unused_subtraction_with_a_bool_operand_raises_as_eager(fn):
    a0, a1 = torch.tensor([0.5, -1.0]), torch.tensor([[False, True], [True, False]])
    with pytest.raises(RuntimeError) as expected:
        fn(a0, a1)
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(fn)(a0, a1)
    assert str(actual.value) == str(expected.value)


# --------------------------- a global read first by autograd.Function.apply, then updated in place (no leaf: eager runs)


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 10


_global_view = None


def _applied_then_updated(a0):  # (campaign, 14021/14022: the global is a view of a non-leaf requiring grad)
    v2 = _Doubled.apply(_global_view)
    torch.nn.functional.silu(_global_view, inplace=True)
    return v2, _global_view * a0


def test_global_read_by_function_apply_then_updated_in_place_runs_as_eager():
    global _global_view
    results = []
    for f in (_applied_then_updated, thunder.jit(_applied_then_updated)):
        leaf = torch.tensor([1.5, -0.5, 0.5, -1.0, 0.5], dtype=torch.float64, requires_grad=True)
        _global_view = (leaf * 1)[1:]
        outs = f(torch.tensor([2.0, 1.0, -1.0, 0.5], dtype=torch.float64))
        results.append((outs, torch.autograd.grad([o.sum() for o in outs], leaf), _global_view.detach().clone()))
    (e, ge, xe), (a, ga, xa) = results
    torch.testing.assert_close(a, e)
    torch.testing.assert_close(ga, ge)
    torch.testing.assert_close(xa, xe)


def _unused_relu_of_bool(add):  # (campaign, 14022: the relu updates a view of a tensor nobody reads)
    v0 = torch.zeros((3,), dtype=torch.bool)
    torch.nn.functional.relu(v0[0], inplace=True)
    return add * 2


@pytest.mark.parametrize("fn", [_unused_relu_of_bool, lambda x: (torch.relu(x > 0), x)[1] * 1])
def test_unused_relu_of_bool_raises_as_eager(fn):
    x = torch.tensor([0.5, -1.0])
    with pytest.raises(RuntimeError) as expected:
        fn(x)
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(fn)(x)
    assert str(actual.value) == str(expected.value)


# --------------------------- a product of two dtypes with no elements, which eager runs as a bmm (no dtype check)


def _remainder_then_product(slice_prim, matmul):  # (campaign, 14010: matmul a channels_last bfloat16 batch)
    v1 = torch.where(slice_prim > 0, slice_prim, 0.5 * slice_prim)
    v3 = torch.remainder(slice_prim, v1)
    return torch.matmul(matmul, v3)


def _channels_last_batch():
    values = [[[[0.5, -1.28125]], [[float("nan"), 0.146484375]], [[float("inf"), -1.0546875]]]]
    batch = torch.tensor(values, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    return torch.tensor([[], []], dtype=torch.float64), batch


@pytest.mark.parametrize(
    "fn, make",
    [
        (_remainder_then_product, _channels_last_batch),
        (torch.matmul, lambda: (torch.ones(3, 2, 1, dtype=torch.bfloat16).transpose(0, 1), torch.ones(1, 0))),
        (torch.matmul, lambda: (torch.ones(1, 2, dtype=torch.bfloat16), torch.ones(2, 2, 0, dtype=torch.float64))),
    ],
)
def test_product_of_two_dtypes_without_elements_in_eagers_batched_path_runs_as_eager(fn, make):
    assert_as_eager(lambda a, b: fn(a, b), make, grads=False)


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.ones(1, 3, 1, 2, dtype=torch.bfloat16), torch.ones(2, 0, dtype=torch.float64)),
        lambda: (
            torch.ones(1, 3, 1, 2, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last),
            torch.ones(2, 0, dtype=torch.float64, requires_grad=True),
        ),
        lambda: (torch.ones(1, 2, dtype=torch.bfloat16, requires_grad=True), torch.ones(2, 2, 0)),
    ],
)
def test_product_of_two_dtypes_eager_folds_into_one_matrix_product_raises(make):
    with pytest.raises(RuntimeError, match="dtype"):
        torch.matmul(*make())
    with pytest.raises(RuntimeError, match="dtype"):
        thunder.jit(lambda a, b: a @ b)(*make())


# ------------------- symbolic sizes: an out= call whose out= form eager has no derivative for (diag into a matrix)


def _diag_into_matrix(a2):  # (campaign, 14011)
    v1 = torch.empty((10, 10), dtype=torch.float64)
    torch.diag(a2, out=v1)
    return (v1,)


@pytest.mark.parametrize("cache", [None, "symbolic values"])
def test_out_form_without_derivative_raises_in_backward_as_eager_with_symbolic_sizes(cache):
    fns = (_diag_into_matrix, thunder.jit(_diag_into_matrix, **({"cache": cache} if cache else {})))
    for f in fns:
        leaf = torch.linspace(-1.0, 1.0, 20, dtype=torch.float64, requires_grad=True)
        (out,) = f((leaf * 1)[::2])
        assert out.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::diag_embed is not implemented"):
            torch.autograd.grad(out.sum(), leaf)


# ---------- symbolic sizes: an empty output nobody differentiates does not reach a call whose saved tensor was updated


def _scattered_after_floor_division(a0):  # (campaign, 14018: a0 is empty)
    v1 = a0 * int(torch.div(a0.numel() + 1, 2, rounding_mode="floor") - 1)
    v2 = v1[:, :1]
    v3 = torch.div(v2, v2, rounding_mode="floor")
    v1.scatter_(0, torch.zeros_like(v1, dtype=torch.int64), v1.expand_as(v1))
    return v3.detach(), v1


def _updated_then_log_softmax_updated(a0):  # (campaign, 14015: a0 is empty, updated in place)
    a0.add_(a0, alpha=-1)
    v0 = torch.nn.functional.log_softmax(a0, dim=-1)
    with torch.no_grad():
        v0.add_(1)
    return (v0 * 2).detach(), a0


@pytest.mark.parametrize(
    "fn, rows",
    [
        (_scattered_after_floor_division, 0),
        (_updated_then_log_softmax_updated, 0),
        (_updated_then_log_softmax_updated, 2),
    ],
)
def test_symbolic_sizes_backward_of_updated_saves_raises_only_where_eagers_does(fn, rows):
    results = []
    for f in (fn, thunder.jit(fn, cache="symbolic values")):
        leaf = torch.linspace(-1.0, 1.0, 2 * rows).reshape(2, rows).to(torch.bfloat16).requires_grad_()
        out = f(leaf * 1)[-1]
        try:
            results.append(torch.autograd.grad(out.sum(), leaf))
        except RuntimeError as e:
            results.append(str(e).split(":")[0])
    assert type(results[0]) is type(results[1])
    if isinstance(results[0], str):
        assert results[1] == results[0]
    else:
        torch.testing.assert_close(results[1], results[0])


# -------- an in-place layout change of a tensor requiring grad under no_grad: the gradient through it is refused


@pytest.mark.parametrize(
    "change", [lambda x: x.t_(), lambda x: x.unsqueeze_(0), lambda x: x.as_strided_((2, 2), (1, 2))]
)
@pytest.mark.parametrize("leaf", [True, False])
def test_gradient_through_a_layout_changed_without_grad_raises_naming_the_lines(change, leaf):
    def fn(x, y):
        with torch.no_grad():
            change(x)
        return x * torch.arange(2.0), y * 2

    def make():
        base = torch.tensor([[0.5, -1.0], [1.5, 2.0]], requires_grad=True)
        return (base if leaf else base * 1), torch.tensor([1.0, -2.0], requires_grad=True)

    expected, actual = fn(*make()), thunder.jit(fn)(*make())
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
        assert a.requires_grad == e.requires_grad
    x, y = make()
    out = thunder.jit(fn)(x, y)
    (gy,) = torch.autograd.grad(out[1].sum(), y, retain_graph=True)
    torch.testing.assert_close(gy, torch.full((2,), 2.0))  # (a gradient not through it is computed)
    with pytest.raises(RuntimeError, match="whose layout was changed in place without grad") as info:
        out[0].sum().backward()
    assert str(info.value).count("test_campaign_s24_repros.py") == 2  # (the change's line and the use's)


def test_layout_change_without_grad_of_a_detached_tensor_or_a_view_nobody_reads_runs_as_eager():
    def fn(x):
        y = x.detach()
        with torch.no_grad():
            y.t_()
            y.squeeze_()
            x[0].unsqueeze_(0)
        return x * 2, y * 1

    assert_as_eager(fn, lambda: (torch.tensor([[0.5, -1.0], [1.5, 2.0]], requires_grad=True),))


@pytest.mark.parametrize(
    "fn",
    [
        # a view taken under no_grad does not require grad; restriding it there keeps it so
        lambda x: torch.no_grad()(lambda: x.t().t_() * 3)(),
        lambda x: torch.no_grad()(lambda: x[0].unsqueeze_(0) + 1)(),
        lambda x: (torch.no_grad()(lambda: x.detach().t_())() * x.sum(),),
    ],
)
def test_layout_change_without_grad_of_a_view_taken_without_grad_does_not_require_grad(fn):
    assert_as_eager(fn, lambda: (torch.tensor([[0.5, -1.0, 2.0], [1.5, 2.0, 0.25]], requires_grad=True),))
