"""In-place updates while tracing: ``x.add_(y)``, ``x[k] = v``, ``x.t_()``, ``x.resize_(n)`` and eager's rules for them.

An update rebinds the updated tensor to a new value and reaches what shares its memory: its base and the base's
other views (re-derived lazily), an input the caller expanded, the tensor's gradient path (kept, cut off or given a
zero gradient, as autograd would). Layout changes make the tensor a view of its former elements.
"""

from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol, flat_proxies
from thunder.core.symbolic import (
    has_symbolic,
    hints,
    is_data_dependent,
    known,
    same_shape,
    specialize,
)
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.tracing import version_counters
from thunder.tracing.autograd_function import _no_grad_update
from thunder.tracing.errors import (
    TracingError,
    describe_location,
    user_frame,
)
from thunder.tracing.fallback import (
    _can_cast,
    _dtype_title,
    _func_name,
)
from thunder.tracing.inplace_grad import (
    _HISTORY_KEEPING_UPDATES,
    _LAYOUT_UPDATES,
    _func_name_of,
    _nondifferentiable_update,
    _still_requires_grad,
    comparison_operands_requiring_grad,
    note_unrecorded_layout_change,
    refuse_resize_requiring_grad,
)
from thunder.tracing.resized_history import note_resized_root, resized_without_grad
from thunder.tracing.restrided_gradients import note_restride_past_elements
from thunder.tracing.tracing_tensor import (
    TracingTensor,
    _unwrap_leaf,
)
from thunder.tracing.views import (
    _METADATA_INPLACE,
    _OVERWRITES,
    _changes_layout,
    _covers_root,
    _mark_view,
    _meta_like,
    _overlaps_itself,
    _refuse_update_of_grad_leaf,
    _storage_id,
    _write_strided,
    _write_view,
    _written_region,
    checked_written_region,
    input_shadow,
    run_on_shadows,
    shadow,
    write_into_overlapping_root,
)

T = torch.Tensor

# in-place matrix products that resize their ``self`` to the product's shape in eager (x.addbmm_(a, b) of a [1] x)
_RESIZING_BLAS_UPDATES = frozenset(("addbmm_", "addmm_", "addmv_", "addr_", "baddbmm_"))
# in-place ops that only re-describe a tensor's elements (its sizes and strides), never write them
_LAYOUT_ONLY_UPDATES = frozenset("unsqueeze_ squeeze_ t_ transpose_ swapdims_ swapaxes_".split())


def _fit_run_time_sizes(value: TensorProxy, shape) -> TensorProxy:
    """An in-place update's result ``value`` expanded to its target's ``shape`` where they differ only in sizes known
    when the program runs (``x.add_(y)`` with ``y`` from nonzero: eager needs the broadcast shape to be ``x``'s, and
    the expand raises at run time where it is not, as eager does); else ``value`` unchanged."""
    if not isinstance(value, TensorProxy) or len(value.shape) != len(shape) or not has_symbolic(value.shape):
        return value
    runtime = False
    for v, t in zip(value.shape, shape):
        if known(v == t):
            continue
        if not (is_data_dependent(v) or is_data_dependent(t)):
            return value
        runtime = True
    if not runtime:
        return value
    from thunder.torch import expand as ltorch_expand

    return ltorch_expand(value, tuple(shape))


class UpdateRecorder:
    """The part of ``Tracer`` that records in-place updates: a tensor's new value, its aliases', its base's, and
    what autograd keeps of the old one."""

    def _inplace(self, func, op: InplaceOp, args, uargs, ukwargs, kwargs=None):
        result = op.fn(*uargs, **ukwargs)
        if op.mutated_args is None:
            targets, values, out = (op.arg_index,), (result,), None
        else:
            out, *values = result
            targets = op.mutated_args
        inputs = [p for p in flat_proxies((uargs, ukwargs)) if isinstance(p, TensorProxy)]
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in inputs)
        for i, value in zip(targets, values):
            if value is None:
                continue
            if (
                grad
                and isinstance(value, TensorProxy)
                and not value.requires_grad
                and value.dtype.kind in ("float", "complex")
                and all(value is not p for p in inputs)
            ):
                value.requires_grad = True  # computed from a tensor that requires grad
            wrapper = args[i] if i < len(args) else None
            if isinstance(wrapper, torch.Tensor) and not isinstance(wrapper, TracingTensor):
                wrapper = self.outside_tensor(wrapper)
            if not isinstance(wrapper, TracingTensor):
                raise TracingError(f"{_func_name(func)} updates argument {i} in place, which is not a traced tensor")
            if (
                op.mutated_args is None
                and _func_name_of(func) not in _METADATA_INPLACE
                and _func_name_of(func) not in _RESIZING_BLAS_UPDATES
            ):
                value = _fit_run_time_sizes(value, wrapper._tt_value.shape)
            if (
                op.mutated_args is None
                and not same_shape(value.shape, wrapper._tt_value.shape)
                and _func_name_of(func) not in _METADATA_INPLACE
                and _func_name_of(func) not in _RESIZING_BLAS_UPDATES
            ):
                # (x.add_(y) with y broadcasting x to a larger shape: eager refuses, the result would not fit x)
                where = describe_location(user_frame(2))
                raise RuntimeError(
                    f"output with shape {list(hints(wrapper._tt_value.shape))} doesn't match the broadcast shape "
                    f"{list(hints(value.shape))} (in {_func_name(func)})\n  {where}"
                )
            # (an update of the values or of the layout (unsqueeze_, as_strided_), not a resize; eager lets a
            # non-differentiable logical op update a leaf that requires grad, as autograd does not record it)
            name = _func_name_of(func)
            refuse_resize_requiring_grad(name, wrapper)
            if name in _LAYOUT_UPDATES or (
                same_shape(value.shape, wrapper._tt_value.shape) and name not in _HISTORY_KEEPING_UPDATES
            ):
                _refuse_update_of_grad_leaf(func, wrapper, args)
            self._rebind(func, wrapper, value, args, kwargs, bumps=op.mutated_args is None)
        return out

    def _rebind(self, func, wrapper: TracingTensor, value: TensorProxy, args=(), kwargs=None, bumps=True) -> None:
        """``wrapper`` now holds ``value`` (an in-place update), and so do its aliases; ``bumps``: eager bumps its
        version counter (not for the running statistics batch norm's kernel updates)."""
        root = wrapper if wrapper._tt_view is None else wrapper._tt_view[0]
        if root._tt_inference and not torch.is_inference_mode_enabled():
            raise RuntimeError(
                "Inplace update to inference tensor outside InferenceMode is not allowed. You can make a clone to get "
                f"a normal tensor before doing inplace update.\n  {describe_location(user_frame(3))}"
            )
        if bumps:
            version_counters.bump(wrapper)
        if self.pending_shadows:  # an update reaches the aliases of what it writes: all of them must be known
            self.flush_shadows()
        # the write records its symbols directly (also when called after the op's own call: an opaque op that
        # returned its argument), never as user calls that would hand back stand-ins instead of proxies
        in_symbol, self.in_symbol = self.in_symbol, True
        try:
            self._rebind_value(func, wrapper, value, args, kwargs)
        finally:
            self.in_symbol = in_symbol
        if value.requires_grad and torch.is_grad_enabled() and value.dtype.kind in ("float", "complex"):
            # as in eager, the updated tensor (and the base it is a view of) now requires grad: what user code
            # (and autograd.Function.apply) reads
            with torch._C.DisableTorchFunction():
                for t in (wrapper, wrapper._tt_view[0] if wrapper._tt_view is not None else None):
                    if t is not None and t.is_leaf and not t.requires_grad:
                        t.requires_grad_(True)

    def _rebind_value(self, func, wrapper: TracingTensor, value: TensorProxy, args, kwargs) -> None:
        old = wrapper._thunder_proxy
        self.layout_read = True  # which aliases an update reaches depends on the inputs' layout
        if value.shape != old.shape or (
            getattr(func, "__name__", None) in _METADATA_INPLACE and _changes_layout(func, wrapper, args, kwargs or {})
        ):
            self._rebind_metadata(func, wrapper, value, args, kwargs or {})
            return
        if getattr(func, "__name__", None) == "set_" and len(args) > 1 and args[1] is wrapper:
            return  # (x.set_(x): its own storage in its own layout, no element written, also of an expanded x)
        if getattr(func, "__name__", None) in _LAYOUT_ONLY_UPDATES:
            return  # (x.squeeze_() with no dim of size 1: the layout as it was, no element written, as in eager)
        if len(args) > 1 and args[0] is wrapper and self._overlapping_update(func, wrapper, args, kwargs or {}):
            return
        if (
            old.requires_grad
            and torch.is_grad_enabled()
            and value.dtype.kind in ("float", "complex")
            and (getattr(func, "__name__", None) in _OVERWRITES or not self._depends_on_grad(value))
        ):
            # an in-place op on a tensor that requires grad leaves it requiring grad (x.fill_(1.5), x.copy_(c):
            # its gradient is zero), so what is computed from it requires grad, or under no_grad is cut off;
            # an op replacing its values (x.copy_(y)) gives x's former values a zero gradient, as in eager
            value = _still_requires_grad(self.trace, old, value)
        # a bool/int result written into a float tensor (x.logical_not_(), x.eq_(y)): the tensor still requires
        # grad when it did, and after a comparison also when y does (zero gradients for both), as in eager
        nondiff_result = old.dtype.kind in ("float", "complex") and value.dtype.kind not in ("float", "complex")
        read = ()
        if nondiff_result and torch.is_grad_enabled():
            read = comparison_operands_requiring_grad(
                func, old, flat_proxies(self._unwrap_inputs((args[1:], kwargs or {})))
            )
        nondiff_result = nondiff_result and torch.is_grad_enabled() and (old.requires_grad or bool(read))
        if value.dtype is not old.dtype:
            if not _can_cast(value.dtype, old.dtype):
                raise RuntimeError(
                    f"result type {_dtype_title(value.dtype)} can't be cast to the desired output type {_dtype_title(old.dtype)}"
                )
            from thunder.torch import to as ltorch_to

            value = ltorch_to(value, old.dtype.torch_dtype)
        if nondiff_result:
            value = _nondifferentiable_update(self.trace, func, old, value, read)
        if self.autodiff and not torch.is_grad_enabled() and value.dtype.kind in ("float", "complex"):
            # an update under no_grad is invisible to autograd: the tensor keeps the gradient path it had (also
            # when a bool result is written into it, x.eq_(y))
            value = _no_grad_update(self.trace, old, value)
        name = getattr(func, "__name__", None)
        if (
            name == "copy_"
            and len(args) > 1
            and args[1] is wrapper
            and not (value.requires_grad and _overlaps_itself(shadow(wrapper)))
        ):
            # x.copy_(x) does nothing in eager (even on an expanded x): its views stay views of it, not
            # copies re-derived after an update (but eager's backward of one on an expanded x with grad raises)
            return
        region = checked_written_region(func, wrapper, args, kwargs or {})
        view = wrapper._tt_view
        root = wrapper if view is None else view[0]
        # an input the caller expanded, written directly or through a view: every element at a written memory
        # location shows the write, as in eager
        overlapping_root = region is not None and _overlaps_itself(input_shadow(root))
        if overlapping_root:
            written = value
            if region is not shadow(wrapper):  # x[key] = v: only x[key]'s elements are written
                written = torch_to_thunder[T.__getitem__](value, _unwrap_leaf(args[1]))
            new_root = write_into_overlapping_root(root, region, written)
        if view is None:
            wrapper._tt_value = new_root if overlapping_root else value
            wrapper._tt_version += 1
            return
        # an update through a view writes the root; the root's other views re-derive lazily
        base, steps = view
        old_base = base._tt_value
        partial = region is not wrapper._tt_meta and _overlaps_itself(wrapper._tt_meta)
        if overlapping_root:
            new_base = new_root
        elif partial:
            # x[key] = v on an x whose elements overlap (expand): only x[key]'s elements are written
            part = TracingTensor(torch_to_thunder[T.__getitem__](value, _unwrap_leaf(args[1])))
            part._tt_meta = region
            new_base = _write_strided(base, part, part._tt_value)
        elif steps is None:
            new_base = _write_strided(base, wrapper, value)
        elif not (old_base.requires_grad or value.requires_grad) and _covers_root(base, wrapper):
            # every element of the root, in its order (a KV cache's self.k[:bs] with bs the whole batch): the new
            # value is the root's (where autograd is involved, the scatter below keeps the old root's history)
            new_base = value
        else:
            new_base = _write_view(old_base, steps, value)
        if (
            (old_base.requires_grad or value.requires_grad)
            and not new_base.requires_grad
            and new_base is not value
            and new_base.dtype.kind in ("float", "complex")
        ):
            new_base.requires_grad = True  # (recorded as prims, which leave the flag unset)
        if (
            self.autodiff
            and (wrapper._tt_nondiff or not torch.is_grad_enabled())
            and new_base.dtype.kind in ("float", "complex")
        ):
            # written through detach(), or under no_grad: the base keeps its gradient path, as in eager (whose
            # no_grad update records nothing, so the written elements' gradient still reaches the base's history)
            new_base = _no_grad_update(self.trace, old_base, new_base)
        if wrapper._tt_nondiff and wrapper._tt_counter is not base._tt_counter:  # (.data: a counter of its own)
            self.unseen_by_version_counter.append((old_base, new_base))
        base._tt_value = new_base
        base._tt_version += 1
        wrapper._tt_value = value
        # (a partly written x whose elements overlap re-derives: other elements show the write too)
        wrapper._tt_seen = -1 if partial or overlapping_root else base._tt_version
        family = getattr(wrapper, "_tt_family", None)
        if (
            family is not None
            and torch.is_grad_enabled()
            and (value.requires_grad or family._tt_grad is not None)
            and value.dtype.kind in ("float", "complex")
        ):
            # d = x.detach(); d[0].add_(y): for autograd d is a tensor of its own, whose written elements now
            # carry y's gradient (the root keeps x's): its gradient path is kept beside the root's values
            if family is wrapper:
                family._tt_grad = value
            else:
                _ = family._thunder_proxy  # (up to date: the elements the written ones are merged into)
                family._tt_grad = _write_strided(family, wrapper, value)
                family._tt_grad.requires_grad = True
                family._tt_seen = -1  # (its value re-derives, with this gradient path)

    def _depends_on_grad(self, value: TensorProxy) -> bool:
        """Whether the symbol that computed ``value`` read a tensor that requires grad (or ``value`` does)."""
        if value.requires_grad and value.name in self.input_names:
            return True
        for bsym in reversed(self.trace.scopes[-1][-8:]):
            if any(o is value for o in bsym.flat_outs):
                return any(isinstance(a, TensorProxy) and a.requires_grad for a in bsym.flat_args)
        return value.requires_grad

    def _overlapping_update(self, func, wrapper: TracingTensor, args, kwargs) -> bool:
        """``x[1:].add_(x[:-1])``: an update reading a tensor that partly shares the destination's memory is
        eager's error, or eager's own call run on a copy of the storage (``thunder/tracing/overlap.py``)."""
        from thunder.tracing.overlap import overlapping_inputs, refuse_full_overlap, update_on_storage

        if not callable(func) or isinstance(func, Symbol):
            return False
        dm = shadow(wrapper)
        sid = _storage_id(dm)
        layout = (dm.shape, dm.stride(), dm.storage_offset())
        same = [
            i
            for i, a in enumerate(args)
            if i > 0
            and type(a) is TracingTensor
            and (a is wrapper or _storage_id(shadow(a)) == sid)
            and (shadow(a).shape, shadow(a).stride(), shadow(a).storage_offset()) == layout
        ]
        if same:
            refuse_full_overlap(func, dm, same, [shadow(a) if type(a) is TracingTensor else a for a in args], kwargs)
        candidates = [
            (i, shadow(a))
            for i, a in enumerate(args)
            if i > 0 and type(a) is TracingTensor and a is not wrapper and _storage_id(shadow(a)) == sid
        ]
        if not candidates:
            return False
        name = getattr(func, "__name__", None)
        found = overlapping_inputs(
            _written_region(name, wrapper, args), candidates, _func_name(func), setitem=name == "__setitem__"
        )
        if not found:
            return False
        root = wrapper._tt_view[0] if wrapper._tt_view is not None else wrapper
        if any((args[i]._tt_view[0] if args[i]._tt_view is not None else args[i]) is not root for i in found):
            raise NotImplementedError(
                f"{_func_name(func)} reads a tensor that partly overlaps the tensor it writes, through aliases thunder "
                f"cannot relate; clone() the input first\n  {describe_location(user_frame(3))}"
            )
        views = {0: dm, **{i: shadow(args[i]) for i in found}}
        old_root = root._thunder_proxy
        rest = [None if i in views else self._unwrap_inputs(a) for i, a in enumerate(args)]
        new_root = update_on_storage(func, shadow(root), old_root, views, rest, self._unwrap_inputs(kwargs))
        if (
            self.autodiff
            and (wrapper._tt_nondiff or not torch.is_grad_enabled())
            and new_root.dtype.kind
            in (
                "float",
                "complex",
            )
        ):
            new_root = _no_grad_update(self.trace, old_root, new_root)
        root._tt_value = new_root
        root._tt_version += 1
        if wrapper is not root:
            wrapper._tt_seen = -1
        return True

    def _rebind_metadata(self, func, wrapper: TracingTensor, value: TensorProxy, args, kwargs) -> None:
        """An in-place op that changes a tensor's sizes or strides (``unsqueeze_``, ``t_``, ``resize_``, ``set_``).

        The tensor becomes a view: of its former elements (``t_``, ``as_strided_``, a ``resize_`` within its
        storage), of another tensor (``set_``) or of a fresh root (a ``resize_`` growing the storage). Its
        former elements live on as a hidden root that the views taken before the change now derive from
        (``_tt_former``); for an input that root is also what the program writes back into the caller's
        tensor, which gets its new layout after the call (``thunder/tracing/layout_updates.py``).
        """
        note_unrecorded_layout_change(_func_name_of(func), wrapper)  # (refused where its history is read)
        if self.before_layout_change is not None:
            self.before_layout_change()
            self.before_layout_change = None
        old_meta = shadow(wrapper)
        specialize(value.shape)  # the new layout is learned from the shadows, in numbers
        specialize(wrapper._tt_value.shape)
        with torch._C.DisableTorchFunction():
            old_nbytes = old_meta.untyped_storage().nbytes()
        new_meta = run_on_shadows(func, (old_meta.detach(), *args[1:]), kwargs) if callable(func) else None
        value = note_restride_past_elements(func, wrapper, old_meta, new_meta, value)
        if new_meta is None or tuple(new_meta.shape) != hints(value.shape):
            new_meta = _meta_like(value.shape, value.dtype.torch_dtype)
        with torch._C.DisableTorchFunction():
            grown = _storage_id(new_meta) == _storage_id(old_meta) and new_meta.untyped_storage().nbytes() > old_nbytes
        made_root = wrapper._tt_view is None
        if made_root:
            # the former elements become a hidden root the tensor is now a (restrided) view of
            root = TracingTensor(wrapper._tt_value)
            root._tt_meta = old_meta
            root._tt_nondiff = wrapper._tt_nondiff
            wrapper._tt_former = root
            wrapper._tt_view = (root, None)
            wrapper._tt_seen = root._tt_version
        else:
            if getattr(wrapper, "_tt_input", False) and getattr(wrapper, "_tt_original", None) is None:
                # an input that was a view of its storage (aliased arguments): its elements as given
                root = TracingTensor(wrapper._thunder_proxy)
                root._tt_meta = old_meta
                root._tt_view, root._tt_seen = wrapper._tt_view, wrapper._tt_seen
                root._tt_nondiff = wrapper._tt_nondiff
                wrapper._tt_original = root
            wrapper._tt_view = (wrapper._tt_view[0], None)
            if getattr(func, "__name__", None) == "as_strided_":
                wrapper._tt_seen = -1  # (its elements may reach past the former ones: taken from the root's)
        if getattr(wrapper, "_tt_input", False) and getattr(wrapper, "_tt_original", None) is None:
            wrapper._tt_original = wrapper._tt_former
        src = args[1] if getattr(func, "__name__", None) == "set_" and len(args) > 1 else None
        if isinstance(src, TracingTensor) and _storage_id(shadow(src)) == _storage_id(new_meta):
            _mark_view(wrapper, src, None)  # x.set_(y): x now aliases y
        elif grown or _storage_id(new_meta) != _storage_id(old_meta):
            # resize_ past the storage's end, set_ to a new storage: a tensor of its own, the view of a fresh root
            if grown:
                new_meta = _meta_like(value.shape, value.dtype.torch_dtype)
            fresh = TracingTensor(value)
            fresh._tt_meta = new_meta
            wrapper._tt_view = (fresh, None)
            wrapper._tt_seen = fresh._tt_version
        old_value = wrapper._tt_value
        rederive = False
        if self.autodiff and not torch.is_grad_enabled() and old_value.requires_grad and not value.requires_grad:
            # (a layout change under no_grad, x.t_(): autograd records nothing, x keeps the gradient path it had)
            if _func_name_of(func) == "resize_" and wrapper._tt_view[0] is not wrapper._tt_former:
                # (a view resized so, an out= view: eager makes its history anew, from its base's through its new
                # layout, as it is re-derived below)
                rederive = True
            elif _func_name_of(func) == "resize_":  # (an out= tensor: its node expects the shape it had then)
                if made_root and wrapper._tt_view[0] is root and not getattr(wrapper, "_tt_input", False):
                    # (its former elements, a hidden root it is returned as a view of: a gradient through them comes
                    # through the resized tensor)
                    root._tt_value = _no_grad_update(self.trace, old_value, root._tt_value)
                    note_resized_root(self, wrapper, old_value, root._tt_value)
                value = resized_without_grad(self, old_value, value)
            else:
                value = _no_grad_update(self.trace, old_value, value)
        wrapper._tt_meta = new_meta
        if rederive:
            wrapper._tt_seen = -1
            value = wrapper._thunder_proxy
        wrapper._tt_value = value
        # (outside inference_mode: there, assigning .data reaches the dispatcher's shallow-copy check with the stand-ins)
        with torch._C.DisableTorchFunction(), torch.inference_mode(False):
            wrapper.data = TracingTensor(value)
