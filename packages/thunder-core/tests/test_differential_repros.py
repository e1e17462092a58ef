"""One minimal reproduction per defect class found by the differential fuzzer (``test_differential.py``,
``fuzz_campaign.py``) and by PyTorch's op_db (``test_op_db.py``). Each is a strict xfail naming its
class and issue, pinned to the exception the defect raises today: when a fix lands the test XPASSes,
and the fixer removes the mark (and the matching entry of ``DISABLED_IN_CI`` /
``op_db_known_failures.txt``).

Every test compares ``thunder.jit`` with eager PyTorch on cloned inputs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _clone(xs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in xs]


def _assert_same(fn, *inputs, grads: bool = False) -> None:
    """Outputs (values, dtypes, requires_grad), inputs after the call and, with ``grads``, the
    gradients of the inputs that require grad, all equal eager's."""
    e_in, t_in = _clone(inputs), _clone(inputs)
    expected = fn(*e_in)
    actual = thunder.jit(fn)(*t_in)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.requires_grad == e.requires_grad, "requires_grad differs"
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True)
    for a, e in zip(t_in, e_in):
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True, msg="input after the call differs")
    if grads:
        outs = [(a, e) for a, e in zip(actual, expected) if e.requires_grad]
        e_leaves = [x for x in e_in if x.requires_grad]
        t_leaves = [x for x in t_in if x.requires_grad]
        e_grads = torch.autograd.grad([e.sum() for _, e in outs], e_leaves, allow_unused=True)
        t_grads = torch.autograd.grad([a.sum() for a, _ in outs], t_leaves, allow_unused=True)
        for a, e, x in zip(t_grads, e_grads, t_leaves):
            a = torch.zeros_like(x) if a is None else a
            e = torch.zeros_like(x) if e is None else e
            torch.testing.assert_close(a, e, equal_nan=True, msg="gradient differs")


def _x(*shape, requires_grad: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_(requires_grad)


# --- issue 13: gradients -------------------------------------------------------------------------


def test_detach_is_a_stop_gradient():
    _assert_same(lambda a: a * a.detach(), _x(2, 3), grads=True)


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 10


def test_custom_function_backward_is_used():
    _assert_same(lambda a: _ScaleGrad.apply(a), _x(2, 3), grads=True)


def test_no_grad_region_is_respected():
    def fn(a):
        with torch.no_grad():
            b = a * 3
        return a * b

    _assert_same(fn, _x(2, 3), grads=True)


def test_output_of_non_differentiable_inputs_does_not_require_grad():
    _assert_same(lambda a, b: torch.sin(a), _x(2, 3, requires_grad=False), _x(2, 3))


def test_slice_assignment_is_differentiable():
    def fn(a):
        b = torch.sin(a)
        b[..., :1] = 0.5
        return b

    _assert_same(fn, _x(2, 3), grads=True)


def test_native_layer_norm_statistics_do_not_require_grad():
    w, b = _x(3), _x(3)
    _assert_same(lambda a, w, b: torch.native_layer_norm(a, (3,), w, b, 1e-5), _x(2, 3), w, b)


def test_inplace_mul_of_input_by_parameter_grad():
    def fn(a, w):
        a.mul_(w)  # timm's LayerScale(inplace=True): w's gradient needs a's value before the update
        return a

    _assert_same(fn, _x(2, 3, requires_grad=False), _x(3), grads=True)


def test_prod_with_a_zero_grad():
    _assert_same(lambda a: (a - a).prod(1) + a.sum(1), _x(2, 3), grads=True)


def test_std_and_norm_of_constant_grad():
    _assert_same(lambda a: (a * 0 + 1).std() + (a * 0).norm() + a.sum(), _x(2, 3), grads=True)


def test_amax_backward_of_a_nan_cotangent():
    # var of one element is NaN; eager's amax backward, (g / count) * mask, makes every element's
    # gradient NaN (NaN * 0), not only the maximum's
    _assert_same(lambda a: a.amax().var(), _x(2, 3), grads=True)


def test_slice_assignment_under_no_grad():
    def fn(a):
        b = torch.sin(a)
        with torch.no_grad():
            b[..., :1] = 0.5
        return b

    _assert_same(fn, _x(2, 3), grads=True)


# --- issue 14: views, aliases, in-place ----------------------------------------------------------


def test_inplace_through_mT_updates_base():
    def fn(a):
        b = torch.sin(a)
        b.mT.mul_(2)
        return b

    _assert_same(fn, _x(2, 3, requires_grad=False))


def test_inplace_through_detach_updates_input():
    def fn(a):
        b = a.detach()
        b.add_(1)
        return b * 1

    _assert_same(fn, _x(2, 3, requires_grad=False))


def test_same_tensor_passed_twice():
    def fn(a, b):
        a.add_(a)
        return torch.sin(b)

    def run(f):
        x = _x(2, 3, requires_grad=False)
        return f(x, x), x

    expected, e_x = run(fn)
    actual, t_x = run(thunder.jit(fn))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(t_x, e_x)


def test_inplace_through_float_of_float_tensor_updates_input():
    def fn(a):
        b = a.float()  # a is float32: eager returns a itself
        b.add_(1)
        return a * 1

    _assert_same(fn, _x(2, 3, requires_grad=False).float())


def test_inplace_through_mT_of_0d_tensor():
    def fn(a):
        b = torch.sin(a)
        b.mT.add_(a)
        return b

    _assert_same(fn, _x(requires_grad=False))


def test_setitem_squeezes_leading_unit_dims_of_value():
    def fn(a):
        a[0] = a  # a is (1, 3): eager drops the value's leading 1
        return a * 1

    _assert_same(fn, _x(1, 3, requires_grad=False))


def test_bool_inplace_add_with_alpha():
    def fn(a):
        b = a[0]
        b.add_(b, alpha=-1)
        return b

    _assert_same(fn, torch.tensor([[True, True, False]]))


# --- op_db: defects not named in the issues ------------------------------------------------------


def test_tensor_where_method():
    # x.where(condition, y) is torch.where(condition, x, y)
    _assert_same(lambda a, c: a.where(c, 0.5), _x(2, 3, requires_grad=False), torch.tensor([True, False, True]))


def test_index_fill():
    _assert_same(lambda a: a.index_fill(0, torch.tensor([0]), -1.0), _x(requires_grad=False))  # a 0-d input


def test_flip_dims_keyword():
    _assert_same(lambda a: torch.flip(a, dims=(0,)), _x(2, 3, requires_grad=False))


def test_var_unbiased_grad():
    _assert_same(lambda a: torch.var(a, True), _x(2, 3), grads=True)  # unbiased given positionally


def test_narrow_with_tensor_start():  # a tensor literal's value is known while tracing (known_values.py)
    _assert_same(lambda a: torch.narrow(a, 1, torch.tensor(1), 2), _x(2, 3, requires_grad=False))


def test_nll_loss_with_weight_grad():
    target, weight = torch.tensor([0, 2]), torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    _assert_same(lambda a: F.nll_loss(a, target, weight=weight, reduction="none"), _x(2, 3), grads=True)


def test_output_holding_an_input_value_updated_later():
    # found by the fuzzer: v.copy_(b) makes v's value b's, and returning it gave back the caller's b,
    # which the in-place update of b then changed
    def fn(a, b):
        v = a * 2
        w = v.view(-1, 1)
        v.copy_(b)
        b.add_(1)
        return v, w, v[1:]

    _assert_same(fn, _x(2, requires_grad=False), _x(2, requires_grad=False))


def test_batch_norm_statistics_do_not_require_grad():
    # native_batch_norm refuses running statistics that require grad: which outputs eager's autograd
    # tracks is learned one input at a time
    w, b = _x(3), _x(3)

    def fn(a, w, b):
        mean, var = torch.zeros(3, dtype=a.dtype), torch.ones(3, dtype=a.dtype)
        return torch.native_batch_norm(a, w, b, mean, var, True, 0.1, 1e-5)

    _assert_same(fn, _x(2, 3), w, b, grads=True)


@pytest.mark.parametrize(
    "shape, dim, keepdim",
    [((0,), -1, False), ((2, 0), -1, True), ((0, 3), 0, False), ((2, 0, 3), (1, 2), False)],
)
def test_logsumexp_over_an_empty_dimension(shape, dim, keepdim):
    # fuzzer, campaign seeds 3009/3011/3013: the backward recomputed amax over the empty dim and raised; eager
    # gives -inf and an empty gradient
    _assert_same(
        lambda a: torch.logsumexp(a, dim, keepdim), torch.randn(shape, dtype=torch.float64).requires_grad_(), grads=True
    )


# found by the fuzz campaign (issue 25, seed 3017): eager's prod backward gives each element the product of the others
# (an exclusive cumulative product) when the input holds a zero, so a NaN or an infinity elsewhere makes those
# gradients NaN (thunder gave 0); with no zero anywhere it is g * result / a, and a full reduction of an input with two
# zeros or more has no gradient
@pytest.mark.parametrize(
    "values",
    [
        [[float("nan"), -0.0, -2.18], [0.57, -1.08, -1.40]],
        [[float("inf"), 0.0, 2.0], [3.0, 4.0, 5.0]],
        [[float("-inf"), 1.0, 2.0], [3.0, float("-inf"), 5.0]],
        [[0.0, float("nan"), 2.0], [3.0, 0.0, 5.0]],
    ],
    ids=["nan_and_a_zero", "inf_and_a_zero", "two_negative_infs", "nan_and_two_zeros"],
)
@pytest.mark.parametrize("dim", [None, 0, 1], ids=["all", "dim0", "dim1"])
def test_prod_grad_with_non_finite_elements_and_zeros(values, dim):
    a = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    _assert_same(lambda a: a.prod() if dim is None else a.prod(dim), a, grads=True)


# Campaign seed 3017 (issue 25): a bfloat16 fmod_ whose quotient sits at a rounding boundary (3 * a / a in bfloat16).
# Both forwards give 1.109375 (a quotient truncated to 2). Eager's backward is derivatives.yaml's
# -grad * self.div(other, rounding_mode="trunc") evaluated in bfloat16, where the quotient 2.993 is rounded to 3.0
# before it is truncated: the leaf's gradient is 3 - 3 = 0. Thunder's prim rule took the quotient in float32 (2) and
# gave 1; fmod now has a torch-level rule computing the quotient in the arguments' dtype, as eager does.
def test_bfloat16_fmod_grad_at_a_rounding_boundary():
    def fn(a0):
        v0 = torch.add(a0, a0, alpha=2)
        v0.fmod_(a0)
        return v0

    _assert_same(fn, torch.tensor([[1.1171875], [1.15625]], dtype=torch.bfloat16, requires_grad=True), grads=True)


def test_view_input_updated_through_a_select_of_a_slice_then_returned():
    # campaign seed 7102: thunder's backward raised autograd's "A view was created in no_grad mode and its base
    # ... has been modified inplace": the select (run by PyTorch, an opaque call) made a view of the input that
    # backward saved as it was, and the write-back then overwrote it. Neighbours: test_view_chain_input_updates.py
    def fn(a0):
        v0 = a0[..., 1:]
        v0.select(-1, 0).pow_(2)
        return v0

    leaf_e = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(3, 2).requires_grad_()
    leaf_t = leaf_e.detach().clone().requires_grad_()
    e = fn((leaf_e * 1)[::2])
    t = thunder.jit(fn)((leaf_t * 1)[::2])
    torch.testing.assert_close(t, e)
    e.sum().backward()
    t.sum().backward()
    torch.testing.assert_close(leaf_t.grad, leaf_e.grad)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("limits", [(-0.5, 0.5), (-1.5, 2.5), (0.0, 6.0)], ids=str)
@pytest.mark.parametrize("inplace", [False, True])
def test_hardtanh_of_an_integer_tensor_keeps_its_dtype(dtype, limits, inplace):
    # campaign seed 9201: the trace said float32 for F.hardtanh(int64 tensor, -0.5, 0.5) while the kernel returns int64
    # (it converts the limits to the integer type), so the in-place form raised "result type Float can't be cast"
    def fn(x):
        y = F.hardtanh(x, *limits, inplace=inplace)
        return y, y.dtype == x.dtype

    x = torch.tensor([[-3, 0, 1, 2, 7]]).to(dtype)
    try:
        expected = fn(x.clone())
    except RuntimeError as e:  # uint8 with a limit below zero after truncation
        with pytest.raises(RuntimeError, match=str(e)):
            thunder.jit(fn)(x.clone())
        return
    actual = thunder.jit(fn)(x.clone())
    assert actual[1] == expected[1] and actual[0].dtype == expected[0].dtype
    assert torch.equal(actual[0], expected[0])


@pytest.mark.parametrize("op", ["type_as", "to"])
@pytest.mark.parametrize(
    "a_dtype, a_requires_grad",
    [(torch.int64, False), (torch.float64, False), (torch.float64, True), (torch.float32, True)],
    ids=str,
)
def test_a_conversion_to_another_tensors_dtype_takes_no_gradient_from_it(op, a_dtype, a_requires_grad):
    # outside fuzzer (generate-and-test), seed 2: int_tensor.type_as(w) with w requiring grad required grad in thunder
    # (the dtype's tensor counted as a differentiable argument); eager's result requires grad only through a
    a = torch.tensor([0.0, 1.0, 3.0]).to(a_dtype).requires_grad_(a_requires_grad)
    w = torch.tensor([-0.3, 0.7, 1.1], requires_grad=True)

    def fn(a, w):
        y = getattr(a, op)(w)
        return y * 2, y.requires_grad

    expected, actual = fn(a, w), thunder.jit(fn)(a, w)
    assert actual[1] == expected[1] and actual[0].requires_grad == expected[0].requires_grad
    torch.testing.assert_close(actual[0], expected[0])
    if expected[0].requires_grad:
        ge = torch.autograd.grad(expected[0].sum(), [a, w], allow_unused=True)
        gt = torch.autograd.grad(actual[0].sum(), [a, w], allow_unused=True)
        assert gt[1] is None or not gt[1].any()
        torch.testing.assert_close(gt[0], ge[0])


@pytest.mark.parametrize("as_dict", [False, True])
def test_an_argument_updated_under_no_grad_is_returned_as_the_callers_tensor(as_dict):
    # outside fuzzer, seed 3: thunder returned a copy (values and gradients right, but a later write through the
    # output did not reach the argument); eager returns the argument itself, with the history it had
    def fn(a0):
        with torch.no_grad():
            a0.mul_(a0)
        return {"a0": a0} if as_dict else a0

    leaves = [torch.tensor([[0.5, -2.0], [1.5, 3.0]], requires_grad=True) for _ in range(2)]
    args = [leaf * 1 for leaf in leaves]
    expected, actual = fn(args[0]), thunder.jit(fn)(args[1])
    e, a = (expected["a0"], actual["a0"]) if as_dict else (expected, actual)
    assert e is args[0] and a is args[1]
    torch.testing.assert_close(a, e)
    (e * 2).sum().backward()
    (a * 2).sum().backward()
    torch.testing.assert_close(leaves[1].grad, leaves[0].grad)


_VIEWS_OF_ARGUMENT = {
    "non-leaf": lambda l: l * 1,
    "column view": lambda l: (l * 1)[:, 1:],
    "row view": lambda l: (l * 1)[1:],
}


@pytest.mark.parametrize("make", _VIEWS_OF_ARGUMENT.values(), ids=_VIEWS_OF_ARGUMENT.keys())
@pytest.mark.parametrize("returned", ["itself", "product"])
def test_an_update_under_no_grad_through_a_view_keeps_the_gradient_of_the_written_elements(make, returned):
    # outside fuzzer, seed 4: `with torch.no_grad(): a1[..., 0] += 1` zeroed the gradient of the written elements
    # (the update cut them off from the base's history); eager's no_grad update records nothing, so they keep it
    def fn(a1):
        with torch.no_grad():
            a1[..., 0].add_(1)
            a1[..., 0] += 1
        return a1 if returned == "itself" else a1 * 3

    grads = []
    for f in (fn, thunder.jit(fn)):
        leaf = torch.arange(8.0, dtype=torch.float64).reshape(4, 2).requires_grad_()
        a1 = make(leaf)
        out = f(a1)
        grads.append(torch.autograd.grad((out * 3).sum() + (a1 * 2).sum(), leaf)[0])
        grads.append(out.detach())
    torch.testing.assert_close(grads[2], grads[0])
    torch.testing.assert_close(grads[3], grads[1])


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("value", [float("nan"), 1.5, float("inf")], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_of_a_zero_dim_tensor_along_a_dim_passes_the_whole_gradient(op, value, keepdim):
    # outside fuzzer, seed 4: x.max(dim=0).values of a 0-d NaN had a NaN gradient (eager: the cotangent)
    def fn(x):
        return getattr(x, op)(dim=0, keepdim=keepdim).values * 3

    xe = torch.tensor(value, requires_grad=True)
    xt = torch.tensor(value, requires_grad=True)
    torch.testing.assert_close(thunder.jit(fn)(xt), fn(xe), equal_nan=True)
    torch.testing.assert_close(torch.autograd.grad(thunder.jit(fn)(xt), xt)[0], torch.autograd.grad(fn(xe), xe)[0])


def test_a_layout_change_of_an_expanded_argument_then_a_reshape():
    # outside fuzzer, seed 3: the element positions of an expanded root were divided by its zero stride
    # (ZeroDivisionError while the program ran)
    def fn(a1):
        a1.unsqueeze_(0)
        return a1.reshape_as(a1), a1 // 2

    def make():
        return (torch.arange(3.0).reshape(1, 3, 1) * 1).unsqueeze(0).expand(2, 1, 3, 1)

    expected, actual = fn(make()), thunder.jit(fn)(make())
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.randn(3), lambda: torch.randn(3, requires_grad=True) * 1, lambda: torch.randn(2, 3).t()],
    ids=["tensor", "non-leaf", "transposed"],
)
@pytest.mark.parametrize("start", ["empty_like", "product"])
def test_a_tensor_copied_into_is_its_own_memory(make, start):
    # outside fuzzer, seed 5: `v = torch.empty_like(a); v.copy_(a); return v` returned `a` itself (the copy was
    # elided), so a write through the output changed the caller's argument
    def fn(a):
        v = torch.empty_like(a) if start == "empty_like" else a * 2
        v.copy_(a)
        return v

    a = make()
    out = thunder.jit(fn)(a)
    expected = fn(a)
    torch.testing.assert_close(out, expected)
    assert out.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    assert out.requires_grad == expected.requires_grad
    before = a.detach().clone()
    with torch.no_grad():
        out.add_(1)
    torch.testing.assert_close(a.detach(), before)


def test_input_updated_under_no_grad_and_returned_is_the_callers_tensor():
    # the CI fuzz slice (issue 25): a non-leaf input updated only under no_grad and returned came back as a copy;
    # eager returns the caller's tensor itself, its history unchanged
    def fn(a):
        v = a * 2
        with torch.no_grad():
            a.add_(a)
        return v, a

    def run(f):
        leaf = _x(2, 3)
        a = leaf * 1
        out = f(a)
        assert out[1] is a
        (grad,) = torch.autograd.grad(out[0].sum() + (out[1] * out[1]).sum() + (a * 3).sum(), leaf)
        return out, grad

    (e_out, e_grad), (t_out, t_grad) = run(fn), run(thunder.jit(fn))
    for t, e in zip(t_out, e_out):
        torch.testing.assert_close(t, e)
    torch.testing.assert_close(t_grad, e_grad)
