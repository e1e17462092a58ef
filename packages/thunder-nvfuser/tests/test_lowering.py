"""The FusionDefinition a region lowers to, checked with a recording stand-in (not nvFuser) and evaluated
with PyTorch on the CPU against eager PyTorch: the lowering's meaning, not nvFuser's compiler."""

from __future__ import annotations

import pytest
import torch
from conftest import cuda_trace, fuse, fusion_bsyms
from nvfuser_standin import DataTypeStandIn, RecordingFusionDefinitionStandIn, fake_nvfuser_module

import thunder.torch as ltorch
from thunder.core import prims
from thunder.executors.fusion import Region
from thunder_nvfuser.executor import NvFuserExecutor
from thunder_nvfuser.lowering import lower_region


def _run_with_standin(fn, *args, ex=None):
    """Traces ``fn`` on CUDA proxies, fuses with nvFuser, runs the program on CPU tensors with the stand-in."""
    ex = ex or NvFuserExecutor()
    fused = fuse(cuda_trace(fn, *args), ex)
    fusions = [b.sym.call_ctx[b.sym.name] for b in fusion_bsyms(fused, ex)]
    for f in fusions:
        f._nvfuser = fake_nvfuser_module()  # bypasses the nvFuser import and version check
    return fused.python_callable()(*args), fusions, fused


def test_add_with_broadcast_and_cast_lowers_to_these_calls():
    trace = cuda_trace(lambda a, b: a + b, torch.randn(2, 3), torch.randn(3, dtype=torch.bfloat16))
    add = trace.bound_symbols[0]
    region = Region([add], list(trace.args), [add.output], "nvFusion0")
    fd = RecordingFusionDefinitionStandIn()
    lower_region(fd, region, DataTypeStandIn)
    assert fd.calls == [
        (
            "define_tensor",
            (),
            dict(shape=[-1, -1], contiguity=[True, True], dtype="DataType.Float", is_cpu=False, stride_order=[1, 0]),
        ),
        (
            "define_tensor",
            (),
            dict(shape=[-1], contiguity=[True], dtype="DataType.BFloat16", is_cpu=False, stride_order=[0]),
        ),
        ("ops.broadcast_in_dim", ("T1",), dict(shape=[2, 3], broadcast_dims=[1])),
        ("ops.cast", ("T2",), dict(dtype="DataType.Float")),
        ("ops.add", ("T0", "T3"), {}),
        ("add_output", ("T4",), {}),
    ]


def test_scalars_size_one_dims_and_reductions():
    trace = cuda_trace(lambda a: (a * 0.5).sum(-1), torch.randn(1, 4))
    bsyms = trace.bound_symbols[:-1]
    region = Region(bsyms, list(trace.args), [bsyms[-1].output], "nvFusion0")
    fd = RecordingFusionDefinitionStandIn()
    lower_region(fd, region, DataTypeStandIn)
    assert fd.calls[0][2]["shape"] == [1, -1] and fd.calls[0][2]["contiguity"] == [None, True]
    assert fd.calls[1:] == [
        ("define_scalar", (0.5,), dict(dtype="DataType.Double")),
        ("ops.mul", ("T0", "S1"), {}),
        ("ops.sum", ("T2", [1], False, "DataType.Float"), {}),
        ("add_output", ("T3",), {}),
    ]


def test_pad_widths_run_from_the_last_dim():
    trace = cuda_trace(
        lambda a: prims.pad(a, 0.0, ((1, 2, 0), (0, 3, 0))),
        torch.randn(2, 3),
    )
    region = Region(trace.bound_symbols[:1], list(trace.args), [trace.bound_symbols[0].output], "nvFusion0")
    fd = RecordingFusionDefinitionStandIn()
    lower_region(fd, region, DataTypeStandIn)
    assert ("ops.pad", ("T0",), dict(pad_widths=[0, 3, 1, 2], value="S1")) in fd.calls


CASES = {
    "softmax_silu": (
        lambda a, b: torch.nn.functional.silu((a + b).softmax(-1)),
        (torch.randn(4, 8), torch.randn(8)),
    ),
    "rmsnorm_bf16": (
        lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16) * w,
        (torch.randn(2, 5, 16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)),
    ),
    "rope_like": (
        lambda x, cos, sin: x * cos + torch.cat((-x[..., 4:], x[..., :4]), -1) * sin,
        (torch.randn(2, 3, 5, 8), torch.randn(5, 8), torch.randn(5, 8)),
    ),
    "shapes": (
        lambda a: a.transpose(0, 1).reshape(6, 2).unsqueeze(0).squeeze(0)[1:5:2],
        (torch.randn(3, 4),),
    ),
    "where_var_amax": (
        lambda a, b: (torch.where(a > 0, a, b).var(0), a.amax(1), (a - b).abs().amin()),
        (torch.randn(4, 6), torch.randn(4, 6)),
    ),
    "ints_and_bools": (
        lambda a, b: ((a // 3) + (a % 5) * b, (a > b) & (b != 0)),
        (torch.randint(-20, 20, (7,)), torch.randint(1, 5, (7,))),
    ),
    "pad_and_index": (
        lambda a, i: (torch.nn.functional.pad(a, (1, 2)), a.index_select(0, i) * 2),
        (torch.randn(3, 4), torch.tensor([2, 0])),
    ),
    "factories": (
        lambda a: (
            a
            + torch.full((3,), 2.5, device=a.device, dtype=torch.float32)
            + torch.arange(0, 3, device=a.device, dtype=torch.float32)
        ),
        (torch.randn(3),),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_means_what_the_prims_mean(name):
    fn, args = CASES[name]
    expected = fn(*args)
    got, fusions, fused = _run_with_standin(_torch_to_ltorch(fn), *args)
    assert fusions, str(fused)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


def _torch_to_ltorch(fn):
    """Runs ``fn`` (written against torch) on proxies: torch.* calls are mapped to thunder.torch."""
    import types

    shim = types.SimpleNamespace(
        rsqrt=ltorch.rsqrt,
        cat=ltorch.cat,
        where=ltorch.where,
        full=ltorch.full,
        arange=ltorch.arange,
        float32=torch.float32,
        bfloat16=torch.bfloat16,
        nn=types.SimpleNamespace(functional=types.SimpleNamespace(pad=ltorch.pad, silu=ltorch.silu)),
    )
    g = dict(fn.__globals__)
    g["torch"] = shim
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def test_one_definition_per_input_signature():
    args = (torch.randn(4, 8), torch.randn(8))
    fn = _torch_to_ltorch(CASES["softmax_silu"][0])
    _, [fusion], fused = _run_with_standin(fn, *args)
    call = fused.python_callable()
    call(*args)
    assert len(fusion.fusions) == 1
    (fd,) = fusion.fusions.values()
    assert fd.executions == 2
    # a transposed (non-contiguous) first input: a new definition with that layout
    a_t = torch.randn(8, 4).t()
    torch.testing.assert_close(call(a_t, args[1]), ltorch_free(a_t, args[1]))
    assert len(fusion.fusions) == 2


def ltorch_free(a, b):
    return torch.nn.functional.silu((a + b).softmax(-1))
