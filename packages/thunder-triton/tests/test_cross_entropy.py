"""The Triton cross-entropy against eager PyTorch (values and gradients), through thunder.jit.

Kernels run in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, set in conftest.py), so
shapes are small.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _helpers import DEVICE

import thunder
from thunder.core import dtypes
from thunder.core.devices import to_device
from thunder.core.proxies import TensorProxy
from thunder_triton import cross_entropy as ce_module
from thunder_triton import get_executor
from thunder_triton.cross_entropy import cross_entropy_checker

triton_ex = get_executor()
EXECUTORS = [triton_ex, *thunder.get_default_executors()]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
}


def _loss_fn(**kwargs):
    def fn(logits, target):
        return F.cross_entropy(logits, target, **kwargs)

    return fn


def _targets(shape, n_classes, ignore_index=-100, n_ignored=2, generator=None):
    t = torch.randint(0, n_classes, shape, generator=generator)
    flat = t.view(-1)
    flat[:n_ignored] = ignore_index  # some rows are ignored
    return t


def _check(fn, logits, target, *, expect_triton=True, grad_out=None):
    """Runs ``fn`` jitted with the triton executor and eagerly; compares values and the logits' grads.

    Non-contiguous cases build their views inside ``fn``, so the kernel sees the strided tensor.
    """
    dtype = logits.dtype
    tol = TOL.get(dtype, dict(atol=1e-6, rtol=1e-6))
    leaf = logits.detach().clone().requires_grad_(True)
    jf = thunder.jit(fn, executors=EXECUTORS)
    out = jf(leaf, target)

    ref_leaf = logits.detach().clone().requires_grad_(True)
    expected = fn(ref_leaf, target)
    torch.testing.assert_close(out, expected, **tol)
    if dtype in (torch.bfloat16, torch.float16):
        # and against a float32 computation of the same inputs
        torch.testing.assert_close(out.float(), fn(logits.float(), target), **tol)

    go = torch.randn_like(out) if grad_out is None else grad_out
    (g,) = torch.autograd.grad(out, leaf, go)
    (g_ref,) = torch.autograd.grad(expected, ref_leaf, go)
    torch.testing.assert_close(g, g_ref, **tol)

    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    if expect_triton:
        assert "triton_cross_entropy(" in fwd, fwd
        assert "triton_cross_entropy_backward(" in bwd, bwd
    else:
        assert "triton_cross_entropy" not in fwd, fwd
        assert "triton_cross_entropy" not in bwd, bwd
    return out


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values_and_grads(dtype, reduction):
    torch.manual_seed(0)
    n, v = 9, 37  # odd vocabulary
    logits = torch.randn(n, v, dtype=dtype) * 3
    target = _targets((n,), v, ignore_index=-100)
    _check(_loss_fn(reduction=reduction), logits, target)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_custom_ignore_index_and_label_smoothing(reduction):
    torch.manual_seed(1)
    n, v = 7, 29
    logits = torch.randn(n, v)
    target = _targets((n,), v, ignore_index=5, n_ignored=3)
    _check(_loss_fn(reduction=reduction, ignore_index=5, label_smoothing=0.1), logits, target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_vocabulary_larger_than_one_block(monkeypatch, dtype):
    # several loop iterations of the online log-sum-exp, the last one partial
    monkeypatch.setattr(ce_module, "MAX_BLOCK", 16)
    torch.manual_seed(2)
    n, v = 6, 53
    logits = torch.randn(n, v, dtype=dtype) * 4
    target = _targets((n,), v, n_ignored=1)
    _check(_loss_fn(label_smoothing=0.2), logits, target)


def test_large_logits_are_stable():
    n, v = 4, 19
    logits = torch.randn(n, v) * 1e4
    target = torch.randint(0, v, (n,))
    _check(_loss_fn(), logits, target)


def test_3d_logits_class_dim_1():
    torch.manual_seed(3)
    b, v, d = 3, 11, 5
    logits = torch.randn(b, v, d)
    target = _targets((b, d), v, n_ignored=2)
    _check(_loss_fn(reduction="none"), logits, target)
    _check(_loss_fn(reduction="mean", label_smoothing=0.05), logits, target)


def test_flattened_3d_logits():
    # the usual language-model call: logits [B, T, V] flattened to [B * T, V]
    torch.manual_seed(4)
    b, t, v = 2, 5, 23

    def fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-1)

    logits = torch.randn(b, t, v)
    target = _targets((b, t), v, ignore_index=-1, n_ignored=3)
    _check(fn, logits, target)


def test_non_contiguous_logits_and_target():
    torch.manual_seed(5)
    n, v = 8, 31

    def fn(logits_t, target_wide):
        # logits: a transposed view (class stride n), target: every other element
        return F.cross_entropy(logits_t.t(), target_wide[::2], reduction="none")

    logits_t = torch.randn(v, n)
    target_wide = _targets((2 * n,), v, n_ignored=4)
    _check(fn, logits_t, target_wide)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_kernels_on_strided_tensors(reduction):
    # the launchers called directly: strided logits (3-D, class dim in the middle), strided target
    torch.manual_seed(10)
    b, v, d = 2, 19, 3
    base = torch.randn(b, d, v, dtype=torch.float16)
    logits = base.transpose(1, 2)  # [b, v, d], class stride 1, non-contiguous
    assert not logits.is_contiguous()
    target = _targets((b, 2 * d), v, n_ignored=1)[:, ::2]
    assert not target.is_contiguous()
    loss, lse = ce_module.cross_entropy_forward(logits, target, -100, reduction, 0.0)
    ref_in = logits.detach().float().requires_grad_(True)
    ref = F.cross_entropy(ref_in, target, reduction=reduction)
    torch.testing.assert_close(loss.float(), ref, **TOL[torch.float16])
    torch.testing.assert_close(lse, torch.logsumexp(logits.float(), dim=1))
    go = torch.randn_like(ref)
    grad = ce_module.cross_entropy_backward(go.half(), logits, target, lse, -100, reduction, 0.0)
    (g_ref,) = torch.autograd.grad(ref, ref_in, go.half().float())
    torch.testing.assert_close(grad.float(), g_ref, **TOL[torch.float16])


def test_non_contiguous_grad_output():
    torch.manual_seed(6)
    n, v = 5, 13
    logits = torch.randn(n, v)
    target = _targets((n,), v, n_ignored=1)
    go = torch.randn(2 * n)[::2]  # a strided cotangent
    _check(_loss_fn(reduction="none"), logits, target, grad_out=go)


def test_all_rows_ignored_mean_is_nan_like_eager():
    n, v = 3, 7
    logits = torch.randn(n, v, requires_grad=True)
    target = torch.full((n,), -100)
    jf = thunder.jit(_loss_fn(), executors=EXECUTORS)
    out = jf(logits, target)
    assert "triton_cross_entropy(" in str(thunder.last_traces(jf)[-1])
    assert torch.isnan(out) and torch.isnan(F.cross_entropy(logits, target))


def test_forward_only_without_grad():
    torch.manual_seed(7)
    logits = torch.randn(6, 17)
    target = _targets((6,), 17)
    jf = thunder.jit(_loss_fn(reduction="sum"), executors=EXECUTORS)
    torch.testing.assert_close(jf(logits, target), F.cross_entropy(logits, target, reduction="sum"))
    assert "triton_cross_entropy(" in str(thunder.last_traces(jf)[-1])


# ---------------------------------------------------------------- refusals fall back to the decomposition


def test_float64_falls_back():
    torch.manual_seed(8)
    logits = torch.randn(5, 9, dtype=torch.float64)
    target = _targets((5,), 9, n_ignored=1)
    _check(_loss_fn(), logits, target, expect_triton=False)


def test_1d_logits_fall_back():
    logits = torch.randn(9)
    target = torch.tensor(4)
    _check(_loss_fn(), logits, target, expect_triton=False)


def test_4d_logits_fall_back():
    torch.manual_seed(9)
    logits = torch.randn(2, 5, 3, 2)
    target = torch.randint(0, 5, (2, 3, 2))
    _check(_loss_fn(reduction="sum"), logits, target, expect_triton=False)


def _proxy(shape, dtype=dtypes.float32, device=DEVICE):
    return TensorProxy(shape=shape, dtype=dtype, device=to_device(device))


def test_checker_accepts_and_refuses():
    a, t = _proxy((4, 10)), _proxy((4,), dtypes.int64)
    assert cross_entropy_checker(a, t)
    assert cross_entropy_checker(a, t, reduction="none", ignore_index=0, label_smoothing=0.3)
    assert cross_entropy_checker(_proxy((4, 10, 3), dtypes.bfloat16), _proxy((4, 3), dtypes.int64))
    assert cross_entropy_checker(_proxy((4, 10), dtypes.float16), _proxy((4,), dtypes.int32))
    # refused: class weights, deprecated arguments, probability targets, other dtypes/shapes
    assert not cross_entropy_checker(a, t, weight=_proxy((10,)))
    assert not cross_entropy_checker(a, t, size_average=True)
    assert not cross_entropy_checker(a, t, reduce=False)
    assert not cross_entropy_checker(a, _proxy((4, 10)))
    assert not cross_entropy_checker(_proxy((4, 10), dtypes.float64), t)
    assert not cross_entropy_checker(_proxy((10,)), _proxy((), dtypes.int64))
    assert not cross_entropy_checker(_proxy((4, 10, 3, 2)), _proxy((4, 3, 2), dtypes.int64))
    assert not cross_entropy_checker(a, _proxy((5,), dtypes.int64))
    assert not cross_entropy_checker(a, t, label_smoothing=1.5)
    assert not cross_entropy_checker(a, t, reduction="batchmean")
    assert not cross_entropy_checker(_proxy((4, 0)), t)
