"""Eager's memory layout for the results of ops that never alias their arguments (``x.t() * 2``, ``a @ b``).

A result's shadow (``views.shadow``) is contiguous unless an op said otherwise. That holds when the op's
tensor arguments are contiguous, but eager's elementwise kernels give their result the memory order of
their arguments (TensorIterator): ``y = x.t() * 2`` is a transposed tensor in eager, so ``y.reshape(-1)``
copies and ``y.contiguous()`` is a new tensor, where a contiguous shadow would make them a view of ``y`` and
``y`` itself (an in-place update of the reshape would then wrongly reach ``y``).

So when an argument's layout may not be contiguous, the op's run on the shadows is recorded here and made
only when something asks for the result's shadow (a view op, a layout query, an in-place update), as PyTorch
answers it. A chain of such ops is resolved early once it grows long, so that resolving stays shallow; an
in-place op that changes a tensor's sizes or strides resolves every pending layout first (their arguments'
layouts are those of the ops' calls).
"""

from __future__ import annotations

import weakref

import torch

from thunder.core.symbolic import hints
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _snapshot, run_on_shadows

__all__ = ["PendingLayout", "defer_result_layout"]

_MAX_DEPTH = 32  # pending layouts that depend on pending layouts, before one is resolved


def _may_be_strided(w: TracingTensor) -> bool:
    """Whether ``w``'s shadow may not be contiguous (unknown yet, or known strided)."""
    if w._tt_pending is not None or w._tt_layout_pending is not None:
        return True
    m = w._tt_meta
    if m is None:
        t = w._tt_layout_of  # an input whose shadow is not made yet: the caller's tensor
        return t is not None and not t.is_contiguous()
    return not m.is_contiguous()


def _tensor_arguments(args, kwargs):
    for a in args:
        if type(a) is TracingTensor:
            yield a
        elif type(a) in (tuple, list):
            for b in a:
                if type(b) is TracingTensor:
                    yield b
    for a in kwargs.values():
        if type(a) is TracingTensor:
            yield a


class PendingLayout:
    """An op's run on its arguments' shadows, made when a result's shadow is first needed."""

    __slots__ = ("func", "args", "kwargs", "outputs", "depth")

    def __init__(self, func, args, kwargs, outputs: tuple[TracingTensor, ...], depth: int) -> None:
        self.func = func
        self.args, self.kwargs = _snapshot(args), _snapshot(kwargs)  # (user code may change a list it passed)
        self.outputs = tuple(weakref.ref(w) for w in outputs)
        self.depth = depth
        for w in outputs:
            w._tt_layout_pending = self

    def resolve(self) -> None:
        refs = self.outputs
        if refs is None:
            return
        self.outputs = None
        outs = [r() for r in refs]
        for w in outs:
            if w is not None:
                w._tt_layout_pending = None
        mout = run_on_shadows(self.func, self.args, self.kwargs)
        if isinstance(mout, torch.Tensor):
            mout = (mout,)
        if not isinstance(mout, (tuple, list)) or len(mout) != len(outs):
            return  # (PyTorch cannot run it on meta, or returns another structure: contiguous, as before)
        with torch._C.DisableTorchFunction():
            for w, m in zip(outs, mout):
                if w is None or w._tt_meta is not None or not isinstance(m, torch.Tensor):
                    continue
                p = w._tt_value
                if m.dtype != p.dtype.torch_dtype or tuple(m.shape) != hints(p.shape) or m.is_contiguous():
                    continue
                # a storage of its own with eager's strides (the result is not a view of an argument: its
                # symbol says so, whatever the meta kernel shares)
                w._tt_meta = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")


def defer_result_layout(tracer, func, args, kwargs, wrapped) -> None:
    """Records the layout run of ``func``'s results ``wrapped`` when an argument may be strided (or the call
    names a memory format); nothing otherwise (contiguous arguments give contiguous results)."""
    if type(wrapped) is TracingTensor:
        outs = (wrapped,)
    elif type(wrapped) in (tuple, list) and wrapped and all(type(w) is TracingTensor for w in wrapped):
        outs = tuple(wrapped)
    else:
        return
    depth = 0
    strided = "memory_format" in kwargs
    with torch._C.DisableTorchFunction():
        for a in _tensor_arguments(args, kwargs):
            if _may_be_strided(a):
                strided = True
                pending = a._tt_layout_pending
                if pending is not None:
                    depth = max(depth, pending.depth + 1)
    if not strided:
        return
    pending = PendingLayout(func, args, kwargs, outs, depth)
    if depth >= _MAX_DEPTH:
        pending.resolve()
    else:
        tracer.pending_layouts.append(pending)
