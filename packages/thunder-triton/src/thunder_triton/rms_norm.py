"""RMSNorm: Triton forward and backward kernels for ``F.rms_norm`` and hand-written RMSNorm modules.

What is claimed:

- ``torch.nn.functional.rms_norm(x, (D,), weight, eps)`` (``ltorch.rms_norm``) over the last
  dimension, with a weight;
- the chains LitGPT's ``RMSNorm`` and Hugging Face's ``LlamaRMSNorm`` record, recognised by
  :func:`match_rms_norm` (see :mod:`thunder_triton.patterns`) and replaced by the composite
  symbol :data:`rms_norm_pattern`:

  - LitGPT: ``x32 = x.float(); n = x32 * rsqrt(mean(x32 * x32, -1, keepdim=True) + eps);
    (n * w.float()).to(dtype)``;
  - HF: ``x32 = x.to(float32); n = x32 * rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps);
    w * n.to(input_dtype)``.

Both compute in float32; they differ in where the weight is applied: LitGPT multiplies the
float32 normalised value by the weight and rounds once (``norm_dtype=None``), HF rounds the
normalised value to the input dtype first and multiplies that by the weight
(``norm_dtype=input dtype``). The kernels do the same, in float32 registers.

Operators (as they appear in traces):

- ``triton_rms_norm(x, weight, eps, norm_dtype, out_dtype)`` returns ``(y, rstd)``: the output
  and the per-row ``1 / sqrt(mean(x**2) + eps)`` (float32) saved for backward;
- ``triton_rms_norm_backward(grad, x, weight, rstd, norm_dtype)`` returns ``(grad_x, grad_weight)``.

The checker (:func:`rms_norm_checker`) accepts: ``x`` float32/bfloat16/float16 with at least one
dimension and a non-empty last dimension of at most ``MAX_BLOCK`` elements, ``weight`` 1-D of
that size and a floating dtype of those three, float32 arithmetic (the chain upcasts, or ``x``
is float32), CUDA tensors (CPU ones too under ``TRITON_INTERPRET=1``). Any strides: a row whose
last dimension is not contiguous is copied first. Everything else runs the recorded operations.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.transforms import get_grad, put_grads
from thunder.extend import OperatorExecutor
from thunder_triton.patterns import Match, TraceGraph, cast_source
from thunder_triton.plugin import accepted_devicetypes

__all__ = [
    "rms_norm_forward",
    "rms_norm_backward",
    "rms_norm_checker",
    "rms_norm_pattern",
    "match_rms_norm",
    "register",
]

# The widest row one program holds in registers.
MAX_BLOCK = 65536
# Rows each program of the backward kernel handles (it accumulates their weight gradient).
BACKWARD_ROWS_PER_PROGRAM = 64

_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
# norm_dtype codes the kernels understand: 0 = no rounding of the normalised value
_NORM_CODES = {None: 0, torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}


@triton.jit
def _round(v, NORM: tl.constexpr):
    if NORM == 1:
        v = v.to(tl.bfloat16).to(tl.float32)
    elif NORM == 2:
        v = v.to(tl.float16).to(tl.float32)
    return v


@triton.jit
def _rms_forward_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, n_cols, eps, NORM: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n_cols + eps)
    n = _round(x * rstd, NORM)
    tl.store(y_ptr + row * y_row_stride + cols, (n * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_backward_kernel(
    g_ptr,
    x_ptr,
    w_ptr,
    rstd_ptr,
    dx_ptr,
    dw_ptr,
    g_row_stride,
    x_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    rows_per_program,
    NORM: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], tl.float32)
    start = pid * rows_per_program
    end = tl.minimum(start + rows_per_program, n_rows)
    for row in range(start, end):
        g = tl.load(g_ptr + row * g_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        n = x * rstd
        dw += g * _round(n, NORM)
        dn = g * w
        # y = n * w, n = x * rstd:  dx = rstd * (dn - n * mean(dn * n))
        dx = rstd * (dn - n * (tl.sum(dn * n, 0) / n_cols))
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_ptr + pid * n_cols + cols, dw, mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a 2-D ``[rows, D]`` tensor whose last dimension is contiguous (a view when possible)."""
    t2 = t.reshape(-1, t.shape[-1]) if t.ndim != 2 else t
    if t2.shape[-1] > 1 and t2.stride(-1) != 1:
        t2 = t2.contiguous()
    return t2


def _launch_params(n_cols: int) -> tuple[int, int]:
    block = triton.next_power_of_2(n_cols)
    num_warps = 4 if block <= 1024 else (8 if block <= 8192 else 16)
    return block, num_warps


def rms_norm_forward(
    x: torch.Tensor, weight: torch.Tensor, eps: float, norm_dtype: torch.dtype | None, out_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the forward kernel: ``(y, rstd)`` with ``y`` of ``x``'s shape in ``out_dtype``, ``rstd`` float32 per row."""
    n_cols = x.shape[-1]
    x2 = _rows(x)
    rows = x2.shape[0]
    y = torch.empty((rows, n_cols), dtype=out_dtype, device=x.device)
    rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows > 0:
        block, num_warps = _launch_params(n_cols)
        _rms_forward_kernel[(rows,)](
            x2,
            weight.contiguous(),
            y,
            rstd,
            x2.stride(0),
            y.stride(0),
            n_cols,
            float(eps),
            NORM=_NORM_CODES[norm_dtype],
            BLOCK=block,
            num_warps=num_warps,
        )
    return y.view(x.shape), rstd


def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, norm_dtype: torch.dtype | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs the backward kernel: ``(grad_x, grad_weight)`` in ``x``'s and ``weight``'s dtypes."""
    n_cols = x.shape[-1]
    x2 = _rows(x)
    g2 = _rows(grad)
    rows = x2.shape[0]
    dx = torch.empty((rows, n_cols), dtype=x.dtype, device=x.device)
    n_programs = max(1, triton.cdiv(rows, BACKWARD_ROWS_PER_PROGRAM))
    dw_partial = torch.zeros((n_programs, n_cols), dtype=torch.float32, device=x.device)
    if rows > 0:
        block, num_warps = _launch_params(n_cols)
        _rms_backward_kernel[(n_programs,)](
            g2,
            x2,
            weight.contiguous(),
            rstd,
            dx,
            dw_partial,
            g2.stride(0),
            x2.stride(0),
            dx.stride(0),
            rows,
            n_cols,
            BACKWARD_ROWS_PER_PROGRAM,
            NORM=_NORM_CODES[norm_dtype],
            BLOCK=block,
            num_warps=num_warps,
        )
    return dx.view(x.shape), dw_partial.sum(0).to(weight.dtype)


# ---------------------------------------------------------------- meta functions


def _forward_meta(x, weight, eps, norm_dtype, out_dtype):
    y = TensorProxy(like=x, dtype=dtypes.to_dtype(out_dtype))
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    rstd = TensorProxy(like=x, shape=(rows,), dtype=dtypes.float32, requires_grad=False)
    return y, rstd


def _backward_meta(grad, x, weight, rstd, norm_dtype):
    return TensorProxy(like=x, requires_grad=False), TensorProxy(like=weight, requires_grad=False)


# ---------------------------------------------------------------- the composite symbol and its matcher


def _rms_norm_reference(x, weight, eps, norm_dtype, out_dtype):
    """What :data:`rms_norm_pattern` computes, in thunder operations."""
    x32 = ltorch.to(x, torch.float32)
    n = ltorch.mul(x32, ltorch.rsqrt(ltorch.add(ltorch.mean(ltorch.mul(x32, x32), -1, keepdim=True), eps)))
    if norm_dtype is not None:
        n = ltorch.to(n, norm_dtype)
    return ltorch.to(ltorch.mul(n, weight), out_dtype)


rms_norm_pattern = Symbol(
    "rms_norm_pattern",
    _rms_norm_reference,
    id="thunder_triton::rms_norm_pattern",
    print_name="thunder_triton.rms_norm_pattern",
)
"""``rms_norm_pattern(x, weight, eps, norm_dtype, out_dtype)``: a recognised RMSNorm chain (see the module docstring)."""


def _other(b, p):
    """The other operand of a binary bound symbol ``b`` one of whose operands is ``p``."""
    a0, a1 = b.args[0], b.args[1]
    if a0 is p:
        return a1
    if a1 is p:
        return a0
    return None


def _match_normalised(g: TraceGraph, n) -> tuple[list[int], TensorProxy, float] | None:
    """``n = x32 * rsqrt(mean(x32 * x32 | x32 ** 2, -1, keepdim=True) + eps)``: ``(indices, x, eps)``."""
    found = g.producer(n, ltorch.mul)
    if found is None or found[1].kwargs:
        return None
    i_n, b_n = found
    for r in (b_n.args[1], b_n.args[0]):
        fr = g.producer(r, ltorch.rsqrt)
        if fr is None:
            continue
        x32 = _other(b_n, r)
        if not isinstance(x32, TensorProxy) or x32 is r:
            continue
        fa = g.producer(fr[1].args[0], ltorch.add)
        if fa is None or fa[1].kwargs:
            continue
        a0, a1 = fa[1].args
        ms, eps = (a0, a1) if isinstance(a0, TensorProxy) else (a1, a0)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not isinstance(ms, TensorProxy):
            continue
        fm = g.producer(ms, ltorch.mean)
        if fm is None:
            continue
        b_m = fm[1]
        margs = dict(zip(("a", "dim", "keepdim"), b_m.args))
        margs.update(b_m.kwargs)
        if margs.get("keepdim") is not True or margs.get("dtype") is not None:
            continue
        dim = margs.get("dim")
        dim = dim[0] if isinstance(dim, (tuple, list)) and len(dim) == 1 else dim
        if dim not in (-1, x32.ndim - 1):
            continue
        fs = g.producer(margs["a"], ltorch.mul, ltorch.pow)
        if fs is None or fs[1].kwargs:
            continue
        sq = fs[1]
        if sq.sym is ltorch.mul and not (sq.args[0] is x32 and sq.args[1] is x32):
            continue
        if sq.sym is ltorch.pow and not (sq.args[0] is x32 and sq.args[1] == 2):
            continue
        indices = [i_n, fr[0], fa[0], fm[0], fs[0]]
        x = x32
        cast = cast_source(g, x32)
        if cast is not None:
            indices.append(cast[0])
            x = cast[1]
        if x32.dtype is not dtypes.float32:
            return None
        return indices, x, float(eps)
    return None


def match_rms_norm(g: TraceGraph, anchor: int) -> Match | None:
    """Recognises LitGPT's and HF's RMSNorm chains ending at ``anchor`` (see the module docstring)."""
    b = g.bsyms[anchor]
    out = b.output
    if not isinstance(out, TensorProxy):
        return None
    out_dtype = out.dtype.torch_dtype
    extra: list[int] = []
    # LitGPT: an optional final cast of (n * w32)
    cast = cast_source(g, out) if b.sym in (ltorch.to, ltorch.float, ltorch.half, ltorch.bfloat16) else None
    mul_b = b
    if cast is not None:
        fm = g.producer(cast[1], ltorch.mul)
        if fm is None:
            return None
        extra.append(fm[0])
        mul_b = fm[1]
    elif b.sym is not ltorch.mul:
        return None
    if mul_b.kwargs:
        return None
    for n in (mul_b.args[0], mul_b.args[1]):
        w = _other(mul_b, n)
        if not isinstance(n, TensorProxy) or not isinstance(w, TensorProxy) or w is n:
            continue
        norm_dtype = None
        n_indices: list[int] = []
        # HF: w * n.to(input_dtype)
        nc = cast_source(g, n)
        if nc is not None and cast is None:
            n_indices.append(nc[0])
            norm_dtype = n.dtype.torch_dtype
            n = nc[1]
        found = _match_normalised(g, n)
        if found is None:
            continue
        indices, x, eps = found
        wc = cast_source(g, w)
        if wc is not None and w.dtype is dtypes.float32:
            indices.append(wc[0])
            w = wc[1]
        return Match([anchor, *extra, *n_indices, *indices], rms_norm_pattern, (x, w, eps, norm_dtype, out_dtype))
    return None


# ---------------------------------------------------------------- checkers


def rms_norm_checker(x, weight, eps, norm_dtype, out_dtype) -> bool:
    """Whether the kernels compute this :data:`rms_norm_pattern` call (see the module docstring)."""
    if not isinstance(x, TensorProxy) or not isinstance(weight, TensorProxy):
        return False
    if x.dtype not in _DTYPES or weight.dtype not in _DTYPES or x.ndim < 1:
        return False
    if x.device.devicetype not in accepted_devicetypes() or weight.device != x.device:
        return False
    d = x.shape[-1]
    if d == 0 or d > MAX_BLOCK or tuple(weight.shape) != (d,):
        return False
    if norm_dtype not in _NORM_CODES or dtypes.to_dtype(out_dtype) not in _DTYPES:
        return False
    return isinstance(eps, (int, float)) and not isinstance(eps, bool)


def _functional_args(a, normalized_shape, weight=None, eps=None):
    """``F.rms_norm``'s call as :data:`rms_norm_pattern` arguments, or ``None`` when it is not one."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if not isinstance(a, TensorProxy) or weight is None or a.ndim < 1:
        return None
    if tuple(normalized_shape) != (a.shape[-1],):
        return None
    if eps is None:
        eps = torch.finfo(a.dtype.torch_dtype).eps if a.dtype in _DTYPES else 0.0
    return a, weight, eps, None, a.dtype.torch_dtype


def functional_rms_norm_checker(a, normalized_shape, weight=None, eps=None) -> bool:
    """Whether the kernels compute this ``F.rms_norm`` call: the last dimension, with a weight."""
    args = _functional_args(a, normalized_shape, weight, eps)
    return args is not None and rms_norm_checker(*args)


# ---------------------------------------------------------------- registration


def register(ex: OperatorExecutor) -> tuple:
    """Registers the RMSNorm operators and the implementations of :data:`rms_norm_pattern` and ``ltorch.rms_norm``.

    Returns the forward and backward operators' symbols.
    """
    fwd = ex.register_operator("triton_rms_norm", meta=_forward_meta, fn=rms_norm_forward)
    bwd = ex.register_operator("triton_rms_norm_backward", meta=_backward_meta, fn=rms_norm_backward)

    def execution_transform(x, weight, eps, norm_dtype, out_dtype):
        y, _ = fwd(x, weight, eps, norm_dtype, out_dtype)
        return y

    def grad_transform(x, weight, eps, norm_dtype, out_dtype):
        y, rstd = fwd(x, weight, eps, norm_dtype, out_dtype)
        g = get_grad(y)
        gx, gw = bwd(g, x, weight, rstd, norm_dtype)
        put_grads((x, weight), (gx, gw))
        return y

    ex.register_implementation(
        rms_norm_pattern,
        checker=rms_norm_checker,
        execution_transform=execution_transform,
        grad_transform=grad_transform,
    )
    ex.register_implementation(
        ltorch.rms_norm,
        checker=functional_rms_norm_checker,
        execution_transform=lambda *a, **k: execution_transform(*_functional_args(*a, **k)),
        grad_transform=lambda *a, **k: grad_transform(*_functional_args(*a, **k)),
    )
    return fwd, bwd
