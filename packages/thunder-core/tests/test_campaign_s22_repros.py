"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14016, session 22) found, each against eager:
values, dtypes, ``requires_grad``, gradients and whether each output is a view."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from eager_comparison import assert_as_eager
from torch.nn.attention import SDPBackend, sdpa_kernel

import thunder

# ------------------------- an empty view updated in place beside another view of its base that the program saves


def _setitem_then_matmul(a0, a1, a2):  # (campaign, 14012: a0 and a1 one empty expanded view, a2 a row of it)
    a1[...] = True
    return (torch.matmul(a1, a2),)


def _mul_then_matmul(a, b):
    a.mul_(2)
    return (torch.matmul(a, b),)


def _mul_then_matmul_of_the_other(a, b):
    a.mul_(2)
    return (torch.matmul(b.unsqueeze(0), b.unsqueeze(1)),)


def _empty_expanded():
    leaf = torch.tensor([], requires_grad=True)
    a0 = (leaf * 1).unsqueeze(0).expand(2, -1)
    return leaf, (a0, a0, a0[0])


def _empty_views():
    leaf = torch.tensor([], requires_grad=True)
    base = leaf * 1
    return leaf, (base.view(2, 0), base[0:0])


def _differentiate_all(fn, make):
    """The gradient of the leaf through the outputs and the arguments after the call (what the campaign takes)."""
    leaf, args = make()
    targets = [*fn(*args), *args]
    return torch.autograd.grad(targets, leaf, [torch.ones_like(t) for t in targets], allow_unused=True)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_setitem_then_matmul, _empty_expanded),
        (_mul_then_matmul, _empty_views),
        (_mul_then_matmul_of_the_other, _empty_views),
    ],
)
def test_saved_view_of_an_argument_sharing_a_counter_with_an_updated_empty_view(fn, make):
    assert_as_eager(fn, lambda: make()[1], grads=False)  # (gradients of the leaf below: the arguments are updated)
    (expected,), (actual,) = _differentiate_all(fn, make), _differentiate_all(thunder.jit(fn), make)
    assert (actual is None) == (expected is None)
    if expected is not None:
        torch.testing.assert_close(actual, expected)


def test_saved_view_of_an_argument_updated_after_the_call_refuses_backward_as_eager():
    for f in (_mul_then_matmul, thunder.jit(_mul_then_matmul)):
        leaf, (a, b) = _empty_views()
        (out,) = f(a, b)
        with torch.no_grad():
            b.add_(1)  # (out's backward needs b, as it was)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(out.sum(), leaf)


# ------------------------------------------- a product eager computes as a transposed view, under the symbolic cache


def _abs_then_product(a0, a2):  # (campaign, 14010: a0 an empty slice of a transposed float16 non-leaf)
    a0.abs_()
    return (a0 @ a2,)


def _transposed_slice(rows, cols, batch):
    def make():
        a0 = (torch.linspace(-1.0, 2.0, cols * 2, dtype=torch.float16, requires_grad=True).reshape(cols, 2) * 1).mT
        a2 = torch.linspace(-2.0, 1.0, batch * cols, dtype=torch.float16, requires_grad=True).reshape(batch, 1, cols, 1)
        return a0[2 - rows :], (a2 * 1).permute(0, 3, 2, 1).expand(batch, 1, cols, 3)

    return make


def test_product_returned_as_a_transposed_view_under_the_symbolic_cache():
    jfn = thunder.jit(_abs_then_product, cache="symbolic values")
    # (an empty product and one of a single row are eager's views; of two rows, a tensor of its own)
    for rows, cols, batch in [(0, 2, 1), (0, 3, 2), (1, 4, 3), (2, 3, 2), (0, 5, 4), (1, 2, 2)]:
        make = _transposed_slice(rows, cols, batch)
        (e,), (a,) = _abs_then_product(*make()), jfn(*make())
        assert (a.shape, a.dtype, a.requires_grad, a._is_view()) == (e.shape, e.dtype, e.requires_grad, e._is_view())
        torch.testing.assert_close(a, e)


def test_linear_gradient_with_no_output_features():
    def fn(w, x):
        return (F.linear(x, w), x * 1)

    for shape in [(2,), (3, 2), (2, 1, 2)]:
        assert_as_eager(
            fn, lambda shape=shape: (torch.ones(0, 2, requires_grad=True), torch.ones(shape, requires_grad=True))
        )


# ------------------------------------------- attention on CPU laid out by the kernel eager runs (flash or math)


def _attention_then_merged_heads_doubled(q, k, v):
    o = F.scaled_dot_product_attention(q, k, v)
    r = o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)  # (a view of o where o is laid out as flash's)
    r.mul_(2)
    return o, r


def _attention_heads_merged_by_view(q, k, v):
    return (F.scaled_dot_product_attention(q, k, v).transpose(1, 2).view(q.shape[0], q.shape[2], -1),)


_KERNELS = {
    "default": contextlib.nullcontext,
    "math": lambda: sdpa_kernel(SDPBackend.MATH),
    "flash": lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION),
}
_LAYOUTS = {
    "contiguous": lambda t: t,
    "heads-transposed": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),  # (batch, length, heads, dim)
    "dim-transposed": lambda t: t.transpose(-1, -2).contiguous().transpose(-1, -2),  # (flash refuses it)
}


def _qkv(layout, requires_grad=True):
    def make():
        g = torch.Generator().manual_seed(0)
        return tuple(
            _LAYOUTS[layout](torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64)).requires_grad_(requires_grad)
            for _ in range(3)
        )

    return make


def _in_kernel(fn, kernel):
    def run(*args):
        with _KERNELS[kernel]():
            return fn(*args)

    run.__name__ = fn.__name__
    return run


@pytest.mark.parametrize("kernel", list(_KERNELS))
@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("fn", [_attention_then_merged_heads_doubled, _attention_heads_merged_by_view])
def test_attention_result_laid_out_as_eagers_kernel(fn, layout, kernel):
    fn = _in_kernel(fn, kernel)
    try:
        expected = fn(*_qkv(layout)())
    except RuntimeError as e:  # (no kernel enabled takes the arguments, or view refuses the layout)
        with pytest.raises(RuntimeError, match=re.escape(str(e).split("\n")[0][:40])) as error:
            thunder.jit(fn)(*_qkv(layout)())
        assert fn.__name__ in "\n".join(getattr(error.value, "__notes__", []))
        return
    assert_as_eager(fn, _qkv(layout), grads=False)
    actual = thunder.jit(fn)(*_qkv(layout)())
    assert [t.stride() for t in actual] == [t.stride() for t in expected]
    _assert_gradients_as_eager(fn, _qkv(layout))


def _assert_gradients_as_eager(fn, make):
    """The gradients of the arguments through every output, or eager's error at backward (the flash kernel saves its
    result: an update through a view of it makes eager's backward refuse)."""

    def forward(f):
        args = make()
        outs = f(*args)
        return lambda: torch.autograd.grad([o.sum() for o in outs], args)

    _assert_same_gradients_or_error(fn, forward)


def _assert_same_gradients_or_error(fn, forward):
    """For eager's ``fn`` and thunder's: ``forward(f)`` runs it and returns its backward, whose gradients are the same
    values, or whose error is the same (its first words)."""
    results = []
    for f in (fn, thunder.jit(fn)):
        backward = forward(f)
        try:
            results.append(backward())
        except RuntimeError as e:
            results.append(str(e).split(":")[0])
    if isinstance(results[0], str):
        assert results[1] == results[0]
    else:
        torch.testing.assert_close(results[1], results[0])


def test_attention_traced_again_under_other_kernels():
    jfn = thunder.jit(_attention_then_merged_heads_doubled)
    for kernel in ("default", "math", "default"):
        with _KERNELS[kernel]():
            expected = _attention_then_merged_heads_doubled(*_qkv("heads-transposed", False)())
            actual = jfn(*_qkv("heads-transposed", False)())
        for e, a in zip(expected, actual):
            assert (a.stride(), a._is_view()) == (e.stride(), e._is_view())
            torch.testing.assert_close(a, e)
    assert thunder.cache_misses(jfn) == 2


# ------------------------------------------------------------- view() of a layout it cannot express raises as eager


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x * 1).transpose(1, 2).view(2, 4, 24),
        lambda x: x.transpose(1, 2).view(-1),
        lambda x: x[:, :, :2].reshape(2, 3, 16).view(96),
    ],
)
def test_view_of_an_incompatible_layout_raises_eagers_error(fn):
    x = torch.randn(2, 3, 4, 8)
    with pytest.raises(RuntimeError, match="view size is not compatible") as expected:
        fn(x)
    with pytest.raises(RuntimeError, match="view size is not compatible") as error:
        thunder.jit(fn)(x)
    assert "<lambda>" in "\n".join(error.value.__notes__)
    del expected


# ------------------------------------------- a view made through a keyword argument or a list (a global's, an input's)

_GLOBAL = torch.arange(6.0).reshape(2, 3)
_GLOBAL_ROW = torch.arange(3.0)


def _selected_by_keyword_then_doubled(x):
    v = torch.select(input=_GLOBAL, dim=0, index=1)
    v.mul_(2)  # (reaches the global, as in eager)
    return x + v, v


def _input_selected_by_keyword_then_doubled(x):
    v = torch.select(input=x, dim=0, index=1)
    v.mul_(2)
    return (v,)


def _input_transposed_by_keyword_then_doubled(x):
    v = torch.transpose(input=x, dim0=0, dim1=1)
    v.mul_(2)
    return (v,)


def _global_in_a_list_viewed_then_updated(x):
    a, b = torch.atleast_2d((_GLOBAL_ROW, x))
    a.add_(1)
    return a, b


def _where_by_keywords(x):  # (input is not where's first parameter: stays a keyword)
    return (torch.where(condition=x > 2, input=x, other=-x),)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (_selected_by_keyword_then_doubled, (3,)),
        (_input_selected_by_keyword_then_doubled, (2, 3)),
        (_input_transposed_by_keyword_then_doubled, (2, 3)),
        (_global_in_a_list_viewed_then_updated, (3,)),
        (_where_by_keywords, (2, 3)),
    ],
)
def test_view_through_a_keyword_or_a_list_aliases_its_tensor(fn, shape):
    def make():
        _GLOBAL.copy_(torch.arange(6.0).reshape(2, 3))
        _GLOBAL_ROW.copy_(torch.arange(3.0))
        return (torch.arange(float(torch.Size(shape).numel())).reshape(shape),)

    expected_globals = None
    for f in (fn, thunder.jit(fn)):
        args = make()
        outs = f(*args)
        shares = [o.untyped_storage().data_ptr() for o in outs]
        state = (_GLOBAL.clone(), _GLOBAL_ROW.clone(), args[0].clone())
        if expected_globals is None:
            expected_globals, expected_shares = (
                state,
                [{p == t.untyped_storage().data_ptr() for t in (_GLOBAL, _GLOBAL_ROW, args[0])} for p in shares],
            )
            expected = [(o.clone(), o._is_view()) for o in outs]
            continue
        for e, t in zip(expected_globals, state):
            torch.testing.assert_close(t, e)
        assert [
            {p == t.untyped_storage().data_ptr() for t in (_GLOBAL, _GLOBAL_ROW, args[0])} for p in shares
        ] == expected_shares
        for (e, view), o in zip(expected, outs):
            torch.testing.assert_close(o, e)
            assert o._is_view() == view


# ------------------------------------------------------------- attention over a head size of 0 (campaign, 14011)


@pytest.mark.parametrize("q_shape, v_shape", [((2, 0), (2, 0)), ((2, 3, 0), (2, 3, 4)), ((1, 2, 3, 0), (1, 2, 3, 5))])
@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_with_an_empty_head_size(q_shape, v_shape, is_causal):
    def fn(q, v):  # (eager's scores are empty sums, zeros: each query attends evenly)
        return (F.scaled_dot_product_attention(q, q * 2, v, is_causal=is_causal).flatten(-2),)

    def make():
        v = torch.arange(float(torch.Size(v_shape).numel())).reshape(v_shape)
        return torch.ones(q_shape, dtype=torch.float16).requires_grad_(), v.half().requires_grad_()

    assert_as_eager(fn, make)


# ------------------------------------- x[0] = x into an expanded x of size 1 first: eager's copy of its own data


def _own_row_assigned(a0):  # (campaign, 14011)
    a0[0] = a0
    return a0 * 2, a0


def _own_data_copied(a0):
    a0.copy_(a0.expand_as(a0))
    return (a0 * 2,)


def _expanded_row(requires_grad):
    leaf = torch.tensor([[[[1.25, -0.25]], [[0.5, -1.0]], [[0.25, -0.5]]]], requires_grad=requires_grad)
    return leaf, (leaf * 1)[:, :1].expand(-1, 3, -1, -1)


@pytest.mark.parametrize("fn", [_own_row_assigned, _own_data_copied])
def test_copy_of_its_own_data_into_an_expanded_tensor_runs_as_eager(fn):
    assert_as_eager(fn, lambda: (_expanded_row(False)[1],))


@pytest.mark.parametrize("fn", [_own_row_assigned, _own_data_copied])
def test_copy_of_its_own_data_into_an_expanded_tensor_refuses_backward_as_eager(fn):
    for f in (fn, thunder.jit(fn)):
        leaf, a0 = _expanded_row(True)
        outs = f(a0)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as error:
            torch.autograd.grad(outs[0].sum(), leaf)
    assert fn.__name__ in str(error.value)


# ------------------------------------------------------------ logsumexp of a 0-d view of a composite's result (14012)


def _cov_then_logsumexp(a):  # (eager's cov of a vector is a 0-d view of its 1x1 result; logsumexp a new tensor)
    v0 = torch.cov(a.reshape(-1))
    return v0.logsumexp((0,), True), v0.logsumexp(0)


@pytest.mark.parametrize("values", [[1.0, 2.0, 4.0], [-0.0, -0.0], [float("inf"), 1.0], []])
@pytest.mark.filterwarnings("ignore:cov")
def test_logsumexp_of_a_zero_dim_view_is_a_new_tensor(values):
    assert_as_eager(_cov_then_logsumexp, lambda: (torch.tensor(values, dtype=torch.float64, requires_grad=True),))
    x = torch.tensor(-0.0)
    assert torch.equal(thunder.jit(lambda x: x.logsumexp(0).copysign(1.0))(x), x.logsumexp(0).copysign(1.0))


# ------------------- a flatten that copied (its argument laid out otherwise), saved, then its argument updated (14012)


def _cos_of_flattened_then_updated(a0, bumps):
    v0 = torch.cos(a0)
    for _ in range(bumps):
        v0.mul_(1)  # (updates before the flatten: the saved copy's count is its own)
    v1 = v0.flatten()  # (a copy where v0 is transposed, as a0; else a view, and eager's backward refuses)
    v2 = torch.cos(v1)
    v0.eq_(v2.sum())
    return (v0,)


@pytest.mark.parametrize("bumps", [0, 1])
@pytest.mark.parametrize("transposed", [True, False])
def test_saved_flatten_of_an_updated_tensor_is_stale_only_where_it_is_a_view(transposed, bumps):
    def make():
        leaf = torch.tensor([[-0.5, -0.5], [-0.5, -2.5], [0.5, -2.0]], requires_grad=True)
        return leaf, (((leaf * 1).t() if transposed else leaf * 1), bumps)

    def forward(f):
        leaf, args = make()
        (out,) = f(*args)
        return lambda: torch.autograd.grad([out, args[0]], leaf, [torch.ones_like(out)] * 2, allow_unused=True)

    _assert_same_gradients_or_error(_cos_of_flattened_then_updated, forward)


# ---------------------------------------------- number / x and x.__rdiv__(y): eager's x.reciprocal() * y (14015)


def _reflected_divisions(a):
    return 2 / a, a.__rdiv__(torch.tensor([-4.25, 7.5], dtype=torch.float64).reshape(1, 2)), 1.7 / a


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_reflected_division_rounds_and_differentiates_as_a_reciprocal(dtype):
    def make():  # (a zero: the reciprocal's gradient is infinite where the quotient's sum of infinities is NaN)
        leaf = torch.tensor([[-0.45703125, 0.0, 0.5859375]], dtype=dtype, requires_grad=True)
        return leaf, (leaf * 1).t()

    (_, e_in), (_, t_in) = make(), make()
    expected, actual = _reflected_divisions(e_in), thunder.jit(_reflected_divisions)(t_in)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype and torch.equal(a, e)
    grads = []
    for f in (_reflected_divisions, thunder.jit(_reflected_divisions)):
        leaf, a = make()
        outs = f(a)
        cotangents = [torch.linspace(-1.0, 1.0, o.numel(), dtype=o.dtype).reshape(o.shape) for o in outs]
        grads.append(torch.autograd.grad(outs, leaf, cotangents)[0])
    torch.testing.assert_close(grads[1], grads[0], equal_nan=True)


# ---------------------------------------- attention on float16/bfloat16 computed as eager's math kernel (14016)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 1), (2, 3, 5, 8)])
@pytest.mark.parametrize("scale", [None, -0.5])
def test_low_precision_attention_on_the_math_kernel_rounds_once_as_eager(dtype, shape, scale):
    def fn(q, k, v):  # (a 2-d query: eager's math kernel, in float32, the result rounded once)
        return (F.scaled_dot_product_attention(q, k * 2, v, is_causal=True, scale=scale).flatten(-2),)

    def make():
        g = torch.Generator().manual_seed(0)
        return tuple(torch.randn(shape, generator=g).to(dtype).requires_grad_() for _ in range(3))

    with sdpa_kernel(SDPBackend.MATH):
        (expected,), (actual,) = fn(*make()), thunder.jit(fn)(*make())
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    assert_as_eager(_in_kernel(fn, "math"), make)


# -------------------------------------- attention's masks added as eager's math kernel adds them (14002, 14004)

_INF = float("inf")


@pytest.mark.parametrize(
    "values",
    [
        [[2.5, -0.4], [-0.35, -0.0], [-2.3, -_INF]],  # (a masked score +inf: inf - inf, NaN, as in eager)
        [[0.5, _INF], [1.0, 0.0], [float("nan"), 2.0]],
        [[-_INF, -_INF], [1.0, 2.0], [0.5, -0.5]],  # (a row of -inf scores: eager's safe softmax gives zeros)
    ],
)
@pytest.mark.parametrize("mask", [None, "causal", "bool"])
@pytest.mark.parametrize("shape", [(3, 2), (1, 1, 3, 2)])
def test_attention_masks_and_infinite_scores_as_eager(values, mask, shape):
    def fn(q):
        m = torch.tensor([[True, False, False], [True, True, False], [False, False, False]]) if mask == "bool" else None
        return (F.scaled_dot_product_attention(q, q * 2, q, attn_mask=m, is_causal=mask == "causal"),)

    assert_as_eager(fn, lambda: (torch.tensor(values).reshape(shape).requires_grad_(),))


# ---------------------------- detach() of an output that is returned as a view of a new base (campaign, 14003)


def _viewed_updated_then_detached(a0):
    v0 = (a0 * 3).view(-1)  # (a view of a tensor the program computes: the step after the call makes it again)
    v0.mul_(2)
    return v0.detach(), v0


@pytest.mark.parametrize("shape", [(), (2, 3)])
def test_detach_of_an_output_viewing_a_computed_tensor_shares_its_storage(shape):
    assert_as_eager(_viewed_updated_then_detached, lambda: (torch.ones(shape, requires_grad=True),))


# ---------------------------------- NumPy results laid out in their operands' memory order (campaign, 14005)


def _numpy_of_a_transposed_tensor(x):
    a = x.detach().numpy()  # (a transposed array: NumPy's results follow its memory order)
    t = torch.from_numpy(np.where(a > 0, a, 0.5) / 3) * x
    return t.exp().flatten(), torch.from_numpy(np.exp(a)).reshape(-1)


def test_numpy_results_keep_their_operands_memory_order():
    assert_as_eager(_numpy_of_a_transposed_tensor, lambda: ((torch.arange(6.0).reshape(3, 2) - 2).t(),), grads=False)
    e, t = (
        _numpy_of_a_transposed_tensor(torch.ones(3, 2).t()),
        thunder.jit(_numpy_of_a_transposed_tensor)(torch.ones(3, 2).t()),
    )
    assert [x._is_view() for x in t] == [x._is_view() for x in e]


def _indexed_then_detached(a0):  # (campaign, 14015: the detached alias made again without bumping the base's counter)
    v0 = a0[torch.tensor([0, 0])]
    return v0.detach(), v0[[-1, 0]]


def test_detach_of_a_rebuilt_view_keeps_the_saved_outputs_version():
    assert_as_eager(_indexed_then_detached, lambda: (torch.arange(9.0).reshape(3, 3).requires_grad_() * 1,))
    leaf = torch.arange(9.0).reshape(3, 3).requires_grad_()
    outs = thunder.jit(_indexed_then_detached)(leaf * 1)
    (g,) = torch.autograd.grad(outs[1].sum(), leaf)  # (the program's saved output is at the version it saved)
    torch.testing.assert_close(g, torch.tensor([[2.0] * 3, [0.0] * 3, [0.0] * 3]))


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_over_no_keys(is_causal):  # (campaign, 14013: eager's safe softmax has no row to check)
    def fn(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),)

    assert_as_eager(fn, lambda: (torch.ones(1, 2, 4, 8), torch.ones(1, 2, 0, 8), torch.ones(1, 2, 0, 8)))


def test_attention_of_a_channels_last_global_gives_eagers_values_and_gradients():
    # (the differential slice drew it: the CPU flash kernel was given rows of stride 3 and computed wrong values, where
    # eager's dispatcher runs its math kernel)
    import torch.nn.functional as F

    import thunder

    leaf = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)

    def f():
        return torch.tanh(F.scaled_dot_product_attention(g, g, g))

    g = (leaf * 1).contiguous(memory_format=torch.channels_last)
    want = f()
    (want_grad,) = torch.autograd.grad(want.sum(), leaf)
    g = (leaf * 1).contiguous(memory_format=torch.channels_last)  # (a new graph: eager's backward freed the first)
    got = thunder.jit(f)()
    (got_grad,) = torch.autograd.grad(got.sum(), leaf)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)
