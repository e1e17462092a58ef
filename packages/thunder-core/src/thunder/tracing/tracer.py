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
    specialize,
)
from thunder.core.trace import TraceCtx
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.torch.signatures import bind_torch_kwargs, input_by_position
from thunder.tracing import autograd_queries, version_counters
from thunder.tracing.attention_kernels import eager_attention_kernel, enabled_kernels
from thunder.tracing.autocast import any_autocast_enabled, autocast_policy
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
    _strip_inplace,
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
from thunder.tracing.matmul_paths import matmul_returning_a_view, unfolded_product_of_nothing
from thunder.tracing.multi_views import mark_multi_views, refuse_rebased_use
from thunder.tracing.numpy_arrays import FROM_ARRAY, TracedArray, array_of, tensor_of
from thunder.tracing.out_arguments import call_with_out
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
    unwrap,
    wrap,
)
from thunder.tracing.tracing_tensor import (
    _current_tracer as _current_tracer,
)
from thunder.tracing.tracing_tensor import (
    _TracingMode as _TracingMode,
)
from thunder.tracing.updates import UpdateRecorder
from thunder.tracing.view_refusals import refuse_view_eager_refuses
from thunder.tracing.views import (
    _DETACHING,
    _LAYOUT_QUERIES,
    _SIZE_QUERIES,
    _can_defer_shadows,
    _check_hidden_function_apply,
    _PendingShadows,
    _refuse_update_of_grad_leaf,
    _returns_itself_when_unchanged,
    _symbolic_size_query,
    adopt_shadows,
    eager_arguments,
    layout_query,
    may_alias,
    run_on_shadows,
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


_SDPA = torch.nn.functional.scaled_dot_product_attention


def _holds_outside_tensor(x) -> bool:
    """Whether ``x`` is, or is a list or tuple holding, a tensor that is no stand-in (from outside the inputs)."""
    t = type(x)
    if t is tuple or t is list:
        return any(type(y) is not TracingTensor and isinstance(y, torch.Tensor) for y in x)
    return t is not TracingTensor and isinstance(x, torch.Tensor)


class Tracer(UpdateRecorder):
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
            # eager's dtype refusals (dtype_support.py); not inside thunder's vmap, whose batched stand-ins a plain
            # probe call would see unbatched (also for a fallback, which runs eager's own call, but only where its
            # result is used: torch.heaviside of complex tensors raises in eager used or not)
            if not (vmap_active[0] or isinstance(func, Symbol)):
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
            ) and (_named_inplace(getattr(func, "__name__", "")) or kwargs.get("inplace")):
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


def _named_inplace(name: str) -> bool:
    """Whether ``name`` is an in-place op's (``relu_``, ``__iadd__``), not another dunder's (``__get__``, which reads
    ``x.real``: of a real ``x``, ``x`` itself)."""
    return name.endswith("_") and (not name.endswith("__") or name.startswith("__i"))
