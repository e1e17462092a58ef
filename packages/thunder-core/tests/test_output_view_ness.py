"""Whether each output is a view, of what, and with which autograd facts, as in eager (issue 25, the grown
fuzzer's "is_view" classes): views made under ``no_grad``/``inference_mode`` of arguments and returned, identity
ops that give back their argument, layout-changing in-place ops, and in-place updates under ``inference_mode``.

Each program runs eagerly and through ``thunder.jit`` (twice: the second call goes through the cache) on fresh
inputs made the same way, and the two are compared: output values, dtypes, strides and storage offsets, which
outputs are the caller's arguments themselves, which share an argument's storage, ``_is_view()``, whether
``_base`` is an argument (or its base), ``requires_grad``/``is_leaf``; then a backward through the outputs that
have a history and through the arguments used after the call, comparing the leaves' gradients (None-ness too)
and the outputs' own ``.grad``."""

from __future__ import annotations

import pytest
import torch

import thunder


def _facts(out: torch.Tensor, args: tuple) -> dict:
    def storage(t):
        return t.untyped_storage().data_ptr() if t.numel() else None

    return {
        "dtype": out.dtype,
        "shape": tuple(out.shape),
        "stride": out.stride(),
        "offset": out.storage_offset(),
        "is_argument": [out is a for a in args],
        "shares_storage": [storage(out) is not None and storage(out) == storage(a) for a in args],
        "is_view": out._is_view(),
        "base_is_argument": [out._base is not None and (out._base is a or out._base is a._base) for a in args],
        "requires_grad": out.requires_grad,
        "is_leaf": out.is_leaf,
    }


def _run(fn, make):
    leaves, args = make()
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    facts = [_facts(o, args) for o in outs]
    values = [o.detach().clone() for o in outs]
    after = [a.detach().clone() for a in args]
    # a loss through the outputs that have a history, and through the arguments used after the call
    loss = sum(
        ((o.double() * (k + 2)) ** 2).sum() for k, o in enumerate(outs) if o.requires_grad and o.is_floating_point()
    )
    loss = loss + sum((a.double() * 3).sum() for a in args if a.requires_grad and a.is_floating_point())
    grads = None
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        loss.backward()
        grads = [None if x.grad is None else x.grad.clone() for x in leaves]
        grads += [o.grad for o in outs if o.is_leaf and o.requires_grad]
    return facts, values, after, grads


def assert_matches_eager(f, make, **jit_options) -> None:
    """Compares ``f`` eagerly and jitted (two calls) on inputs from ``make() -> (leaves, args)``."""
    jf = thunder.jit(f, **jit_options)
    for call in range(2):
        torch.manual_seed(call)
        expected = _run(f, make)
        torch.manual_seed(call)
        actual = _run(jf, make)
        (ef, ev, ea, eg), (af, av, aa, ag) = expected, actual
        assert af == ef, f"call {call}: outputs' facts\nthunder {af}\neager   {ef}"
        torch.testing.assert_close(av, ev, equal_nan=True)
        torch.testing.assert_close(aa, ea, equal_nan=True)
        assert (ag is None) == (eg is None)
        if eg is not None:
            assert [g is None for g in ag] == [g is None for g in eg], f"call {call}: grads {ag} vs {eg}"
            torch.testing.assert_close(ag, eg, equal_nan=True)


def _leaf(shape=(3, 2), dtype=torch.float64):
    return torch.randn(shape, dtype=dtype, requires_grad=True)


def leaf_argument():
    leaf = _leaf()
    return [leaf], (leaf,)


def non_leaf_argument():
    leaf = _leaf()
    return [leaf], (leaf * 1,)


def transposed_view_of_non_leaf():
    leaf = _leaf()
    return [leaf], ((leaf * 1).t(),)


def sliced_view_of_non_leaf():
    leaf = _leaf((4, 2))
    return [leaf], ((leaf * 1)[1:],)


ARGUMENTS = {
    "leaf": leaf_argument,
    "non_leaf": non_leaf_argument,
    "transposed_view": transposed_view_of_non_leaf,
    "sliced_view": sliced_view_of_non_leaf,
}


# --- 1 and 5: views of arguments made without grad and returned ---------------------------------------------

_GRAD_OFF = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
_VIEWS = {
    "expand_as": lambda a: a.expand_as(a),
    "none_index": lambda a: a[None],
    "slice": lambda a: a[1:],
    "view_as": lambda a: a.view_as(a),
    "reshape_flat": lambda a: a.reshape(-1),
    "t": lambda a: a.t(),
    "diagonal": lambda a: a.diagonal(),
}


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("mode", sorted(_GRAD_OFF))
@pytest.mark.parametrize("view", sorted(_VIEWS))
def test_view_of_an_argument_made_without_grad_returned_with_the_argument(view, mode, argument):
    def f(a0):
        with _GRAD_OFF[mode]():
            v0 = _VIEWS[view](a0)
        return v0, a0

    assert_matches_eager(f, ARGUMENTS[argument])


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("view", ["slice", "reshape_flat", "expand_as"])
def test_view_of_an_argument_made_without_grad_returned_alone(view, argument):
    """The argument gets no gradient through the view: ``.grad`` stays None (eager), not zeros."""

    def f(a0, b):
        with torch.no_grad():
            v = _VIEWS[view](a0)
        return v, b * 2

    def make():
        leaves, (a,) = ARGUMENTS[argument]()
        b = _leaf()
        return [*leaves, b], (a, b)

    assert_matches_eager(f, make)


def test_view_of_an_argument_made_without_grad_of_a_non_grad_argument_beside_others():
    def f(a0, a1):
        with torch.inference_mode():
            v = a1[None]
        return v, a0 * 2

    def make():
        leaf = _leaf()
        return [leaf], (leaf * 1, torch.randn(2, 3))

    assert_matches_eager(f, make)


# --- 2: aliases that are no views (detach(), .data, view(dtype)) of an argument the program updates -------------

_ALIASES = {
    "detach": lambda a: a.detach(),
    "data": lambda a: a.data,
    "view_own_dtype": lambda a: a.view(a.dtype),
    "detach_then_slice": lambda a: a.detach()[1:],
    "slice_then_detach": lambda a: a[1:].detach(),
}


@pytest.mark.parametrize("argument", ["sliced_view", "non_leaf", "transposed_view"])
@pytest.mark.parametrize("alias", sorted(_ALIASES))
def test_alias_of_an_updated_argument_is_a_view_exactly_when_eager_says(alias, argument):
    def f(a0):
        a0.round_()
        v = _ALIASES[alias](a0)
        return v, a0

    assert_matches_eager(f, ARGUMENTS[argument])


@pytest.mark.parametrize("alias", ["view_own_dtype", "detach"])
def test_alias_of_an_integer_argument_written_through_out(alias):
    def f(a0):
        torch.add(a0, a0, out=a0)
        return a0, _ALIASES[alias](a0)

    def make():
        return [], (torch.randint(-4, 5, (3, 1, 2)),)

    assert_matches_eager(f, make)


# --- views of tensors computed under inference_mode: eager's have no _base ----------------------------------------

_VIEWS_OUTSIDE = {
    "squeeze": lambda v: v.squeeze(),
    "t": lambda v: v.t(),
    "slice": lambda v: v[1:],
    "reshape_flat": lambda v: v.reshape(-1),
}


@pytest.mark.parametrize("argument", ["leaf", "transposed_view"])
@pytest.mark.parametrize("view", sorted(_VIEWS_OUTSIDE))
def test_view_of_a_tensor_computed_under_inference_mode(view, argument):
    def f(a0):
        with torch.inference_mode():
            v0 = torch.log1p(torch.abs(a0))
        return _VIEWS_OUTSIDE[view](v0), a0 * 2

    assert_matches_eager(f, ARGUMENTS[argument])


def test_view_of_a_tensor_computed_under_inference_mode_after_a_resize_of_an_expanded_argument():
    def f(a0):
        with torch.inference_mode():
            v0 = torch.log1p(torch.abs(a0))
        a0.resize_(0)
        return (v0.squeeze(),)

    def make():
        b = torch.randint(-4, 5, (3, 3))
        return [], (b.unsqueeze(0).expand(2, *b.shape),)

    assert_matches_eager(f, make)


# --- outputs eager computes as tensors of their own, which the program gave back as views or aliases ---------

_GIVING_THE_VALUE_BACK = {
    "logsumexp_0d": lambda a: torch.logsumexp(a, -1),
    "amax_0d": lambda a: a.amax(-1),
    "sum_0d": lambda a: a.sum(-1),
    "mean_0d": lambda a: torch.mean(a, 0),
    "repeat_0d": lambda a: a.repeat(()),
    "tile_0d": lambda a: torch.tile(a, ()),
}


@pytest.mark.parametrize("op", sorted(_GIVING_THE_VALUE_BACK))
def test_op_giving_an_arguments_value_back_returns_a_tensor_of_its_own(op):
    def f(a0, a1):
        return _GIVING_THE_VALUE_BACK[op](a0), a1, a0

    def make():
        leaf = torch.randn((), dtype=torch.float32, requires_grad=True)
        return [leaf], (leaf, torch.randint(-4, 5, (2, 1, 3), dtype=torch.int32))

    assert_matches_eager(f, make)


@pytest.mark.parametrize("computed", ["product", "view_of_a_product"])
@pytest.mark.parametrize("op", sorted(_GIVING_THE_VALUE_BACK))
def test_op_giving_a_computed_values_value_back_returns_a_tensor_of_its_own(op, computed):
    """Campaign seed 14027: ``v.repeat(())`` of a 0-d ``v`` the program computed, returned beside ``v``, came back as
    ``v`` itself (its decomposition gave back its argument), so an update of one output changed the other."""

    def f(a0):
        v = a0 * 2 if computed == "product" else (a0 * 2).reshape(1, 1)[0, 0]
        return _GIVING_THE_VALUE_BACK[op](v), v

    def make():
        leaf = torch.randn((), dtype=torch.float64, requires_grad=True)
        return [leaf], (leaf,)

    assert_matches_eager(f, make)
    out, v = thunder.jit(f)(torch.randn(()))
    out.add_(1)
    assert not torch.equal(out, v)


_UPDATES_THROUGH_A_VIEW = {
    "setitem_of_reshape": lambda v: v.reshape(-1).__setitem__(0, 3),
    "add_of_view": lambda v: v.view(-1).add_(1),
    "mul_of_transpose": lambda v: v.t().mul_(2),
    "fill_of_row": lambda v: v[0].fill_(0.5),
}


@pytest.mark.parametrize("argument", ["leaf", "transposed_view"])
@pytest.mark.parametrize("update", sorted(_UPDATES_THROUGH_A_VIEW))
def test_result_updated_through_a_view_of_it_is_returned_as_no_view(update, argument):
    def f(a0):
        v0 = a0 * 2 if a0.is_contiguous() else (a0 * 2).contiguous()
        _UPDATES_THROUGH_A_VIEW[update](v0)
        return v0, a0

    assert_matches_eager(f, ARGUMENTS[argument])


def test_result_updated_through_a_view_of_it_can_be_updated_in_place_after_the_call():
    def f(a0):
        v0 = a0 / a0.abs().max()
        v0.view(-1).add_(1)
        return v0

    grads = []
    for fn in (f, thunder.jit(f)):
        leaf = torch.linspace(-1.0, 2.0, 6, dtype=torch.float64).reshape(2, 3).requires_grad_()
        out = fn(leaf)
        out.mul_(3)  # eager allows it: out is a tensor of its own
        (out**2).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


# --- 3: layout-changing in-place ops on views of arguments; expanded arguments updated, then reshaped ---------


def two_integer_arguments():
    return [], (torch.randint(-4, 5, (2, 3, 4)), torch.randint(-4, 5, (2, 3)))


def two_non_leaf_arguments():
    first, second = _leaf((3, 4)), _leaf((2, 3))
    return [first, second], (first * 1, second * 1)


def two_views_of_non_leaves():
    first, second = _leaf((3, 4)), _leaf((3, 2))
    return [first, second], ((first * 1)[:, 1:], (second * 1).t())


_RESTRIDED_VIEWS = {
    "slice_swapdims_": lambda a0, a1: a0[1:].swapdims_(0, 1),
    "row_unsqueeze_": lambda a0, a1: a0[0].unsqueeze_(0),
    "transpose_t_": lambda a0, a1: a1.transpose(0, 1).t_(),
    "slice_as_strided_": lambda a0, a1: a0[1:].as_strided_((2,), (1,)),
}


@pytest.mark.parametrize("arguments", ["integers", "non_leaves", "views_of_non_leaves"])
@pytest.mark.parametrize("restride", sorted(_RESTRIDED_VIEWS))
def test_view_of_an_argument_restrided_in_place_is_a_view_of_the_callers_tensor(restride, arguments):
    def f(a0, a1):
        v = _RESTRIDED_VIEWS[restride](a0, a1)
        return v, a0, a1

    make = {
        "integers": two_integer_arguments,
        "non_leaves": two_non_leaf_arguments,
        "views_of_non_leaves": two_views_of_non_leaves,
    }[arguments]
    assert_matches_eager(f, make)


def test_unbind_output_restrided_in_place_is_a_view_of_the_callers_tensor():
    def f(a0, a1):
        v0 = a1.unbind(0)[0]
        v0.as_strided_((1,), (1,))
        return a1, v0

    assert_matches_eager(f, two_integer_arguments)


def expanded_integers():
    return [], (torch.randint(-4, 5, (3,)).expand(2, 3),)


def expanded_view_of_non_leaf():
    leaf = _leaf((3,))
    return [leaf], ((leaf * 1).expand(2, 3),)


_UPDATES_OF_EXPANDED = {
    "zero_": lambda a: a.zero_(),
    "fill_": lambda a: a.fill_(2),
    "setitem": lambda a: a.__setitem__(0, 1),
}
_AFTER_THE_UPDATE = {
    "reshape": lambda a: a.reshape(-1),
    "flatten": lambda a: a.flatten(),
    "contiguous": lambda a: a.contiguous(),
    "t": lambda a: a.t(),
    "unsqueeze": lambda a: a.unsqueeze(0),
}


@pytest.mark.parametrize("after", sorted(_AFTER_THE_UPDATE))
@pytest.mark.parametrize("update", sorted(_UPDATES_OF_EXPANDED))
def test_expanded_integer_argument_updated_then_reshaped(update, after):
    def f(a0):
        _UPDATES_OF_EXPANDED[update](a0)
        return _AFTER_THE_UPDATE[after](a0), a0

    assert_matches_eager(f, expanded_integers)


@pytest.mark.parametrize("after", sorted(_AFTER_THE_UPDATE))
def test_expanded_argument_requiring_grad_updated_then_reshaped(after):
    def f(a0):
        a0[0] = 1  # (eager refuses zero_ and fill_ of an expanded tensor requiring grad)
        return _AFTER_THE_UPDATE[after](a0), a0

    assert_matches_eager(f, expanded_view_of_non_leaf)


# --- 4: bool results written in place without grad: the tensor keeps its history, as in eager ---------------

_BOOL_RESULT_UPDATES = {
    "eq_": lambda v: v.eq_(v),
    "gt_": lambda v: v.gt_(0),
    "logical_not_": lambda v: v.logical_not_(),
    "add_": lambda v: v.add_(1),  # (a float result: the reference form)
}


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("mode", sorted(_GRAD_OFF))
@pytest.mark.parametrize("update", sorted(_BOOL_RESULT_UPDATES))
def test_bool_result_written_without_grad_into_a_view_of_an_argument(update, mode, argument):
    def f(a0):
        v1 = a0.view(-1) if a0.is_contiguous() else a0.reshape(-1)
        with _GRAD_OFF[mode]():
            _BOOL_RESULT_UPDATES[update](v1)
        return a0, v1

    assert_matches_eager(f, ARGUMENTS[argument])


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("mode", sorted(_GRAD_OFF))
@pytest.mark.parametrize("update", sorted(_BOOL_RESULT_UPDATES))
def test_bool_result_written_without_grad_into_an_argument(update, mode, argument):
    """The gradient through the argument after the call is its former history's (eager: 3s, thunder gave 0s)."""

    def f(a0):
        with _GRAD_OFF[mode]():
            _BOOL_RESULT_UPDATES[update](a0)
        return a0

    assert_matches_eager(f, ARGUMENTS[argument])


# --- shape ops of an argument sharing its storage with another (the program reads a contiguous copy of it) -------


def expanded_argument_and_a_view_of_it():
    leaf = _leaf((3,))
    a = (leaf * 1).unsqueeze(0).expand(2, -1)
    return [leaf], (a, a[..., :1])


@pytest.mark.parametrize("after", ["reshape", "flatten", "contiguous"])
def test_shape_op_of_an_argument_sharing_its_storage_copies_as_in_eager(after):
    def f(a0, a1):
        return _AFTER_THE_UPDATE[after](a0), a1

    assert_matches_eager(f, expanded_argument_and_a_view_of_it)


# --- a view made with grad of a view made without grad of an argument, both returned (grown fuzzer seed 29) -------

_VIEWS_WITH_GRAD = {
    "t": lambda v: v.t(),
    "squeeze": lambda v: v.unsqueeze(0).squeeze(),
    "slice": lambda v: v[:, :1],
}


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
@pytest.mark.parametrize("view", sorted(_VIEWS_WITH_GRAD))
def test_view_with_grad_of_a_view_made_without_grad(view, argument):
    def f(a0):
        with torch.no_grad():
            v0 = a0[1:]
        return v0, _VIEWS_WITH_GRAD[view](v0)

    assert_matches_eager(f, ARGUMENTS[argument])


# --- a view of a tensor the program computes, copied before an argument's write-back -------------------------


def _view_of_an_indexed_copy_then_argument_updated(x):
    v = x[torch.tensor([0, 0])]  # (advanced indexing: a tensor of its own)
    vt = v.t()
    torch.nn.functional.relu(x, inplace=True)
    return x, vt


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("argument", ["non_leaf", "transposed_view", "sliced_view"])
def test_view_of_a_computed_tensor_returned_beside_an_updated_argument(argument, cache):
    # (the program copies the view before writing the argument back, as the tensor it views may be the
    # argument's; with symbolic sizes the view's layout over its base was read from that copy: no view)
    assert_matches_eager(_view_of_an_indexed_copy_then_argument_updated, ARGUMENTS[argument], cache=cache)
