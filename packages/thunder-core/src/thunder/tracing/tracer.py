"""The tracing front end: runs the user's Python on stand-in tensors and records torch-level calls.

User code sees ``TracingTensor``s: real ``torch.Tensor`` subclasses (so ``isinstance``, ``.shape``,
``.dtype``, ``.device`` behave) that hold a ``TensorProxy``. Every torch call, whether through a
tensor argument or a factory function under the tracing ``TorchFunctionMode``, reaches
``Tracer.handle``, which maps it to a torch-language symbol (or an opaque fallback run by
PyTorch) and records it into the trace.
"""

from __future__ import annotations

import torch

from thunder.core.proxies import RuntimeValueProxy, TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.symbol import ATOMIC_TYPES, Symbol, flat_proxies, swap_proxies
from thunder.core.symbolic import (
    current_size_env,
    has_symbolic,
    hints,
    is_data_dependent,
    known,
    same_shape,
    specialize,
)
from thunder.core.trace import TraceCtx
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.torch.signatures import bind_torch_kwargs, input_by_position
from thunder.tracing import autograd_queries, version_counters
from thunder.tracing.attention_kernels import eager_attention_kernel, enabled_kernels
from thunder.tracing.autocast import any_autocast_enabled, autocast_policy
from thunder.tracing.autograd_function import _no_grad_update
from thunder.tracing.autograd_queries import AUTOGRAD_QUERIES, AUTOGRAD_UPDATES
from thunder.tracing.dtype_support import refuse_unsupported_dtypes
from thunder.tracing.errors import (
    DataDependentControlFlowError,
    TracingError,
    data_dependent_error,
    data_dependent_size_error,
    describe_location,
    innermost_frame,
    user_frame,
)
from thunder.tracing.fallback import (
    _can_cast,
    _dtype_title,
    _func_name,
    _stored_name,
    fallback_inplace_op,
    fallback_symbol,
)

# (``name as name``: re-exported for the modules that import it from here since before tracer.py was split)
from thunder.tracing.fallback import (
    interpreter_log_records as interpreter_log_records,
)
from thunder.tracing.inplace_grad import (
    _HISTORY_KEEPING_UPDATES,
    _LAYOUT_UPDATES,
    _func_name_of,
    _nondifferentiable_update,
    _still_requires_grad,
    _strip_inplace,
    comparison_operands_requiring_grad,
    note_unrecorded_layout_change,
    refuse_resize_requiring_grad,
)
from thunder.tracing.inplace_grad import (
    recorded_clone as recorded_clone,
)
from thunder.tracing.known_values import (
    INDEX_TENSOR_ARGUMENTS,
    VALUE_READS,
    KnownValues,
    check_index_tensor,
)
from thunder.tracing.matmul_paths import unfolded_product_of_nothing
from thunder.tracing.multi_views import mark_multi_views, refuse_rebased_use
from thunder.tracing.numpy_arrays import FROM_ARRAY, TracedArray, array_of, tensor_of
from thunder.tracing.out_arguments import call_with_out
from thunder.tracing.restrided_gradients import note_restride_past_elements
from thunder.tracing.result_layouts import defer_result_layout
from thunder.tracing.saved_versions import StaleSaves, note_saved, version_count
from thunder.tracing.tracing_tensor import (
    _DATA_DEPENDENT,
    _GRAD_MODE_SWITCHES,
    _METADATA,
    _NONE_ATTRIBUTES,
    _NOT_TRACEABLE,
    TracingTensor,
    _type_string,
    _unwrap_leaf,
    unwrap,
    wrap,
)
from thunder.tracing.tracing_tensor import (
    _current_tracer as _current_tracer,
)
from thunder.tracing.tracing_tensor import (
    _TracingMode as _TracingMode,
)
from thunder.tracing.view_refusals import refuse_view_eager_refuses
from thunder.tracing.views import (
    _DETACHING,
    _LAYOUT_QUERIES,
    _METADATA_INPLACE,
    _OVERWRITES,
    _SIZE_QUERIES,
    _can_defer_shadows,
    _changes_layout,
    _check_hidden_function_apply,
    _covers_root,
    _mark_view,
    _meta_like,
    _overlaps_itself,
    _PendingShadows,
    _refuse_update_of_grad_leaf,
    _returns_itself_when_unchanged,
    _storage_id,
    _symbolic_size_query,
    _write_strided,
    _write_view,
    _written_region,
    adopt_shadows,
    checked_written_region,
    eager_arguments,
    layout_query,
    matmul_returning_a_view,
    may_alias,
    run_on_shadows,
    shadow,
    write_into_overlapping_root,
)
from thunder.tracing.views import (
    alias_of_storage as alias_of_storage,
)
from thunder.tracing.views import (
    input_shadow as input_shadow,
)
from thunder.tracing.views import (
    seed_storage as seed_storage,
)
from thunder.tracing.views import (
    set_input_layout as set_input_layout,
)
from thunder.tracing.views import (
    view_of as view_of,
)
from thunder.tracing.views_without_grad import view_made_without_grad
from thunder.tracing.vmap import batched_call, has_batched, vmap_active

__all__ = ["TracingTensor", "Tracer", "wrap", "unwrap"]

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


_SDPA = torch.nn.functional.scaled_dot_product_attention


def _holds_outside_tensor(x) -> bool:
    """Whether ``x`` is, or is a list or tuple holding, a tensor that is no stand-in (from outside the inputs)."""
    t = type(x)
    if t is tuple or t is list:
        return any(type(y) is not TracingTensor and isinstance(y, torch.Tensor) for y in x)
    return t is not TracingTensor and isinstance(x, torch.Tensor)


class Tracer:
    """Records the user's torch calls into ``trace``."""

    def __init__(self, trace: TraceCtx, *, record_log: bool = True):
        self.trace = trace
        self.in_symbol = False
        self.multi_view_read = False  # an output of unbind/split... was read since the last call (multi_views.py)
        self.log: list[tuple] | None = [] if record_log else None  # what was intercepted (interpreter_log_records)
        self._pending_name = None
        self._store_names: dict[tuple[int, int], str | None] = {}
        self.input_names: set[str] = set()
        self.inputs = None  # the program's _InputBuilder (which stand-ins are arguments, and their checks)
        # whether autocast was on at some call (the program then holds autocast's casts)
        self.autocast = False
        # whether the trace depends on the inputs' layout (read strides, or updated a tensor in place)
        self.layout_read = False
        self.offsets_read = False  # read a storage offset (or traced aliased arguments)
        # autodiff may run on this program: ops run with grad disabled end in a stop-gradient
        self.autodiff = torch.is_grad_enabled()
        self.pending_shadows: list[_PendingShadows] = []
        self.before_layout_change = None  # called once, before an in-place op first changes sizes or strides
        self.known = KnownValues()  # 0-d tensors whose values are known while tracing (known_values.py)
        self.input_index_values = None  # small integer tensor arguments read as numbers (InputIndexValues)
        # (former value, new value) of the updates through ``.data``, which eager's version counter does not see
        self.unseen_by_version_counter: list[tuple[TensorProxy, TensorProxy]] = []
        self.attention_kernels = None  # the attention kernels enabled, when a call was traced as eager's choice
        self.saves = StaleSaves()  # the tensors eager's autograd saved for backward, with their versions
        trace.user_call_hook = self.symbol_called

    # ---------------------------------------------------------------- entry points
    def handle(self, func, args, kwargs):
        if func in _METADATA:
            if func in _SIZE_QUERIES and isinstance(args[0], TracingTensor):
                shape = args[0]._thunder_proxy.shape
                if has_symbolic(shape):
                    return _symbolic_size_query(func, shape, args, kwargs)
            if func in _LAYOUT_QUERIES:
                if type(args[0]) is not TracingTensor and isinstance(args[0], torch.Tensor):
                    # a tensor from outside the inputs (a global, a closure's): its stand-in has its real layout
                    args = (self.outside_tensor(args[0]), *args[1:])
                if isinstance(args[0], TracingTensor):  # strides of symbolic sizes: answered as numbers
                    specialize(args[0]._thunder_proxy.shape)
                self.layout_read = True
                self.offsets_read = self.offsets_read or func is T.storage_offset
                return layout_query(func, args, kwargs)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if func in _NONE_ATTRIBUTES:
            return None
        if func in AUTOGRAD_QUERIES and isinstance(args[0], TracingTensor):
            return autograd_queries.answer(self, func, args[0])
        if vmap_active[0] and has_batched(args, kwargs):
            return batched_call(self, func, args, kwargs)
        what = _DATA_DEPENDENT.get(func)
        if what is not None:
            if func is T.numpy and isinstance(args[0], TracingTensor):
                return array_of(args[0], **kwargs)  # NumPy calls on it are translated (numpy_arrays.py)
            if func in VALUE_READS and self.known:
                value = self.known.value(args[0])
                if value is not None:  # a 0-d tensor computed from sizes and numbers (int(n) in Longformer)
                    with torch._C.DisableTorchFunction():
                        return func(value, *args[1:], **kwargs)
            if func is T.item and isinstance(args[0], TracingTensor) and not args[1:] and not kwargs:
                # read when the program runs: the traced code may return it (RuntimeValueProxy refuses the rest)
                return self.record_call(func, torch_to_thunder[func], args, kwargs)
            raise data_dependent_error(what, user_frame(2))
        if func in _NOT_TRACEABLE:
            raise TracingError(f"thunder.jit cannot {_NOT_TRACEABLE[func]}\n  {describe_location(user_frame(2))}")
        if func is T.__iter__:
            return iter(self.handle(T.unbind, (args[0], 0), {}))
        if func is T.__repr__ or func is T.__str__:
            return TracingTensor.__repr__(args[0])
        if func in AUTOGRAD_UPDATES:
            autograd_queries.refuse_unsupported_update(self, func, args, kwargs)
            if func is T.requires_grad_:
                flag = kwargs.get("requires_grad", args[1] if len(args) > 1 else True)
                return autograd_queries.requires_grad_in_place(self, args[0], flag)
            if func is T.detach_ and isinstance(args[0], TracingTensor):
                return autograd_queries.detach_in_place(self, args[0])
        if func is T.type and len(args) == 1 and kwargs.get("dtype") is None and isinstance(args[0], TracingTensor):
            return _type_string(args[0])  # the string for the real tensor, not the stand-in's meta storage
        if func in _GRAD_MODE_SWITCHES:
            # no_grad / enable_grad / set_grad_enabled: switch the mode for real (later calls see it; see _grad_mode)
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if kwargs.get("requires_grad") is True:  # a factory's: a leaf requiring grad, as after requires_grad_()
            made = self.handle(func, args, {**kwargs, "requires_grad": False})
            return autograd_queries.requires_grad_in_place(self, made, True)
        if kwargs.get("out") is not None:  # computed, then written into out as eager (out_arguments.py)
            return call_with_out(self.handle, func, *self._outside_as_stand_ins(args, kwargs))  # (a global's grad too)
        if func in INDEX_TENSOR_ARGUMENTS:
            args, kwargs = self._read_index_tensor(func, args, kwargs)
        args, kwargs = eager_arguments(func, args, kwargs)
        # (before the checks that read the arguments' layout: a view of a transposed global, a global's product)
        args, kwargs = self._outside_as_stand_ins(args, kwargs)
        if unfolded_product_of_nothing(func, args, kwargs):  # (eager's bmm: no dtype check, b's dtype)
            args = (self.handle(T.to, (args[0], args[1].dtype), {}), args[1])
        if (folded := matmul_returning_a_view(func, args, kwargs)) is not None:
            a, b = folded  # as eager computes it: (b.mT @ a.t()).mT, a view of the product
            product = self.handle(
                torch.matmul, (self.handle(T.transpose, (b, -2, -1), {}), self.handle(T.t, (a,), {})), {}
            )
            return self.handle(T.transpose, (product, -2, -1), {})
        if func is T.view:
            refuse_view_eager_refuses(args, kwargs)
        if func is _SDPA and (chosen := eager_attention_kernel(args, kwargs)) is not None:
            func, args, kwargs = chosen  # as the kernel eager runs computes it (attention_kernels.py)
            self.attention_kernels = enabled_kernels()
        mapped = torch_to_thunder.get(func)
        known = self.known
        if not known and func not in known.candidates:
            return self.record_call(func, mapped, args, kwargs)
        if func in FROM_ARRAY and args and type(args[0]) is TracedArray:
            return tensor_of(func, args[0], kwargs)  # torch.as_tensor(x.numpy()) and friends
        try:
            out = self.record_call(func, mapped, args, kwargs)
        except TypeError:
            # a known 0-d tensor where the op needs a number (x.view(b, n, w) with n = torch.div(seq_len, w)):
            # eager reads its value (__index__), as the tracer can for a known value
            numbers = known.as_numbers((args, kwargs)) if known else None
            if numbers is None:
                raise
            out = self.record_call(func, mapped, *numbers)
        known.record(func, args, kwargs, out)
        return out

    def _read_index_tensor(self, func, args, kwargs):
        """``torch.narrow(x, d, start, n)`` with a tensor ``start``, ``x.tensor_split(indices)`` with a tensor: eager
        reads the tensor as numbers. Its value is known while tracing when it was computed from sizes and numbers,
        or when it is a small integer CPU argument (the prologue then checks its value on every call); any other
        tensor's value only exists when the program runs, which is refused, naming the user's line."""
        position, keyword = INDEX_TENSOR_ARGUMENTS[func]
        in_args = len(args) > position
        x = args[position] if in_args else kwargs.get(keyword)
        if not isinstance(x, TracingTensor):
            return args, kwargs
        check_index_tensor(func, x._thunder_proxy.dtype.torch_dtype, x._thunder_proxy.ndim)
        value = self.known.value(x)
        if value is None and self.input_index_values is not None:
            value = self.input_index_values.value(x)
        if value is None:
            raise data_dependent_error(
                f"read the tensor `{keyword}` of {func.__name__} as numbers (eager calls .item() or .tolist() on it): "
                "its value is not known while tracing (it was computed from tensor data, or the program updated it)",
                user_frame(3),
            )
        number = value.item() if value.ndim == 0 else value.tolist()
        if in_args:
            return (*args[:position], number, *args[position + 1 :]), kwargs
        return args, {**kwargs, keyword: number}

    def _outside_as_stand_ins(self, args, kwargs):
        """``args`` and ``kwargs`` with each tensor from outside the inputs (a global, a closure's), also as a keyword
        or in a list, replaced by its stand-in (with its real layout): so that its views alias it, updates through
        them reach it (written back at the program's end) and what autograd saves of it is known, as in eager."""
        if any(map(_holds_outside_tensor, args)) or (kwargs and any(map(_holds_outside_tensor, kwargs.values()))):
            args = tuple(self._stand_ins_of_outside(a) for a in args)
            kwargs = {k: self._stand_ins_of_outside(v) for k, v in kwargs.items()}
        return args, kwargs

    def symbol_called(self, sym: Symbol, args, kwargs):
        """A symbol was called at the top level: by the user's code (e.g. a registered operator) or by us."""
        if self.in_symbol:
            return sym.record(self.trace, args, kwargs)
        # called from user code while the tracing mode is active: thunder's own torch calls must not be traced
        with torch._C.DisableTorchFunction():
            return self.record_call(sym, sym, args, kwargs)

    # ---------------------------------------------------------------- recording
    def record_call(self, func, mapped, args, kwargs):
        if not args and kwargs:  # (torch.select(input=x, ...): views and updates follow the first argument)
            args, kwargs = input_by_position(func, args, kwargs)
        args, kwargs = self._outside_as_stand_ins(args, kwargs)
        first = first_count = None
        if args and type(args[0]) is TracingTensor:
            first, first_count = args[0]._thunder_proxy, version_count(args[0])
        out = self._record_call(func, mapped, args, kwargs)
        if type(out) is TracingTensor or type(out) is tuple:
            version_counters.share_counter(func, out, args)
            mark_multi_views(func, out, args)
            if not torch.is_grad_enabled():
                if func not in _DETACHING:
                    view_made_without_grad(self.trace, out, args)
            elif self.autodiff and not isinstance(func, Symbol):
                note_saved(
                    self.saves, func, args, kwargs, out, first, first_count
                )  # (eager's saved tensors: saved_versions.py)
        return out

    def _record_call(self, func, mapped, args, kwargs):
        trace = self.trace
        scope = trace.scopes[-1]  # the program, or a custom autograd.Function's backward being traced
        # unwrapping may re-derive views (recorded symbols a fallback below must not delete)
        uargs, ukwargs = self._unwrap_inputs(args), self._unwrap_inputs(kwargs)
        if self.multi_view_read:  # (eager refuses the history of one whose base was updated: refuse_rebased_use)
            refuse_rebased_use(self, func, args, kwargs)
        start = len(scope)
        fell_back = mapped is None
        if mapped is None:
            sym = fallback_symbol(func)
            mapped = torch_to_thunder.get(func, sym) if sym.inplace else sym
        torch_uargs, torch_ukwargs = uargs, ukwargs  # as PyTorch names them, for the opaque fallback
        if ukwargs and not fell_back and not isinstance(func, Symbol):
            # PyTorch's argument names (torch.baddbmm(batch1=...)) mapped onto the symbol's
            target = mapped.fn if type(mapped) is InplaceOp else mapped
            if type(target) is Symbol:
                try:
                    uargs, ukwargs = bind_torch_kwargs(func, target, uargs, ukwargs)
                except NotImplementedError:
                    fell_back = True
                    mapped = fallback_inplace_op(func) if type(mapped) is InplaceOp else fallback_symbol(func)
        inplace_kw = None
        if type(mapped) is Symbol and getattr(mapped, "inplace_param", None) is not None:
            # F.relu(x, inplace=True) and friends: compute out of place, then update x
            uargs, ukwargs, inplace_kw = _strip_inplace(mapped.inplace_param, uargs, ukwargs)
        self.in_symbol = True
        try:
            if not (fell_back or vmap_active[0] or isinstance(func, Symbol)):  # (eager's: dtype_support.py)
                refuse_unsupported_dtypes(func, args, kwargs)
            if any_autocast_enabled():  # checked per call: user code may enter torch.autocast itself
                self.autocast = True
                uargs, ukwargs = autocast_policy(func, uargs, ukwargs)
            if type(mapped) is InplaceOp:
                try:
                    out = self._inplace(func, mapped, args, uargs, ukwargs, kwargs)
                except NotImplementedError:
                    if fell_back or not callable(func) or isinstance(func, Symbol):
                        raise
                    del scope[start:]
                    fell_back = True
                    mapped = fallback_inplace_op(func)
                    out = self._inplace(func, mapped, args, torch_uargs, torch_ukwargs, kwargs)
            else:
                try:
                    out = mapped(*uargs, **ukwargs)
                except NotImplementedError:
                    if isinstance(func, Symbol):
                        raise
                    del scope[start:]
                    fell_back = True
                    out = self._fallback(func, torch_uargs, torch_ukwargs)
                if inplace_kw and isinstance(args[0], TracingTensor) and isinstance(out, TensorProxy):
                    _refuse_update_of_grad_leaf(func, args[0])
                    self._rebind(func, args[0], out)
        except (TracingError, DataDependentControlFlowError, RecursionError):
            raise
        except Exception as e:
            if type(e).__name__ == "GuardOnDataDependentSymNode":
                raise data_dependent_size_error(e, frame=user_frame(2)) from None
            frame = user_frame(2)
            if frame is not None and hasattr(e, "add_note") and not getattr(e, "_thunder_noted", False):
                e.add_note(f"(raised while thunder traced {_func_name(func)} at {describe_location(frame)})")
                e._thunder_noted = True
            raise
        finally:
            self.in_symbol = False
        env = current_size_env()
        if env is not None and env.pending:  # data-dependent sizes of the outputs: read after the op
            from thunder.core.prims import size_of

            for t, d, p in env.take_pending():
                trace.scopes[-1].append(size_of.bind(t, d, output=p))
        if type(mapped) is not InplaceOp and not inplace_kw and out is not None:
            n = getattr(mapped, "grad_args", None)
            out = self._grad_mode(out, uargs, ukwargs) if n is None else self._grad_mode(out, uargs[:n], {})
            if func in _DETACHING and isinstance(out, TensorProxy) and all(out is not a for a in uargs):
                out.requires_grad = False  # detach() and .data: no gradient, so updates of them are no_grad's
        frame = user_frame(2)
        if frame is not None:
            src = (frame.f_code.co_filename, frame.f_lineno)
            if type(out) is RuntimeValueProxy:
                out.where = describe_location(frame)
            bsyms = trace.scopes[-1]
            for i in range(start, len(bsyms)):
                bsyms[i].source = src
            self._name_from_store(frame, out, start)
        if self.log is not None:  # (made into records when asked for: see interpreter_log_records)
            inner = innermost_frame(2, func)
            self.log.append(
                (
                    func,
                    mapped,
                    fell_back,
                    inner.f_code.co_filename if inner else None,
                    inner.f_lineno if inner else None,
                    frame.f_code.co_filename if frame else None,
                    frame.f_lineno if frame else None,
                )
            )
        if type(mapped) is InplaceOp and mapped.returns_self:
            return args[mapped.arg_index]
        if inplace_kw:
            return args[0]
        wrapped = wrap(out)
        aliasing = may_alias(func, mapped, fell_back)
        if not aliasing and type(out) is TensorProxy:
            for a in uargs:
                if a is out:  # (the symbol returned its argument)
                    aliasing = True
                    break
        if not aliasing:
            # a fresh result: eager's strides follow its arguments' (elementwise ops), learned when needed
            defer_result_layout(func, args, kwargs, wrapped)
            return wrapped
        for a in args:  # (a list of tensors too: linalg.multi_dot's result may view a product made inside)
            if isinstance(a, TracingTensor) or (type(a) in (tuple, list) and any(type(b) is TracingTensor for b in a)):
                break
        else:
            return wrapped
        if not fell_back and type(mapped) is Symbol:
            if out is uargs[0] and _returns_itself_when_unchanged(func, args, kwargs):
                return args[0]  # x.float() of a float32 x is x, as in eager
            if _can_defer_shadows(func, mapped, args, wrapped):
                self.pending_shadows.append(_PendingShadows(func, args, kwargs, mapped, uargs, ukwargs, wrapped))
                return wrapped
        mout = run_on_shadows(func, args, kwargs)
        if mout is not None:
            wrapped = adopt_shadows(func, mapped, fell_back, args, uargs, ukwargs, wrapped, mout)
            if (
                fell_back
                and isinstance(out, TensorProxy)
                and any(wrapped is a for a in args)
                and wrapped._thunder_proxy is not out
            ) and (getattr(func, "__name__", "").endswith("_") or kwargs.get("inplace")):
                # an opaque op returning its argument (F.threshold(x, inplace=True)) updated it in place (one
                # returning it unchanged, atleast_2d of a matrix or resolve_conj of a real tensor, did not)
                _refuse_update_of_grad_leaf(func, wrapped)
                self._rebind(func, wrapped, out)
        return wrapped

    def _grad_mode(self, out, uargs, ukwargs):
        """Outputs of a call whose inputs require grad: they require grad too, or with grad disabled
        (``no_grad``, ``inference_mode``, ``set_grad_enabled(False)``) they pass through ``detach``,
        so autodiff sees the region's end as a stop-gradient, as PyTorch's autograd does."""
        inputs = flat_proxies(uargs)
        if ukwargs:
            flat_proxies(ukwargs, inputs)
        for p in inputs:
            if type(p) is TensorProxy and p.requires_grad:
                break
        else:
            return out
        enabled = torch.is_grad_enabled()
        input_ids = {id(p) for p in inputs}
        results = [p for p in flat_proxies(out) if type(p) is TensorProxy and id(p) not in input_ids]
        if enabled or not self.autodiff:
            for p in results:
                p.requires_grad = enabled and p.dtype.kind in ("float", "complex")
            if enabled and not self.autodiff and any(p.requires_grad for p in results):
                from thunder.tracing.errors import describe_location

                frame = user_frame(2)
                where = f" (at {describe_location(frame)})" if frame is not None else ""
                raise TracingError(
                    "the program enables grad (torch.enable_grad or set_grad_enabled(True)) inside a call made under "
                    f"torch.no_grad(){where}; thunder does not differentiate such a program: call it with grad "
                    "enabled, or run that part outside thunder.jit"
                )
            return out
        _check_hidden_function_apply()
        from thunder.torch import detach

        trace = self.trace
        mapping = {}
        for p in results:
            p.requires_grad = False
            if p.dtype.kind in ("float", "complex") and p.name not in mapping:
                mapping[p.name] = d = detach.record(trace, (p,), {})
                d.requires_grad = False
        return swap_proxies(out, mapping) if mapping else out

    def _unwrap_inputs(self, x):
        t = type(x)
        if t is TracingTensor:
            return self._current_value(x)
        if t is tuple or t is list:  # the common case, walked here: a call's arguments
            out = [self._unwrap_inputs(y) if type(y) not in ATOMIC_TYPES else y for y in x]
            return out if t is list else tuple(out)
        if t is dict:
            return {k: self._unwrap_inputs(y) if type(y) not in ATOMIC_TYPES else y for k, y in x.items()}
        if t in ATOMIC_TYPES:
            return x
        return tree_map(self._unwrap_input_leaf, x)

    def _unwrap_input_leaf(self, x):
        if type(x) is RuntimeValueProxy:
            x.refuse("pass to a torch call")
        if isinstance(x, torch.Tensor):
            if isinstance(x, TracingTensor):
                return self._current_value(x)
            return self._current_value(self.outside_tensor(x))
        return x

    def _current_value(self, x: TracingTensor) -> TensorProxy:
        owner = x._tt_owner
        if owner is not self and owner is not None:
            raise TracingError(
                "a thunder stand-in tensor from an earlier trace was used: a tensor created inside a jitted "
                "function was stored in an object that outlives the call (for example a cache that allocates "
                "its buffers lazily on first use). Create such tensors before calling the jitted function."
            )
        if x._tt_multi_view is not None or x._tt_unrecorded_layout is not None:
            self.multi_view_read = True
        return x._thunder_proxy

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
                _refuse_update_of_grad_leaf(func, wrapper)
            self._rebind(func, wrapper, value, args, kwargs, bumps=op.mutated_args is None)
        return out

    def _stand_ins_of_outside(self, x):
        t = type(x)
        if t is tuple or t is list:
            return t(self._stand_ins_of_outside(y) for y in x)
        return self.outside_tensor(x) if t is not TracingTensor and isinstance(x, torch.Tensor) else x

    def outside_tensor(self, t: torch.Tensor) -> TracingTensor:
        """The stand-in of a real tensor from outside the inputs (a global, a closure's, a module's that is not the
        one jitted): an input of the program (``_InputBuilder.captured``)."""
        captured = self.inputs.captured(t)
        self.input_names.add(captured._thunder_proxy.name)
        return captured

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
        if wrapper._tt_view is None:
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
        wrapper._tt_meta = new_meta
        wrapper._tt_value = value
        # (outside inference_mode: there, assigning .data reaches the dispatcher's shallow-copy check with the stand-ins)
        with torch._C.DisableTorchFunction(), torch.inference_mode(False):
            wrapper.data = TracingTensor(value)

    # ---------------------------------------------------------------- ops without a symbol
    def _fallback(self, func, args, kwargs):
        sym = fallback_symbol(func)
        return sym(*args, **kwargs)

    # ---------------------------------------------------------------- names from the user's variables
    def _name_from_store(self, frame, out, start: int) -> None:
        key = (id(frame.f_code), frame.f_lasti)
        pending = self._pending_name
        if pending is not None and pending[0] != key:
            self._apply_name(pending[1], pending[2])
            self._pending_name = None
        if not isinstance(out, TensorProxy) or len(self.trace.scopes[-1]) <= start:
            return
        if out.name in self.input_names:
            return
        name = self._store_names.get(key, False)
        if name is False:
            name = _stored_name(frame.f_code, frame.f_lasti)
            self._store_names[key] = name
        if name is not None:
            self._pending_name = (key, out, name)

    def _apply_name(self, proxy: TensorProxy, name: str) -> None:
        names = self.trace.names
        if name in names or not name.isidentifier() or name.startswith("_"):
            return
        names.discard(proxy.name)
        names.add(name)
        proxy.name = name

    def flush_shadows(self) -> None:
        """Runs the deferred shadow runs of view ops (before an in-place update)."""
        pending = self.pending_shadows
        for p in pending:
            p.resolve()
        pending.clear()

    def finish(self) -> None:
        # deferred shadow runs of views no update reached are not needed: what reads views after tracing
        # (the outputs' checks) resolves its own through view_of
        self.pending_shadows.clear()
        if self._pending_name is not None:
            self._apply_name(self._pending_name[1], self._pending_name[2])
            self._pending_name = None
