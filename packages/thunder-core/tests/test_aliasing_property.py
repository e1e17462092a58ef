"""``thunder.core.aliasing``: the declared "may return a view/alias of argument i" answer, per op family,
against the aliasing eager PyTorch actually produces (outputs sharing an argument's storage)."""

import pytest
import torch

import thunder
from thunder.core.aliasing import aliased_argument_positions, may_return_alias


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
