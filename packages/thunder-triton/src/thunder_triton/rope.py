"""Rotary position embedding: Triton forward and backward kernels for the rotation LitGPT and HF Llama apply.

Both write it with ordinary torch operations (LitGPT's ``apply_rope``, HF's ``rotate_half`` +
``apply_rotary_pos_emb``)::

    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = x * cos + rotated * sin          # LitGPT then casts: roped.to(x.dtype)

:func:`match_rope` recognises that chain (either operand order of the ``mul``s and the ``add``,
with or without the final cast) and replaces it by the composite symbol :data:`rope_pattern`.
The kernel reads each half-row of ``x`` once and writes the output, never ``x1``, ``x2``,
``-x2``, ``rotated`` or the two products; backward applies the transposed rotation to the
incoming gradient. Arithmetic is float32, rounded once to the output dtype (when ``x``, ``cos``
and ``sin`` are all bfloat16 or float16, eager rounds after each operation, so results differ
by rounding).

Operators: ``triton_rope(x, cos, sin, out_dtype)`` and ``triton_rope_backward(grad, cos, sin,
x_dtype)`` (the gradient of ``x``).

The checker (:func:`rope_checker`) accepts: ``x`` of 3 or 4 dimensions with an even last
dimension, float32/bfloat16/float16; ``cos`` and ``sin`` of one shape and dtype that broadcast
to ``x``'s shape without changing it and need no gradient (LitGPT's and HF's caches are
buffers); any strides; CUDA tensors (CPU too under ``TRITON_INTERPRET=1``). Everything else runs
the recorded operations.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.transforms import get_grad, put_grad
from thunder.extend import OperatorExecutor
from thunder_triton.patterns import Match, TraceGraph, cast_source
from thunder_triton.plugin import accepted_devicetypes

__all__ = ["rope_forward", "rope_backward", "rope_checker", "rope_pattern", "match_rope", "register"]

_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)


@triton.jit
def _rope_kernel(
    x_ptr,
    c_ptr,
    s_ptr,
    y_ptr,
    n_rows,
    n_h,
    n_t,
    xs0,
    xs1,
    xs2,
    xs3,
    cs0,
    cs1,
    cs2,
    cs3,
    ss0,
    ss1,
    ss2,
    ss3,
    half,
    BACKWARD: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # a [ROWS, BLOCK] tile: ROWS (batch, head, position) rows, BLOCK of each row's half
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    t = rows % n_t
    bh = rows // n_t
    h = bh % n_h
    b = bh // n_h
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < half)[None, :]
    xo = (b * xs0 + h * xs1 + t * xs2)[:, None]
    co = (b * cs0 + h * cs1 + t * cs2)[:, None]
    so = (b * ss0 + h * ss1 + t * ss2)[:, None]
    c1o = cols[None, :]
    c2o = (cols + half)[None, :]
    x1 = tl.load(x_ptr + xo + c1o * xs3, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + xo + c2o * xs3, mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(c_ptr + co + c1o * cs3, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(c_ptr + co + c2o * cs3, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(s_ptr + so + c1o * ss3, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(s_ptr + so + c2o * ss3, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        # the transpose of y1 = x1*c1 - x2*s1, y2 = x2*c2 + x1*s2
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    yo = (rows * (2 * half))[:, None]
    tl.store(y_ptr + yo + c1o, y1.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + yo + c2o, y2.to(y_ptr.dtype.element_ty), mask=mask)


# Elements of a half-row tile one program handles (rows x half-width), at least one row.
TILE = 2048


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out_dtype: torch.dtype, backward: bool):
    shape = x.shape
    x4 = x if x.ndim == 4 else x.unsqueeze(0)
    c4, s4 = cos.expand(shape), sin.expand(shape)
    if x.ndim == 3:
        c4, s4 = c4.unsqueeze(0), s4.unsqueeze(0)
    y = torch.empty(x4.shape, dtype=out_dtype, device=x.device)
    b, n_h, n_t, d = x4.shape
    rows = b * n_h * n_t
    if rows and d:
        half = d // 2
        block = triton.next_power_of_2(half)
        per_program = max(1, min(triton.next_power_of_2(rows), TILE // block))
        _rope_kernel[(triton.cdiv(rows, per_program),)](
            x4,
            c4,
            s4,
            y,
            rows,
            n_h,
            n_t,
            *x4.stride(),
            *c4.stride(),
            *s4.stride(),
            half,
            BACKWARD=backward,
            ROWS=per_program,
            BLOCK=block,
        )
    return y.view(shape)


def rope_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in ``out_dtype`` (contiguous) by the kernel."""
    return _launch(x, cos, sin, out_dtype, False)


def rope_backward(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, x_dtype: torch.dtype) -> torch.Tensor:
    """The gradient of ``x`` given the output's ``grad``, in ``x_dtype``."""
    return _launch(grad, cos, sin, x_dtype, True)


def _forward_meta(x, cos, sin, out_dtype):
    return TensorProxy(like=x, dtype=dtypes.to_dtype(out_dtype))


def _backward_meta(grad, cos, sin, x_dtype):
    return TensorProxy(like=grad, dtype=dtypes.to_dtype(x_dtype), requires_grad=False)


def _reference(x, cos, sin, out_dtype):
    """What :data:`rope_pattern` computes, in thunder operations."""
    half = x.shape[-1] // 2
    x1 = ltorch.getitem(x, (..., slice(None, half)))
    x2 = ltorch.getitem(x, (..., slice(half, None)))
    rotated = ltorch.cat((ltorch.neg(x2), x1), -1)
    return ltorch.to(ltorch.add(ltorch.mul(x, cos), ltorch.mul(rotated, sin)), out_dtype)


rope_pattern = Symbol(
    "rope_pattern", _reference, id="thunder_triton::rope_pattern", print_name="thunder_triton.rope_pattern"
)
"""``rope_pattern(x, cos, sin, out_dtype)``: a recognised rotary embedding (see the module docstring)."""


def _is_half_slice(g: TraceGraph, p, x, first: bool) -> int | None:
    found = g.producer(p, ltorch.getitem)
    if found is None:
        return None
    b = found[1]
    if len(b.args) != 2 or b.kwargs or b.args[0] is not x:
        return None
    key = b.args[1]
    if not isinstance(key, tuple) or len(key) != 2 or key[0] is not Ellipsis or not isinstance(key[1], slice):
        return None
    d = x.shape[-1]
    sl = key[1]
    if d % 2 or sl.step not in (None, 1):
        return None
    half = d // 2
    if first:
        ok = sl.start in (None, 0) and sl.stop == half
    else:
        ok = sl.start == half and (sl.stop is None or sl.stop >= d)
    if not ok:
        return None
    return found[0]


def _match_rotated(g: TraceGraph, rot) -> tuple[list[int], TensorProxy] | None:
    """``rot = cat((-x[..., d/2:], x[..., :d/2]), dim=-1)``: ``(indices, x)``."""
    fc = g.producer(rot, ltorch.cat)
    if fc is None:
        return None
    b = fc[1]
    params = dict(zip(("tensors", "dim"), b.args))
    params.update(b.kwargs)
    parts = params.get("tensors")
    if params.get("dim", 0) not in (-1, rot.ndim - 1) or not isinstance(parts, (tuple, list)) or len(parts) != 2:
        return None
    fn = g.producer(parts[0], ltorch.neg)
    if fn is None:
        return None
    x2 = fn[1].args[0]
    fx2 = g.producer(x2, ltorch.getitem)
    if fx2 is None:
        return None
    x = fx2[1].args[0]
    if not isinstance(x, TensorProxy):
        return None
    i2 = _is_half_slice(g, x2, x, first=False)
    i1 = _is_half_slice(g, parts[1], x, first=True)
    if i1 is None or i2 is None:
        return None
    return [fc[0], fn[0], i2, i1], x


def match_rope(g: TraceGraph, anchor: int) -> Match | None:
    """Recognises ``[cast](x * cos + rotate_half(x) * sin)`` ending at ``anchor`` (see the module docstring)."""
    b = g.bsyms[anchor]
    out = b.output
    if not isinstance(out, TensorProxy):
        return None
    indices = [anchor]
    add = b
    cast = cast_source(g, out) if b.sym is not ltorch.add else None
    if cast is not None:
        fa = g.producer(cast[1], ltorch.add)
        if fa is None:
            return None
        indices.append(fa[0])
        add = fa[1]
    elif b.sym is not ltorch.add:
        return None
    if add.kwargs or len(add.args) != 2:
        return None
    for p_xc, p_rs in (add.args, add.args[::-1]):
        fxc = g.producer(p_xc, ltorch.mul)
        frs = g.producer(p_rs, ltorch.mul)
        if fxc is None or frs is None or fxc[1].kwargs or frs[1].kwargs:
            continue
        for rot, sin in (frs[1].args, frs[1].args[::-1]):
            found = _match_rotated(g, rot)
            if found is None:
                continue
            rot_indices, x = found
            xa, xb = fxc[1].args
            cos = xb if xa is x else (xa if xb is x else None)
            if not isinstance(cos, TensorProxy) or not isinstance(sin, TensorProxy) or cos is x:
                continue
            return Match([*indices, fxc[0], frs[0], *rot_indices], rope_pattern, (x, cos, sin, out.dtype.torch_dtype))
    return None


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def rope_checker(x, cos, sin, out_dtype) -> bool:
    """Whether the kernels compute this :data:`rope_pattern` call (see the module docstring)."""
    if not all(isinstance(t, TensorProxy) for t in (x, cos, sin)):
        return False
    if x.dtype not in _DTYPES or cos.dtype not in _DTYPES or sin.dtype is not cos.dtype:
        return False
    if x.ndim not in (3, 4) or x.shape[-1] % 2 or tuple(cos.shape) != tuple(sin.shape):
        return False
    if not _broadcasts_to(tuple(cos.shape), tuple(x.shape)) or cos.requires_grad or sin.requires_grad:
        return False
    if dtypes.to_dtype(out_dtype) not in _DTYPES:
        return False
    return len({x.device, cos.device, sin.device}) == 1 and x.device.devicetype in accepted_devicetypes()


def register(ex: OperatorExecutor) -> tuple:
    """Registers the RoPE operators and the implementation of :data:`rope_pattern`; returns the operators."""
    fwd = ex.register_operator("triton_rope", meta=_forward_meta, fn=rope_forward)
    bwd = ex.register_operator("triton_rope_backward", meta=_backward_meta, fn=rope_backward)

    def grad_transform(x, cos, sin, out_dtype):
        y = fwd(x, cos, sin, out_dtype)
        put_grad(x, bwd(get_grad(y), cos, sin, x.dtype.torch_dtype))
        return y

    ex.register_implementation(
        rope_pattern, checker=rope_checker, execution_transform=fwd, grad_transform=grad_transform
    )
    return fwd, bwd
