"""The shared fusion partitioner, with a fusion executor that runs its regions through the torch executor."""

from __future__ import annotations

import random

import torch

import thunder
from thunder.core import prims
from thunder.executors import pythonex, torchex
from thunder.executors.fusion import Region, region_trace
from thunder.extend import FusionExecutor


class ListFusion(FusionExecutor):
    """Fuses the torch-language symbols named in ``names``; a region runs its lowered Python function."""

    region_name = "listFusion"

    def __init__(self, names, *, min_region_size: int = 1):
        super().__init__("list_fusion")
        self.names = set(names)
        self.min_region_size = min_region_size
        self.regions: list[Region] = []
        self.calls = 0

    def can_fuse(self, bsym) -> bool:
        return bsym.sym.name in self.names and bsym.sym.id.startswith("torch.")

    def fuse_region(self, region: Region):
        self.regions.append(region)
        fn = region_trace(region, [torchex.ex, pythonex.ex]).python_callable()

        def run(*args):
            self.calls += 1
            return fn(*args)

        return run


def _jit(fn, fusion):
    return thunder.jit(fn, executors=[fusion, *thunder.get_default_executors()])


def _region_lines(trace) -> list[str]:
    return [
        line.strip() for line in str(trace).splitlines() if "listFusion" in line and not line.strip().startswith("#")
    ]


def _assert_defined_before_use(trace) -> None:
    defined = {a.name for a in trace.args if hasattr(a, "name")}
    for bsym in trace.bound_symbols:
        if bsym.sym is prims.python_del:
            continue
        for p in bsym.flat_args:
            assert p.name in defined, f"{p.name} used before it is computed in\n{trace}"
        defined.update(p.name for p in bsym.flat_outs)


def test_chain_is_one_region_and_prints_contents():
    def f(a, b):
        c = a * b
        d = c + a
        return d * 2, torch.sin(d)

    fusion = ListFusion({"mul", "add"})
    jf = _jit(f, fusion)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = jf(a, b)
    for x, y in zip(out, f(a, b)):
        torch.testing.assert_close(x, y)
    trace = thunder.last_traces(jf)[-1]
    text = str(trace)
    assert len(fusion.regions) == 1 and fusion.calls == 1
    assert [len(r.bound_symbols) for r in fusion.regions] == [3]
    # one call with the region's inputs and the outputs used after it
    assert _region_lines(trace) == ["(d, t2) = listFusion0(a, b)"]
    # its contents are comments right below it, decompositions indented further
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if "= listFusion0(" in line)
    assert lines[k + 1] == '    # c = ltorch.mul(a, b)  # c: "cpu f32[3, 4]"'
    assert lines[k + 2] == '      # c = prims.mul(a, b)  # c: "cpu f32[3, 4]"'
    assert "torch.sin(d)" in text
    assert "Fusion (list_fusion)" in str(thunder.last_traces(jf)[-3])


def test_branching_graph_never_creates_a_cycle():
    # b -> exp (not fusible) -> e consumes both exp's output and d: e cannot join b's region,
    # while d (independent of exp) can, across the unfused exp
    def f(a):
        b = a + 1
        c = torch.exp(b)
        d = b * 2
        e = c + d
        return e * 3

    fusion = ListFusion({"mul", "add"})
    jf = _jit(f, fusion)
    a = torch.randn(5)
    torch.testing.assert_close(jf(a), f(a))
    trace = thunder.last_traces(jf)[-1]
    _assert_defined_before_use(trace)
    members = [[b.sym.name for b in r.bound_symbols] for r in fusion.regions]
    assert members == [["add", "mul"], ["add", "mul"]]
    lines = [line.strip() for line in str(trace).splitlines() if not line.strip().startswith("#")]
    first = next(i for i, line in enumerate(lines) if "listFusion0(" in line)
    exp = next(i for i, line in enumerate(lines) if "torch.exp(" in line)
    second = next(i for i, line in enumerate(lines) if "listFusion1(" in line)
    assert first < exp < second
    # the first region feeds exp and the second one, never the other way round
    assert lines[first].startswith("(b, d) = listFusion0(a)")


def test_diamond_through_two_unfused_paths():
    def f(a, b):
        x = a * b  # fused
        y = torch.exp(x)  # unfused, depends on the region
        z = torch.cos(b)  # unfused, independent
        w = z * a  # fused, may join the first region (depends only on z)
        v = y + w  # fused, depends on y: needs a new region
        return v, x

    fusion = ListFusion({"mul", "add"})
    jf = _jit(f, fusion)
    a, b = torch.randn(4), torch.randn(4)
    for x, y in zip(jf(a, b), f(a, b)):
        torch.testing.assert_close(x, y)
    _assert_defined_before_use(thunder.last_traces(jf)[-1])
    assert [[b.sym.name for b in r.bound_symbols] for r in fusion.regions] == [["mul", "mul"], ["add"]]


def test_side_effects_are_barriers():
    def f(a):
        b = a * 2
        r = torch.rand_like(a)
        c = a * 3
        return b, r, c

    fusion = ListFusion({"mul"})
    jf = _jit(f, fusion)
    b, r, c = jf(torch.ones(3))
    torch.testing.assert_close(b, torch.full((3,), 2.0))
    torch.testing.assert_close(c, torch.full((3,), 3.0))
    assert r.shape == (3,)
    trace = thunder.last_traces(jf)[-1]
    # no region spans the random draw, and the draw stays between them
    assert len(fusion.regions) == 2
    lines = [line for line in str(trace).splitlines() if not line.strip().startswith("#")]
    pos = [
        next(i for i, line in enumerate(lines) if s in line) for s in ("listFusion0(", "torch.rand(", "listFusion1(")
    ]
    assert pos == sorted(pos)


def test_small_regions_go_back_to_other_executors():
    def f(a):
        b = a + 1
        c = torch.exp(b)
        d = c + 1
        e = d * 2
        return e

    fusion = ListFusion({"mul", "add"}, min_region_size=2)
    jf = _jit(f, fusion)
    a = torch.randn(3)
    torch.testing.assert_close(jf(a), f(a))
    text = str(thunder.last_traces(jf)[-1])
    assert [len(r.bound_symbols) for r in fusion.regions] == [2]
    assert "b = torch.add(a, 1)" in text
    assert "(e,) = listFusion0(c)" in text


def test_unused_region_output_is_dropped():
    def f(a):
        b = a + 1
        c = b * 2
        return b, c

    fusion = ListFusion({"mul", "add"})
    jf = _jit(f, fusion)
    a = torch.randn(3)
    out = jf(a)
    torch.testing.assert_close(out[1], (a + 1) * 2)
    assert _region_lines(thunder.last_traces(jf)[-1]) == ["(b, c) = listFusion0(a)"]


_UNARY = [torch.exp, torch.sin, torch.neg, torch.tanh]


def _check_random_program(seed: int) -> int:
    """A random DAG of fusible (add, mul) and unfused (exp, sin, ...) ops: valid order, eager results."""
    rng = random.Random(seed)
    program = []
    n_inputs = 3
    for i in range(rng.randint(4, 14)):
        kind = rng.choice(["add", "mul", "unary", "unary"])
        n_values = n_inputs + i
        x, y = rng.randrange(n_values), rng.randrange(n_values)
        program.append((kind, x, y, rng.randrange(len(_UNARY))))
    outputs = sorted({rng.randrange(n_inputs + len(program)) for _ in range(2)} | {n_inputs + len(program) - 1})

    def f(a, b, c):
        values = [a, b, c]
        for kind, x, y, u in program:
            if kind == "add":
                values.append(values[x] + values[y])
            elif kind == "mul":
                values.append(values[x] * values[y])
            else:
                values.append(_UNARY[u](values[x]) * 0.5)
        return tuple(values[o] for o in outputs)

    fusion = ListFusion({"mul", "add"})
    jf = _jit(f, fusion)
    args = [torch.randn(3) * 0.5 for _ in range(3)]
    for got, want in zip(jf(*args), f(*args)):
        torch.testing.assert_close(got, want)
    trace = thunder.last_traces(jf)[-1]
    _assert_defined_before_use(trace)
    # every fusible op ended up in a region
    code = [line for line in str(trace).splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "torch.add(" in line or "torch.mul(" in line]
    return len(fusion.regions)


def test_random_programs():
    regions = [_check_random_program(seed) for seed in range(25)]
    # the programs include ones the partitioner must split to avoid cycles
    assert max(regions) >= 3
