"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14051..14070, session 25) and the issues left by
session 24 found, each against eager: values, dtypes, ``requires_grad``, gradients and whether each output is a
view; where eager raises, thunder raises too, naming the user's line."""

from __future__ import annotations

import pytest
import torch
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder

# ------------------------- an out= tensor requiring grad resized under no_grad keeps its history, as in eager


def _matrix():
    return (torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], requires_grad=True),)


def _grown_then_used(x):  # a [3] tensor grown to [2, 3]: its node's [3] expands to it (the gradient is summed back)
    o = x[0] * 1
    with torch.no_grad():
        torch.add(x, x, out=o)
    return o * 3


def _grown_then_returned(x):
    o = x[0] * 1
    with torch.no_grad():
        torch.add(x, x, out=o)
    return o


def _gains_a_leading_dim(x):  # (within its storage: [3] to [1, 3])
    o = x.sum(0)
    with torch.no_grad():
        torch.add(x[:1], x[:1], out=o)
    return o * x


def _resized_twice_back_to_its_shape(x):  # (its node's shape is the first one, whatever came between)
    o = x * 1
    with torch.no_grad():
        torch.add(x[0], x[0], out=o)
        torch.add(x, x, out=o)
    return o


def _grown_then_shrunk(x):
    o = x[0] * 1
    with torch.no_grad():
        torch.add(x, x, out=o)
        torch.add(x[0], 1, out=o)
    return o


def _view_resized_within_its_base(x):  # (eager makes a view's history anew, from its base's through its new layout)
    o = (x * 1)[0]
    with torch.no_grad():
        torch.add(x, x, out=o)
    return o * 2


@pytest.mark.parametrize(
    "fn",
    [
        _grown_then_used,
        _grown_then_returned,
        _gains_a_leading_dim,
        _resized_twice_back_to_its_shape,
        _grown_then_shrunk,
        _view_resized_within_its_base,
    ],
)
def test_out_requiring_grad_resized_under_no_grad_keeps_its_history_as_eager(fn):
    assert_as_eager(fn, _matrix)


def _shrunk_then_used(x):
    o = x * 1
    with torch.no_grad():
        torch.add(x[0], x[0], out=o)
    return o * 3


def _shrunk_then_returned(x):
    o = x * 1
    with torch.no_grad():
        torch.add(x[0], x[0], out=o)
    return o


def _flattened_then_returned(x):
    o = x * 1
    with torch.no_grad():
        torch.add(x.flatten(), 1, out=o)
    return o


def _shrunk_then_updated_with_grad(x):
    o = x * 1
    with torch.no_grad():
        torch.add(x[0], x[0], out=o)
    o.add_(x[1])
    return o


@pytest.mark.parametrize(
    "fn", [_shrunk_then_used, _shrunk_then_returned, _flattened_then_returned, _shrunk_then_updated_with_grad]
)
def test_out_requiring_grad_resized_to_a_shape_its_node_does_not_expand_to_raises_in_backward_as_eager(fn):
    # eager's forward runs; its backward hands a gradient of the new shape to the old node, which refuses it
    (x,) = _matrix()
    expected = fn(x)
    with pytest.raises(RuntimeError, match="expected shape compatible with") as eager_error:
        expected.sum().backward()
    (y,) = _matrix()
    actual = thunder.jit(fn)(y)
    assert (actual.shape, actual.requires_grad, actual._is_view()) == (
        expected.shape,
        expected.requires_grad,
        expected._is_view(),
    )
    torch.testing.assert_close(actual, expected)
    with pytest.raises(RuntimeError) as thunder_error:
        actual.sum().backward()
    shapes = str(eager_error.value).split(" - ")[1].splitlines()[0]  # "got [3] but expected shape compatible with .."
    assert shapes in str(thunder_error.value)
    assert "test_campaign_s25_repros.py" in str(thunder_error.value)


def test_out_requiring_grad_resized_under_no_grad_used_only_detached_runs_as_eager():
    def fn(x):
        o = x * 1
        with torch.no_grad():
            torch.add(x[0], x[0], out=o)
        return o.detach() * 2, x * 3

    assert_as_eager(fn, _matrix)


# ------------------------------ an in-place update of a leaf requiring grad: eager's words, "a view of" a leaf or not


@pytest.mark.parametrize(
    "update",
    [
        lambda x: x.__setitem__(0, 1.0),  # (a select: a view)
        lambda x: x.__setitem__((..., 0), 1.0),
        lambda x: x.__setitem__(slice(None, None, 2), 1.0),
        lambda x: x.__setitem__(None, 1.0),
        lambda x: x.__setitem__(..., 1.0),  # (x itself)
        lambda x: x.__setitem__(slice(None), 1.0),
        lambda x: x.__setitem__((slice(None), slice(0, 3)), 1.0),
        lambda x: x.__setitem__((), 1.0),
        lambda x: x.__setitem__(x > 0, 1.0),  # (index_put_ of x itself)
        lambda x: x.__setitem__([0, 1], 1.0),
        lambda x: x.__setitem__((0, [0, 1]), 1.0),  # (index_put_ of a view)
        lambda x: x.real.__setitem__(0, 1.0),  # (x.real of a real x is x)
        lambda x: x[0].add_(1),
        lambda x: x.add_(1),
        lambda x: x.masked_fill_(x > 0, 1.0),
    ],
)
def test_update_of_a_leaf_requiring_grad_is_refused_in_eagers_words(update):
    def fn(x):
        update(x)
        return x * 2

    def make():
        return torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], requires_grad=True)

    with pytest.raises(RuntimeError) as expected:
        fn(make())
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(fn)(make())
    assert str(actual.value).splitlines()[0].split(" (")[0] == str(expected.value).splitlines()[0].rstrip(".")
    assert "test_campaign_s25_repros.py" in str(actual.value)


# ------------------------------------------------- x.real of a real x is x: a read, not an in-place update of x


@pytest.mark.parametrize("requires_grad", [True, False])
def test_real_of_a_real_tensor_is_the_tensor_as_eager(requires_grad):
    def fn(x):
        y = x * 2
        y.real.add_(1)
        return x.real * 2, x[0].real, y

    assert_as_eager(fn, lambda: (torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], requires_grad=requires_grad),))
    x = torch.tensor([0.5, -1.0])
    assert thunder.jit(lambda x: x.real)(x) is x


# ---------------- a view made by an op taking a list of tensors (torch.atleast_2d((x,))) shares x's version counter


class _SinCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * x.cos()


_VIEWS_OF_A_LIST_OR_0D = {
    "atleast_2d of a list": lambda a: torch.atleast_2d((a,))[0],
    "atleast_1d of a list": lambda a: torch.atleast_1d([a])[0],
    "atleast_1d": torch.atleast_1d,
    "atleast_3d": torch.atleast_3d,
}


def _viewed_then_updated_without_grad(view, saver):  # (campaign, 14054)
    def fn(a0):
        v0 = saver(a0)
        v1 = view(a0)
        with torch.no_grad():
            v1.sigmoid_()
        return v0, v1.detach()

    return fn


@pytest.mark.parametrize("shape", [(), (2,)])
@pytest.mark.parametrize("view", list(_VIEWS_OF_A_LIST_OR_0D))
@pytest.mark.parametrize("saver", [lambda a: _SinCos.apply(a)[0], torch.sin], ids=["function", "sin"])
def test_argument_saved_then_updated_through_a_view_raises_in_backward_as_eager(saver, view, shape):
    fn = _viewed_then_updated_without_grad(_VIEWS_OF_A_LIST_OR_0D[view], saver)

    def make():
        return torch.full(shape, 1.5, dtype=torch.float64, requires_grad=True)

    x, y = make(), make()
    expected, actual = fn(x), thunder.jit(fn)(y)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(y, x)  # (the update reached the argument)
    assert y._version == x._version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        expected[0].sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        actual[0].sum().backward()


@pytest.mark.parametrize("shape", [(), (3,)])
def test_atleast_1d_is_a_view_of_a_0d_tensor_and_the_tensor_itself_otherwise(shape):
    def fn(x):
        a, (b, c) = torch.atleast_1d(x), torch.atleast_1d((x, x * 2))
        return a, b, c

    assert_as_eager(fn, lambda: (torch.full(shape, 0.5, requires_grad=True),))


# ------------------- softmax and log_softmax of a dtype without their kernel: empty as eager, else eager's refusal


_SOFTMAXES = {
    "torch.softmax": torch.softmax,
    "torch.log_softmax": torch.log_softmax,
    "Tensor.softmax": torch.Tensor.softmax,
    "F.log_softmax": lambda x, dim, dtype=None: torch.nn.functional.log_softmax(x, dim, dtype=dtype),
    "special.log_softmax": torch.special.log_softmax,
    "special.softmax": torch.special.softmax,
}


@pytest.mark.parametrize("shape", [(0,), (2, 0), (3,), (), (2, 3)])
@pytest.mark.parametrize(
    "dtype, result_dtype",
    [
        (torch.bool, None),
        (torch.int64, None),
        (torch.uint8, torch.bool),
        (torch.float32, torch.bool),
        (torch.float32, torch.int32),
        (torch.int32, torch.float64),
        (torch.bool, torch.float16),
    ],
)
@pytest.mark.parametrize("op", list(_SOFTMAXES))
def test_softmax_of_a_dtype_without_its_kernel_as_eager(op, dtype, result_dtype, shape):
    f = _SOFTMAXES[op]

    def fn(x):
        return f(x, 0, dtype=result_dtype) if result_dtype is not None else f(x, 0)

    x = torch.zeros(shape, dtype=dtype)
    try:
        expected = fn(x)
    except NotImplementedError as e:
        with pytest.raises(NotImplementedError) as actual:
            thunder.jit(fn)(x)
        assert str(actual.value).splitlines()[0] == str(e).splitlines()[0]
        where = str(actual.value) + "".join(getattr(actual.value, "__notes__", ()))  # (eager's message, the line)
        assert "test_campaign_s25_repros.py" in where
        return
    actual = thunder.jit(fn)(x)
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    torch.testing.assert_close(actual, expected)


# ------------- a tensor given as two arguments is one object: a layout change (x.t_()) through one reaches the other


def _transposed_then_indexed(a, b):  # (campaign, 14057: a and b are one tensor)
    a.t_()
    return b[torch.tensor([0, 0])] * 1, b.shape[0] * torch.ones(1)


_LAYOUT_CHANGES = {
    "t_ then index": _transposed_then_indexed,
    "t_ then multiply": lambda a, b: (a.t_(), b * 2)[1],
    "unsqueeze_": lambda a, b: (a.unsqueeze_(0), b * 2)[1],
    "squeeze_": lambda a, b: (a.squeeze_(), b + 1)[1],
    "as_strided_": lambda a, b: (a.as_strided_((2, 1), (1, 1)), b * 2)[1],
    "t_ then update": lambda a, b: (a.t_(), b.mul_(2), a + b)[2],
}


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("change", list(_LAYOUT_CHANGES))
def test_layout_change_of_an_argument_given_twice_reaches_both_names(change, requires_grad):
    fn = _LAYOUT_CHANGES[change]

    def run(f):
        leaf = torch.tensor([[0.5], [-1.5]], requires_grad=requires_grad)
        a = (leaf * 1).t()
        out = f(a, a)
        out = out if isinstance(out, tuple) else (out,)
        grads = torch.autograd.grad(out[0].sum(), leaf) if requires_grad else None
        return out, a, grads

    (expected, e_arg, e_grads), (actual, a_arg, a_grads) = run(fn), run(thunder.jit(fn))
    for e, a in zip(expected, actual):
        assert (a.shape, a.requires_grad) == (e.shape, e.requires_grad)
        torch.testing.assert_close(a, e)
    assert (a_arg.shape, a_arg.stride()) == (e_arg.shape, e_arg.stride())
    torch.testing.assert_close(a_arg, e_arg)
    torch.testing.assert_close(a_grads, e_grads)


# --------------------- an op without a symbol whose meta run raises eager's own error raises it, naming the line


def test_opaque_call_eager_refuses_raises_eagers_error_naming_the_line():
    def fn(x):
        return x.imag * 2

    assert_raises_as_eager(fn, lambda: (torch.tensor([0.5, -1.0]),), names_file="test_campaign_s25_repros.py")


# ---------- which tensors a call saves is asked of eager with the arguments' layouts (matmul folds a transposed batch)


def _attention_then_product_then_elu(a0):  # (campaign, 14059)
    v0 = torch.nn.functional.scaled_dot_product_attention(a0, a0 * 2, a0, is_causal=True).flatten(-2)
    v3 = torch.matmul(a0, v0)
    torch.nn.functional.elu(a0, inplace=True)
    return v3


def _product_then_update(a0):  # (eager's matmul folds a0 through a copy, which its mm saves: a0 itself is not)
    v3 = torch.matmul(a0, torch.ones(3, 6, dtype=a0.dtype, requires_grad=True))
    a0.mul_(2)
    return v3


def _product_of_contiguous_then_update(a0):  # (no copy: mm saves a view of a0, which the update makes stale)
    v3 = torch.matmul(a0.contiguous(), torch.ones(3, 6, dtype=a0.dtype, requires_grad=True))
    a0.mul_(2)
    return v3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "fn", [_attention_then_product_then_elu, _product_then_update, _product_of_contiguous_then_update]
)
def test_saved_tensor_probe_sees_the_arguments_layout(fn, dtype):
    def run(f):
        leaf = torch.linspace(-2.0, 2.0, 18, dtype=dtype).reshape(2, 3, 3).requires_grad_()
        out = f((leaf * 1).transpose(0, 1))
        try:
            return out, torch.autograd.grad(out.float().sum(), leaf)[0]
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            return out, None

    (expected, ge), (actual, ga) = run(fn), run(thunder.jit(fn))
    torch.testing.assert_close(actual, expected)
    assert (ga is None) == (ge is None)
    if ge is not None:
        torch.testing.assert_close(ga, ge)


# ------------ eager's refusals of complex tensors (also by ops without a symbol) are raised where traced, used or not


@pytest.mark.parametrize(
    "op",
    [
        lambda v: v.abs_(),  # (campaign, 14060)
        lambda v: torch.heaviside(v, v),
        lambda v: v.floor(),
        lambda v: v.sign(),
        lambda v: v.sort()[0],
    ],
)
@pytest.mark.parametrize("used", [False, True])
def test_op_eager_refuses_for_complex_tensors_raises_as_eager(op, used):
    def fn(x):
        v = torch.empty((), dtype=torch.complex128)
        torch.complex(x.mean(), x.mean(), out=v)
        y = op(v)
        return (v * 1, y) if used else (v * 1,)

    assert_raises_as_eager(fn, lambda: (torch.tensor([1.0, -1.0], dtype=torch.float64),))


# ---------------------------------------------- out= of another dtype than the result's, which eager's kernel refuses


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.histc(x, min=0, max=10, out=torch.empty((100,), dtype=torch.float64)),  # (campaign, 14064)
        lambda x: torch.nan_to_num(x, out=torch.empty((3,), dtype=torch.float64)),  # (campaign, 14064)
        lambda x: torch.sort(x, out=(torch.empty((3,), dtype=torch.float64), torch.empty((3,), dtype=torch.int64))),
        lambda x: torch.kthvalue(x, 1, out=(torch.empty((), dtype=torch.float64), torch.empty((), dtype=torch.int64))),
        lambda x: torch.complex(x, x, out=torch.empty((3,), dtype=torch.complex128)),
        lambda x: torch.where(x > 0, x, x, out=torch.empty((3,), dtype=torch.float64)),
        lambda x: torch.mm(x[None], x[:, None], out=torch.empty((1, 1), dtype=torch.float64)),
        lambda x: torch.bucketize(x, torch.tensor([0.0, 1.0]), out=torch.empty((3,), dtype=torch.float64)),
    ],
)
def test_out_of_a_dtype_eagers_kernel_refuses_raises_as_eager(call):
    def fn(x):
        return call(x * 1)

    assert_raises_as_eager(fn, lambda: (torch.tensor([0.5, 1.5, -1.0]),), names_file="test_campaign_s25_repros.py")


def test_out_of_a_dtype_eager_casts_into_still_runs():
    def fn(x):
        return torch.cumsum(x, 0, out=torch.empty((3,), dtype=torch.float64)), torch.mean(
            x, 0, out=torch.empty((), dtype=torch.float64)
        )

    x = torch.tensor([0.5, 1.5, -1.0])
    for a, e in zip(thunder.jit(fn)(x), fn(x)):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e)


# ------------------------------- an autograd.Function's output has the layout of its forward's result, as in eager


class _MulSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


def _function_then_flatten(a1):  # (campaign, 14065: a channels_last a1; flatten() of the result copies in eager)
    v0 = _MulSaved.apply(a1, a1)
    v4 = torch.add(v0, a1, alpha=2)
    return v4.flatten(), v0.flatten(), v0


@pytest.mark.parametrize("requires_grad", [True, False])
def test_function_output_has_its_forwards_layout(requires_grad):
    def make():
        x = torch.linspace(-1.0, 1.0, 6).reshape(1, 3, 1, 2).requires_grad_(requires_grad)
        return ((x * 1).contiguous(memory_format=torch.channels_last),)

    assert_as_eager(_function_then_flatten, make)
    (x,) = make()
    assert thunder.jit(_function_then_flatten)(x)[2].stride() == _function_then_flatten(x)[2].stride()
