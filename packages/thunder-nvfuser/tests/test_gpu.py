"""nvFuser on a GPU: OpInfo values and grads, LLaMAMLP and a LitGPT Llama against eager.

Every test here is marked ``cuda`` and skipped (saying so) unless a CUDA device and nvFuser are
present: none of it can run on a CPU-only machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import thunder

pytestmark = pytest.mark.cuda

_CORE_TESTS = Path(__file__).resolve().parents[2] / "thunder-core" / "tests"
if _CORE_TESTS.is_dir():
    sys.path.insert(0, str(_CORE_TESTS))
try:
    from opinfos import OpInfo, opinfos  # thunder-core's OpInfos
except ImportError:  # pragma: no cover - a checkout without thunder-core's tests
    opinfos = []

GPU_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool)


def _executors():
    from thunder_nvfuser.executor import nvfuser_ex

    return [nvfuser_ex, *thunder.get_default_executors()]


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _tensors(y)]
    return []


@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=str)
@pytest.mark.parametrize("op", [pytest.param(op, id=op.name) for op in opinfos if not op.random])
def test_opinfo_values_and_grads(op: OpInfo, dtype: torch.dtype) -> None:
    if dtype not in op.dtypes or dtype in op.skips:
        pytest.skip(f"{op.name} is not tested with {dtype}")
    grad = op.supports_grad and dtype.is_floating_point
    for sample in op.sample_inputs("cuda", dtype, requires_grad=grad):
        jfn = thunder.jit(op.op, executors=_executors())
        actual = jfn(*sample.args, **sample.kwargs)
        expected = op.torch_reference(*sample.args, **sample.kwargs)
        torch.testing.assert_close(actual, expected, equal_nan=True, **op.tolerances(dtype))
        outs = [t for t in _tensors(actual) if t.requires_grad]
        if not outs:
            continue
        inputs = [t for t in _tensors(sample.args) if t.requires_grad]
        cts = [torch.randn_like(o) for o in outs]
        got = torch.autograd.grad(outs, inputs, cts, allow_unused=True)
        ref_outs = [t for t in _tensors(expected) if t.requires_grad]
        want = torch.autograd.grad(ref_outs, inputs, cts, allow_unused=True)
        torch.testing.assert_close(got, want, equal_nan=True, **op.tolerances(dtype))


def _bf16_close(a, b):
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def _has_nvfusion(jfn) -> bool:
    return "nvFusion0" in str(thunder.last_traces(jfn)[-1])


def test_llamamlp_forward_backward_bf16():
    from litgpt.config import Config
    from litgpt.model import LLaMAMLP

    config = Config(n_embd=256, intermediate_size=688, bias=False)
    torch.manual_seed(0)
    model = LLaMAMLP(config).to("cuda", torch.bfloat16)
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    jm = thunder.jit(model, executors=_executors())
    out = jm(x)
    ref = model(x)
    _bf16_close(out, ref)
    assert _has_nvfusion(jm)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, *model.parameters()], g)
    want = torch.autograd.grad(ref, [x, *model.parameters()], g)
    for a, b in zip(got, want):
        _bf16_close(a, b)
    assert "nvFusion" in str(thunder.last_backward_traces(jm)[-1])


def test_litgpt_llama_forward_backward_bf16():
    from litgpt import GPT, Config

    config = Config(
        block_size=128,
        vocab_size=512,
        padded_vocab_size=512,
        n_layer=2,
        n_head=4,
        n_query_groups=2,
        n_embd=128,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=344,
    )
    torch.manual_seed(0)
    model = GPT(config).to("cuda", torch.bfloat16)
    idx = torch.randint(0, 512, (2, 64), device="cuda")
    jm = thunder.jit(model, executors=_executors())
    out = jm(idx)
    ref = model(idx)
    _bf16_close(out, ref)
    assert _has_nvfusion(jm)
    g = torch.randn_like(out)
    params = list(model.parameters())
    for a, b in zip(torch.autograd.grad(out, params, g), torch.autograd.grad(ref, params, g)):
        _bf16_close(a, b)


def test_cache_per_input_signature_and_trace_regions():
    from thunder_nvfuser.executor import NvFusion

    jfn = thunder.jit(lambda a, b: (a * b).sum(-1).exp(), executors=_executors())
    a = torch.randn(4, 8, device="cuda")
    b = torch.randn(4, 8, device="cuda")
    torch.testing.assert_close(jfn(a, b), (a * b).sum(-1).exp())
    jfn(a, b)
    trace = thunder.last_traces(jfn)[-1]
    [fusion] = [b.sym.call_ctx[b.sym.name] for b in trace.bound_symbols if b.sym.name.startswith("nvFusion")]
    assert isinstance(fusion, NvFusion) and len(fusion.fusions) == 1


@pytest.mark.parametrize(
    "fn, n",
    [
        pytest.param(lambda a, b: (a.exp() * b).tanh(), 2, id="tanh(exp(a)*b)"),
        pytest.param(lambda a: torch.sigmoid(torch.sin(a) * 2) * torch.cos(a), 1, id="sigmoid(sin(a)*2)*cos(a)"),
    ],
)
def test_rematerialization_saves_less_with_equal_grads(fn, n):
    from thunder.extend import saved_for_backward
    from thunder_nvfuser.executor import NvFuserExecutor

    torch.manual_seed(0)
    args = [torch.randn(64, 256, device="cuda", requires_grad=True) for _ in range(n)]
    ref = fn(*args)
    g = torch.randn_like(ref)
    want = torch.autograd.grad(ref, args, g)
    saved = {}
    for remat in (False, True):
        ex = NvFuserExecutor(f"nvfuser_remat_{remat}", rematerialize=remat)
        jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
        out = jfn(*args)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(torch.autograd.grad(out, args, g), want)
        saved[remat] = saved_for_backward(thunder.last_traces(jfn)[-1])
    assert len(saved[True]) < len(saved[False])
