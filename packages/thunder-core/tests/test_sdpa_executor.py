"""The sdpa executor: PyTorch's fused attention kernels for scaled_dot_product_attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.proxies import TensorProxy
from thunder.executors.sdpaex import _sdpa_bwd_impl, _sdpa_checker, _sdpa_fwd_impl, _sdpa_fwd_meta


# the grad-transform test needs thunder.core.transforms (autodiff, issue 4)
def _qkv(*shape, dtype=torch.float32, device="cpu", requires_grad=False):
    return [torch.randn(*shape, dtype=dtype, device=device, requires_grad=requires_grad) for _ in range(3)]


def _proxy_of(t: torch.Tensor) -> TensorProxy:
    return TensorProxy(shape=t.shape, dtype=t.dtype, device=t.device)


def _code(jf) -> list[str]:
    return [line.strip() for line in str(thunder.last_traces(jf)[-1]).splitlines() if not line.strip().startswith("#")]


def test_in_default_executors_before_torch():
    names = [ex.name for ex in thunder.get_default_executors()]
    assert names.index("sdpa") < names.index("torch")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.3}, {"attn_mask": "float"}],
    ids=["plain", "causal", "scale", "float-mask"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_forward_matches_eager(kwargs, dtype):
    q, k, v = _qkv(2, 3, 5, 8, dtype=dtype)
    if kwargs.get("attn_mask") == "float":
        kwargs = {"attn_mask": torch.randn(2, 1, 5, 5, dtype=dtype)}

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    jf = thunder.jit(f)
    torch.testing.assert_close(jf(q, k, v), f(q, k, v))
    calls = [line for line in _code(jf) if "sdpa_fwd(" in line]
    assert len(calls) == 1 and calls[0].startswith("(t")
    assert "_) = sdpa_fwd(q, k, v, 0.0" in calls[0]


@pytest.mark.parametrize(
    "case",
    ["3d", "gqa", "value-head-size"],
)
def test_unsupported_calls_stay_with_torch(case):
    q, k, v = _qkv(2, 4, 5, 8)
    kwargs = {}
    if case == "3d":
        q, k, v = q[0], k[0], v[0]
    elif case == "gqa":
        k, v = k[:, :2], v[:, :2]
        kwargs["enable_gqa"] = True
    elif case == "value-head-size":
        v = torch.randn(2, 4, 5, 6)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    jf = thunder.jit(f)
    torch.testing.assert_close(jf(q, k, v), f(q, k, v))
    code = "\n".join(_code(jf))
    assert "sdpa_fwd" not in code


def test_checker():
    def proxy(shape=(2, 4, 5, 8), dtype=thunder.dtypes.float32, device="cpu", requires_grad=False):
        return TensorProxy(shape=shape, dtype=dtype, device=device, requires_grad=requires_grad)

    p = proxy()
    assert _sdpa_checker(p, p, p)
    assert not _sdpa_checker(p, p, p, dropout_p=0.1)  # dropout: random, left to torch
    assert not _sdpa_checker(p, p, p, attn_mask=proxy((5, 5)), is_causal=True)
    assert _sdpa_checker(p, p, p, attn_mask=proxy((5, 5)))
    assert not _sdpa_checker(p, p, p, attn_mask=proxy((5, 5), dtype=thunder.dtypes.float64))
    assert _sdpa_checker(p, p, p, attn_mask=proxy((2, 1, 5, 5), dtype=thunder.dtypes.bool8))
    assert not _sdpa_checker(p, p, proxy(dtype=thunder.dtypes.float64))
    assert not _sdpa_checker(
        proxy(dtype=thunder.dtypes.int64), proxy(dtype=thunder.dtypes.int64), proxy(dtype=thunder.dtypes.int64)
    )


def test_backward_kernel_matches_autograd():
    q, k, v = _qkv(2, 3, 6, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(6, 6, dtype=torch.float64)
    for kwargs in ({"is_causal": True}, {"attn_mask": mask, "scale": 0.5}):
        ref = F.scaled_dot_product_attention(q, k, v, **kwargs)
        grad_out = torch.randn_like(ref)
        want = torch.autograd.grad(ref, (q, k, v), grad_out)
        with torch.no_grad():
            causal = kwargs.get("is_causal", False)
            out, lse = _sdpa_fwd_impl(q, k, v, 0.0, causal, kwargs.get("attn_mask"), kwargs.get("scale"))
            got = _sdpa_bwd_impl(grad_out, q, k, v, out, lse, 0.0, causal, kwargs.get("attn_mask"), kwargs.get("scale"))
        torch.testing.assert_close(out, ref.detach())
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_grads_equal_eager():
    q, k, v = _qkv(1, 2, 4, 8, requires_grad=True)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    jf = thunder.jit(f)
    out = jf(q, k, v)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    want = torch.autograd.grad(f(q, k, v).sum(), (q, k, v))
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 1, 5, 5)])
def test_boolean_mask_runs_the_fused_kernels_as_eager(mask_shape):
    # eager turns a boolean mask into an additive one (-inf where False) and runs the CPU flash kernels,
    # forward and backward; a query whose keys are all masked gets zeros and zero gradients
    torch.manual_seed(0)
    q, k, v = _qkv(2, 3, 5, 8, requires_grad=True)
    mask = torch.rand(mask_shape) > 0.4
    mask[..., 1, :] = False

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2.0

    jf = thunder.jit(f)
    out, want = jf(q, k, v), f(q, k, v)
    grad_out = torch.randn_like(want)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    want_grads = torch.autograd.grad(want, (q, k, v), grad_out)
    torch.testing.assert_close(out, want)
    assert not out.isnan().any()
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)
    assert any("sdpa_fwd(" in line for line in _code(jf))
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert "sdpa_bwd(" in backward and "softmax" not in backward


def test_backward_trace_uses_fused_kernel():
    q, k, v = _qkv(1, 2, 4, 8, requires_grad=True)
    jf = thunder.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = jf(q, k, v)
    out.sum().backward()
    fwd = [line for line in _code(jf) if "sdpa_fwd(" in line]
    # the forward keeps the log-sum-exp for the backward kernel
    assert len(fwd) == 1 and "_)" not in fwd[0].split(" = ")[0]
    bwd = [
        line.strip()
        for line in str(thunder.last_backward_traces(jf)[-1]).splitlines()
        if "sdpa_bwd(" in line and not line.strip().startswith("#")
    ]
    assert len(bwd) == 1
    assert not any("matmul" in line for line in str(thunder.last_backward_traces(jf)[-1]).splitlines())


def test_meta_matches_kernel_outputs():
    q, k, v = _qkv(2, 3, 5, 8, dtype=torch.bfloat16)
    out, lse = _sdpa_fwd_impl(q, k, v, 0.0, False, None, None)
    meta_out, meta_lse = _sdpa_fwd_meta(*(TensorProxy(like=_proxy_of(t)) for t in (q, k, v)), 0.0, False, None, None)
    assert meta_out.shape == tuple(out.shape) and meta_out.dtype.torch_dtype == out.dtype
    assert meta_lse.shape == tuple(lse.shape) and meta_lse.dtype.torch_dtype == lse.dtype


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_forward():
    q, k, v = _qkv(2, 3, 40, 64, dtype=torch.float16, device="cuda")
    jf = thunder.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(jf(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert any("sdpa_fwd(" in line for line in _code(jf))
    out, lse = _sdpa_fwd_impl(q, k, v, 0.0, True, None, None)
    _, meta_lse = _sdpa_fwd_meta(*(_proxy_of(t) for t in (q, k, v)), 0.0, True, None, None)
    assert meta_lse.shape == tuple(lse.shape)


# ---------------------------------------------------------------- CUDA: the efficient-attention pair, forward and backward
# (the structure and the kernels' arguments are checked here on CPU, with CUDA-typed proxies and meta tensors; the
# values need a GPU: test_cuda_values_and_grads_equal_eager)


def _cuda_proxies(shape=(2, 4, 40, 64), dtype=thunder.dtypes.bfloat16, requires_grad=True):
    return [TensorProxy(name, shape=shape, dtype=dtype, device="cuda", requires_grad=requires_grad) for name in "qkv"]


def test_checker_takes_cuda_calls_that_need_grad():
    from thunder.core.trace import TraceCtx, tracectx

    with tracectx(TraceCtx()):
        q, k, v = _cuda_proxies()
        assert _sdpa_checker(q, k, v, is_causal=True)
        assert _sdpa_checker(*_cuda_proxies(dtype=thunder.dtypes.float32))
        assert _sdpa_checker(*_cuda_proxies(requires_grad=False), scale=0.5)
        # left to the decomposition: a mask, float64, a head size the kernels need padded, dropout
        mask = TensorProxy(shape=(40, 40), dtype=thunder.dtypes.bfloat16, device="cuda")
        assert not _sdpa_checker(q, k, v, attn_mask=mask)
        assert not _sdpa_checker(*_cuda_proxies(dtype=thunder.dtypes.float64))
        assert not _sdpa_checker(*_cuda_proxies(shape=(2, 4, 40, 36)))
        assert not _sdpa_checker(q, k, v, dropout_p=0.1)


def test_cuda_trace_runs_the_fused_backward_kernel():
    """A CUDA call that needs grad: the forward saves the log-sum-exp, the backward is one sdpa_bwd (before, the
    checker declined it and the backward differentiated the decomposition: matmuls, a float32 softmax, where)."""
    import thunder.torch as ltorch
    from thunder.core import prims
    from thunder.core.trace import TraceCtx, tracectx
    from thunder.extend import get_executor
    from thunder.transforms.split import split_forward_backward

    trace = TraceCtx()
    with tracectx(trace):
        q, k, v = _cuda_proxies()
        trace.args = [q, k, v]
        prims.python_return(ltorch.scaled_dot_product_attention(q, k, v, is_causal=True))
    fb = split_forward_backward(trace, {"q", "k", "v"}, [get_executor("sdpa"), get_executor("torch")])
    fwd = [b for b in fb.forward.bound_symbols if b.sym.name not in ("python_return", "python_del")]
    bwd = [b for b in fb.backward.bound_symbols if b.sym.name not in ("python_return", "python_del", "unpack_sequence")]
    assert [b.sym.name for b in fwd] == ["sdpa_fwd"], fb.forward
    lse = fwd[0].output[1]
    assert lse.device.devicetype is thunder.core.devices.DeviceType.CUDA and lse.shape == (2, 4, 64)  # padded to 32
    names = [b.sym.name for b in bwd if b.sym.name != "clear"]
    assert "sdpa_bwd" in names, fb.backward
    source = str(fb.backward)
    assert "matmul" not in source and "softmax" not in source and "where" not in source


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_kernel_calls_fit_the_op_schemas(dtype):
    """The CUDA branches of the forward and backward implementations, run on meta tensors: every argument is
    valid for the installed torch's ``_scaled_dot_product_efficient_attention`` and ``_backward`` schemas,
    and the outputs have the shapes and dtypes the operators' meta functions promise."""
    q, k, v = (torch.randn(2, 3, 40, 64, dtype=dtype, device="meta") for _ in range(3))
    k = torch.randn(2, 3, 64, 40, dtype=dtype, device="meta").transpose(-1, -2)  # a last dim of stride 40
    out, lse = _sdpa_fwd_impl(q, k, v, 0.0, True, None, 0.125)
    proxies = [TensorProxy(shape=t.shape, dtype=t.dtype, device="cuda") for t in (q, k, v)]
    meta_out, meta_lse = _sdpa_fwd_meta(*proxies, 0.0, True, None, 0.125)
    assert meta_out.shape == tuple(out.shape) and meta_out.dtype.torch_dtype == out.dtype
    assert meta_lse.shape == tuple(lse.shape) and meta_lse.dtype.torch_dtype == lse.dtype
    grads = _sdpa_bwd_impl(torch.randn_like(out), q, k, v, out, lse, 0.0, True, None, 0.125)
    assert [(g.shape, g.dtype) for g in grads] == [(t.shape, t.dtype) for t in (q, k, v)]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("kwargs", [{"is_causal": True}, {"scale": 0.3}], ids=["causal", "scale"])
def test_cuda_values_and_grads_equal_eager(dtype, kwargs):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = _qkv(2, 4, 96, 64, dtype=dtype, device="cuda", requires_grad=True)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    jf = thunder.jit(f)
    out = jf(q, k, v)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    assert any("sdpa_fwd(" in line for line in _code(jf))
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert "sdpa_bwd(" in backward and "softmax" not in backward
    # against eager with the same kernels: equal up to the kernels' nondeterministic accumulation order
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        same = f(q, k, v)
        same_grads = torch.autograd.grad(same, (q, k, v), grad_out)
    tight = {"atol": 1e-5, "rtol": 1e-5} if dtype is torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(out, same, **tight)
    for g, w in zip(grads, same_grads):
        torch.testing.assert_close(g, w, **tight)
    # against eager's own choice of kernel (flash, cuDNN or efficient) and the float64 math reference
    ref = f(*(t.detach().double().requires_grad_() for t in (q, k, v)))
    loose = {"atol": 1e-4, "rtol": 1e-4} if dtype is torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(out, f(q, k, v), **loose)
    torch.testing.assert_close(out.double(), ref, **loose)
