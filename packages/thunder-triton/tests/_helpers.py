"""Shared helpers of the kernel tests: jit with the triton executor, compare values and gradients with eager."""

from __future__ import annotations

import copy
import os

import torch

import thunder
from thunder_triton import get_executor

# where the tests' tensors live (conftest.py): the CPU through the interpreter, or CUDA
DEVICE = "cuda" if os.environ.get("THUNDER_TRITON_TEST_DEVICE", "").strip().lower() == "cuda" else "cpu"

triton_ex = get_executor()
EXECUTORS = [triton_ex, *thunder.get_default_executors()]

TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.bfloat16: dict(atol=3e-2, rtol=2e-2),
    torch.float16: dict(atol=3e-3, rtol=2e-3),
    torch.float64: dict(atol=1e-7, rtol=1e-7),
}


def check_against_eager(fn, *inputs, fwd_ops=(), bwd_ops=(), absent=(), tol=None, module=None):
    """Runs ``fn`` (or ``module``) jitted with the triton executor and eagerly; compares outputs and all grads.

    ``fwd_ops`` / ``bwd_ops`` must be called in the final forward / backward traces; ``absent``
    names operators that must appear in neither. Returns the jitted function.
    """
    dtype = next(x.dtype for x in inputs if x.is_floating_point())
    tol = tol or TOL[dtype]
    leaves = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    ref_leaves = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    if module is not None:
        ref_module = copy.deepcopy(module)
        jfn = thunder.jit(module, executors=EXECUTORS)
        ref_fn = ref_module
    else:
        jfn = thunder.jit(fn, executors=EXECUTORS)
        ref_fn = fn
    out = jfn(*leaves)
    expected = ref_fn(*ref_leaves)
    torch.testing.assert_close(out, expected, **tol)
    if out.requires_grad:
        go = torch.randn_like(out)
        out.backward(go)
        expected.backward(go)
        for a, b in zip(leaves, ref_leaves):
            if a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad, **tol)
        if module is not None:
            ref_params = dict(ref_module.named_parameters())
            for name, p in module.named_parameters():
                torch.testing.assert_close(p.grad, ref_params[name].grad, **tol, msg=name)
    fwd = str(thunder.last_traces(jfn)[-1])
    bwd = str(thunder.last_backward_traces(jfn)[-1]) if out.requires_grad else ""
    for op in fwd_ops:
        assert f"{op}(" in fwd, fwd
    for op in bwd_ops:
        assert f"{op}(" in bwd, bwd
    for op in absent:
        assert f"{op}(" not in fwd and f"{op}(" not in bwd, fwd + bwd
    return jfn
