"""Rematerialisation across the forward/backward boundary with the nvFuser executor, checked on the CPU.

Traces are built on proxies that say they live on ``cuda:0`` (no GPU needed), split into forward
and backward, passed through the executor's ``rematerialize`` hook, fused, and run on CPU tensors
with the recording stand-in evaluating each ``FusionDefinition`` with PyTorch: fewer tensors are
saved for backward, and outputs and gradients still equal eager PyTorch's.
"""

from __future__ import annotations

import pytest
import torch
from conftest import cuda_trace, fuse, fusion_bsyms
from nvfuser_standin import fake_nvfuser_module

import thunder.torch as ltorch
from thunder.executors import pythonex, torchex
from thunder.extend import saved_for_backward
from thunder.transforms.split import split_forward_backward
from thunder_nvfuser.executor import NvFuserExecutor


def _tanh_exp(a, b):
    return (a.exp() * b).tanh()


def _tanh_exp_thunder(a, b):
    return ltorch.tanh(ltorch.exp(a) * b)


def _mlp(x, w1, w2):  # LLaMA-MLP-like activation: matmuls left to torch, the rest fused
    return (torch.nn.functional.silu((x @ w1).float()).to(x.dtype)) * (x @ w2)


def _mlp_thunder(x, w1, w2):
    return ltorch.silu(ltorch.matmul(x, w1).float()).to(x.dtype) * ltorch.matmul(x, w2)


def _sin_sigmoid(a):
    return torch.sigmoid(torch.sin(a) * 2) * torch.cos(a)


def _sin_sigmoid_thunder(a):
    return ltorch.sigmoid(ltorch.sin(a) * 2) * ltorch.cos(a)


def _compile(thunder_fn, examples, ex: NvFuserExecutor):
    """(forward callable, backward callable, saved proxies, the fused backward trace)."""
    trace = cuda_trace(thunder_fn, *examples)
    for p in trace.args:
        p.requires_grad = True
    fb = split_forward_backward(trace, {p.name for p in trace.args}, [ex, torchex.ex, pythonex.ex])
    forward, backward = ex.rematerialize(fb.forward, fb.backward)
    fused = [fuse(forward, ex), fuse(backward, ex)]
    for t in fused:
        for b in fusion_bsyms(t, ex):
            b.sym.call_ctx[b.sym.name]._nvfuser = fake_nvfuser_module()  # no nvFuser import or check
    return fused[0].python_callable(), fused[1].python_callable(), saved_for_backward(forward), fused[1]


CASES = [
    pytest.param(_tanh_exp, _tanh_exp_thunder, [(3, 5), (3, 5)], torch.float32, id="tanh(exp(a)*b)"),
    pytest.param(_mlp, _mlp_thunder, [(4, 8), (8, 6), (8, 6)], torch.bfloat16, id="silu(x@w1)*(x@w2) bf16"),
    pytest.param(_sin_sigmoid, _sin_sigmoid_thunder, [(6,)], torch.float32, id="sigmoid(sin(a)*2)*cos(a)"),
]


@pytest.mark.parametrize("fn, thunder_fn, shapes, dtype", CASES)
def test_saves_fewer_tensors_with_the_same_values_and_grads(fn, thunder_fn, shapes, dtype):
    torch.manual_seed(0)
    inputs = [torch.randn(s, dtype=dtype) for s in shapes]
    fw, bw, saved, fused_backward = _compile(thunder_fn, inputs, NvFuserExecutor())
    saved_without = _compile(thunder_fn, inputs, NvFuserExecutor(rematerialize=False))[2]
    assert len(saved) < len(saved_without)
    assert sum(p.numel() * p.dtype.bytes for p in saved) < sum(p.numel() * p.dtype.bytes for p in saved_without)
    # the recomputation is fused: the backward's nvFusion regions hold forward operations again
    assert any(b.sym.name.startswith("nvFusion") for b in fused_backward.bound_symbols)

    outputs, saved_values = fw(*inputs)
    assert len(saved_values) == len(saved)
    cotangent = torch.randn_like(outputs[0])
    grads = bw(list(saved_values), [cotangent])

    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    expected = fn(*leaves)
    expected_grads = torch.autograd.grad(expected, leaves, cotangent)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype is torch.bfloat16 else {}
    torch.testing.assert_close(outputs[0], expected, **tol)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, **tol)


def test_can_be_switched_off():
    ex = NvFuserExecutor(rematerialize=False)
    trace = cuda_trace(_tanh_exp_thunder, torch.randn(2, 2), torch.randn(2, 2))
    for p in trace.args:
        p.requires_grad = True
    fb = split_forward_backward(trace, {p.name for p in trace.args}, [ex, torchex.ex, pythonex.ex])
    assert ex.rematerialize(fb.forward, fb.backward) == (fb.forward, fb.backward)
