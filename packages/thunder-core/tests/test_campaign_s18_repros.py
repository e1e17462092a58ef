"""Classes the differential campaign (``fuzz_campaign.py``, seeds 14001..14008, session 18) found, each against eager.

Each program takes the gradient, as the campaign does, to the leaves the inputs are made from, through the outputs and
through the inputs that are views of a non-leaf base (read again after the call)."""

from __future__ import annotations

import pytest
import torch

import thunder


def _outcome(fn, make_inputs):
    """(outputs, gradients of the leaves) of ``fn`` on fresh inputs, or the RuntimeError its forward or backward
    raised. ``make_inputs()`` gives (the leaves, the inputs)."""
    leaves, args = make_inputs()
    try:
        out = fn(*args)
        seeds = [o for o in out if o.requires_grad]
        seeds += [a for a in args if a.requires_grad and not a.is_leaf]
        gen = torch.Generator().manual_seed(1234)
        cotangents = [torch.randn(s.shape, generator=gen, dtype=s.dtype) for s in seeds]
        grads = torch.autograd.grad(seeds, leaves, cotangents, allow_unused=True) if seeds else ()
        return out, grads
    except RuntimeError as e:
        return e


def _assert_as_eager(fn, make_inputs, *, message: str | None = None) -> None:
    """thunder.jit(fn) gives eager's outputs and gradients, or raises where eager raises (then naming the user's
    line and, where given, with ``message`` in it)."""
    expected = _outcome(fn, make_inputs)
    actual = _outcome(thunder.jit(fn), make_inputs)
    if isinstance(expected, Exception):
        assert isinstance(actual, Exception), f"eager raised {expected!r}, thunder ran"
        if message is not None:
            assert message in str(expected) and message in str(actual), (expected, actual)
            assert f"in {fn.__name__}" in str(actual), actual
        return
    assert not isinstance(actual, Exception), f"thunder raised {actual!r}, eager ran"
    (eo, eg), (ao, ag) = expected, actual
    assert len(eo) == len(ao)
    for e, a in zip(eo, ao):
        assert (a.dtype, a.shape, a.requires_grad) == (e.dtype, e.shape, e.requires_grad)
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True)
    for e, a in zip(eg, ag):
        assert (e is None) == (a is None)
        if e is not None:
            torch.testing.assert_close(a, e, equal_nan=True)


def _view_of_non_leaf(values, dtype=torch.float64, view=lambda b: b[1:]):
    def make():
        leaf = torch.tensor(values, dtype=dtype, requires_grad=True)
        return [leaf], (view(leaf * 1),)

    return make


_MODIFIED = "modified by an inplace operation"


# ---------------------------------------------------------------- saved values updated in place (eager's backward raises)


def _double_then_mul_(add):  # (campaign, old features, seed 14006) x.double() of a float64 x is x itself
    v0 = add.double()
    v0.mul_(add)
    return (v0,)


def test_an_empty_view_updated_in_place_gets_its_history_from_the_program():
    # the empty view was not given the update's history after the call (nothing to copy): its gradient then went
    # around the program's backward, which raises eager's error
    _assert_as_eager(_double_then_mul_, _view_of_non_leaf([]), message=_MODIFIED)
    _assert_as_eager(_double_then_mul_, _view_of_non_leaf([1.0, 2.0]), message=_MODIFIED)


# ---------------------------------------------------------------- arguments viewing one storage share eager's counter


def _sin_of_view_then_add_(a0, a1, a2):  # (campaign, widened, seed 14002)
    v5 = torch.sin(a2)
    a0.add_(a0)
    return (v5,)


def _aliased(view, values=((1.5, -0.25, -2.0), (0.5, -1.0, -1.25))):
    def make():
        leaf = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        a0 = leaf * 1
        return [leaf], (a0, torch.tensor([1, 0]), view(a0))

    return make


def test_an_update_of_one_argument_makes_a_value_saved_from_its_view_stale():
    # the tracer counted each argument's updates apart: sin's saved a2 looked current after a0.add_, which bumps
    # the counter a2 shares with a0 in eager
    _assert_as_eager(_sin_of_view_then_add_, _aliased(lambda a0: a0[..., :1]), message=_MODIFIED)
    _assert_as_eager(_sin_of_view_then_add_, _aliased(lambda a0: a0.detach()[..., :1]), message=_MODIFIED)
    # ``.data`` has a counter of its own: eager's backward runs
    _assert_as_eager(_sin_of_view_then_add_, _aliased(lambda a0: a0.data[..., :1]))


def _cos_then_update_of_an_empty_view(scatter_add, var):  # (campaign, old features, seed 14008 after the fixes)
    v6 = torch.cos(scatter_add)
    with torch.no_grad():
        var.add_(var, alpha=-1)
    return (torch.erf(v6),)


def test_empty_views_of_one_base_share_eagers_counter():
    # empty arguments share no memory (no allocation), so they were not grouped as aliases: a1 = a0[0] updated
    # in place left cos's saved a0 current for thunder, stale for eager
    def make():
        a0 = torch.tensor([[], []], dtype=torch.float64, requires_grad=True)
        return [a0], (a0, a0[0])

    _assert_as_eager(_cos_then_update_of_an_empty_view, make, message=_MODIFIED)


def _fill_then_gelu(a0, a1, a2):  # (campaign, widened, seed 14005): a wrong refusal
    with torch.no_grad():
        a0.fill_(1.5)
    return (torch.nn.functional.gelu(a0.flatten()),)


def test_a_value_saved_after_an_update_of_an_aliased_argument_is_current():
    # gelu saved a view of a0 taken after the update; the storage the aliased arguments view was counted apart from
    # a0, so that value looked updated since and the program's backward refused where eager's runs
    def make():
        a0 = torch.tensor([[-1.0], [0.5], [-0.5]], dtype=torch.float64, requires_grad=True)
        return [a0], (a0, a0[..., :1], torch.tensor([1]))

    _assert_as_eager(_fill_then_gelu, make)
    _assert_as_eager(_fill_then_gelu, _aliased(lambda a0: a0[..., :1]))


def _add_then_mul_through_a_view(a0, a1):
    a0.add_(1)
    a1.mul_(2)
    return (a0 * 2,)


def test_updates_of_arguments_viewing_one_base_bump_their_one_counter():
    # eager's a0 and a1 = a0[..., :1] share a counter: two updates, two bumps of both (the tracer kept one)
    def make():
        a0 = torch.arange(6.0).reshape(2, 3)
        return a0, a0[..., :1]

    (e0, e1), (t0, t1) = make(), make()
    expected = _add_then_mul_through_a_view(e0, e1)
    actual = thunder.jit(_add_then_mul_through_a_view)(t0, t1)
    torch.testing.assert_close(actual, expected)
    assert (t0._version, t1._version) == (e0._version, e1._version)


def test_a_later_call_whose_aliases_share_no_counter_is_traced_again():
    # the program's counts hold for arguments sharing eager's counter as when traced: ``.data``, with a counter of its
    # own, updated in place leaves sin's saved a2 current (eager's backward runs), ``detach()`` does not
    def make(alias):
        def make_inputs():
            leaf = torch.tensor([[1.5, -0.25, -2.0], [0.5, -1.0, -1.25]], dtype=torch.float64, requires_grad=True)
            base = leaf * 1
            return [leaf], (alias(base), torch.tensor([1, 0]), base[..., :1])

        return make_inputs

    jitted = thunder.jit(_sin_of_view_then_add_)
    for alias in (torch.Tensor.detach, lambda b: b.data, torch.Tensor.detach, lambda b: b.data):
        expected, actual = _outcome(_sin_of_view_then_add_, make(alias)), _outcome(jitted, make(alias))
        assert isinstance(actual, Exception) == isinstance(expected, Exception), (expected, actual)


# ---------------------------------------------------------------- in-place ops without a derivative


def _acosh_(a0):  # (campaign, both generators, seeds 14002-14008)
    v0 = a0 * 1 + 2
    v0.acosh_()
    return (v0,)


def test_an_in_place_op_without_a_derivative_raises_eagers_error():
    # eager's node for x.acosh_() is a real one (AcoshBackward1) whose backward raises: only a node named
    # NotImplemented was asked, so thunder's backward computed a gradient
    def make():
        leaf = torch.tensor([[1.5, -0.25, 2.0]], dtype=torch.float64, requires_grad=True)
        return [leaf], (leaf,)

    _assert_as_eager(_acosh_, make, message="the derivative for 'inplace version of acosh' is not implemented")
    leaf = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    out = thunder.jit(_acosh_)(leaf)[0]
    with pytest.raises(NotImplementedError, match="in _acosh_"):
        out.sum().backward()


@pytest.mark.parametrize(
    "fn",
    [lambda x, y: x // y, lambda x, y: torch.heaviside(x, y), lambda x, y: (x * 1 + 2).acosh_()],
    ids=["floor_divide", "heaviside", "acosh_"],
)
def test_a_missing_derivative_raises_eagers_exception_type(fn):
    # eager raises RuntimeError for floor_divide's and heaviside's NotImplemented node and NotImplementedError for
    # acosh_'s node; thunder chose the type from the message's words and raised NotImplementedError for all three
    # (pytest.raises(RuntimeError) passes for a NotImplementedError, a subclass: the types are compared exactly)
    def error_of(f):
        x = torch.tensor([1.5, -0.5, 2.5], requires_grad=True)
        y = torch.tensor([0.5, 2.0, -1.0], requires_grad=True)
        with pytest.raises(RuntimeError) as info:
            f(x, y).sum().backward()
        return info.type

    assert error_of(thunder.jit(fn)) is error_of(fn)


# ---------------------------------------------------------------- updates of expanded views autograd records


def _zero_then_matmul_of_alias(var, flag, take):  # (campaign, widened, seed 14006)
    var.zero_()
    return (torch.matmul(take, take),)


def _fill_then_scale(a0):  # (campaign, widened, seed 14008)
    a0.fill_(1.5)
    return ((a0 * 2).flatten(),)


def _fill_under_no_grad_then_scale(a0):
    with torch.no_grad():
        a0.fill_(1.5)
    return ((a0 * 2).flatten(),)


def test_an_update_of_an_expanded_view_with_grad_raises_in_backward_as_eager():
    # eager runs zero_/fill_ on an expanded view, but its backward (CopySlices copying the gradient into that view)
    # raises; thunder's computed a gradient. Under no_grad there is no such node: both run
    def expanded_with_alias():
        leaf = torch.tensor([[-3.0], [-0.5], [2.5]], dtype=torch.float64, requires_grad=True)
        a0 = (leaf * 1)[0:1].expand(4, -1)
        return [leaf], (a0, torch.tensor([True]), a0[0])

    def expanded():
        leaf = torch.tensor([0.75], dtype=torch.float64, requires_grad=True)
        return [leaf], ((leaf * 1).unsqueeze(0).expand(2, -1),)

    overlap = "more than one element of the written-to tensor refers to a single memory location"
    _assert_as_eager(_zero_then_matmul_of_alias, expanded_with_alias, message=overlap)
    _assert_as_eager(_fill_then_scale, expanded, message=overlap)
    _assert_as_eager(_fill_under_no_grad_then_scale, expanded)


# ---------------------------------------------------------------- dtypes as eager's at every step


def _scatter_clamp_then_matmul(squeeze):  # (campaign, widened, seed 14004)
    v0 = squeeze.scatter(1, torch.zeros_like(squeeze, dtype=torch.int64), squeeze.expand_as(squeeze))
    v2 = torch.clamp(v0, max=v0)
    v3 = (torch.empty((1, 0, 3), dtype=torch.float64) + v2.mean()).acos()
    return (torch.matmul(v2, v3),)


def _matmul(a, b):
    return (torch.matmul(a, b),)


def test_a_batched_matmul_of_nothing_takes_the_second_dtype_as_eager():
    # eager's bmm path returns before its dtype check when the product is empty, in the second operand's dtype;
    # thunder refused ("expected m1 and m2 to have the same dtype"). Its folded (mm) path still refuses, as eager's
    _assert_as_eager(_scatter_clamp_then_matmul, lambda: ([], (torch.zeros(2, 0),)))
    for a, b in [((2, 0), (1, 0, 3)), ((1, 0, 1), (1, 1, 3)), ((0, 2, 1), (0, 1, 3)), ((1, 2, 0), (0, 3))]:

        def make(a=a, b=b):
            leaves = [torch.zeros(a, requires_grad=True), torch.ones(b, dtype=torch.float64, requires_grad=True)]
            return leaves, tuple(leaves)

        _assert_as_eager(_matmul, make)


# ---------------------------------------------------------------- views of a multi-view op whose base was updated


def _chunk_then_update_base(a0):  # (campaign, widened, seed 14008, with the view used after the update)
    v1 = a0.unsqueeze(0) * 3
    v2 = v1.chunk(2, -1)[0]
    v1.div_(a0, rounding_mode="trunc")
    return (v2 * 2,)


def _chunk_then_update_base_under_no_grad(a0):
    v1 = a0 * 2
    v2 = v1.chunk(2, -1)[0]
    with torch.no_grad():
        v1.mul_(3)
    return (v2.exp(),)


def _chunk_then_update_base_returned(a0):  # (campaign, widened, seed 14008)
    v1 = a0.unsqueeze(0) * 3
    v2 = v1.chunk(2, -1)[0]
    v1.div_(a0, rounding_mode="trunc")
    return (v2,)


def test_a_multi_view_read_after_its_base_was_updated_raises_as_eager():
    # eager refuses the history of an output of chunk/split/unbind whose base was updated in place after it (also
    # under no_grad); thunder re-derived the view from the updated base and computed a gradient
    def make():
        leaf = torch.tensor([1.5, -0.25, -2.0, 0.5, -1.0], dtype=torch.float64, requires_grad=True)
        return [leaf], (leaf,)

    message = "is a view and its base or another view of its base has been modified inplace"
    _assert_as_eager(_chunk_then_update_base, make, message=message)
    _assert_as_eager(_chunk_then_update_base_under_no_grad, make, message=message)
    # returned as it is (the step after the call made it a view of the base's new value, whose gradient ran)
    _assert_as_eager(_chunk_then_update_base_returned, make, message=message)


# ---------------------------------------------------------------- as_strided of an argument sharing its storage


def _as_strided_of_aliased(a0, a1):  # (campaign, both generators, seeds 14001/14003)
    v = a0.as_strided((2, 2), (1, 2))
    return (v * torch.arange(1.0, 5.0, dtype=v.dtype).reshape(2, 2), a1 * 3)


def _as_strided_then_update(a0, a1):
    v = torch.as_strided(a0, (2, 2), (1, 2), storage_offset=a0.storage_offset() + 1)
    v.mul_(2)
    return (a1.exp(), a0.sin())


def test_as_strided_of_an_argument_sharing_its_storage_reads_the_storage():
    # thunder refused as_strided of an argument aliasing another one when one requires grad (its value is a copy of
    # its own elements); reading only its elements, the result is taken from the storage, as eager's
    def make(offset):
        def make_inputs():
            leaf = torch.arange(-4.0, 8.0, dtype=torch.float64).reshape(4, 3).requires_grad_()
            a0 = (leaf * 1)[offset:]
            return [leaf], (a0, a0[..., :1])

        return make_inputs

    for offset in (0, 1):
        _assert_as_eager(_as_strided_of_aliased, make(offset))
        _assert_as_eager(_as_strided_then_update, make(offset))


def _as_strided_copy_past_its_elements(a0, a1, a2):  # (campaign, widened, seed 14007)
    v0 = torch.as_strided_copy(a0, (2, 2), (1, 2), storage_offset=0)
    return (v0.gather(-1, torch.zeros_like(v0, dtype=torch.int64)) * 3, a1 * 2)


def test_as_strided_copy_past_an_aliased_arguments_elements_gives_them_no_gradient():
    # the copy reads storage elements a0 (expanded from a row) does not hold: their values come from the storage,
    # their gradient is dropped, as eager's as_strided backward does
    def make():
        leaf = torch.tensor([[0.25, 0.5, -2.0], [-0.5, -2.5, 1.5], [-1.0, 1.5, 3.0]], requires_grad=True)
        a0 = (leaf * 1)[0:1].expand(3, -1)
        return [leaf], (a0, a0[..., :1], a0[..., :1])

    _assert_as_eager(_as_strided_copy_past_its_elements, make)


def _masked_fill_(a0, m):  # (campaign, widened, seed 14006)
    a0.masked_fill_(m, -1.5)
    return (a0 * 2,)


@pytest.mark.filterwarnings("ignore:Use of masked_fill_ on expanded tensors is deprecated")
def test_masked_fill_of_an_expanded_tensor_fills_each_memory_location_as_eager():
    # eager runs masked_fill_ on an expanded tensor (a memory location takes the value when the mask holds for any of
    # its elements); thunder refused it as most in-place ops on such a tensor
    for mask in ([[True, False, False], [False, False, True]], [[False] * 3, [False] * 3]):
        inputs = []

        def make(mask=mask):
            a0 = torch.tensor([[0.5, 1.0, 2.0]], dtype=torch.float64).expand(2, 3)
            inputs.append(a0)
            return [], (a0, torch.tensor(mask))

        _assert_as_eager(_masked_fill_, make)
        torch.testing.assert_close(inputs[1]._base, inputs[0]._base)
