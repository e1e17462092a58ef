"""thunder-apex without apex (CPU): import, availability, checkers, and the wiring through a stand-in.

The wiring tests run the executor's operators through ``apex_standin`` (a PyTorch STAND-IN for
apex's Python interface, installed into ``sys.modules`` by the ``standin`` fixture) on CPU tensors,
and compare values and gradients with eager PyTorch. Tests against real apex kernels are in
``test_apex_cuda.py``.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import thunder
import thunder.plugins
import thunder_apex.executor
from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.core.transforms import grad
from thunder.extend import OperatorExecutor
from thunder_apex import apex_ex, plugin, runtime
from thunder_apex.cross_entropy import _checker as ce_checker
from thunder_apex.norms import _layer_norm_checker, _rms_norm_checker


def _trace_text(fn) -> str:
    return str(thunder.last_traces(fn)[-1])


# ---------------------------------------------------------------- import and availability


def test_import_does_not_import_apex():
    code = (
        "import sys, thunder_apex, thunder_apex.plugin\n"
        "from thunder_apex import apex_ex\n"
        "loaded = [m for m in sys.modules if m == 'apex' or m.startswith('apex.')"
        " or m in ('xentropy_cuda', 'fused_layer_norm_cuda')]\n"
        "assert not loaded, loaded\n"
        "print(apex_ex.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "apex"
    assert isinstance(apex_ex, OperatorExecutor)


def test_reports_apex_not_installed(no_apex):
    assert runtime.unavailable_reason() == "apex not installed"
    assert apex_ex.unavailable_reason() == "apex not installed"
    assert plugin.thunder_unavailable_reason() == "apex not installed"
    assert plugin.thunder_executors() == []
    info = {i.name: i for i in thunder.plugins.plugin_infos(reload=True)}["apex"]
    assert info.unavailable_reason == "apex not installed"
    assert info.executors == [] and info.error is None
    assert apex_ex not in thunder.discover(reload=True)
    out = io.StringIO()
    thunder.plugins.report(file=out)
    assert "contributed nothing: apex not installed" in out.getvalue()


def test_reports_apex_built_without_xentropy(monkeypatch):
    import apex_standin

    apex_standin.install(monkeypatch, xentropy=False)
    assert runtime.unavailable_reason() == "apex built without xentropy"
    assert plugin.thunder_executors() == []
    info = {i.name: i for i in thunder.plugins.plugin_infos(reload=True)}["apex"]
    assert info.unavailable_reason == "apex built without xentropy"
    assert apex_ex not in thunder.discover(reload=True)


def test_available_with_apex_discovered_first(standin):
    assert runtime.unavailable_reason() is None
    assert plugin.thunder_executors() == [apex_ex]
    found = thunder.discover(reload=True)
    # first but for plugins of a higher priority (thunder-triton's 30, where it is installed too)
    ahead = found[: found.index(apex_ex)]
    assert all(getattr(ex, "priority", 0) > apex_ex.priority for ex in ahead), ahead
    thunder.plugins.plugin_infos(reload=True)  # leave the cached discovery as this machine really is


# ---------------------------------------------------------------- checker decisions on proxies


def _proxy(shape, dtype=dtypes.float32, device="cuda:0"):
    return TensorProxy(shape=shape, dtype=dtype, device=device)


def test_cross_entropy_checker_without_apex_declines_cuda(no_apex):
    with tracectx(TraceCtx()):
        assert not ce_checker(_proxy((4, 8)), _proxy((4,), dtypes.int64), ignore_index=-1)


def test_cross_entropy_checker_decisions(monkeypatch):
    import apex_standin

    apex_standin.install(monkeypatch)  # apex "installed", but CPU not allowed (the default)
    with tracectx(TraceCtx()):
        logits, target = _proxy((4, 8)), _proxy((4,), dtypes.int64)
        assert ce_checker(logits, target)
        assert ce_checker(logits, target, ignore_index=-1, reduction="sum", label_smoothing=0.1)
        assert ce_checker(logits, target, reduction="none")
        assert ce_checker(_proxy((4, 8), dtypes.float16), target)
        # declined: CPU, unsupported dtypes, weights, ignore_index that can be a class, bad args
        assert not ce_checker(_proxy((4, 8), device="cpu"), _proxy((4,), dtypes.int64, "cpu"))
        assert not ce_checker(logits, _proxy((4,), dtypes.int64, "cuda:1"))
        assert not ce_checker(_proxy((4, 8), dtypes.float64), target)
        assert not ce_checker(_proxy((4, 8), dtypes.bfloat16), target)
        assert not ce_checker(logits, _proxy((4,), dtypes.int32))
        assert not ce_checker(logits, target, weight=_proxy((8,)))
        assert not ce_checker(logits, target, ignore_index=0)
        assert not ce_checker(logits, target, reduction="batchmean")
        assert not ce_checker(logits, target, label_smoothing=1.5)
        assert not ce_checker(_proxy((2, 4, 8)), _proxy((2, 8), dtypes.int64))
        assert not ce_checker(_proxy((0, 8)), _proxy((0,), dtypes.int64))


def test_norm_checker_decisions(monkeypatch):
    import apex_standin

    apex_standin.install(monkeypatch)
    with tracectx(TraceCtx()):
        x, w, b = _proxy((2, 3, 8)), _proxy((8,)), _proxy((8,))
        assert _layer_norm_checker(x, (8,), w, b, 1e-5)
        assert _layer_norm_checker(x, [8], None, None)
        assert _layer_norm_checker(_proxy((2, 3, 8), dtypes.bfloat16), (3, 8))
        assert _rms_norm_checker(x, (8,), w)
        assert _rms_norm_checker(x, 8, None, None)
        assert not _layer_norm_checker(_proxy((2, 8), device="cpu"), (8,))
        assert not _layer_norm_checker(x, (8,), w, None)  # weight without bias
        assert not _layer_norm_checker(x, (8,), _proxy((8,), dtypes.float16), _proxy((8,), dtypes.float16))
        assert not _layer_norm_checker(x, (4,))
        assert not _rms_norm_checker(x, (8,), _proxy((4,)))
        assert not _rms_norm_checker(_proxy((2, 8), dtypes.float64), (8,))
    # no fused_layer_norm_cuda: declined
    monkeypatch.setitem(sys.modules, "fused_layer_norm_cuda", None)
    with tracectx(TraceCtx()):
        assert not _layer_norm_checker(_proxy((2, 8)), (8,))


# ---------------------------------------------------------------- wiring through the stand-in (CPU)


def test_seed_example_traces(standin):
    """The example ending extending_thunder.md: forward and grad traces (CPU here, CUDA there)."""
    torch.manual_seed(0)
    logits = torch.randn(32, 50)
    labels = torch.randint(0, 50, (32,))

    def foo(logits, labels):
        return torch.nn.functional.cross_entropy(logits, labels, reduction="mean", ignore_index=-1)

    cfoo = thunder.jit(foo, executors=[apex_ex])
    torch.testing.assert_close(cfoo(logits, labels), foo(logits, labels))
    fwd = _trace_text(cfoo)
    assert re.search(r"\(t\d+, _\) = apex_cross_entropy\(logits, labels, 'mean', 0\.0\)", fwd), fwd
    assert standin.called("xentropy_cuda.forward")

    cfoo_grad = grad(cfoo)
    (g,) = cfoo_grad(logits, labels)
    expected = torch.func.grad(foo)(logits, labels)
    torch.testing.assert_close(g, expected)
    bwd = _trace_text(cfoo_grad)
    assert re.search(r"\(_, (t\d+)\) = apex_cross_entropy\(logits, labels, 'mean', 0\.0\)", bwd), bwd
    lse = re.search(r"\(_, (t\d+)\) = apex_cross_entropy", bwd).group(1)
    contiguous = re.search(r"(t\d+) = Tensor\.contiguous\(logits", bwd).group(1)
    call = re.search(
        r"(t\d+) = apex_cross_entropy_backward\((t\d+), (t\d+), target=labels, "
        r"max_log_sum_exp=(t\d+), label_smoothing=0\.0\)",
        bwd,
    )
    assert call is not None, bwd
    assert call.group(3) == contiguous and call.group(4) == lse
    assert standin.called("xentropy_cuda.backward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_values_and_grads(standin, reduction, label_smoothing, dtype):
    torch.manual_seed(1)
    logits = torch.randn(12, 7, dtype=dtype)
    tol = {} if dtype is torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    labels = torch.randint(0, 7, (12,))
    labels[[2, 5]] = -100  # ignored rows (the default ignore_index)

    def fn(logits, labels):
        return F.cross_entropy(logits, labels, reduction=reduction, label_smoothing=label_smoothing)

    jfn = thunder.jit(fn, executors=[apex_ex])
    # the kernel's losses are float32 for float16 logits: the result must still be float16, as eager's
    torch.testing.assert_close(jfn(logits, labels), fn(logits, labels), **tol)
    assert "apex_cross_entropy(" in _trace_text(jfn)

    # through torch autograd (thunder's forward/backward split)
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    out, ref = jfn(a, labels), fn(b, labels)
    cot = torch.randn_like(ref)
    out.backward(cot)
    ref.backward(cot)
    torch.testing.assert_close(a.grad, b.grad, **tol)
    assert a.grad[2].abs().sum() == 0
    assert "apex_cross_entropy_backward(" in str(thunder.last_backward_traces(jfn)[-1])


def test_cross_entropy_all_rows_ignored_mean_is_nan_like_torch(standin):
    logits = torch.randn(3, 4)
    labels = torch.full((3,), -1)
    jfn = thunder.jit(lambda a, t: F.cross_entropy(a, t, ignore_index=-1), executors=[apex_ex])
    assert torch.isnan(jfn(logits, labels)) and torch.isnan(F.cross_entropy(logits, labels, ignore_index=-1))


def test_cross_entropy_declined_call_stays_with_torch(standin):
    logits = torch.randn(6, 5)
    labels = torch.randint(0, 5, (6,))

    def fn(a, t):
        return F.cross_entropy(a, t, ignore_index=1)  # a non-negative ignore_index: not apex

    jfn = thunder.jit(fn, executors=[apex_ex])
    torch.testing.assert_close(jfn(logits, labels), fn(logits, labels))
    assert "apex_cross_entropy" not in _trace_text(jfn)
    assert not standin.called("xentropy_cuda.forward")


def test_without_apex_cpu_program_runs_on_torch(no_apex, monkeypatch):
    # even with CPU tensors allowed, a missing apex makes the checker decline
    monkeypatch.setattr(thunder_apex.executor, "SUPPORTED_DEVICE_TYPES", {DeviceType.CUDA, DeviceType.CPU})
    logits = torch.randn(6, 5)
    labels = torch.randint(0, 5, (6,))
    jfn = thunder.jit(lambda a, t: F.cross_entropy(a, t), executors=[apex_ex])
    torch.testing.assert_close(jfn(logits, labels), F.cross_entropy(logits, labels))
    assert "apex_cross_entropy" not in _trace_text(jfn)


_NORM_CASES = {
    "layer_norm_affine": (lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5), "apex_layer_norm_affine"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (3, 8)), "apex_layer_norm"),
    "rms_norm_affine": (lambda x, w, b: F.rms_norm(x, (8,), w, 1e-6), "apex_rms_norm_affine"),
    "rms_norm": (lambda x, w, b: F.rms_norm(x, (8,)), "apex_rms_norm"),
}


@pytest.mark.parametrize("case", sorted(_NORM_CASES))
def test_norm_values_and_grads(standin, case):
    fn, op = _NORM_CASES[case]
    torch.manual_seed(2)
    x = torch.randn(2, 3, 8)
    w = torch.randn(8)
    b = torch.randn(8)
    jfn = thunder.jit(fn, executors=[apex_ex])
    torch.testing.assert_close(jfn(x, w, b), fn(x, w, b))
    fwd = _trace_text(jfn)
    assert re.search(rf"= {op}_fwd\(x, ", fwd), fwd

    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    refs = [t.clone().requires_grad_() for t in (x, w, b)]
    out, ref = jfn(*leaves), fn(*refs)
    cot = torch.randn_like(ref)
    out.backward(cot)
    ref.backward(cot)
    for got, want in zip(leaves, refs):
        if want.grad is None:
            assert got.grad is None or got.grad.abs().sum() == 0
        else:
            torch.testing.assert_close(got.grad, want.grad)
    assert f"{op}_bwd(" in str(thunder.last_backward_traces(jfn)[-1])
    module = "fused_layer_norm_cuda." + ("rms_" if "rms" in op else "") + "backward"
    assert standin.called(module + ("_affine" if "affine" in op else ""))
