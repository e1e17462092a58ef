"""Eager's memory layout for the results of ops that never alias their arguments (``x.t() * 2``, ``a @ b``).

A result's shadow (``views.shadow``) is contiguous unless an op said otherwise. That holds when the op's
tensor arguments are contiguous, but eager's elementwise kernels give their result the memory order of
their arguments (TensorIterator): ``y = x.t() * 2`` is a transposed tensor in eager, so ``y.reshape(-1)``
copies and ``y.contiguous()`` is a new tensor, where a contiguous shadow would make them a view of ``y`` and
``y`` itself (an in-place update of the reshape would then wrongly reach ``y``).

So when an argument's layout is not known to be contiguous (a strided input or view, a deferred view, the
result of another such op), the op's run on the arguments' shadows is recorded here and made only when
something asks for the result's shadow (a view op, a layout query, an in-place update), as PyTorch answers
it. Running PyTorch's meta kernels costs up to milliseconds per op (elementwise ops go through Python
references on ``meta``; SDPA about 8 ms), and most results' shadows are never asked for, so nothing runs
before a question. An argument that is itself a pending result enters the record as ``_EarlierLayout`` (that
run and the output's position): an answer runs the chain of pending runs it reads, oldest first, each once
(``y`` in ``y = (x.t() * 2).exp()`` is transposed, as in eager). Programs whose inputs are contiguous record
nothing.
"""

from __future__ import annotations

import torch

from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbolic import hints
from thunder.tracing.hidden_bases import VIEWS_OF_INTERNAL_RESULTS, eager_view_shadow
from thunder.tracing.layout_memo import layout_run
from thunder.tracing.pointwise_layout import pointwise_strides
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _SAME_ORDER_VIEWS, DeferredMetaRun, _storage_id, shadow

__all__ = ["PendingLayout", "defer_result_layout"]


def _layout_kind(w: TracingTensor) -> bool:
    """True when ``w``'s shadow is known not to be contiguous or may not be (a deferred view, a result whose
    layout run is pending: their runs are made with the result's), False when it is contiguous."""
    if w._tt_layout_pending is not None:
        return True
    pending = w._tt_pending
    if pending is not None:
        return not _same_order_view_of_contiguous(pending)  # (x.view(...) of a contiguous x: contiguous)
    m = w._tt_meta
    if m is None:
        t = w._tt_layout_of  # an input whose shadow is not made yet: the caller's tensor
        return t is not None and not _row_major(t)
    return not _row_major(m)


def _row_major(t: torch.Tensor) -> bool:
    """Whether ``t`` has a new contiguous tensor's strides, its size-1 dimensions' too: eager's pointwise kernels
    keep an argument's order of those (``pointwise_layout.py``), which ``stride()`` reads."""
    if not t.is_contiguous():
        return False
    shape = t.shape
    if 1 not in shape and 0 not in shape:
        return True
    step = 1
    for n, k in zip(reversed(t.shape), reversed(t.stride())):
        if k != step:
            return False
        step *= max(n, 1)
    return True


def _same_order_view_of_contiguous(pending) -> bool:
    """Whether a deferred view keeps its argument's elements in their order (``view``, ``reshape``,
    ``unsqueeze`` ...) and that argument is a result known to be contiguous: then the view is contiguous too."""
    base = pending.args[0] if pending.args else None
    return (
        getattr(pending.mapped, "name", None) in _SAME_ORDER_VIEWS
        and type(base) is TracingTensor
        and base._tt_meta is None
        and base._tt_pending is None
        and base._tt_layout_pending is None
        and base._tt_layout_of is None
    )


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


class _EarlierLayout:
    """In a pending run's arguments: output ``index`` of the earlier pending run ``run``, whose layout that run
    gives (its own tensor's shadow may change later, through an in-place ``t_()`` or ``as_strided_``)."""

    __slots__ = ("run", "index", "shape", "dtype")

    def __init__(self, run: PendingLayout, index: int, w: TracingTensor) -> None:
        self.run, self.index = run, index
        p = w._tt_value
        self.shape, self.dtype = hints(p.shape), p.dtype.torch_dtype

    def meta(self) -> torch.Tensor:
        layouts = self.run.layouts
        m = layouts[self.index] if layouts is not None and self.index < len(layouts) else None
        if m is None or tuple(m.shape) != self.shape or m.dtype != self.dtype:
            with torch._C.DisableTorchFunction():
                m = torch.empty(self.shape, dtype=self.dtype, device="meta")
        return m


def _earlier(x) -> list[_EarlierLayout]:
    """The ``_EarlierLayout`` entries of a recorded argument structure."""
    return [y for y in tree_leaves(x) if type(y) is _EarlierLayout]


def _materialize(x):
    """``x`` with each ``_EarlierLayout`` replaced by the layout its run gave."""
    return tree_map(lambda y: y.meta() if type(y) is _EarlierLayout else y, x)


def _as_shadows(x):
    """``x`` with its stand-ins replaced by their shadows as known now, a pending result by ``_EarlierLayout``."""
    t = type(x)
    if t is TracingTensor:
        if x._tt_pending is not None:
            return x  # (a deferred view: its shadow is made with this op's, when asked for)
        run = x._tt_layout_pending
        if run is not None:
            for i, r in enumerate(run.outputs):
                if r() is x:
                    return _EarlierLayout(run, i, x)
        return shadow(x)
    if t is tuple or t is list:
        return t(_as_shadows(y) for y in x)
    if t is dict:
        return {k: _as_shadows(v) for k, v in x.items()}
    return x


class PendingLayout(DeferredMetaRun):
    """An op's run on its arguments' shadows (taken when it was called), made when a result's shadow is first
    needed, after the earlier pending runs it reads (``_EarlierLayout``). ``layouts`` keeps each output's
    strided shadow (None: contiguous) once it ran, for the later runs that read it."""

    __slots__ = ("layouts",)
    marker = "_tt_layout_pending"
    meta_run = staticmethod(layout_run)  # (remembered by the arguments' layouts: layout_memo.py)

    def __init__(self, func, args, kwargs, outputs: tuple[TracingTensor, ...]) -> None:
        self.func = func
        self.args, self.kwargs = _as_shadows(args), _as_shadows(kwargs)
        self.layouts = None
        self._hold(outputs)

    def resolve(self) -> None:
        if self.layouts is not None:
            return
        # the earlier pending runs this one reads, oldest first (a post-order walk without recursion: chains may be
        # long)
        order, state, stack = [], {}, [(self, False)]
        while stack:
            run, expanded = stack.pop()
            if expanded:
                order.append(run)
                continue
            if id(run) in state:
                continue
            state[id(run)] = run
            stack.append((run, True))
            for e in _earlier((run.args, run.kwargs)):
                if e.run.layouts is None and id(e.run) not in state:
                    stack.append((e.run, False))
        for run in order:
            if run.layouts is None:  # (a deferred view's run may have resolved it meanwhile, reading its shadow)
                run._resolve_one()

    def _resolve_one(self) -> None:
        self.args, self.kwargs = _materialize(self.args), _materialize(self.kwargs)
        n = len(self.outputs) if self.outputs is not None else 0
        layouts = [None] * n
        ran = self._run()
        self.layouts = tuple(layouts)
        if ran is None:
            return
        outs, mout = ran
        if mout is None:  # (no meta kernel: a rule of ours where eager's result is a view, torch.cov)
            mout = eager_view_shadow(self.func, self.args, outs)
        if isinstance(mout, torch.Tensor):
            mout = (mout,)
        if not isinstance(mout, (tuple, list)) or len(mout) != len(outs):
            return  # (PyTorch cannot run it on meta, or returns another structure: contiguous, as before)
        with torch._C.DisableTorchFunction():
            hidden = getattr(self.func, "__name__", None) in VIEWS_OF_INTERNAL_RESULTS
            shared = {_storage_id(a) for a in tree_leaves((self.args, self.kwargs)) if type(a) is torch.Tensor}
            for i, (w, m) in enumerate(zip(outs, mout)):
                if not isinstance(m, torch.Tensor):
                    continue
                if len(mout) == 1:  # (eager's CPU kernel lays a pointwise result out otherwise than meta's)
                    strides = pointwise_strides(self.func, self.args, self.kwargs, m)
                    if strides is not None and strides != m.stride():
                        m = torch.empty_strided(m.shape, strides, dtype=m.dtype, device="meta")
                if (
                    hidden
                    and m._base is not None
                    and w is not None
                    and w._tt_meta is None
                    and _storage_id(m) not in shared
                ):
                    # a view of a tensor eager's composite made inside (``torch.cov`` of a vector squeezes its 1x1
                    # result): the shadow is that view, so the output is returned as eager's (hidden_bases.py)
                    p = w._tt_value
                    if m.dtype == p.dtype.torch_dtype and tuple(m.shape) == hints(p.shape):
                        w._tt_meta = m
                if _row_major(m):
                    continue
                # a storage of its own with eager's strides (the result is not a view of an argument: its
                # symbol says so, whatever the meta kernel shares)
                layouts[i] = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="meta")
                if w is None or w._tt_meta is not None:
                    continue
                p = w._tt_value
                if m.dtype == p.dtype.torch_dtype and tuple(m.shape) == hints(p.shape):
                    w._tt_meta = layouts[i]
        self.args = self.kwargs = None  # (the shadows it read are not needed any more)
        self.layouts = tuple(layouts)


def defer_result_layout(func, args, kwargs, wrapped) -> None:
    """Records the layout run of ``func``'s results ``wrapped`` when an argument is known to be strided (or the
    call names a memory format); nothing otherwise (contiguous arguments give contiguous results)."""
    if type(wrapped) is TracingTensor:
        outs = (wrapped,)
    elif type(wrapped) in (tuple, list) and wrapped and all(type(w) is TracingTensor for w in wrapped):
        outs = tuple(wrapped)
    else:
        return
    strided = "memory_format" in kwargs or getattr(func, "__name__", None) in VIEWS_OF_INTERNAL_RESULTS
    with torch._C.DisableTorchFunction():
        for a in _tensor_arguments(args, kwargs):
            if strided:
                break
            strided = _layout_kind(a)
        if strided:
            PendingLayout(func, args, kwargs, outs)  # (held by the results)
