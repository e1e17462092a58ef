"""Which bound symbols the nvFuser executor takes, and the regions it forms (no nvFuser, no GPU needed)."""

from __future__ import annotations

import torch
from conftest import cuda_trace, fuse, fusion_bsyms

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.executors import pythonex, torchex
from thunder.executors.passes import claim_executors, fusion_claims
from thunder_nvfuser.executor import NvFuserExecutor
from thunder_nvfuser.lowering import supported_prim_names


def _claimed(trace, ex) -> list[str]:
    claimed = claim_executors(trace, [ex, torchex.ex, pythonex.ex])
    return [b.sym.name for b, e in fusion_claims(claimed).values() if e is ex]


def _mlp(x, w1, w2, w3):
    return ltorch.linear(ltorch.silu(ltorch.linear(x, w1)) * ltorch.linear(x, w2), w3)


def _prim_names(bsym) -> list[str]:
    if bsym.sym.id.startswith("prims."):
        return [bsym.sym.name]
    return [n for s in bsym.subsymbols for n in _prim_names(s)]


def test_takes_elementwise_reductions_and_shapes_on_cuda_whole():
    ex = NvFuserExecutor()

    def f(a, b):
        c = (a + b).softmax(-1)
        return (c * 2).sum(0).reshape(1, -1).permute(1, 0), c[:, 1:3].exp()

    trace = cuda_trace(f, torch.randn(4, 8), torch.randn(8, dtype=torch.bfloat16))
    assert _claimed(trace, ex) == ["add", "softmax", "mul", "sum", "reshape", "permute", "getitem", "exp"]
    fused = fuse(trace, ex)
    regions = fusion_bsyms(fused, ex)
    assert [b.sym.name for b in regions] == ["nvFusion0"]
    assert [b.sym.name for b in fused.bound_symbols] == ["nvFusion0", "python_return"]
    text = str(fused)
    assert "(t" in text and "= nvFusion0(t0, t1)" in text
    assert "    # t13 = ltorch.softmax(t4, -1)" in text and "prims.amax" in text  # contents as comments


def test_cpu_tensors_are_not_taken():
    ex = NvFuserExecutor()
    trace = cuda_trace(lambda a, b: (a + b).exp(), torch.randn(3), torch.randn(3), device="cpu")
    assert _claimed(trace, ex) == []
    assert fusion_bsyms(fuse(trace, ex), ex) == []


def test_mixed_devices_are_not_taken():
    ex = NvFuserExecutor()
    trace = TraceCtx("fn")
    with tracectx(trace):
        a = TensorProxy(shape=(3,), dtype=torch.float32, device="cuda:0")
        b = TensorProxy(shape=(3,), dtype=torch.float32, device="cpu")
        trace.args = [a, b]
        c = prims.exp(a)
        d = prims.exp(b)
        prims.python_return((c, d))
    assert _claimed(trace, ex) == ["exp"]
    claimed = claim_executors(trace, [ex, torchex.ex, pythonex.ex])
    [(bsym, _)] = [v for v in fusion_claims(claimed).values()]
    assert bsym.args[0] is a


def test_unsupported_dtypes_and_prims_go_to_torch():
    ex = NvFuserExecutor()
    # int8 tensors: nvFuser has no such tensor type
    trace = cuda_trace(lambda a: a + a, torch.ones(4, dtype=torch.int8))
    assert _claimed(trace, ex) == []
    # cumsum and argmax: no nvFuser lowering; the elementwise work around them still fuses
    trace = cuda_trace(lambda a: (a.exp().cumsum(0) * 2).argmax(), torch.randn(5))
    assert _claimed(trace, ex) == ["exp", "mul"]
    fused = fuse(trace, ex)
    names = [b.sym.name for b in fused.bound_symbols]
    assert names == ["nvFusion0", "cumsum", "nvFusion1", "argmax", "python_return"]


def test_a_composite_is_split_when_part_of_it_is_not_supported():
    ex = NvFuserExecutor()
    # flip has no nvFuser lowering: the torch executor runs it between two fusible operations
    trace = cuda_trace(lambda a: ltorch.flip(a.exp(), (0,)) + 1, torch.randn(4))
    claimed = claim_executors(trace, [ex, torchex.ex, pythonex.ex])
    taken = {id(b) for b, e in fusion_claims(claimed).values() if e is ex}
    assert [(b.sym.name, id(b) in taken) for b in claimed.bound_symbols] == [
        ("exp", True),
        ("flip", False),
        ("add", True),
        ("python_return", False),
    ]


def test_regions_never_form_a_cycle():
    """exp -> cumsum (not fused) -> add(exp, cumsum): one region holding exp and add would be a cycle."""
    ex = NvFuserExecutor()

    def f(a):
        e = a.exp()
        c = e.cumsum(0)
        return e + c, (a * 3).sin()

    trace = cuda_trace(f, torch.randn(6))
    fused = fuse(trace, ex)
    regions = fusion_bsyms(fused, ex)
    assert len(regions) == 2
    contents = [sorted(n for s in r.subsymbols for n in _prim_names(s)) for r in regions]
    assert not any("exp" in c and "add" in c for c in contents)
    # the independent `(a * 3).sin()` joins the open region instead of making a third one
    assert contents == [["exp"], ["add", "mul", "sin"]]
    # every value is defined before it is used
    defined = {p.name for p in fused.args}
    for b in fused.bound_symbols:
        assert all(p.name in defined for p in b.flat_args), b.sym.name
        defined.update(p.name for p in b.flat_outs)


def test_matmul_and_linear_only_with_their_options():
    shapes = (torch.randn(2, 8, 16), torch.randn(32, 16), torch.randn(32, 16), torch.randn(16, 32))
    trace = cuda_trace(_mlp, *shapes)
    assert _claimed(trace, NvFuserExecutor()) == ["silu", "mul"]
    assert _claimed(trace, NvFuserExecutor(options=("linear",))) == ["linear", "silu", "linear", "mul", "linear"]
    trace = cuda_trace(lambda a, b: (a @ b).relu(), torch.randn(4, 8), torch.randn(8, 2))
    assert "matmul" not in _claimed(trace, NvFuserExecutor())
    assert _claimed(trace, NvFuserExecutor(options=("matmul",))) == ["matmul", "relu"]


def test_random_draws_only_with_the_random_option():
    def f(a):
        return prims.uniform(a.shape, 0.0, 1.0, device=a.device, dtype=a.dtype) * a

    trace = cuda_trace(f, torch.randn(4))
    assert _claimed(trace, NvFuserExecutor()) == ["uniform", "mul"]
    assert _claimed(trace, NvFuserExecutor(options=())) == ["mul"]


def test_supported_prims_cover_the_families():
    names = set(supported_prim_names(("random",)))
    assert {"add", "exp", "where", "convert_element_type", "sum", "amax", "var", "broadcast_in_dim"} <= names
    assert {"reshape", "transpose", "slice", "squeeze", "cat", "pad", "full", "iota", "uniform"} <= names
    assert not {"matmul", "linear", "cumsum", "copy_", "argmax"} & names
    assert {"matmul", "linear"} <= set(supported_prim_names(("matmul", "linear")))
