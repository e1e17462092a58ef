"""thunder-apex against real NVIDIA apex kernels on a GPU: values and gradients against eager PyTorch.

Marked ``apex_cuda``: conftest.py skips these unless a CUDA GPU is present and apex's xentropy and
fused_layer_norm_cuda extensions are importable.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.transforms import grad
from thunder_apex import apex_ex

pytestmark = pytest.mark.apex_cuda

_TOL = {torch.float32: {}, torch.float16: {"rtol": 1e-2, "atol": 1e-2}, torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy(dtype, reduction, label_smoothing):
    torch.manual_seed(0)
    logits = torch.randn(64, 1000, device="cuda", dtype=dtype)
    labels = torch.randint(0, 1000, (64,), device="cuda")
    labels[::7] = -100

    def fn(a, t):
        return F.cross_entropy(a, t, reduction=reduction, label_smoothing=label_smoothing)

    jfn = thunder.jit(fn, executors=[apex_ex])
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    out, ref = jfn(a, labels), fn(b, labels)
    assert out.dtype == ref.dtype
    if not ref.isfinite().all():
        # eager float16 sums the label-smoothing term in float16 and overflows to inf; apex's kernel
        # accumulates in float32 (as torch.compile does): compare with eager in float32, rounded
        ref32 = fn(logits.float(), labels).to(dtype)
        assert ref32.isfinite().all()
        torch.testing.assert_close(out, ref32, **_TOL[dtype])
    else:
        torch.testing.assert_close(out, ref, **_TOL[dtype])
    assert "apex_cross_entropy(" in str(thunder.last_traces(jfn)[-1])
    cot = torch.randn_like(ref)
    out.backward(cot)
    ref.backward(cot)
    torch.testing.assert_close(a.grad, b.grad, **_TOL[dtype])


def test_seed_example_grad():
    logits = torch.randn(2048, 50257, device="cuda")
    labels = torch.randint(0, 50257, (2048,), device="cuda")

    def foo(logits, labels):
        return F.cross_entropy(logits, labels, reduction="mean", ignore_index=-1)

    cfoo = thunder.jit(foo, executors=[apex_ex])
    torch.testing.assert_close(cfoo(logits, labels), foo(logits, labels))
    cfoo_grad = grad(cfoo)
    (g,) = cfoo_grad(logits, labels)
    torch.testing.assert_close(g, torch.func.grad(foo)(logits, labels))
    assert "apex_cross_entropy_backward(" in str(thunder.last_traces(cfoo_grad)[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["layer_norm", "layer_norm_affine", "rms_norm", "rms_norm_affine"])
def test_norms(dtype, kind):
    torch.manual_seed(0)
    x = torch.randn(4, 16, 256, device="cuda", dtype=dtype)
    w = torch.randn(256, device="cuda", dtype=dtype)
    b = torch.randn(256, device="cuda", dtype=dtype)
    fns = {
        "layer_norm": lambda x, w, b: F.layer_norm(x, (256,)),
        "layer_norm_affine": lambda x, w, b: F.layer_norm(x, (256,), w, b),
        "rms_norm": lambda x, w, b: F.rms_norm(x, (256,), eps=1e-6),
        "rms_norm_affine": lambda x, w, b: F.rms_norm(x, (256,), w, 1e-6),
    }
    fn = fns[kind]
    jfn = thunder.jit(fn, executors=[apex_ex])
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    refs = [t.clone().requires_grad_() for t in (x, w, b)]
    out, ref = jfn(*leaves), fn(*refs)
    torch.testing.assert_close(out, ref, **_TOL[dtype])
    assert f"apex_{kind}_fwd(" in str(thunder.last_traces(jfn)[-1])
    cot = torch.randn_like(ref)
    out.backward(cot)
    ref.backward(cot)
    for got, want in zip(leaves, refs):
        if want.grad is not None:
            torch.testing.assert_close(got.grad, want.grad, **_TOL[dtype])
