"""The step after a call that makes the caller's tensors what eager leaves them: inputs whose sizes or
strides the program changed in place get their new layout, an input the program returns is returned
as the caller's tensor itself, and an output that is a view of an input the program updated in place is
returned as that view of the caller's tensor.

Views of updated inputs (``y.add_(1); return y.t()``): the program computes the output from the input's
new value, a tensor of its own, and writes that value back into the caller's tensor at its end. Eager's
output is a view of the caller's tensor: a later write through either reaches the other. The output's
shadow says which storage it views and where (sizes, strides, storage offset, as eager computed them);
after the write-back, the step returns the caller's tensor re-viewed there (``as_strided``), whose autograd
history passes through the caller's tensor's new history, as eager's view does.

Layout changes (``unsqueeze_``, ``t_``, ``resize_``, ``set_``, ``as_strided_`` ...): while tracing, such an
input's stand-in becomes a view of ``_tt_original``, a stand-in of its elements in the layout the caller
gave (``Tracer._rebind_metadata``). The program writes those elements back as for any input updated in
place; after the call, the caller's tensor is restrided onto its own storage (``as_strided_``), pointed
at another input's storage (``set_``), or given a tensor the program returns (a ``resize_`` past the
storage's end, ``set_`` to a tensor computed inside the program).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, NamedTuple

import torch

from thunder.core import pytree
from thunder.core.aliasing import may_alias_an_argument
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_symbolic
from thunder.tracing.autograd_queries import refuse_returned_made_leaf
from thunder.tracing.errors import describe_location
from thunder.tracing.hidden_bases import (
    VIEWS_OF_INTERNAL_RESULTS,
    HiddenBaseView,
    copy_outputs_run_as_views,
    hidden_base_view,
    return_hidden_base_views,
)
from thunder.tracing.inplace_grad import recorded_clone
from thunder.tracing.multi_views import rebased_multi_view
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import _storage_id, input_shadow, shadow, view_of

__all__ = ["PostCall", "ReturnedView", "ViewOfResult"]


class ReturnedView(NamedTuple):
    """An output returned as a view of a caller's tensor (see ``PostCall.views``)."""

    leaf: int  # its position among the output's leaves
    caller: str  # how the prologue reads the caller's tensor it views
    layout: tuple | None  # (size, stride, storage offset) over that tensor's storage; None: the tensor's own layout
    name: str  # the output's name in the computation
    detached: bool  # viewed through detach(): a tensor of its own for autograd
    updated: bool  # the program writes that storage back
    without_grad: bool = False  # made under no_grad/inference_mode: a leaf that passes no gradient to the tensor
    alias_not_view: bool = False  # a detach()/.data/view(dtype) output itself: it shares the storage, no ``_base``
    bounds: tuple = ()  # layouts it is viewed through, as eager's ``as_strided`` backward (``views.gradient_bounds``)
    # eager's error where a gradient reaches it: an output of x.unbind()/x.split() whose base was updated since
    refused: str | None = None


class ViewOfResult(NamedTuple):
    """An output returned as a view of a tensor the program computes (see ``PostCall.internal_views``)."""

    leaf: int  # its position among the output's leaves
    extra: int  # index in ``PostCall.extra`` of the tensor it views in eager
    layout: tuple | None  # (size, stride, storage offset) of the view; None: the program's output's when it runs
    root_layout: tuple | None  # (size, stride) of the tensor it views; None: as ``layout``
    name: str  # the output's name in the computation
    root: str  # the name of the tensor it views
    restrided: bool  # that tensor itself after an in-place layout change (``y = x * 2; y.unsqueeze_(0)``), no view
    without_grad: bool  # made under no_grad: a leaf of its own in eager (made under no_grad here too)
    # index in ``PostCall.extra`` of the value the program's output views when it runs, where the program returns a
    # copy of it as the tensor eager's output views (``layout`` None only); None: that tensor itself
    layout_of: int | None = None
    detached: bool = False  # viewed through detach() (``y.detach()[1:]``): a view of eager's alias without grad
    bounds: tuple = ()  # layouts it is viewed through, as eager's ``as_strided`` backward (``views.gradient_bounds``)
    # index in ``PostCall.extra`` of the output's own value before an output step copied it (``layout`` None only):
    # the copy has a storage of its own, so the view's layout over its root is read from that value
    uncopied_view: int | None = None
    alias: bool = False  # detach()'s own output: no view, an alias without grad sharing that tensor's storage


class PostCall:
    """What the step after a call of one traced program does to the caller's tensors and the output."""

    def __init__(self, tensors, state_reads) -> None:
        # how the step reads each input: arguments by their prologue expression, module state from its
        # module (a prologue local exists only when the computation reads the tensor)
        state_exprs = {name: expr for name, expr, _, _ in state_reads}
        self.exprs: dict[int, str] = {}
        self.proxies: dict[int, TensorProxy] = {}  # each input's proxy (its value when called)
        self.storages: dict[int, str] = {}  # storage of an input's shadow -> an expression reading that input
        self.nbytes: dict[int, int] = {}  # the size of each input's storage when called
        self.storage_of: dict[int, int] = {}  # input stand-in -> storage of its shadow when called
        self._wrappers: list | None = []  # the inputs' stand-ins, until their layouts are taken (take_layouts)
        for ti in tensors:
            expr = state_exprs.get(ti.proxy.name, ti.expr) if ti.is_module_state else ti.expr
            if not expr or id(ti.wrapper) in self.exprs:
                continue
            self.exprs[id(ti.wrapper)] = expr
            self.proxies[id(ti.wrapper)] = ti.proxy
            self._wrappers.append((ti.wrapper, expr))
        self.steps: list[tuple] = []  # (expression of the caller's tensor, kind, details, layout)
        self.extra: list[TensorProxy] = []  # values the program returns for the layout steps
        self.returned: list[tuple[int, str, bool]] = []  # (output leaf, input expression, value unchanged)
        # the outputs returned as views of the caller's storages
        self.views: list[ReturnedView] = []
        # outputs returned as views of tensors the program computes, as eager's are (see _return_internal_views)
        self.internal_views: list[ViewOfResult] = []
        # outputs viewing a tensor the program computes under inference_mode: eager's are no views (an inference
        # tensor's views have no ``_base``), so they are returned as aliases without one (``detach()``)
        self.inference_views: list[int] = []
        # outputs eager returns as views of a tensor its composite op made inside (hidden_bases.py)
        self.hidden_base_views: list[HiddenBaseView] = []
        self.spec = None  # the output's structure (a transform that changes it disables the substitution)
        # the inputs passed as views of one storage with others: the prologue gives the program a view of that
        # whole storage, through which an update's autograd history reaches the caller's tensors
        self.shared: frozenset[str] = frozenset()
        # (output leaf, earlier leaf): one tensor the user's function returned at both places (``v0.double()`` of a
        # float64 ``v0`` is ``v0``), which the step gives back as one object
        self.repeats: list[tuple[int, int]] = []
        # (output leaf, earlier leaf): two tensors the user's function returned holding one value (``v1.reshape(-1)``
        # of a 1-d ``v1``: eager's is a new view), which the program gives back as one object: the step makes the
        # later a view of the earlier, a tensor of its own as in eager
        self.distinct: list[tuple[int, int]] = []
        # (output leaf, output leaf it views, layout over the storage): views made with grad of an output returned as
        # a view made without grad (``_plan_views_of_views_without_grad``)
        self.views_of_outputs: list[tuple[int, int, tuple]] = []

    def take_layouts(self) -> None:
        """Notes the storage of every input as called: before the first in-place op that changes a tensor's
        sizes or strides (the tracer calls this), else when the step is planned (most programs have none)."""
        if self._wrappers is None:
            return
        for w, expr in self._wrappers:
            self._take_layout(w, expr)
        self._wrappers = None

    def _take_layout(self, w: TracingTensor, expr: str) -> None:
        m = input_shadow(w)
        if m is not None:
            self.storages.setdefault(_storage_id(m), expr)
            self.storage_of[id(w)] = _storage_id(m)
            with torch._C.DisableTorchFunction():
                self.nbytes[id(w)] = m.untyped_storage().nbytes()

    def add_input(self, w: TracingTensor, expr: str) -> None:
        """An input found while tracing (a captured tensor, ``_InputBuilder.captured``), read at ``expr``."""
        self.exprs[id(w)] = expr
        self.proxies[id(w)] = w._thunder_proxy
        if self._wrappers is not None:
            self._wrappers.append((w, expr))
        else:  # (the layouts were taken: this one's is still as called)
            self._take_layout(w, expr)

    def elements(self, ti) -> TensorProxy:
        """The input's current elements in the layout the caller gave (what the program writes back); its
        proxy when they are the ones it was called with."""
        wrapper = ti.wrapper
        original = getattr(wrapper, "_tt_original", None)
        value = wrapper._thunder_proxy if original is None else original._thunder_proxy
        return ti.proxy if value is getattr(wrapper, "_tt_unchanged", None) else value

    def plan(self, wrappers, result, written: set[int] = frozenset(), shared: set[str] = frozenset()) -> None:
        """Records the layout step of every input among ``wrappers`` whose layout the program changed, which
        leaves of the user's ``result`` are inputs, and which are views of the storage of an input the
        program writes back (``written``: those inputs' stand-ins; ``shared``: the names of the inputs passed
        as views of one storage with others)."""
        self.shared = frozenset(self.exprs[w] for w, p in self.proxies.items() if p.name in shared)
        seen = set()
        views_of_inputs = []  # (output leaf, stand-in) of outputs viewing an input that may be left as they are
        for w in wrappers:
            original = getattr(w, "_tt_original", None)
            if original is None or id(w) in seen or id(w) not in self.exprs:
                continue
            seen.add(id(w))
            self._plan_layout(w, original)
        try:
            leaves, self.spec = pytree.tree_flatten(result)
        except Exception:
            return
        written_storages = shared_storages = input_names = None
        first: dict[int, int] = {}
        first_of_value: dict[str, int] = {}
        for i, leaf in enumerate(leaves):
            if type(leaf) is not TracingTensor:
                continue
            refuse_returned_made_leaf(leaf)
            if first.setdefault(id(leaf), i) != i:
                self.repeats.append((i, first[id(leaf)]))
                continue
            if first_of_value.setdefault(leaf._thunder_proxy.name, i) != i:
                self.distinct.append((i, first_of_value[leaf._thunder_proxy.name]))
            if id(leaf) in self.exprs:
                value = leaf._thunder_proxy
                original = self.proxies[id(leaf)]
                # (an input whose layout alone changed in place, ``x.t_()``: the layout step restrides the caller's
                # tensor, which is then eager's output)
                former = getattr(leaf, "_tt_original", None)
                elements = value if former is None else former._thunder_proxy
                unchanged = (
                    elements is original
                    or elements is getattr(leaf, "_tt_unchanged", None)
                    or _updated_unseen_by_autograd(elements, original)
                )
                self.returned.append((i, self.exprs[id(leaf)], unchanged))
                continue
            if input_names is None:
                input_names = {p.name for p in self.proxies.values()}
            if (leaf._thunder_proxy.name in input_names or leaf._tt_nondiff) and self._plan_input_view(i, leaf):
                continue
            # (a view the program derives from its root's elements through the shadows' strides, as after an in-place
            # layout change, ``v = x[0]; v.unsqueeze_(0)``: a tensor of its own when run, where eager's views the
            # caller's storage)
            view = leaf._tt_view
            restrided = leaf._tt_former is not None or (
                view is not None and view[1] is None and id(view[0]) in self.exprs
            )
            if written or self.shared or restrided:
                if written_storages is None:
                    self.take_layouts()
                    written_storages = {self.storage_of[w] for w in written if w in self.storage_of}
                    shared_storages = {s for w, s in self.storage_of.items() if self.exprs[w] in self.shared}
                    if restrided:
                        shared_storages = shared_storages | set(self.storage_of.values())
                if self._plan_view(i, leaf, written_storages, shared_storages):
                    continue
            if leaf._tt_leaf_view and self._plan_view_without_grad(i, leaf):
                continue
            view = view_of(leaf)
            if view is not None and id(view[0]) in self.exprs:
                views_of_inputs.append((i, leaf))
            self._plan_internal_view(i, leaf)
        if views_of_inputs and any(v.without_grad for v in self.views):
            self._plan_views_of_views_without_grad(views_of_inputs)

    def _plan_views_of_views_without_grad(self, candidates) -> None:
        """Records each output leaf among ``candidates`` (views of inputs the step leaves as the program's) that the
        user's code made with grad from an output returned as a view made without grad (``with torch.no_grad(): v =
        a[1:]``; ``w = v.t()``; both returned) as that view of the returned one: eager's ``w._base`` is the caller's
        tensor, and its history passes through ``v``, a leaf of its own."""
        from thunder.core.aliasing import returns_view_of_first_argument
        from thunder.core.trace import get_tracectx

        by_value = {v.name: v.leaf for v in self.views if v.without_grad}
        producer = {}
        for b in get_tracectx().bound_symbols:
            for o in b.flat_outs:
                producer[getattr(o, "name", None)] = b
        for i, leaf in candidates:
            name = leaf._thunder_proxy.name
            while name not in by_value:
                b = producer.get(name)
                if b is None or not returns_view_of_first_argument(b.sym) or not b.flat_args:
                    break
                name = b.flat_args[0].name
            if name not in by_value or not leaf._thunder_proxy.requires_grad:
                continue
            try:
                m = shadow(leaf)
            except Exception:
                continue
            with torch._C.DisableTorchFunction():
                layout = (tuple(m.shape), tuple(m.stride()), m.storage_offset())
                exotic = m.is_conj() or m.is_neg()
            if exotic or not all(type(n) is int for n in (*layout[0], *layout[1], layout[2])):
                continue
            self.views_of_outputs.append((i, by_value[name], layout))

    def _plan_input_view(self, i: int, leaf: TracingTensor) -> bool:
        """Records output leaf ``i`` as a view of the caller's tensor when a view op returned an input's value
        unchanged (``x.reshape_as(x)``, ``x.view(x.shape)``, ``v.t()`` of a vector): the program returns the
        input itself, where eager returns a new view of it (``out._base is x``) in the input's own layout (its
        layout is None here: read from the caller's tensor at each call, symbolic sizes included)."""
        view = view_of(leaf) if leaf._tt_view is not None or leaf._tt_pending is not None else None
        if view is None or leaf._tt_leaf_view:
            return False  # (a view made under no_grad stays the program's: no gradient reaches the input through it)
        # a view through detach() (``x.detach()[:, :1]`` of a column) is one of the caller's tensor detached; detach()'s
        # output itself is no view (it shares the storage, with no ``_base``): the step's other business
        detached = bool(leaf._tt_nondiff)
        if detached and getattr(leaf, "_tt_family", None) is leaf:
            return False
        root = view[0]
        proxy = self.proxies.get(id(root))
        if proxy is None:
            return False
        if leaf._thunder_proxy.name != proxy.name and not (detached and self._whole_detached(leaf, root)):
            return False
        self.views.append(
            ReturnedView(
                i, self.exprs[id(root)], None, leaf._thunder_proxy.name, detached, False, refused=_refused_history(leaf)
            )
        )
        return True

    def _whole_detached(self, leaf: TracingTensor, root: TracingTensor) -> bool:
        """Whether ``leaf`` is detach()'s output of the input ``root`` (or a view of it the identity made) in the
        input's own layout: the program returns detach()'s value, a tensor of its own."""
        family = getattr(leaf, "_tt_family", None)
        if family is None or family._thunder_proxy.name != leaf._thunder_proxy.name:
            return False
        try:
            m, rm = shadow(leaf), input_shadow(root)
        except Exception:
            return False
        if rm is None:
            return False
        with torch._C.DisableTorchFunction():
            return (
                _storage_id(m) == _storage_id(rm)
                and m.dtype == rm.dtype
                and (tuple(m.shape), m.storage_offset()) == (tuple(rm.shape), rm.storage_offset())
                # (the stride of a dimension of size 1 addresses nothing)
                and all(n == 1 or a == b for n, a, b in zip(m.shape, m.stride(), rm.stride()))
            )

    def _plan_view_without_grad(self, i: int, leaf: TracingTensor) -> bool:
        """Records output leaf ``i``, a view of an input made under ``no_grad`` or ``inference_mode``, as that view
        of the caller's tensor made again under ``no_grad`` after the call (``with torch.no_grad(): v = a[1:]; return
        v``): eager's is a leaf that requires grad, has ``_base`` set and shares the caller's storage, and no gradient
        reaches the caller's tensor through it. The layout is the input's own (read at each call) when the view
        keeps it (``a.expand_as(a)``), else the traced one in plain integers."""
        view = view_of(leaf)
        if view is None:
            return False
        root = view[0]
        if id(root) not in self.exprs or getattr(root, "_tt_original", None) is not None:
            return False
        m, rm = shadow(leaf), input_shadow(root)
        if rm is None:
            return False
        with torch._C.DisableTorchFunction():
            if _storage_id(m) != _storage_id(rm) or m.dtype != rm.dtype or m.is_conj() or m.is_neg():
                return False
            layout = (tuple(m.shape), tuple(m.stride()), m.storage_offset())
            own = (tuple(rm.shape), tuple(rm.stride()), rm.storage_offset())
        if layout == own:
            layout = None  # (the caller's tensor's layout at each call: symbolic sizes too)
        elif not all(type(n) is int for n in (*layout[0], *layout[1], layout[2])):
            return False
        name = leaf._thunder_proxy.name
        self.views.append(ReturnedView(i, self.exprs[id(root)], layout, name, False, False, True))
        return True

    def _plan_internal_view(self, i: int, leaf: TracingTensor) -> None:
        """Records output leaf ``i`` as a view of the tensor ``root`` the program computes when eager's output is
        one (``y = x * 2; return y.t()``): the program also returns ``root``, and the step after the call views it
        where eager's output views its base. An output of the program's autograd node that is a view of a tensor
        made inside it refuses in-place updates with grad (and one computed as a tensor of its own has no
        ``_base``), where eager's allows them; a view of one of the node's outputs is what eager returns."""
        if leaf._tt_pending is None and leaf._tt_view is None:
            self._plan_hidden_base_view(i, leaf)
            return  # (the common case: a tensor of its own)
        view = view_of(leaf)
        if view is None:
            self._plan_hidden_base_view(i, leaf)
            return
        # (detach()'s output itself shares the storage with no ``_base``: a view only of what detach() gives)
        detached = bool(leaf._tt_nondiff)
        # (detach()'s output itself: an alias, no view; made again beside the others, which may view a copy)
        alias = detached and getattr(leaf, "_tt_family", None) is leaf
        root = view[0]
        if id(root) in self.exprs or root._tt_view is not None:
            return  # (a view of an input is the step's other business; a root that changed its layout in place)
        if rebased_multi_view(leaf) and leaf._thunder_proxy.requires_grad:
            return  # (eager refuses its history: the program's value, whose backward raises that, is returned)
        with torch._C.DisableTorchFunction():
            if root.is_inference():  # (a tensor made under inference_mode: eager's views of it have no ``_base``)
                self.inference_views.append(i)
                return
        value = root._thunder_proxy
        if value.name in {p.name for p in self.proxies.values()}:
            return  # (the root holds an input's value: the caller's tensor)
        try:
            m, rm = shadow(leaf), shadow(root)
        except Exception:
            return
        with torch._C.DisableTorchFunction():
            if _storage_id(m) != _storage_id(rm) or rm.storage_offset() != 0 or rm.is_conj() or rm.is_neg():
                return
            if m.is_conj() or m.is_neg() or m.dtype != rm.dtype:
                return
            layout = (tuple(m.shape), tuple(m.stride()), m.storage_offset())
            root_layout = (tuple(rm.shape), tuple(rm.stride()))
        # (a tensor of its own restrided in place: its stand-in views its former elements, eager's is no view)
        restrided = root is getattr(leaf, "_tt_former", None) and root._tt_view is None
        numbers = (*layout[0], *layout[1], layout[2], *root_layout[0], *root_layout[1])
        layout_of = uncopied_view = None
        # (sizes the trace specialised, as a strided re-derivation of the view does, are its numbers at every call)
        if (
            any(is_symbolic(s) for s in value.shape)
            or any(is_symbolic(s) for s in leaf._thunder_proxy.shape)
            or not all(type(n) is int for n in numbers)
        ):
            if restrided:
                return
            # (sizes that vary between calls: the layout is the one the program's own output has when it runs)
            layout = root_layout = None
            # (an output step copied the root after the view was made: the view is the copied value's)
            uncopied = root._tt_uncopied
            if uncopied is not None:
                layout_of = len(self.extra)
                self.extra.append(uncopied)
            if leaf._tt_uncopied is not None:
                uncopied_view = len(self.extra)
                self.extra.append(leaf._tt_uncopied)
        self.internal_views.append(
            ViewOfResult(
                i,
                len(self.extra),
                layout,
                root_layout,
                leaf._thunder_proxy.name,
                value.name,
                restrided,
                leaf._tt_leaf_view,
                layout_of,
                detached,
                leaf._tt_bounds if layout is not None else (),
                uncopied_view,
                alias,
            )
        )
        self.extra.append(value)

    def _plan_hidden_base_view(self, i: int, leaf: TracingTensor) -> None:
        """Records output leaf ``i`` when eager's is a view of a tensor made inside a composite op (hidden_bases.py)."""
        if leaf._tt_copied:
            self.hidden_base_views.append(HiddenBaseView(i, None, None, 0, None, None))
            return
        pending = leaf._tt_layout_pending
        if pending is not None and getattr(pending.func, "__name__", None) in VIEWS_OF_INTERNAL_RESULTS:
            pending.resolve()
        m = leaf._tt_meta
        if m is None or m._base is None:
            return
        self.take_layouts()
        plan = hidden_base_view(i, m, self.storages)
        if plan is not None:
            self.hidden_base_views.append(plan)

    def _plan_view(self, i: int, leaf: TracingTensor, written_storages: set[int], shared_storages: set[int]) -> bool:
        """Records output leaf ``i`` as a view of the caller's tensor when its shadow views the storage of a
        written input or of inputs passed as views of one storage (which the program reads as copies when one
        requires grad), in a layout ``as_strided`` can make again (plain integers, the input's dtype, no
        conjugate or negative bit)."""
        try:
            m = shadow(leaf)
        except Exception:  # (a shadow the meta device cannot compute: the output stays the program's)
            return True
        storage = _storage_id(m)
        if storage not in written_storages and storage not in shared_storages:
            return False
        view = view_of(leaf)
        root = view[0] if view is not None else None
        # the input the output was derived from, else any input viewing that storage
        if root is not None and self.storage_of.get(id(root)) == storage:
            expr = self.exprs[id(root)]
            base = self.proxies[id(root)]
        else:
            expr = self.storages[storage]
            base = next(self.proxies[w] for w, e in self.exprs.items() if e == expr)
        with torch._C.DisableTorchFunction():
            layout = (tuple(m.shape), tuple(m.stride()), m.storage_offset())
            exotic = m.is_conj() or m.is_neg() or m.dtype is not base.dtype.torch_dtype
        if exotic or not all(type(n) is int for n in (*layout[0], *layout[1], layout[2])):
            return True
        updated = storage in written_storages
        detached = bool(leaf._tt_nondiff)
        alias_not_view = detached and getattr(leaf, "_tt_family", None) is leaf
        self.views.append(
            ReturnedView(
                i,
                expr,
                layout,
                leaf._thunder_proxy.name,
                detached,
                updated,
                leaf._tt_leaf_view,
                alias_not_view,
                leaf._tt_bounds,
                _refused_history(leaf),
            )
        )
        return True

    def _plan_layout(self, w: TracingTensor, original: TracingTensor) -> None:
        self.take_layouts()
        expr = self.exprs[id(w)]
        new = shadow(w)
        with torch._C.DisableTorchFunction():
            layout = (tuple(new.shape), tuple(new.stride()), new.storage_offset())
            itemsize = new.element_size()
        storage = _storage_id(new)
        size, stride, offset = layout
        end = offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1 if all(size) else 0
        grown = end * itemsize > self.nbytes.get(id(w), 0)
        if storage == _storage_id(shadow(original)) and not grown:
            self.steps.append((expr, "restride", None, layout))
        elif storage in self.storages and not grown:
            self.steps.append((expr, "storage_of", self.storages[storage], layout))
        else:  # a storage made inside the program, or grown by resize_: the program returns the tensor
            self.steps.append((expr, "tensor", len(self.extra), layout))
            self.extra.append(w._thunder_proxy)

    def wrap_output(self, structure, finish, finish_args: list[str]) -> tuple[Any, Any, list[str]]:
        """``(structure, finish, finish_args)`` of ``_collect_output`` extended with this step."""
        if not self.steps and not self.returned and not self.views and not self.internal_views:
            if not self.inference_views and not self.distinct and not self.hidden_base_views:
                return structure, finish, finish_args
        inference_views = tuple(self.inference_views)
        views_of_outputs = tuple(self.views_of_outputs)
        shared = self.shared
        repeats = tuple(self.repeats)
        distinct = tuple(self.distinct)
        internal_views = tuple(self.internal_views)
        hidden_base_views = tuple(self.hidden_base_views)
        steps, returned, views, n_args, spec, nested = (
            tuple(self.steps),
            tuple(self.returned),
            tuple(self.views),
            len(finish_args),
            self.spec,
            bool(self.extra),
        )
        named = {s[0] for s in steps} | {s[2] for s in steps if s[1] == "storage_of"} | {r[1] for r in returned}
        named |= {v.caller for v in views}
        exprs = sorted(named)
        where = {e: n_args + i for i, e in enumerate(exprs)}

        def finish_after_call(values, *args):
            out, extra = values if nested else (values, ())
            result = out if finish is None else finish(out, *args[:n_args])
            if hidden_base_views:  # (first: the internal views of a copied output view the copy, as eager's do)
                result, extra = copy_outputs_run_as_views(result, hidden_base_views, spec, extra)
            if internal_views:
                result = _return_internal_views(result, internal_views, extra, spec)
            if inference_views:
                result = _return_inference_views(result, inference_views, spec)
            if hidden_base_views:
                result = return_hidden_base_views(result, hidden_base_views, spec)
            if views:  # (before the layout steps: the views are of the storages as called)
                result = _return_views(result, views, args, where, spec)
            if views_of_outputs:
                result = _return_views_of_outputs(result, views_of_outputs, spec)
            for expr, kind, detail, (size, stride, offset) in steps:
                t = args[where[expr]]
                # a tensor with autograd history restrides as eager's t_() does (with a backward); a leaf
                # (which eager lets change only under no_grad) without one; an inference tensor under inference_mode,
                # where the traced code changed it
                mode = torch.inference_mode() if t.is_inference() else contextlib.nullcontext()
                with mode, torch.set_grad_enabled(torch.is_grad_enabled() and not t.is_leaf):
                    if kind == "restride":
                        t.as_strided_(size, stride, offset)
                    elif kind == "storage_of":
                        t.set_(args[where[detail]].untyped_storage(), offset, size, stride)
                    else:
                        t.set_(extra[detail].detach())
            if returned:
                result = _return_inputs(result, returned, args, where, spec, shared)
            if distinct:  # (before the repeats: a repeat of a leaf made distinct is that leaf's new object)
                result = _return_distinct(result, distinct, spec)
            if repeats:
                result = _return_repeats(result, repeats, spec)
            return result

        if nested:
            structure = (structure, tuple(self.extra))
        return structure, finish_after_call, [*finish_args, *exprs]


def _updated_unseen_by_autograd(value: TensorProxy, original: TensorProxy) -> bool:
    """Whether ``value`` is the input ``original`` updated only where autograd does not see it (``no_grad``): its
    gradient path is the input's own, so the caller's tensor, written back in place, is the output eager returns
    (with its history as it was)."""
    from thunder.core.trace import get_tracectx

    trace = get_tracectx()
    if trace is None or not original.requires_grad:
        return False
    for b in reversed(trace.bound_symbols):
        if b.output is value:
            return b.sym.id == "keep_grad_of" and b.args[0] is original
    return False


def _aliases_of(trace, names: set[str]) -> set[str]:
    """``names`` and the values of ``trace`` an executor may run as views of them."""
    may = set(names)
    for b in trace.bound_symbols:
        if any(isinstance(a, TensorProxy) and a.name in may for a in b.flat_args) and may_alias_an_argument(b):
            may.update(o.name for o in b.flat_outs if isinstance(o, TensorProxy))
    return may


def emit_writes(writes: list[tuple[TensorProxy, TensorProxy]], trace) -> list[tuple[TensorProxy, TensorProxy]]:
    """Records the copies writing each updated input (or constant) ``(new value, tensor)`` back at the
    program's end, and returns them in the order written. A new value that is (a view of) another written
    tensor's value as called (``b.copy_(a); a.mul_(2)``: ``b``'s new value is ``a``'s old one) is read before
    that tensor is overwritten: its write goes first, and any further such value is cloned before the writes."""
    from thunder.core import prims

    if len(writes) > 1:
        may = _aliases_of(trace, {proxy.name for _, proxy in writes})
        reading = [w for w in writes if w[0].name in may]
        if reading:
            rest = [w for w in writes if w[0].name not in may]
            for i in range(1, len(reading)):
                new, proxy = reading[i]
                reading[i] = (recorded_clone(new), proxy)
            writes = reading + rest
    for new, proxy in writes:
        prims.copy_(new, proxy)
    return writes


def unalias_outputs(result, trace, input_names: set[str], exclude: set[int]) -> None:
    """Outputs the executors may run as views of an input are cloned before the program writes inputs back
    (``x.copy_(a)`` runs as an expand of ``a``; a later write into ``a`` must not reach the output).

    An output that is a view of another output cloned here (``v.detach()`` returned with ``v``) is made again from
    that clone, so the two share memory as in eager."""
    may = _aliases_of(trace, input_names)
    try:
        leaves = [
            leaf for leaf in pytree.tree_leaves(result) if type(leaf) is TracingTensor and id(leaf) not in exclude
        ]
    except Exception:
        return
    cloned = set()
    views = []
    for leaf in leaves:
        view = view_of(leaf)
        if view is not None:
            views.append((leaf, view))
            continue
        p = leaf._thunder_proxy
        if p.name in may and id(leaf) not in cloned:
            cloned.add(id(leaf))
            if leaf._tt_uncopied is None:  # (as ``outputs.note_copy``)
                leaf._tt_uncopied = p
            leaf._tt_value = recorded_clone(p)
            leaf._tt_version += 1  # (its views re-derive from the clone)
    for leaf, view in views:
        if id(view[0]) in cloned:
            continue
        p = leaf._thunder_proxy
        if p.name in may:
            if leaf._tt_uncopied is None:
                leaf._tt_uncopied = p
            leaf._tt_value = recorded_clone(p)
            leaf._tt_seen = view[0]._tt_version


def _return_views(result, views, args, where, spec):
    """``result`` with the outputs that are views of updated inputs' storages replaced by those views of the
    caller's tensors (``as_strided`` over the storage, after the write-back), as eager returns them.

    An output viewing the input through ``detach()`` is a view of the caller's tensor detached: for autograd it
    is a tensor of its own; one that got a history of its own from updates through it takes the program's output's
    history (``_detached_alias_with_history``). An output whose ``requires_grad`` the view would not reproduce
    otherwise (the caller's tensor could not take the update's history) stays the program's output: its values
    and gradients are right, its storage is not."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i, expr, layout, _, detached, _, without_grad, alias_not_view, bounds, refused in views:
        out, t = leaves[i], args[where[expr]]
        if not isinstance(out, torch.Tensor) or t.dtype != out.dtype or t.device != out.device:
            continue
        size, stride, offset = (t.shape, t.stride(), t.storage_offset()) if layout is None else layout
        # (the layout is the storage's: viewed from the caller's base, as eager's view is, never through an
        # intermediate view whose history may predate the update; a prologue's flat view of a detached tensor
        # is no autograd view of its base)
        base = t._base
        if base is None or base.dtype != t.dtype or base.requires_grad != t.requires_grad:
            base = t
        if alias_not_view:  # (detach() of a view is no view: it shares the storage and the version counter)
            view = base.as_strided(size, stride, offset).detach()
        else:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not without_grad):
                view = _through(base.detach() if detached else base, bounds).as_strided(size, stride, offset)
        if view.requires_grad == out.requires_grad:
            leaves[i] = view
            if refused is not None and view.requires_grad:  # (eager's view refuses its history once rebased)
                view.register_hook(functools.partial(_refuse_gradient, refused))
        elif detached and out.requires_grad and not view.requires_grad and torch.is_grad_enabled():
            leaves[i] = _detached_alias_with_history(view, out, alias_not_view)
    return pytree.tree_unflatten(spec, leaves)


def _refused_history(leaf: TracingTensor) -> str | None:
    """Eager's error where a gradient reaches the output ``leaf`` returned as a view of a caller's tensor: an output
    of a view op returning several views (``x.unbind(0)[0]``, ``x.chunk(2)[0]``) that requires grad and whose base
    was updated in place since (eager refuses its history then); None for any other."""
    if not rebased_multi_view(leaf) or not leaf._thunder_proxy.requires_grad:
        return None
    name, index, _, (frame, lineno) = leaf._tt_multi_view
    return (
        f"Output {index} of {name} is a view and its base or another view of its base has been modified inplace. "
        "This view is the output of a function that returns multiple views. Such functions do not allow the output "
        "views to be modified inplace. You should replace the inplace operation by an out-of-place one. (eager's "
        f"backward raises this too)\n  {describe_location(frame, lineno)}"
    )


def _refuse_gradient(message: str, grad):
    raise RuntimeError(message)


def _through(base: torch.Tensor, bounds: tuple) -> torch.Tensor:
    """``base`` viewed through each layout of ``bounds`` in turn (each ``as_strided`` backward then drops the gradient of
    the elements past that layout's, as eager's ``as_strided`` of a view does)."""
    for size, stride, offset in bounds:
        base = base.as_strided(size, stride, offset)
    return base


def _detached_alias_with_history(view: torch.Tensor, out: torch.Tensor, alias_not_view: bool) -> torch.Tensor:
    """Eager's ``v = x.detach(); v.add_(y)`` with ``y`` requiring grad: ``v`` shares the caller's storage and has
    the update's history. ``view`` is that storage's elements (written back already), ``out`` the program's value
    with its history: a clone of ``out`` moved onto the storage (no ``_base``: detach()'s output is no view), or the
    view given the history by copying ``out``'s (equal) elements into it (a view through ``detach()``)."""
    if alias_not_view:
        alias = out.clone()
        with torch.no_grad():
            alias.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())
        return alias
    view.copy_(out)
    return view


def _return_internal_views(result, internal_views, extra, spec):
    """``result`` with the outputs that are views of tensors the program computes replaced by those views of the
    program's own outputs (``as_strided``), as eager returns them: their ``_base`` is set, and an in-place update
    of one after the call is allowed with grad and reaches the others viewing that tensor. A tensor the executors
    laid out otherwise than eager is copied into eager's layout first; an output whose ``requires_grad`` the view
    would not reproduce stays the program's."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    bases = {}
    # (a tensor restrided in place is the program's tensor restrided after the call; one the compiled function
    # saved for its backward must keep its version, so a copy with its history is restrided instead)
    restrided_roots = {id(extra[v.extra]) for v in internal_views if v.restrided}
    for v in internal_views:
        i, k, layout, root_layout, restrided, without_grad, layout_of, detached, bounds, uncopied_view = (
            v.leaf,
            v.extra,
            v.layout,
            v.root_layout,
            v.restrided,
            v.without_grad,
            v.layout_of,
            v.detached,
            v.bounds,
            v.uncopied_view,
        )
        out, root = leaves[i], extra[k]
        if not isinstance(out, torch.Tensor) or not isinstance(root, torch.Tensor) or root.dtype != out.dtype:
            continue
        if layout is None:  # (symbolic sizes: the program's output is that view of its root, or of the root's
            # value before a copy, when it runs)
            # (itself a view when the executors ran it as one, ``reshape``: the layout is taken from where it starts)
            # (the output itself copied by an output step: its layout is its value's before the copy)
            made = out if uncopied_view is None else extra[uncopied_view]
            viewed = root
            if layout_of is not None and _storage_id(made) != _storage_id(root):
                viewed = extra[layout_of]
            offset = made.storage_offset() - viewed.storage_offset()
            if _storage_id(made) != _storage_id(viewed) or offset < 0 or viewed.dtype != out.dtype:
                continue
            layout = (made.shape, made.stride(), offset)
            root_layout = (viewed.shape, viewed.stride())
        (size, stride, offset), (root_size, root_stride) = layout, root_layout
        if root.shape != root_size or out.shape != size:
            continue
        base = bases.get(id(root))  # (the program returns one tensor for each output viewing it)
        if base is None:
            base = root
            saved = id(root) in restrided_roots and root.requires_grad
            # (a root the program returns itself, a view as eager's is, ``v = torch.cov(x); v.reshape(-1), v``: the
            # output views it in place, sharing its storage as in eager; a copy would be a storage of its own)
            offset_ok = (root._base is None and root.storage_offset() == 0) or (
                not bounds and any(leaf is root for leaf in leaves)
            )
            if saved or not offset_ok or not _same_strides(root, root_stride):
                base = torch.empty_strided(root_size, root_stride, dtype=root.dtype, device=root.device)
                base.copy_(root)
                if root._base is None and id(root) not in restrided_roots and base.requires_grad == root.requires_grad:
                    # (the program returns the root itself too, laid out otherwise than eager's, ``v = x.t() * 2;
                    # return v, v.diagonal()``: the copy in eager's layout is returned in its place, so the views
                    # share its storage as eager's do)
                    leaves[:] = [base if leaf is root else leaf for leaf in leaves]
            bases[id(root)] = base
        if restrided:  # (eager's is the tensor itself, restrided in place: no view)
            if base.requires_grad == out.requires_grad:
                with torch.set_grad_enabled(torch.is_grad_enabled() and not base.is_leaf):
                    leaves[i] = base.as_strided_(size, stride, offset)
            continue
        if v.alias:  # (detach()'s output: the base's storage, no view; left as it is where it has grad)
            if not out.requires_grad:
                # (out of place: as_strided_ would bump the counter the alias shares with the base, which the
                # program's backward may have saved)
                leaves[i] = base.detach().as_strided(size, stride, offset + base.storage_offset()).detach()
            continue
        if detached:  # (one alias without grad per tensor: the views of one detach() share it in eager)
            key = (id(root), "detached")
            if key not in bases:
                bases[key] = base.detach()
            base = bases[key]
        with torch.set_grad_enabled(torch.is_grad_enabled() and not without_grad):
            # (``offset`` counts from the root's first element: as_strided's from its storage's)
            view = _through(base, bounds).as_strided(size, stride, offset + (0 if bounds else base.storage_offset()))
        if view.requires_grad == out.requires_grad:
            leaves[i] = view
    return pytree.tree_unflatten(spec, leaves)


def _return_views_of_outputs(result, views_of_outputs, spec):
    """``result`` with the outputs made with grad from another output (a view made without grad) replaced by those
    views of it (``as_strided`` over the storage they share), whose history passes through it as eager's does."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i, j, (size, stride, offset) in views_of_outputs:
        out, base = leaves[i], leaves[j]
        if not isinstance(out, torch.Tensor) or not isinstance(base, torch.Tensor) or base.dtype != out.dtype:
            continue
        if _storage_id(out) != _storage_id(base) or base._base is None:
            continue  # (the returned one is no view of the caller's tensor: the step left it as the program's)
        view = base.as_strided(size, stride, offset)
        if view.requires_grad == out.requires_grad:
            leaves[i] = view
    return pytree.tree_unflatten(spec, leaves)


def _return_repeats(result, repeats, spec):
    """``result`` with each tensor the user's function returned at several places given back as one object."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i, j in repeats:
        leaves[i] = leaves[j]
    return pytree.tree_unflatten(spec, leaves)


def _return_distinct(result, distinct, spec):
    """``result`` with each output that is the same object as an earlier one, where the user's function returned two
    tensors, made a view of it (``view`` of its own shape: the same storage and ``_base``, an object of its own)."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i, j in distinct:
        out = leaves[i]
        if isinstance(out, torch.Tensor) and out is leaves[j]:
            leaves[i] = out.view(out.shape)
    return pytree.tree_unflatten(spec, leaves)


def _same_strides(t: torch.Tensor, stride) -> bool:
    """Whether ``t`` has the strides ``stride`` wherever they matter (dims of size one step nowhere)."""
    return all(n == 1 or a == b for n, a, b in zip(t.shape, t.stride(), stride))


def _return_inference_views(result, leaves_viewing, spec):
    """``result`` with the outputs that view a tensor computed under ``inference_mode`` made aliases that are no
    views (``detach()``: same storage, no ``_base``), as eager's views of an inference tensor are."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i in leaves_viewing:
        out = leaves[i]
        if isinstance(out, torch.Tensor) and out._base is not None and not out.requires_grad:
            leaves[i] = out.detach()
    return pytree.tree_unflatten(spec, leaves)


def _return_inputs(result, returned, args, where, spec, shared):
    """``result`` with the outputs that are inputs replaced by the caller's tensors, as eager returns them.

    A view of a non-leaf base gets the update's history from the compiled function (``_record_view_updates``
    of ``thunder.transforms.split``), so it is returned too; so is an argument sharing its storage with others
    (``f(x, x[1:])``): the update's history reaches the caller's storage through the whole-storage input, and
    the caller's tensor views it. An input whose new value carries autograd history the caller's tensor does
    not hold (a tensor autograd would not rebase) stays the program's output: its gradients are right, its
    identity is not."""
    leaves, out_spec = pytree.tree_flatten(result)
    if out_spec != spec:  # a transform (grad, vjp) made another output
        return result
    for i, expr, unchanged in returned:
        out, t = leaves[i], args[where[expr]]
        if not isinstance(out, torch.Tensor) or out.shape != t.shape:
            continue
        if unchanged or out is t or not out.requires_grad or (t.requires_grad and t.is_leaf):
            leaves[i] = t
        elif t.requires_grad and (expr in shared or not (t.is_leaf if t._base is None else t._base.is_leaf)):
            # (a tensor of its own was given the update's history by the compiled function, ``mark_dirty``; the
            # output differs from it when a layout step restrided it afterwards, ``x.mul_(2).t_()``)
            leaves[i] = t
    return pytree.tree_unflatten(spec, leaves)
