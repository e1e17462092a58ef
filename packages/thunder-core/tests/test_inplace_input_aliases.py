"""In-place updates of inputs through ``detach()`` and through aliasing arguments, against eager: outputs
(values, ``requires_grad``, identity of a returned input), the caller's tensors and gradients.
Minimal repros of what the differential fuzzer's ``inplace_input`` feature found."""

from __future__ import annotations

import pytest
import torch

import thunder


def _leaf(*shape):
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_(True)


def _check(fn, make, *, same_object: tuple[int, ...] = ()):
    """``fn(*make())`` through thunder.jit equals eager: values, requires_grad, the inputs after the call,
    the gradients of the leaf inputs; outputs at ``same_object`` are the first input itself, as in eager."""
    e_in, t_in = make(), make()
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.requires_grad == e.requires_grad, "requires_grad differs"
        torch.testing.assert_close(a.detach(), e.detach())
    for i in same_object:
        assert expected[i] is e_in[0]
        assert actual[i] is t_in[0], "eager returns the caller's tensor itself"
    for a, e in zip(t_in, e_in):
        torch.testing.assert_close(a.detach(), e.detach(), msg="input after the call differs")
    pairs = [(a, e) for a, e in zip(actual, expected) if e.requires_grad]
    e_leaves = [x for x in e_in if x.requires_grad and x.is_leaf]
    t_leaves = [x for x in t_in if x.requires_grad and x.is_leaf]
    if pairs and e_leaves:
        e_grads = torch.autograd.grad([(e * (k + 1)).sum() for k, (_, e) in enumerate(pairs)], e_leaves)
        t_grads = torch.autograd.grad([(a * (k + 1)).sum() for k, (a, _) in enumerate(pairs)], t_leaves)
        for a, e in zip(t_grads, e_grads):
            torch.testing.assert_close(a, e, msg="gradient differs")


def test_write_under_no_grad_through_an_aliasing_argument_keeps_the_gradient_of_the_other():
    def f(a0, a1):
        with torch.no_grad():
            a1.add_(a1)
        return (a0 * 1,)

    def make():
        a0 = _leaf(2, 3)
        return a0, a0[0]

    _check(f, make)


def test_write_through_a_detached_aliasing_argument_is_invisible_to_autograd():
    def f(a0, a1):
        a1.mul_(3)
        return a0 * 2, a1 + 0

    def make():
        a0 = _leaf(2, 3)
        return a0, a0.detach()[1]

    _check(f, make)


def test_input_updated_through_detach_and_returned_is_the_callers_tensor():
    def f(a0):
        v0 = a0.detach()
        v0.add_(v0, alpha=-1)
        return v0, a0

    _check(f, lambda: (_leaf(3, 3),), same_object=(1,))


def test_returned_input_is_the_callers_tensor():
    def f(a0, b):
        b.add_(1)
        return a0, b

    x, y = torch.zeros(3), torch.zeros(3)
    out = thunder.jit(f)(x, y)
    assert out[0] is x and out[1] is y and torch.equal(y, torch.ones(3))


def test_detached_alias_and_its_base_are_distinct_outputs():
    # a value kept as the gradient path of another (keep_grad_of) is its own tensor object
    def f(a1, a2):
        v0 = a2 + a1
        v4 = v0.detach()
        v4.clamp_(min=0)
        return v4, v0

    _check(f, lambda: (_leaf(3), _leaf(3) * 0 + 1))


def test_second_detached_view_sees_the_write_without_a_gradient():
    def f(a0):
        v0 = a0.detach()
        v1 = a0.detach()
        v0[0][..., :1] = 0.5
        return v1, v1 * a0

    _check(f, lambda: (_leaf(1, 3),))


def test_aliased_arguments_without_writes_keep_their_gradients():
    def f(a0, a1):
        return (torch.sigmoid(a0[..., 1:]) + a1.sum(),)

    def make():
        a0 = _leaf(2, 2)
        return a0, a0.mT

    _check(f, make)


def test_setitem_on_one_slice_of_an_expanded_input_writes_every_alias():
    def f(a1, a2):
        v1 = a1.expand(2, *a1.shape)
        v1[0] = a2
        return (v1 * 1,)

    _check(f, lambda: (torch.zeros(2, 3), torch.arange(3.0)))


def test_copy_of_itself_is_a_no_op_on_an_expanded_view():
    def f(a0):
        v0 = a0.expand(2, *a0.shape)
        with torch.no_grad():
            v0.copy_(v0)
        return (a0.sum() * 1,)

    _check(f, lambda: (_leaf(2, 1),))


def test_backward_reads_an_aliased_argument_as_it_was_before_the_write_back():
    # a1.flatten() copies; backward needs a1's old values although the program writes the storage at its end
    def f(a0, a1):
        v0 = a1.select(0, -1)
        v1 = a1.flatten()
        with torch.no_grad():
            v0.pow_(2)
        return (v1.abs(),)

    def make():
        a0 = _leaf(2, 3)
        return a0, a0.mT

    _check(f, make)


def test_inplace_on_a_tensor_that_requires_grad_keeps_it_requiring_grad():
    # so that what no_grad computes from it is cut off, as in eager
    def f(a0):
        v0 = torch.nn.functional.gelu(a0)
        v0.fill_(1.5)
        with torch.no_grad():
            v4 = torch.nn.functional.silu(v0)
        return v4, torch.sigmoid(a0) * 1

    _check(f, lambda: (_leaf(2, 3),))


def test_no_grad_update_of_a_detached_tensor_leaves_it_without_gradient():
    def f(a0):
        v0 = a0 * 2
        v2 = (v0 * v0.detach()).detach()
        with torch.no_grad():
            v2.add_(a0 - v0)
        return (v2,)

    _check(f, lambda: (_leaf(3),))


def test_gradient_written_through_an_aliasing_argument_reaches_the_other():
    def f(a0, a1, a2):
        a1.add_(a2)
        with torch.no_grad():
            a0[..., :1] = 0.5
        return (a0,)

    def make():
        a0 = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        return a0, a0[0], torch.tensor(1.5, requires_grad=True)

    _check(f, make, same_object=(0,))


def test_updates_through_views_of_a_detached_tensor_give_it_its_own_gradient():
    # eager: d = x.detach() is a tensor of its own for autograd; writes of values that require grad through
    # its views give it (and only it) their gradients
    def f(a0):
        d = a0.detach()
        d[0:2].mul_(a0[0:2])
        d[1:].add_(1)
        d.t().add_(a0 * 2)
        return d * a0, d

    _check(f, lambda: (_leaf(4),))


def test_view_of_a_detached_tensor_updated_through_another_view_of_it():
    def f(a0):
        v1 = a0.detach().view(2, 2)
        v1.T[0].mul_(a0[:2] * 2)
        return v1 + 0, a0 * 1

    _check(f, lambda: (_leaf(4),))


def test_output_copied_from_an_input_is_not_changed_by_a_later_write_into_that_input():
    # v1.copy_(a1) may run as an expand of a1: the write into a1 at the program's end must not reach v1
    def f(a1):
        v1 = a1[[-1, 0]]
        v1.copy_(a1)
        with torch.no_grad():
            a1[..., :1] = 0.5
        return (v1,)

    _check(f, lambda: (torch.tensor([[0.25, 1.5, -1.0]], dtype=torch.float64),))


def test_inplace_update_with_a_gradient_is_seen_by_autograd_function_apply():
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def f(a0):
        v1 = torch.exp(a0.detach())
        v1.add_(a0)
        return (Twice.apply(v1),)

    _check(f, lambda: (_leaf(3),))


def test_tensor_that_requires_grad_still_does_after_an_update_from_a_constant():
    # eager: x.copy_(c) / x.fill_(v) keep x requiring grad (with a zero gradient there)
    def f(a, c):
        v = a * 2
        v.copy_(c)
        w = (a * 3).float()
        w.fill_(1.5)
        return v * 3, w

    _check(f, lambda: (_leaf(3), torch.ones(3, dtype=torch.float64)))


def test_no_grad_copy_of_an_input_whose_storage_is_written_through_an_aliasing_argument():
    # b's new value (a's as called, kept beside b's gradient path) is written back before a's storage is
    # overwritten through its alias c
    def fn(a, b, c):
        with torch.no_grad():
            b.copy_(a)
        c.zero_()
        return (b * 2,)

    def make():
        a = torch.tensor([[2.2, -0.8, -1.5]], dtype=torch.float64)
        return a, _leaf(2, 3), a[..., :1]

    _check(fn, make)


def test_backward_reads_an_argument_sharing_storage_with_an_earlier_written_one():
    # b = a.mT: mul_'s backward needs b as called; a's write-back (before b's) overwrites their storage
    def fn(a, w, b):
        b.mul_(w)
        return (b[torch.tensor([0, 0])],)

    def make():
        a = torch.tensor([[-1.0, 1.5], [0.2, -0.5], [2.0, -1.5]], dtype=torch.float64)
        return a, _leaf(2, 3), a.mT

    _check(fn, make)


def _expanded_and_its_transpose(leaf):
    a0 = (leaf * 1)[0:1].expand(3, -1)
    return a0, a0.mT


# Eager's fill_ and zero_ write an expanded tensor (they do not check for self-overlapping writes; most in-place
# kernels do): thunder runs them, writing each memory location once when it writes the input back, and refuses,
# at trace time, the updates eager refuses on such a tensor.
@pytest.mark.parametrize(
    "update",
    [lambda x: x.fill_(1.5), lambda x: x.zero_()],
    ids=["fill_", "zero_"],
)
def test_update_eager_allows_on_an_expanded_input_with_an_aliasing_argument(update):
    # fuzzer repro (campaign seed 3001): the program writes into the expanded a0, which the prologue makes a view
    # of the storage a0 and a0.mT share
    def fn(a0, a1):
        update(a0)
        return a1 * 2, a0 + 1

    e_leaf, t_leaf = _leaf(1, 3), _leaf(1, 3)
    e_in, t_in = _expanded_and_its_transpose(e_leaf), _expanded_and_its_transpose(t_leaf)
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    for a, e in zip([*actual, *t_in], [*expected, *e_in]):
        torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True)
    # eager's backward refuses (its CopySlices writes the gradient through the expanded view): thunder's too
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.autograd.grad(sum(e.sum() for e in expected) + (e_in[1] * 3).sum(), e_leaf)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.autograd.grad(sum(a.sum() for a in actual) + (t_in[1] * 3).sum(), t_leaf)


def test_update_eager_refuses_on_an_expanded_input_is_refused():
    def fn(a0, a1):
        a0.add_(torch.arange(3.0, dtype=a0.dtype)[:, None])  # a different value per aliased row
        return a1 * 2

    with pytest.raises(RuntimeError, match="single memory location") as eager:
        fn(*_expanded_and_its_transpose(_leaf(1, 3)))
    with pytest.raises(RuntimeError, match="single memory location") as ours:
        thunder.jit(fn)(*_expanded_and_its_transpose(_leaf(1, 3)))
    assert type(ours.value) is type(eager.value)


# update, and the leaf's gradient by hand where eager's backward refuses (a whole write through the expanded view;
# the test's loss reads the input 3 * 2 + 5 = 11 times per row, 3 rows)
_UPDATES_EAGER_ALLOWS = {
    "fill_": (lambda x: x.fill_(-2.0), 0.0),
    "zero_": (lambda x: x.zero_(), 0.0),
    "fill_value_kw": (lambda x: x.fill_(value=0.25), 0.0),
    "setitem_row": (lambda x: x.__setitem__(1, 4.0), None),
    "setitem_row_of_values": (lambda x: x.__setitem__(2, torch.arange(3.0, dtype=x.dtype)), None),
    "copy_itself": (lambda x: x.copy_(x), 33.0),
}


@pytest.mark.parametrize("update, hand_grad", list(_UPDATES_EAGER_ALLOWS.values()), ids=list(_UPDATES_EAGER_ALLOWS))
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "non_leaf"])
def test_update_eager_allows_on_an_expanded_input(update, hand_grad, requires_grad):
    # an input the caller expanded, no aliasing argument: eager writes each memory location once
    def fn(a0):
        update(a0)
        return (a0 * 2,)

    e_leaf, t_leaf = _leaf(1, 3), _leaf(1, 3)

    def make(leaf):
        base = leaf * 1 if requires_grad else torch.arange(1.0, 4.0, dtype=torch.float64)[None]
        return (base.expand(3, -1),)

    e_in, t_in = make(e_leaf), make(t_leaf)
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    torch.testing.assert_close(actual[0].detach(), expected[0].detach())
    assert actual[0].requires_grad == expected[0].requires_grad
    torch.testing.assert_close(t_in[0].detach(), e_in[0].detach(), msg="input after the call differs")
    torch.testing.assert_close(t_in[0]._base.detach(), e_in[0]._base.detach(), msg="its base differs")
    if not requires_grad:
        return
    if hand_grad is None:
        (t_grad,) = torch.autograd.grad((actual[0] * 3).sum() + (t_in[0] * 5).sum(), t_leaf)
        (e_grad,) = torch.autograd.grad((expected[0] * 3).sum() + (e_in[0] * 5).sum(), e_leaf)
        torch.testing.assert_close(t_grad, e_grad)
    else:  # (eager's backward refuses, its CopySlices writing the gradient through the expanded view: thunder's too)
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.autograd.grad((expected[0] * 3).sum() + (e_in[0] * 5).sum(), e_leaf)
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.autograd.grad((actual[0] * 3).sum() + (t_in[0] * 5).sum(), t_leaf)


_UPDATES_EAGER_REFUSES = {
    "mul_": lambda x: x.mul_(2),
    "fill_with_a_tensor": lambda x: x.fill_(torch.tensor(2.0, dtype=x.dtype)),
    "copy_of_a_row": lambda x: x.copy_(torch.ones(3, dtype=x.dtype)),
    "setitem_everything": lambda x: x.__setitem__(..., 1.0),
    "relu_": lambda x: x.relu_(),
}


@pytest.mark.parametrize("update", list(_UPDATES_EAGER_REFUSES.values()), ids=list(_UPDATES_EAGER_REFUSES))
def test_update_eager_refuses_on_an_expanded_input_names_the_users_line(update):
    def fn(a0):
        update(a0)
        return a0 * 2

    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.zeros(1, 3).expand(3, -1))
    with pytest.raises(RuntimeError, match="single memory location") as ours:
        thunder.jit(fn)(torch.zeros(1, 3).expand(3, -1))
    notes = "\n".join(getattr(ours.value, "__notes__", []))
    assert f'File "{__file__}"' in notes, "the error names the user's line (the update's lambda above)"


def _empty_view_and_aliases(leaf):
    a0 = (leaf * 1).mT[1:]  # (0, 2): no elements, but the base's storage
    return a0, a0[..., :1], a0[..., :1]


@pytest.mark.parametrize(
    "make",
    [
        _empty_view_and_aliases,
        lambda leaf: ((leaf * 1).mT[1:], (leaf * 1).mT),  # a1 another view of another base: its own storage
        lambda leaf: (lambda base: (base[1:], base))((leaf * 1).mT),  # a1 the (non-empty) base itself
    ],
    ids=["empty_aliases", "other_storage", "the_base"],
)
def test_update_of_an_empty_view_input_keeps_the_backward_of_an_argument_sharing_its_storage(make):
    # fuzzer repro (campaign, issue 25): the backward raised "modified by an inplace operation ... AsStrided": an
    # empty view was not recognised as sharing the storage of the other arguments, whose values the backward saved
    def fn(a0, a1, *rest):
        a0.mul_(2)
        return (a0 / (a1.abs() + 1)).sum() + (a1 * 3).sum()

    def leaf():
        return torch.tensor([[1.5], [-2.0]], dtype=torch.float64)

    e_leaf, t_leaf = leaf().detach().requires_grad_(), leaf().detach().requires_grad_()
    e_in, t_in = make(e_leaf), make(t_leaf)
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(t_in, e_in):
        torch.testing.assert_close(a.detach(), e.detach())
    (e_grad,) = torch.autograd.grad(expected + (e_in[0] * 5).sum(), e_leaf)
    (t_grad,) = torch.autograd.grad(actual + (t_in[0] * 5).sum(), t_leaf)
    torch.testing.assert_close(t_grad, e_grad)


def test_write_through_one_expanded_argument_counts_each_gradient_once():
    # a1 = a0.mT, both expanded: the write through a1 reaches a0's three rows; every other memory location's gradient
    # reaches the leaf once (writing each expanded element into the shared storage counted it three times)
    def fn(a0, a1):
        a1[0, 0] = 5.0
        return (a0 * 2,)

    def make():
        leaf = torch.arange(1.0, 4.0, dtype=torch.float64)[None].requires_grad_()
        a0 = (leaf * 1).expand(3, -1)
        return leaf, (a0, a0.mT)

    (e_leaf, e_in), (t_leaf, t_in) = make(), make()
    expected, actual = fn(*e_in), thunder.jit(fn)(*t_in)
    torch.testing.assert_close(actual[0].detach(), expected[0].detach())
    (e_grad,) = torch.autograd.grad(expected[0].sum(), e_leaf)
    (t_grad,) = torch.autograd.grad(actual[0].sum(), t_leaf)
    torch.testing.assert_close(t_grad, e_grad)  # [[0, 6, 6]]: location 0 overwritten, 3 rows * 2 elsewhere
