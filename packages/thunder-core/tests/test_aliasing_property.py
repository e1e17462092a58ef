"""``thunder.core.aliasing``: the declared "may return a view/alias of argument i" answer, per op family,
against the aliasing eager PyTorch actually produces (outputs sharing an argument's storage)."""

import pytest
import torch

import thunder
from thunder.core.aliasing import (
    OPAQUE_KEEPING_RNG_STATE,
    aliased_argument_positions,
    aliased_outputs,
    may_alias_an_argument,
    may_return_alias,
    returns_view_of_first_argument,
)


def _eager_aliased_inputs(fn, inputs) -> set[int]:
    """The inputs whose storage one of eager's outputs shares."""
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ptrs = [x.untyped_storage().data_ptr() for x in inputs]
    return {i for o in outs for i, p in enumerate(ptrs) if o.untyped_storage().data_ptr() == p}


def _declared_aliased_inputs(fn, inputs, symbol_name: str) -> set[int]:
    """The inputs the traced call of ``symbol_name`` declares its outputs may alias."""
    jfn = thunder.jit(fn)
    jfn(*inputs)
    trace = thunder.last_traces(jfn)[0]
    (bsym,) = [b for b in trace.bound_symbols if b.sym.name == symbol_name]
    names = [p.name for p in trace.args]
    declared = set()
    for pos in aliased_argument_positions(bsym):
        name = bsym.flat_args[pos].name
        if name in names:
            declared.add(names.index(name))
    return declared


def _x():
    return torch.randn(3, 2, 4)


# (symbol recorded, function, inputs): eager returns a view for every one of these
VIEW_CASES = {
    "view": ("view", lambda x: x.view(6, 4), lambda: (_x(),)),
    "transpose": ("transpose", lambda x: x.transpose(0, 1), lambda: (_x(),)),
    "getitem": ("getitem", lambda x: x[1:, 0], lambda: (_x(),)),
    "expand": ("expand", lambda x: x.expand(2, 3, 2, 4), lambda: (_x(),)),
    "unflatten": ("unflatten", lambda x: x.unflatten(0, (3, 1)), lambda: (_x(),)),
    "movedim": ("movedim", lambda x: torch.movedim(x, 0, 1), lambda: (_x(),)),
    "split (several outputs)": ("split", lambda x: x.split(1), lambda: (_x(),)),
    "flatten": ("flatten", lambda x: x.flatten(), lambda: (_x(),)),
    "unfold": ("unfold", lambda x: x.unfold(0, 2, 1), lambda: (_x(),)),
    # a view of its first argument only: the second gives the shape
    "expand_as": ("expand_as", lambda x, y: x.expand_as(y), lambda: (torch.randn(1, 4), torch.randn(3, 4))),
}

# symbols tagged alias: eager returns the argument itself
ALIAS_CASES = {
    "detach": ("detach", lambda x: x.detach(), lambda: (_x(),)),
    "contiguous of a contiguous tensor": ("contiguous", lambda x: x.contiguous(), lambda: (_x(),)),
}

# torch calls without a torch-language symbol, run by PyTorch: any argument may be aliased
OPAQUE_CASES = {
    "as_strided": ("Tensor.as_strided", lambda x: x.as_strided((2, 2), (1, 2)), lambda: (_x(),)),
    "aten.alias": ("torch.ops.aten.alias", lambda x: torch.ops.aten.alias(x), lambda: (_x(),)),
    "view as another dtype": ("Tensor.view", lambda x: x.view(torch.int32), lambda: (_x(),)),
}

# fresh results: no argument is aliased
FRESH_CASES = {
    "elementwise": ("add", lambda x, y: x + y, lambda: (_x(), _x())),
    "reduction": ("sum", lambda x: x.sum(0), lambda: (_x(),)),
    "clone": ("clone", lambda x: x.clone(), lambda: (_x(),)),
    "matmul": ("matmul", lambda x, y: x @ y, lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    "cat": ("cat", lambda x, y: torch.cat([x, y]), lambda: (_x(), _x())),
}


@pytest.mark.parametrize("case", list(VIEW_CASES) + list(ALIAS_CASES))
def test_declared_aliasing_is_eagers_for_views_and_aliases(case):
    name, fn, make = {**VIEW_CASES, **ALIAS_CASES}[case]
    inputs = make()
    eager = _eager_aliased_inputs(fn, inputs)
    assert eager, "the case is meant to alias an input in eager"
    assert _declared_aliased_inputs(fn, inputs, name) == eager


@pytest.mark.parametrize("case", list(OPAQUE_CASES))
def test_opaque_calls_may_alias_every_tensor_argument(case):
    name, fn, make = OPAQUE_CASES[case]
    inputs = make()
    eager = _eager_aliased_inputs(fn, inputs)
    assert eager
    assert eager <= _declared_aliased_inputs(fn, inputs, name)


@pytest.mark.parametrize("case", list(FRESH_CASES))
def test_fresh_results_declare_no_alias(case):
    name, fn, make = FRESH_CASES[case]
    inputs = make()
    assert _eager_aliased_inputs(fn, inputs) == set()
    assert _declared_aliased_inputs(fn, inputs, name) == set()


def test_reshape_of_a_non_contiguous_tensor_may_alias_though_eager_copies():
    # the answer is "may": a superset of eager's (reshape copies here, views a contiguous tensor)
    x = torch.randn(4, 3).t()
    assert _eager_aliased_inputs(lambda a: a.reshape(12), (x,)) == set()
    assert _declared_aliased_inputs(lambda a: a.reshape(12), (x,), "reshape") == {0}
    y = torch.randn(4, 3)
    assert _eager_aliased_inputs(lambda a: a.reshape(12), (y,)) == {0}


def test_may_return_alias_reads_the_symbols_tags():
    from thunder import torch as ltorch
    from thunder.core import prims

    assert may_return_alias(ltorch.reshape) and may_return_alias(ltorch.detach)
    assert may_return_alias(prims.reshape)  # a shape prim
    assert not may_return_alias(ltorch.add) and not may_return_alias(prims.add)

    assert returns_view_of_first_argument(ltorch.reshape) and not returns_view_of_first_argument(ltorch.detach)


def _bsym(trace, name):
    (bsym,) = [b for b in trace.bound_symbols if b.sym.name == name]
    return bsym


def test_an_executors_call_answers_for_the_calls_it_runs():
    # a claimed symbol (run by the torch executor) may alias when the call it stands for declares it; the
    # decomposition of that call does not matter: repeat_interleave's expand does not make its result a view
    x = torch.randn(2, 3)
    for fn, name, eager_alias in (
        (lambda a: a.flatten(), "flatten", True),
        (lambda a: a.mT, "transpose", True),
        (lambda a: a.repeat_interleave(2, dim=0), "repeat_interleave", False),
    ):
        assert bool(_eager_aliased_inputs(fn, (x,))) == eager_alias
        jfn = thunder.jit(fn)
        jfn(x)
        claimed = _bsym(thunder.last_traces(jfn)[-1], name)
        assert claimed.sym.executor is not None
        assert may_alias_an_argument(claimed) == eager_alias


def test_an_unclaimed_symbol_answers_for_its_decomposition():
    # before claiming, an executor may run the decomposition instead: repeat_interleave's broadcast and reshape
    # may be views; batch_norm's decomposition reshapes only its statistics, never returns a view of an argument
    jfn = thunder.jit(lambda a: a.repeat_interleave(2, dim=0))
    jfn(torch.randn(2, 3))
    bsym = _bsym(thunder.last_traces(jfn)[0], "repeat_interleave")
    assert not may_return_alias(bsym.sym) and may_alias_an_argument(bsym)

    def bn(a):
        return torch.nn.functional.batch_norm(a, torch.zeros(3), torch.ones(3), training=True)

    jbn = thunder.jit(bn)
    jbn(torch.randn(4, 3))
    assert _eager_aliased_inputs(bn, (torch.randn(4, 3),)) == set()
    assert not may_alias_an_argument(_bsym(thunder.last_traces(jbn)[0], "batch_norm_functional"))


def test_an_opaque_call_keeping_the_random_state_aliases_through_its_result_only():
    # an opaque call whose gradient replays the random generator (the forward of a training program) may return
    # a view of its argument, as eager's as_strided does (thunder has no symbol for it); the generator state it also
    # returns is a fresh tensor
    x = torch.randn(3, 4)
    assert _eager_aliased_inputs(lambda a: a.as_strided((3,), (4,)), (x,)) == {0}
    jfn = thunder.jit(lambda a: a.as_strided((3,), (4,)) * 2)
    jfn(x.clone().requires_grad_())
    forward = thunder.last_traces(jfn)[-1]
    (bsym,) = [b for b in forward.bound_symbols if OPAQUE_KEEPING_RNG_STATE in b.sym.tags]
    result, state = bsym.output
    assert aliased_argument_positions(bsym) == (0,)
    assert [o.name for o in aliased_outputs(bsym)] == [result.name]
    assert may_alias_an_argument(bsym)
