"""Inductor graphs with symbolic sizes, compiled without Dynamo, and the guards that say which calls they serve.

A region whose trace has symbolic sizes (a KV cache that grows by a position per decode step; ``cache="symbolic
values"``) meets new sizes on every call. Compiling one graph per size costs a compile per call; handing the region
to ``torch.compile(dynamic=True)`` costs Dynamo's frame evaluation and guards on every call. Instead the region is
traced once with fake inputs whose symbolic dimensions (the ones the thunder trace left symbolic) are symbols of a
shape environment, and compiled once by Inductor; the shape environment's guards (a dimension is at least 2, two
dimensions are equal, a constant is what it was) become one Python function, evaluated on each call's inputs before
the graph is called with them (a few microseconds). A call whose inputs fail the guards needs another graph.

The inputs a graph is called with are contiguous, as the fake inputs it was traced with; the region wrapper
(``torch_compile._InductorRegion``) makes them so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

from thunder.executors import inductor_subprocess

__all__ = ["SYMBOLIC_INT", "SymbolicGraph", "compile_symbolic_graph"]

SYMBOLIC_INT = "int"  # an input dimension spec: the input is an int (a size) the graph takes as a symbol


class SymbolicGraph:
    """A compiled graph and its guard: ``graph(list(args))`` computes the region for args that pass ``guard(*args)``."""

    __slots__ = ("graph", "guard", "guard_source")

    def __init__(self, graph: Callable, guard: Callable[..., bool], guard_source: str):
        self.graph = graph
        self.guard = guard
        self.guard_source = guard_source  # (the guard as Python, for messages and tests)


def compile_symbolic_graph(fn: Callable, inputs: Sequence, dynamic: Sequence) -> SymbolicGraph:
    """``fn`` traced to an aten graph for inputs like ``inputs`` and compiled by Inductor, with the dimensions
    ``dynamic`` names symbolic.

    ``dynamic[i]`` is, for a tensor input, the tuple of its symbolic dimensions; ``SYMBOLIC_INT`` for an int input
    that is a symbol (a size); None for an input the graph holds as a constant (a number: the guard checks it).
    Tensor inputs must be contiguous (the guard checks the strides of the symbolic ones only).
    """
    from torch._dynamo.source import LocalSource
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    shape_env = ShapeEnv()
    fake_mode = FakeTensorMode(shape_env=shape_env)
    fakes = []
    for i, (value, dims) in enumerate(zip(inputs, dynamic, strict=True)):
        source = LocalSource(f"t{i}")
        if isinstance(value, torch.Tensor):
            sizes = [DimDynamic.DYNAMIC if d in (dims or ()) else DimDynamic.STATIC for d in range(value.dim())]
            context = StatelessSymbolicContext(dynamic_sizes=sizes)
            fakes.append(fake_mode.from_tensor(value, symbolic_context=context, source=source))
        elif dims == SYMBOLIC_INT:
            symbol = shape_env.create_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC)
            fakes.append(shape_env.create_symintnode(symbol, hint=value, source=source))
        else:
            fakes.append(value)
    with fake_mode:
        graph = make_fx(fn, decomposition_table=select_decomp_table())(*fakes)
    compiled = inductor_subprocess.compile_aten_graph(graph, fakes, fake_mode)
    expression = shape_env.produce_guards_expression(fakes)
    guard, source = _guard_function(expression, fakes, len(inputs))
    return SymbolicGraph(compiled, guard, source)


def _guard_function(expression: str | None, fakes: list, count: int) -> tuple[Callable[..., bool], str]:
    """The shape environment's guard expression (over ``L['t0']``, ``L['t1']``...) as a function of the inputs,
    with a check of every number input the graph holds as a constant (its type and value)."""
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

    names = [f"t{i}" for i in range(count)]
    checks = []
    constants = {}
    for i, fake in enumerate(fakes):
        if isinstance(fake, (bool, int, float, complex)) and not isinstance(fake, torch.SymInt):
            constants[f"c{i}"] = fake
            checks.append(f"type(t{i}) is c{i}_type and t{i} == c{i}")
            constants[f"c{i}_type"] = type(fake)
    if expression:
        checks.append("(" + re.sub(r"L\['(t\d+)'\]", r"\1", expression) + ")")
    body = " and ".join(checks) or "True"
    source = f"def guard({', '.join(names)}):\n    return {body}\n"
    namespace = {**SYMPY_INTERP, **constants}
    exec(compile(source, "<region guard>", "exec"), namespace)  # noqa: S102 - code built from the shape guards
    return namespace["guard"], source
