"""Outputs that alias each other or an input as eager's do: ``v0 = x * 2; return v0, v0.flatten()`` returns a view
of ``v0`` beside it (``_base``, shared storage, offsets and strides), ``return v0, v0`` returns one tensor twice, a
tensor restrided in place (``v0.unsqueeze_(0)``) is no view, and a view op that gives an input back unchanged
(``x.reshape_as(x)``) returns a new view of the caller's tensor. A write the caller makes after the call through
one output reaches the others (or raises where eager raises), and gradients through every output and through the
arguments are eager's, on the first call and on the cached second one. Issue 25, outputs aliasing each other."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.core import pytree


def _with_view(view):
    return lambda x: (lambda v0: (v0, view(v0)))(x * 2)


def _restrided_in_place(x):
    v0 = x * 2
    v1 = v0.t()
    v0.unsqueeze_(0)
    return v1, v0


def _argument_restrided_in_place(x):
    x.swapdims_(0, 1)
    return x


def _detached_alias_beside_an_argument_update(x):
    # (both outputs may alias x for the executors, so the program copies them before it writes x back: one copy)
    v0 = x[torch.tensor([0, 0])]
    v1 = v0.detach()
    with torch.no_grad():
        x.add_(x)
    return v1, v0


_PROGRAMS = {
    "detached_alias_beside_an_argument_update": _detached_alias_beside_an_argument_update,
    "flatten": _with_view(lambda v: v.flatten()),
    "offset_slice": _with_view(lambda v: v[1:]),
    "transpose": _with_view(lambda v: v.t()),
    "view": _with_view(lambda v: v.view(-1)),
    "unsqueeze": _with_view(lambda v: v.unsqueeze(0)),
    "expand": _with_view(lambda v: v[:1].expand(3, 3)),
    "diagonal": _with_view(lambda v: v.diagonal()),
    "same_tensor_twice": lambda x: (lambda v0: (v0, v0))(x * 2),
    "two_views_of_one_result": lambda x: (lambda v0: (v0.t(), v0[1:]))(x * 2),
    "reshape_of_transposed_result_copies": lambda x: (lambda v0: (v0, v0.reshape(-1)))(x.t() * 2),
    "reshape_as_of_argument": lambda x: (x.reshape_as(x), x),
    "view_as_of_argument": lambda x: x.view_as(x),
    "restrided_in_place": _restrided_in_place,
    "argument_restrided_in_place": _argument_restrided_in_place,
}


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _relations(outs: list[torch.Tensor], x: torch.Tensor) -> tuple:
    """Which outputs are which tensor, view which, share storage, and each one's layout and autograd facts."""
    named = [x, *outs]
    ptrs = [t.untyped_storage().data_ptr() for t in named]
    return (
        [[a is b for b in named] for a in outs],
        [[a._base is b for b in named] for a in outs],
        [[ptrs[i] == ptrs[j] for j in range(len(named))] for i in range(1, len(named))],
        [(tuple(t.shape), t.stride(), t.storage_offset(), t._is_view(), t.requires_grad) for t in outs],
    )


def _run(program, requires_grad: bool, jit: bool, write_after: bool):
    fn = thunder.jit(program) if jit else program
    results = []
    for call in range(2):
        leaf = (torch.arange(9, dtype=torch.float64).reshape(3, 3) / 5 + call).requires_grad_(requires_grad)
        x = leaf * 1
        outs = _tensors(fn(x))
        facts = _relations(outs, x)
        error = None
        if write_after:
            # the caller updates the first output in place: eager reaches every tensor viewing it (or raises)
            try:
                outs[0].mul_(3)
            except RuntimeError as e:
                error = type(e)
        values = [t.detach().clone() for t in (x, *outs)]
        grad = None
        if requires_grad and error is None:
            loss = sum((t * (k + 2)).sum() for k, t in enumerate(outs) if t.requires_grad) + (x * 7).sum()
            (grad,) = torch.autograd.grad(loss, leaf)
        results.append((facts, error, values, grad))
    return results


@pytest.mark.parametrize("write_after", [False, True], ids=["read", "caller_writes_output"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("program_name", sorted(_PROGRAMS))
def test_outputs_alias_as_in_eager(program_name, requires_grad, write_after):
    program = _PROGRAMS[program_name]
    expected = _run(program, requires_grad, jit=False, write_after=write_after)
    actual = _run(program, requires_grad, jit=True, write_after=write_after)
    for call, (e, t) in enumerate(zip(expected, actual)):
        e_facts, e_error, e_values, e_grad = e
        t_facts, t_error, t_values, t_grad = t
        assert t_facts == e_facts, f"call {call}: identities, bases, shared storages or layouts differ"
        assert t_error == e_error, f"call {call}: the caller's in-place write after the call"
        for ev, tv in zip(e_values, t_values, strict=True):
            torch.testing.assert_close(tv, ev, equal_nan=True)
        if e_grad is None:
            assert t_grad is None
        else:
            torch.testing.assert_close(t_grad, e_grad)


def test_view_output_follows_a_later_write_into_its_base():
    """The issue's example: ``v1`` is a view of ``v0``; the caller's ``v0.add_(1)`` after the call changes ``v1``
    and the gradient through ``v1`` goes through the update, as in eager."""

    def f(x):
        v0 = x * 2
        v1 = v0.flatten()
        return v0, v1

    leaf = torch.arange(6, dtype=torch.float64).reshape(2, 3).requires_grad_(True)
    v0, v1 = thunder.jit(f)(leaf)
    assert v1._base is v0
    v0.mul_(leaf)  # (a second use of leaf: eager's v1 now holds 2 * leaf * leaf)
    torch.testing.assert_close(v1, (2 * leaf * leaf).flatten())
    (grad,) = torch.autograd.grad(v1.sum(), leaf)
    torch.testing.assert_close(grad, 4 * leaf.detach())


@pytest.mark.parametrize("cache", [None, "symbolic values"])
def test_identity_view_of_argument_is_a_new_view_with_symbolic_sizes(cache):
    """``v.t()`` of a vector gives the input's value back: eager returns a new view of it (``_base is v``), with
    every size symbolic too (the view takes the caller's tensor's own layout at each call)."""

    def f(v):
        return v.t()

    jf = thunder.jit(f) if cache is None else thunder.jit(f, cache=cache)
    for n in (3, 5):
        v = torch.arange(n, dtype=torch.float64) * 1
        expected, actual = f(v), jf(v)
        assert actual is not v and actual._base is v and expected._base is v
        assert (actual.stride(), actual.storage_offset()) == (expected.stride(), expected.storage_offset())
        actual.mul_(2)
        torch.testing.assert_close(v, torch.arange(n, dtype=torch.float64) * 2)


@pytest.mark.parametrize("shape", [(0,), (2, 0), (3,)])
def test_one_view_returned_twice_is_one_tensor(shape):
    """``v0.double()`` of a float64 ``v0`` is ``v0``: returned beside it, eager gives one tensor back twice, also when
    ``v0`` is a view of an argument the program gives back as a new view of the caller's tensor (an empty one:
    slicing it gives its value back)."""

    def f(x):
        v0 = x[..., :1]
        return v0.double(), v0

    x = torch.randn(shape, dtype=torch.float64)
    expected, actual = f(x), thunder.jit(f)(x)
    assert expected[0] is expected[1]
    assert actual[0] is actual[1]
    assert actual[0]._base is x


def _chunk_of_an_empty_result(x):
    v0 = x * 2
    return v0.chunk(2, -1)[0], v0


def _value_given_back_beside_its_tensor(x):
    v0 = x.mean() + 1
    return v0, torch.cumsum(v0, 0)  # (cumsum of a 0-d tensor: eager's is a new tensor)


def _identity_narrow_of_a_result_without_grad(x):
    with torch.no_grad():
        v1 = torch.nn.functional.relu6(x[..., :1])
    return v1.narrow(-1, 0, 1), v1


_EDGE_PROGRAMS = {
    "chunk_of_an_empty_result": (_chunk_of_an_empty_result, (0,)),
    "value_given_back_beside_its_tensor": (_value_given_back_beside_its_tensor, (3, 3)),
    "identity_narrow_of_a_strided_result": (_identity_narrow_of_a_result_without_grad, (1, 3)),
}


@pytest.mark.parametrize("name", sorted(_EDGE_PROGRAMS))
def test_outputs_alias_as_in_eager_at_edge_sizes(name):
    """Empty tensors (``chunk`` gives ``chunks`` empty views), 0-d results an op gives back unchanged, and views of
    results whose strides differ from eager's only in dims of size one (fuzz_campaign --seed 13001)."""
    program, shape = _EDGE_PROGRAMS[name]
    jitted = thunder.jit(program)
    for call in range(2):
        leaf = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        x, e_x = leaf * 1, leaf.detach().clone().requires_grad_() * 1
        outs, expected = _tensors(jitted(x)), _tensors(program(e_x))
        assert _without_unit_strides(_relations(outs, x)) == _without_unit_strides(_relations(expected, e_x)), call
        torch.testing.assert_close(outs, expected)


def _without_unit_strides(relations):
    # (a dim of size one steps nowhere: its stride is whatever a kernel chose)
    *rest, layouts = relations
    return (*rest, [(s, tuple(d for n, d in zip(s, st) if n != 1), *more) for s, st, *more in layouts])
