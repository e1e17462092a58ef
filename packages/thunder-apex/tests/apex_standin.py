"""STAND-IN for NVIDIA apex, written in PyTorch, for the CPU tests. It is NOT apex.

It implements the Python interface of the apex pieces thunder-apex calls, with the same
signatures and return values, so that the executor's wiring (operator names, argument order,
grad transforms) can be checked against eager PyTorch without a GPU:

- ``apex.contrib.xentropy.SoftmaxCrossEntropyLoss`` whose module
  (``apex.contrib.xentropy.softmax_xentropy``) holds ``xentropy_cuda`` with
  ``forward(logits, labels, smoothing, half_to_float) -> (losses, max_log_sum_exp)`` and
  ``backward(grad_loss, logits, max_log_sum_exp, labels, smoothing) -> grad_logits``;
- ``fused_layer_norm_cuda`` with ``forward``/``forward_affine``/``backward``/``backward_affine``
  and ``rms_forward``/``rms_forward_affine``/``rms_backward``/``rms_backward_affine``.

The backward functions use the statistics they are given (``max_log_sum_exp``, ``mean``,
``invvar``) and check them against recomputed values, so a wrong argument order fails. Every call
is appended to ``CALLS`` (``(name, args)``), so tests can see the stand-in really ran.

``install(monkeypatch)`` puts these modules into ``sys.modules`` for one test.
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import torch

CALLS: list[tuple[str, tuple]] = []


def _record(name: str, *args) -> None:
    CALLS.append((name, args))


# ---------------------------------------------------------------- xentropy_cuda


def _xentropy_forward(logits, labels, smoothing, half_to_float):
    _record("xentropy_cuda.forward", logits, labels, smoothing, half_to_float)
    assert logits.is_contiguous() and labels.is_contiguous()
    assert bool((labels >= 0).all()), "apex's kernel cannot take negative labels"
    x = logits.float()
    max_log_sum_exp = torch.logsumexp(x, dim=1)
    picked = x.gather(1, labels.unsqueeze(1)).squeeze(1)
    losses = max_log_sum_exp - (1 - smoothing) * picked - smoothing * x.mean(dim=1)
    # as apex's kernel (xentropy_kernel.cu): the losses are float32 whatever the logits' dtype, the
    # log-sum-exps float32 only with half_to_float (the real kernel showed this on a GPU)
    lse_dtype = torch.float32 if half_to_float else logits.dtype
    return losses, max_log_sum_exp.to(lse_dtype)


def _xentropy_backward(grad_loss, logits, max_log_sum_exp, labels, smoothing):
    _record("xentropy_cuda.backward", grad_loss, logits, max_log_sum_exp, labels, smoothing)
    assert grad_loss.shape == labels.shape == max_log_sum_exp.shape
    x = logits.float()
    torch.testing.assert_close(max_log_sum_exp.float(), torch.logsumexp(x, dim=1), rtol=1e-3, atol=1e-3)
    probs = torch.exp(x - max_log_sum_exp.float().unsqueeze(1))
    target = torch.full_like(x, smoothing / x.shape[1])
    target.scatter_add_(1, labels.unsqueeze(1), torch.full_like(x[:, :1], 1 - smoothing))
    return (grad_loss.float().unsqueeze(1) * (probs - target)).to(logits.dtype)


class SoftmaxCrossEntropyLoss(torch.autograd.Function):
    """Stand-in of apex's autograd function (the executor calls the extension, not this)."""

    @staticmethod
    def forward(ctx, logits, labels, smoothing=0.0, padding_idx=0, half_to_float=False):
        losses, max_log_sum_exp = _xentropy_forward(logits, labels, smoothing, half_to_float)
        losses = losses.masked_fill(labels == padding_idx, 0)
        ctx.save_for_backward(logits, max_log_sum_exp, labels)
        ctx.smoothing, ctx.padding_idx = smoothing, padding_idx
        return losses

    @staticmethod
    def backward(ctx, grad_loss):
        logits, max_log_sum_exp, labels = ctx.saved_tensors
        grad_loss = grad_loss.masked_fill(labels == ctx.padding_idx, 0).contiguous()
        return _xentropy_backward(grad_loss, logits, max_log_sum_exp, labels, ctx.smoothing), None, None, None, None


# ---------------------------------------------------------------- fused_layer_norm_cuda


def _dims(x, normalized_shape):
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


def _stat_dtype(x):
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _ln_stats(x, normalized_shape, eps):
    xf = x.to(_stat_dtype(x))
    dims = _dims(x, normalized_shape)
    mean = xf.mean(dims)
    invvar = torch.rsqrt(xf.var(dims, correction=0) + eps)
    return mean.reshape(-1), invvar.reshape(-1)


def _rms_invvar(x, normalized_shape, eps):
    xf = x.to(_stat_dtype(x))
    return torch.rsqrt(xf.pow(2).mean(_dims(x, normalized_shape)) + eps).reshape(-1)


def _ln_out(x, mean, invvar, normalized_shape, weight, bias):
    rows = mean.shape[0]
    xf = x.to(mean.dtype).reshape(rows, -1)
    y = ((xf - mean.unsqueeze(1)) * invvar.unsqueeze(1)).reshape(x.shape)
    if weight is not None:
        y = y * weight.to(y.dtype) + bias.to(y.dtype)
    return y.to(x.dtype)


def _rms_out(x, invvar, weight):
    rows = invvar.shape[0]
    y = (x.to(invvar.dtype).reshape(rows, -1) * invvar.unsqueeze(1)).reshape(x.shape)
    if weight is not None:
        y = y * weight.to(y.dtype)
    return y.to(x.dtype)


def _vjp(fn, primals, grad):
    primals = [p.detach().requires_grad_(True) for p in primals]
    with torch.enable_grad():
        out = fn(*primals)
        return torch.autograd.grad(out, primals, grad)


def _check_stats(given, expected):
    for g, e in zip(given, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        torch.testing.assert_close(g, e)


def _ln_forward(x, normalized_shape, eps):
    _record("fused_layer_norm_cuda.forward", x, normalized_shape, eps)
    mean, invvar = _ln_stats(x, normalized_shape, eps)
    return _ln_out(x, mean, invvar, normalized_shape, None, None), mean, invvar


def _ln_forward_affine(x, normalized_shape, weight, bias, eps):
    _record("fused_layer_norm_cuda.forward_affine", x, normalized_shape, weight, bias, eps)
    mean, invvar = _ln_stats(x, normalized_shape, eps)
    return _ln_out(x, mean, invvar, normalized_shape, weight, bias), mean, invvar


def _ln_backward(grad, mean, invvar, x, normalized_shape, eps, memory_efficient):
    _record("fused_layer_norm_cuda.backward", grad, mean, invvar, x, normalized_shape, eps, memory_efficient)
    assert memory_efficient is False
    _check_stats((mean, invvar), _ln_stats(x, normalized_shape, eps))
    (gx,) = _vjp(lambda x: torch.nn.functional.layer_norm(x, normalized_shape, eps=eps), [x], grad)
    return gx


def _ln_backward_affine(grad, mean, invvar, x, normalized_shape, weight, bias, eps, memory_efficient):
    _record("fused_layer_norm_cuda.backward_affine", grad, mean, invvar, x, normalized_shape, weight, bias, eps)
    assert memory_efficient is False
    _check_stats((mean, invvar), _ln_stats(x, normalized_shape, eps))
    return _vjp(lambda x, w, b: torch.nn.functional.layer_norm(x, normalized_shape, w, b, eps), [x, weight, bias], grad)


def _rms_forward(x, normalized_shape, eps):
    _record("fused_layer_norm_cuda.rms_forward", x, normalized_shape, eps)
    invvar = _rms_invvar(x, normalized_shape, eps)
    return _rms_out(x, invvar, None), invvar


def _rms_forward_affine(x, normalized_shape, weight, eps):
    _record("fused_layer_norm_cuda.rms_forward_affine", x, normalized_shape, weight, eps)
    invvar = _rms_invvar(x, normalized_shape, eps)
    return _rms_out(x, invvar, weight), invvar


def _rms_backward(grad, invvar, x, normalized_shape, eps, memory_efficient):
    _record("fused_layer_norm_cuda.rms_backward", grad, invvar, x, normalized_shape, eps, memory_efficient)
    assert memory_efficient is False
    _check_stats((invvar,), (_rms_invvar(x, normalized_shape, eps),))
    (gx,) = _vjp(lambda x: torch.nn.functional.rms_norm(x, normalized_shape, eps=eps), [x], grad)
    return gx


def _rms_backward_affine(grad, invvar, x, normalized_shape, weight, eps, memory_efficient):
    _record("fused_layer_norm_cuda.rms_backward_affine", grad, invvar, x, normalized_shape, weight, eps)
    assert memory_efficient is False
    _check_stats((invvar,), (_rms_invvar(x, normalized_shape, eps),))
    return _vjp(lambda x, w: torch.nn.functional.rms_norm(x, normalized_shape, w, eps), [x, weight], grad)


# ---------------------------------------------------------------- installing the modules


def _module(name: str, package: bool = False, **attrs) -> ModuleType:
    module = ModuleType(name, f"STAND-IN for {name} (PyTorch, for tests; not NVIDIA apex)")
    if package:
        module.__path__ = []  # no directory: nothing real can be found under it
    module.__dict__.update(attrs)
    return module


def install(monkeypatch, *, xentropy: bool = True, layer_norm: bool = True) -> None:
    """Installs the stand-in apex into ``sys.modules`` for the current test (``monkeypatch`` undoes it).

    ``xentropy=False`` mimics apex built without ``--xentropy``: ``apex.contrib.xentropy`` exists
    but lacks ``SoftmaxCrossEntropyLoss`` (as apex's ``__init__`` leaves it when the import fails).
    """
    CALLS.clear()
    apex = _module("apex", package=True)
    contrib = _module("apex.contrib", package=True)
    xentropy_pkg = _module("apex.contrib.xentropy", package=True)
    monkeypatch.setitem(sys.modules, "apex", apex)
    monkeypatch.setitem(sys.modules, "apex.contrib", contrib)
    monkeypatch.setitem(sys.modules, "apex.contrib.xentropy", xentropy_pkg)
    monkeypatch.setattr(apex, "contrib", contrib, raising=False)
    monkeypatch.setattr(contrib, "xentropy", xentropy_pkg, raising=False)
    if xentropy:
        extension = SimpleNamespace(forward=_xentropy_forward, backward=_xentropy_backward)
        impl = _module("apex.contrib.xentropy.softmax_xentropy", xentropy_cuda=extension)
        loss_fn = type(
            "SoftmaxCrossEntropyLoss",
            (SoftmaxCrossEntropyLoss,),
            {"__module__": impl.__name__},
        )
        impl.SoftmaxCrossEntropyLoss = loss_fn
        monkeypatch.setitem(sys.modules, impl.__name__, impl)
        monkeypatch.setattr(xentropy_pkg, "SoftmaxCrossEntropyLoss", loss_fn, raising=False)
    if layer_norm:
        ext = _module(
            "fused_layer_norm_cuda",
            forward=_ln_forward,
            forward_affine=_ln_forward_affine,
            backward=_ln_backward,
            backward_affine=_ln_backward_affine,
            rms_forward=_rms_forward,
            rms_forward_affine=_rms_forward_affine,
            rms_backward=_rms_backward,
            rms_backward_affine=_rms_backward_affine,
        )
        monkeypatch.setitem(sys.modules, "fused_layer_norm_cuda", ext)


def called(name: str) -> bool:
    """Whether the stand-in function ``name`` (e.g. ``"xentropy_cuda.backward"``) ran since ``install``."""
    return any(n == name for n, _ in CALLS)
