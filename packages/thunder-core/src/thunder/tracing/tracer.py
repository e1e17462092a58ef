"""The tracing front end: runs the user's Python on stand-in tensors and records torch-level calls.

User code sees ``TracingTensor``s: real ``torch.Tensor`` subclasses (so ``isinstance``, ``.shape``,
``.dtype``, ``.device`` behave) that hold a ``TensorProxy``. Every torch call, whether through a
tensor argument or a factory function under the tracing ``TorchFunctionMode``, reaches
``Tracer.handle``, which maps it to a torch-language symbol (or an opaque fallback run by
PyTorch) and records it into the trace.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import os
import warnings
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from thunder.core import devices, dtypes
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.symbol import ATOMIC_TYPES, Symbol, flat_proxies, swap_proxies
from thunder.core.symbolic import current_size_env, has_symbolic, hint, hints, size_env_of, specialize
from thunder.core.trace import TraceCtx
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.torch.signatures import bind_torch_kwargs
from thunder.tracing.autocast import any_autocast_enabled, autocast_policy
from thunder.tracing.autograd_function import _no_grad_update, patch_function_apply, value_update_symbol
from thunder.tracing.errors import (
    TracingError,
    data_dependent_error,
    data_dependent_size_error,
    describe_location,
    innermost_frame,
    user_frame,
)
from thunder.tracing.rng import patched_rng
from thunder.tracing.vmap import batched_call, has_batched, patched_vmap, vmap_active

__all__ = ["TracingTensor", "Tracer", "wrap", "unwrap"]

T = torch.Tensor
_current_tracer: list = [None]


class TracingTensor(torch.Tensor):
    """A tensor-like stand-in seen by user code while tracing; ``_thunder_proxy`` is its current value."""

    # per-instance state, with the class holding the defaults (a stand-in is made for every op's result)
    # (root wrapper, derivation steps or None) when this tensor is a view of another; steps None:
    # derived from the root through the shadows' strides (see the "views" section)
    _tt_view = None
    _tt_seen = 0  # the base's version this view's value was derived at
    _tt_version = 0  # bumped by every in-place update (views of this tensor re-derive lazily)
    _tt_meta = None  # the shadow: a meta tensor with eager's sizes, strides and storage (lazy)
    _tt_pending = None  # the view op whose shadow run is deferred until something needs it (_PendingShadows)
    _tt_nondiff = False  # a view through detach()/.data: updates through it are invisible to autograd
    _tt_former = None  # its elements before an in-place op changed its sizes or strides (t_, unsqueeze_)
    _tt_grad = None  # a detach() output updated with values that require grad: its gradient path
    _tt_layout_of = None  # an input's real tensor, until its shadow is made from it (input_shadow)
    _tt_grad_leaf = False  # an input that is a leaf requiring grad (eager refuses to update it in place)

    @staticmethod
    def __new__(cls, proxy: TensorProxy):
        t = torch.Tensor._make_wrapper_subclass(
            cls,
            hints(proxy.shape),  # symbolic sizes: the wrapper has the traced call's sizes
            dtype=proxy.dtype.torch_dtype,
            device=proxy.device._torch_device,
            requires_grad=proxy.requires_grad and proxy.dtype.kind in ("float", "complex"),
        )
        t._tt_value = proxy
        t._tt_owner = _current_tracer[-1]  # the tracer that made it (None: an input, made before tracing)
        return t

    @property
    def _thunder_proxy(self) -> TensorProxy:
        """The current value; a view whose base was updated in place re-derives itself from the base."""
        view = self._tt_view
        if view is not None:
            base = view[0]
            if base._tt_view is not None:
                # the root changed its sizes or strides in place (t_, unsqueeze_): this view's elements are
                # those of its former layout
                base = base._tt_former
                view = self._tt_view = (base, view[1])
                self._tt_seen = -1
            if base._tt_version != self._tt_seen:
                if view[1] is None:
                    value = _derive_strided(base, self)
                else:
                    value = _derive_view(base._tt_value, view[1])
                if self._tt_nondiff:
                    value = _family_gradient(self, value)
                elif base._tt_value.requires_grad and value.dtype.kind in ("float", "complex"):
                    value.requires_grad = True  # (recorded as prims, which leave the flag unset)
                self._tt_value = value
                self._tt_seen = base._tt_version
        return self._tt_value

    @_thunder_proxy.setter
    def _thunder_proxy(self, value: TensorProxy) -> None:
        self._tt_value = value

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        tracer = _current_tracer[-1]
        if tracer is None:
            raise TracingError(
                "a thunder stand-in tensor escaped the traced function (stored in a global or an attribute?) "
                f"and was used with {getattr(func, '__name__', func)} after tracing ended"
            )
        return tracer.handle(func, args, kwargs or {})

    def set_(self, *args, **kwargs):
        # Tensor.set_ skips __torch_function__: route it to the tracer like every other call
        return torch.overrides.handle_torch_function(T.set_, (self, *args), self, *args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise TracingError(f"internal error: {func} reached PyTorch's dispatcher with a thunder stand-in tensor")

    def __repr__(self, *, tensor_contents=None):
        p = self._thunder_proxy
        return f'TracingTensor({p.name}: "{p.type_string()}")'


# type(x).__name__ and x.__class__.__name__ in user code read "Tensor", as for the tensor it stands for.
# (type(x) itself stays the stand-in's class: a __class__ property answering torch.Tensor would run on every
# isinstance(x, C) that fails, about 0.7 us each, all over tracing)
TracingTensor.__name__ = "Tensor"


def _type_string(t: torch.Tensor) -> str:
    """What ``t.type()`` returns in eager for a tensor of ``t``'s dtype and device ("torch.cuda.FloatTensor")."""
    with torch._C.DisableTorchFunction():
        name = torch.empty((), dtype=t.dtype, device="meta").type()  # "torch.meta.FloatTensor"
    device = t.device.type
    return name.replace("torch.meta.", "torch." if device == "cpu" else f"torch.{device}.", 1)


class _TracingMode(TorchFunctionMode):
    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer
        self._function_apply = patch_function_apply()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.tracer.handle(func, args, kwargs or {})

    def __enter__(self):
        # torch.autograd.Function.apply is not a torch function, and torch.vmap inside the traced code
        # batches stand-in tensors (thunder/tracing/vmap.py): both are patched while tracing
        self._vmap = patched_vmap()
        self._patches = contextlib.ExitStack()
        self._patches.enter_context(self._function_apply)
        self._patches.enter_context(self._vmap)
        self._patches.enter_context(patched_rng())
        try:
            return super().__enter__()
        except BaseException:
            self._patches.close()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._patches.__exit__(*exc)


def unwrap(x):
    """TracingTensors inside ``x`` (any pytree) replaced by their proxies."""
    if type(x) is TracingTensor:
        return x._thunder_proxy
    return tree_map(_unwrap_leaf, x)


def _unwrap_leaf(x):
    return x._thunder_proxy if isinstance(x, TracingTensor) else x


def wrap(x):
    """Proxies inside ``x`` (any pytree) replaced by TracingTensors (what user code sees)."""
    if isinstance(x, TensorProxy):
        return TracingTensor(x)
    return tree_map(_wrap_leaf, x)


def _wrap_leaf(x):
    if isinstance(x, TensorProxy):
        return TracingTensor(x)
    if isinstance(x, Proxy):
        return x.value if hasattr(x, "value") else x
    return x


# metadata queries are answered from the wrapper itself (its sizes, dtype and device are the proxy's)
_METADATA_NAMES = (
    "shape dtype device requires_grad ndim is_cuda is_cpu is_meta layout is_sparse is_quantized is_nested "
    "is_mkldnn itemsize nbytes is_leaf names"
).split()
_METADATA_METHODS = (
    "size dim ndimension numel nelement is_floating_point is_complex is_signed element_size get_device "
    "is_contiguous stride storage_offset __len__ __hash__ __format__ dim_order"
).split()
_METADATA = {getattr(T, n).__get__ for n in _METADATA_NAMES if hasattr(T, n)} | {
    getattr(T, n) for n in _METADATA_METHODS if hasattr(T, n)
}
_NONE_ATTRIBUTES = {T.grad_fn.__get__, T.grad.__get__, T._base.__get__}

_NUMPY = (
    "convert a tensor to NumPy (NumPy computes on values; the torch function of the same name, such as "
    "x.sum() for np.sum(x.numpy()), traces)"
)
_DATA_DEPENDENT = {
    T.__bool__: "convert a tensor to a Python bool (an `if`, `while`, `and`/`or` or `assert` on a tensor)",
    T.item: "read a tensor's value with .item()",
    T.tolist: "read a tensor's values with .tolist()",
    T.__int__: "convert a tensor to a Python int",
    T.__float__: "convert a tensor to a Python float",
    T.__index__: "use a tensor as a Python index",
    T.__complex__: "convert a tensor to a Python complex",
    T.numpy: _NUMPY,
    T.__array__: _NUMPY,
    T.__contains__: "test membership in a tensor (`x in t`)",
    T.data_ptr: "read a tensor's data pointer",
    T.untyped_storage: "access a tensor's storage",
}

_NOT_TRACEABLE = {
    T.register_hook: (
        "register a gradient hook on a tensor inside the jitted function (the program's backward is one "
        "operation): register it on the output after the call, or use a torch.autograd.Function"
    ),
    torch.autograd.grad: (
        "run torch.autograd.grad inside the jitted function: call it on the outputs after the call, or use "
        "thunder.core.transforms.grad / vjp on the function"
    ),
}


# functions that switch grad mode: run, not recorded (the tracer applies the mode to each call it records)
_GRAD_MODE_SWITCHES = frozenset({torch._C._set_grad_enabled})


class Tracer:
    """Records the user's torch calls into ``trace``."""

    def __init__(self, trace: TraceCtx, *, record_log: bool = True):
        self.trace = trace
        self.in_symbol = False
        self.log: list[tuple] | None = [] if record_log else None  # what was intercepted (interpreter_log_records)
        self.constants: dict[int, TensorProxy] = {}
        # constants the program updates in place: id -> (tensor, stand-in holding its current value)
        self.updated_constants: dict[int, tuple[torch.Tensor, TracingTensor]] = {}
        self._pending_name = None
        self._store_names: dict[tuple[int, int], str | None] = {}
        self.input_names: set[str] = set()
        # whether autocast was on at some call (the program then holds autocast's casts)
        self.autocast = False
        # whether the trace depends on the inputs' layout (read strides, or updated a tensor in place)
        self.layout_read = False
        self.offsets_read = False  # read a storage offset (or traced aliased arguments)
        # autodiff may run on this program: ops run with grad disabled end in a stop-gradient
        self.autodiff = torch.is_grad_enabled()
        self.pending_shadows: list[_PendingShadows] = []
        self.before_layout_change = None  # called once, before an in-place op first changes sizes or strides
        trace.user_call_hook = self.symbol_called

    # ---------------------------------------------------------------- entry points
    def handle(self, func, args, kwargs):
        if func in _METADATA:
            if func in _SIZE_QUERIES and isinstance(args[0], TracingTensor):
                shape = args[0]._thunder_proxy.shape
                if has_symbolic(shape):
                    return _symbolic_size_query(func, shape, args, kwargs)
            if func in _LAYOUT_QUERIES:
                if isinstance(args[0], TracingTensor):  # strides of symbolic sizes: answered as numbers
                    specialize(args[0]._thunder_proxy.shape)
                self.layout_read = True
                self.offsets_read = self.offsets_read or func is T.storage_offset
                return layout_query(func, args, kwargs)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if func in _NONE_ATTRIBUTES:
            return None
        if vmap_active[0] and has_batched(args, kwargs):
            return batched_call(self, func, args, kwargs)
        what = _DATA_DEPENDENT.get(func)
        if what is not None:
            raise data_dependent_error(what, user_frame(2))
        if func in _NOT_TRACEABLE:
            raise TracingError(f"thunder.jit cannot {_NOT_TRACEABLE[func]}\n  {describe_location(user_frame(2))}")
        if func is T.__iter__:
            return iter(self.handle(T.unbind, (args[0], 0), {}))
        if func is T.__repr__ or func is T.__str__:
            return TracingTensor.__repr__(args[0])
        if func is T.requires_grad_:
            return args[0]
        if func is T.type and len(args) == 1 and kwargs.get("dtype") is None and isinstance(args[0], TracingTensor):
            return _type_string(args[0])  # the string for the real tensor, not the stand-in's meta storage
        if func in _GRAD_MODE_SWITCHES:
            # no_grad / enable_grad / set_grad_enabled: switch the mode for real (later calls see it; see _grad_mode)
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        mapped = torch_to_thunder.get(func)
        return self.record_call(func, mapped, args, kwargs)

    def symbol_called(self, sym: Symbol, args, kwargs):
        """A symbol was called at the top level: by the user's code (e.g. a registered operator) or by us."""
        if self.in_symbol:
            return sym.record(self.trace, args, kwargs)
        # called from user code while the tracing mode is active: thunder's own torch calls must not be traced
        with torch._C.DisableTorchFunction():
            return self.record_call(sym, sym, args, kwargs)

    # ---------------------------------------------------------------- recording
    def record_call(self, func, mapped, args, kwargs):
        trace = self.trace
        for a in args:
            if type(a) is not TracingTensor and isinstance(a, torch.Tensor):
                # a tensor from outside the inputs (a global, a closure's): its stand-in, so that its views alias
                # it and updates through them reach it (written back at the program's end), as in eager
                args = tuple(
                    self._updated_constant(a) if type(a) is not TracingTensor and isinstance(a, torch.Tensor) else a
                    for a in args
                )
                break
        scope = trace.scopes[-1]  # the program, or a custom autograd.Function's backward being traced
        # unwrapping may re-derive views (recorded symbols a fallback below must not delete)
        uargs, ukwargs = self._unwrap_inputs(args), self._unwrap_inputs(kwargs)
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
        except (TracingError, RecursionError):
            raise
        except Exception as e:
            if type(e).__name__ == "GuardOnDataDependentSymNode":
                raise data_dependent_size_error(e, frame=user_frame(2)) from None
            frame = user_frame(2)
            if frame is not None and hasattr(e, "add_note") and not getattr(e, "_thunder_noted", False):
                from thunder.tracing.errors import describe_location

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
            out = self._grad_mode(out, uargs, ukwargs)
            if func in _DETACHING and isinstance(out, TensorProxy) and all(out is not a for a in uargs):
                out.requires_grad = False  # detach() and .data: no gradient, so updates of them are no_grad's
        frame = user_frame(2)
        if frame is not None:
            src = (frame.f_code.co_filename, frame.f_lineno)
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
        if aliasing:
            for a in args:
                if isinstance(a, TracingTensor):
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
                ):
                    # an opaque op returning its argument (F.threshold(x, inplace=True)) updated it in place
                    # (or returned it unchanged: atleast_2d of a matrix, conj of a real tensor)
                    if getattr(func, "__name__", "").endswith("_") or kwargs.get("inplace"):
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
        if isinstance(x, torch.Tensor):
            if isinstance(x, TracingTensor):
                return self._current_value(x)
            return self._constant_tensor(x)
        return x

    def _current_value(self, x: TracingTensor) -> TensorProxy:
        owner = x._tt_owner
        if owner is not self and owner is not None:
            raise TracingError(
                "a thunder stand-in tensor from an earlier trace was used: a tensor created inside a jitted "
                "function was stored in an object that outlives the call (for example a cache that allocates "
                "its buffers lazily on first use). Create such tensors before calling the jitted function."
            )
        return x._thunder_proxy

    def _constant_tensor(self, t: torch.Tensor) -> TensorProxy:
        """A real tensor from outside the inputs (a global or closure): a named constant of the trace."""
        updated = self.updated_constants.get(id(t))
        if updated is not None:  # updated in place earlier in the program: its current value
            return updated[1]._thunder_proxy
        p = self.constants.get(id(t))
        if p is None:
            name = self.trace.add_constant(t, "_tensor_constant")
            p = TensorProxy(name, shape=t.shape, dtype=t.dtype, device=t.device, requires_grad=t.requires_grad)
            self.constants[id(t)] = p
        return p

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
                wrapper = self._updated_constant(wrapper)
            if not isinstance(wrapper, TracingTensor):
                raise TracingError(f"{_func_name(func)} updates argument {i} in place, which is not a traced tensor")
            # (an update of the values, not of the sizes: t_, resize_; eager lets a non-differentiable logical op
            # update a leaf that requires grad, as autograd does not record it)
            if value.shape == wrapper._tt_value.shape and _func_name_of(func) not in _HISTORY_KEEPING_UPDATES:
                _refuse_update_of_grad_leaf(func, wrapper)
            self._rebind(func, wrapper, value, args, kwargs)
        return out

    def _updated_constant(self, t: torch.Tensor) -> TracingTensor:
        """The stand-in of a constant tensor (a global, or one held by an object such as a KV cache) that
        the program updates in place; the update is written back into the tensor at the end."""
        entry = self.updated_constants.get(id(t))
        if entry is None:
            wrapper = TracingTensor(self._constant_tensor(t))
            set_input_layout(wrapper, t)
            wrapper._tt_input = False
            wrapper._tt_constant = True
            entry = self.updated_constants[id(t)] = (t, wrapper)
        return entry[1]

    def constant_writes(self) -> list[tuple[TensorProxy, TensorProxy]]:
        """``(final value, constant)`` of every constant updated in place: what the program writes back
        into the tensor at its end."""
        writes = []
        for t, wrapper in self.updated_constants.values():
            original = self.constants[id(t)]
            new = wrapper._thunder_proxy
            if new is not original:
                writes.append((new, original))
        return writes

    def _rebind(self, func, wrapper: TracingTensor, value: TensorProxy, args=(), kwargs=None) -> None:
        """``wrapper`` now holds ``value`` (an in-place update), and so do its aliases."""
        if self.pending_shadows:  # an update reaches the aliases of what it writes: all of them must be known
            self.flush_shadows()
        self._rebind_value(func, wrapper, value, args, kwargs)
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
        if self.autodiff and not torch.is_grad_enabled() and value.dtype.kind in ("float", "complex"):
            # an update under no_grad is invisible to autograd: the tensor keeps the gradient path it had
            value = _no_grad_update(self.trace, old, value)
        # a bool/int result written into a float tensor that requires grad (x.logical_not_(), x.eq_(0)): the
        # tensor still requires grad, as in eager
        nondiff_result = (
            old.requires_grad
            and torch.is_grad_enabled()
            and old.dtype.kind in ("float", "complex")
            and value.dtype.kind not in ("float", "complex")
        )
        if value.dtype is not old.dtype:
            if not _can_cast(value.dtype, old.dtype):
                raise RuntimeError(
                    f"result type {_dtype_title(value.dtype)} can't be cast to the desired output type {_dtype_title(old.dtype)}"
                )
            from thunder.torch import to as ltorch_to

            value = ltorch_to(value, old.dtype.torch_dtype)
        if nondiff_result:
            value = _nondifferentiable_update(self.trace, func, old, value)
        view = wrapper._tt_view
        if view is None:
            wrapper._tt_value = value
            wrapper._tt_version += 1
            return
        name = getattr(func, "__name__", None)
        if name == "copy_" and len(args) > 1 and args[1] is wrapper:
            return  # x.copy_(x) does nothing in eager (even on an expanded x)
        region = _written_region(name, wrapper, args)
        if name not in _UNIFORM_WRITES and _overlaps_itself(region):
            raise RuntimeError(
                f"{_func_name(func)}: unsupported operation: more than one element of the written-to tensor refers "
                "to a single memory location. Please clone() the tensor before performing the operation."
            )
        # an update through a view writes the root; the root's other views re-derive lazily
        base, steps = view
        old_base = base._tt_value
        partial = region is not wrapper._tt_meta and _overlaps_itself(wrapper._tt_meta)
        if partial:
            # x[key] = v on an x whose elements overlap (expand): only x[key]'s elements are written
            part = TracingTensor(torch_to_thunder[T.__getitem__](value, _unwrap_leaf(args[1])))
            part._tt_meta = region
            new_base = _write_strided(base, part, part._tt_value)
        elif steps is None:
            new_base = _write_strided(base, wrapper, value)
        else:
            new_base = _write_view(old_base, steps, value)
        if (
            (old_base.requires_grad or value.requires_grad)
            and not new_base.requires_grad
            and new_base is not value
            and new_base.dtype.kind in ("float", "complex")
        ):
            new_base.requires_grad = True  # (recorded as prims, which leave the flag unset)
        if self.autodiff and wrapper._tt_nondiff and new_base.dtype.kind in ("float", "complex"):
            # written through detach(): the base keeps its gradient path, as in eager
            new_base = _no_grad_update(self.trace, old_base, new_base)
        base._tt_value = new_base
        base._tt_version += 1
        wrapper._tt_value = value
        # (a partly written x whose elements overlap re-derives: other elements show the write too)
        wrapper._tt_seen = -1 if partial else base._tt_version
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
        from thunder.tracing.overlap import overlapping_inputs, update_on_storage

        if not callable(func) or isinstance(func, Symbol):
            return False
        dm = shadow(wrapper)
        sid = _storage_id(dm)
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
        if self.before_layout_change is not None:
            self.before_layout_change()
            self.before_layout_change = None
        if getattr(wrapper, "_tt_constant", False):
            raise NotImplementedError(
                f"{_func_name(func)} changes the sizes or strides of a tensor held outside the function's inputs "
                f"(a global or a closure's); pass the tensor as an argument\n  {describe_location(user_frame(3))}"
            )
        old_meta = shadow(wrapper)
        specialize(value.shape)  # the new layout is learned from the shadows, in numbers
        specialize(wrapper._tt_value.shape)
        with torch._C.DisableTorchFunction():
            old_nbytes = old_meta.untyped_storage().nbytes()
        new_meta = run_on_shadows(func, (old_meta.detach(), *args[1:]), kwargs) if callable(func) else None
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
        with torch._C.DisableTorchFunction():
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


# ---------------------------------------------------------------- views
#
# Which results alias which inputs is PyTorch's answer, not a table of ours: every stand-in carries a
# *shadow*, a tensor on the ``meta`` device with eager's sizes, strides and storage (inputs get their
# real layout), and an op that may alias runs on the shadows. An output that is an input's shadow is
# that input itself (``x.contiguous()`` of a contiguous ``x``); one sharing an input's storage is a
# view of it. A view remembers its root base (a tensor that is not a view) and either the steps
# deriving it from the root (``(symbol, other args, kwargs, output index)``, replayed for registered
# symbols) or ``None``: then it is derived through the shadows' strides (any op, fallbacks included).
# An in-place update of a view writes the root and bumps its version; every view of that root
# re-derives its value on its next use (``TracingTensor._thunder_proxy``), so reads through any alias
# see the update as in eager.

# steps that keep the elements and their order (only the shape changes)
_SAME_ORDER_VIEWS = frozenset("reshape view view_as reshape_as flatten unflatten squeeze unsqueeze detach".split())
# in-place ops that change a tensor's sizes or strides: the shadow is updated by running them
_METADATA_INPLACE = frozenset(
    "unsqueeze_ squeeze_ t_ transpose_ swapdims_ swapaxes_ resize_ resize_as_ set_ as_strided_".split()
)
_SHAPE_GET, _NBYTES_GET = T.shape.__get__, T.nbytes.__get__
_SIZE_QUERIES = frozenset((_SHAPE_GET, T.size, T.numel, T.nelement, T.__len__, _NBYTES_GET))


def _symbolic_size_query(func, shape, args, kwargs):
    """``x.shape``, ``x.size(d)``, ``x.numel()`` of a tensor with symbolic sizes: symbolic answers."""
    if func == _SHAPE_GET:  # (a method-wrapper: compared by equality)
        return torch.Size(shape)
    if func is T.size:
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if dim is None:
            return torch.Size(shape)
        return shape[int(dim)]
    if func is T.__len__:
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        specialize(shape[0])  # len() must be an int
        return hint(shape[0])
    n = 1
    for s in shape:
        n = n * s
    if func == _NBYTES_GET:
        return n * args[0].element_size()
    return n


_LAYOUT_QUERIES = frozenset(getattr(T, n) for n in ("stride", "is_contiguous", "storage_offset", "dim_order"))


def _meta_like(shape, dtype: torch.dtype) -> torch.Tensor:
    with torch._C.DisableTorchFunction():
        return torch.empty(hints(shape), dtype=dtype, device="meta")


def _check_hidden_function_apply() -> None:
    """Raises if the current call runs inside a ``torch.autograd.Function.forward`` that PyTorch's own ``apply``
    called (a reference to ``apply`` taken before tracing): thunder would lose the Function's backward."""
    import sys

    f = sys._getframe(2)
    while f is not None:
        code = f.f_code
        if code.co_argcount and code.co_varnames[0] == "ctx" and code.co_name == "forward":
            ctx = f.f_locals.get("ctx")
            if isinstance(ctx, torch.autograd.function.BackwardCFunction):
                from thunder.tracing.errors import describe_location

                caller = f.f_back
                while caller is not None and caller.f_code.co_filename.startswith(os.path.dirname(torch.__file__)):
                    caller = caller.f_back
                name = ctx._forward_cls.__name__
                raise TracingError(
                    f"{name}.apply was called through a reference taken before thunder traced the program "
                    f"(such as `op = {name}.apply` at import time), so thunder cannot use {name}'s backward "
                    f"(at {describe_location(caller or f)}); call {name}.apply(...) itself in the traced code"
                )
        f = f.f_back


def shadow(w: TracingTensor) -> torch.Tensor:
    """``w``'s shadow (a contiguous one unless an op or the input's layout said otherwise)."""
    if w._tt_pending is not None:
        w._tt_pending.resolve()
    m = w._tt_meta
    if m is None:
        m = input_shadow(w)
        if m is None:
            p = w._tt_value
            m = w._tt_meta = _meta_like(p.shape, p.dtype.torch_dtype)
    return m


def input_shadow(w: TracingTensor) -> torch.Tensor | None:
    """The shadow of an input's stand-in: the real tensor's strides, storage offset and storage size
    (made on first use); None for tensors without a storage (nested, sparse) and for other stand-ins."""
    t = w._tt_layout_of
    if t is not None:
        w._tt_layout_of = None
        if w._tt_meta is not None:  # (given one already: aliased arguments, see alias_of_storage)
            return w._tt_meta
        try:
            with torch._C.DisableTorchFunction():
                n = t.untyped_storage().nbytes() // max(t.element_size(), 1)
                storage = torch.empty((n,), dtype=t.dtype, device="meta")
                w._tt_meta = storage.as_strided(t.shape, t.stride(), t.storage_offset())
        except Exception:  # tensors without a storage
            pass
    return w._tt_meta


def view_of(w: TracingTensor):
    """``(root, steps)`` when ``w`` is a view of ``root`` (see the "views" section), else None."""
    if w._tt_pending is not None:
        w._tt_pending.resolve()
    return w._tt_view


def set_input_layout(w: TracingTensor, t: torch.Tensor) -> None:
    """Gives an input's stand-in the real tensor's layout for its shadow (see ``input_shadow``)."""
    w._tt_layout_of = t
    w._tt_meta = None
    w._tt_input = True
    w._tt_grad_leaf = t.requires_grad and t.is_leaf


def _refuse_update_of_grad_leaf(func, wrapper: TracingTensor) -> None:
    """With grad enabled, eager refuses to update a leaf tensor that requires grad (a parameter, an input
    made with ``requires_grad=True``) or a view of one in place; so does thunder, naming the user's line."""
    if not torch.is_grad_enabled():
        return
    view = view_of(wrapper)
    if wrapper._tt_nondiff:
        return
    root = wrapper if view is None else view[0]
    if root._tt_grad_leaf:
        through_view = view is not None or getattr(func, "__name__", None) == "__setitem__"
        what = "a view of a leaf Variable" if through_view else "a leaf Variable"
        raise RuntimeError(
            f"{what} that requires grad is being used in an in-place operation "
            f"({_func_name(func)}, as in eager)\n  {describe_location(user_frame(3))}"
        )


# in-place ops writing one value everywhere: well defined through a view whose elements overlap
_UNIFORM_WRITES = frozenset(("fill_", "zero_"))
# in-place ops whose new values do not read the tensor's former ones
_OVERWRITES = frozenset(("copy_", "fill_", "zero_"))


def _overlaps_itself(m: torch.Tensor | None) -> bool:
    """Whether two elements of the view ``m`` are one memory location (eager refuses most writes then)."""
    if m is None:
        return False
    with torch._C.DisableTorchFunction():
        overlap = torch._debug_has_internal_overlap(m)
    if overlap != 2:  # 0: no, 1: yes, 2: too hard to tell from the strides alone
        return overlap == 1
    if m.numel() > 1 << 20:
        return False
    with torch._C.DisableTorchFunction():
        positions = torch.arange(m.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(m.shape, m.stride())))
        return torch.as_strided(positions, m.shape, m.stride(), m.storage_offset()).unique().numel() < m.numel()


def _written_region(name: str | None, w: TracingTensor, args) -> torch.Tensor | None:
    """The shadow of the elements an in-place op writes: ``x[key] = v`` writes only ``x[key]`` when that is a view."""
    m = w._tt_meta
    if name == "__setitem__" and len(args) > 1 and m is not None:
        region = run_on_shadows(T.__getitem__, (w, args[1]), {})
        if isinstance(region, torch.Tensor) and _storage_id(region) == _storage_id(m):
            return region
    return m


def alias_of_storage(w: TracingTensor, root: TracingTensor, t: torch.Tensor) -> None:
    """Makes the input stand-in ``w`` (of the real tensor ``t``) a view of ``root``, its storage as a 1-D input."""
    with torch._C.DisableTorchFunction():
        w._tt_meta = shadow(root).as_strided(t.shape, t.stride(), t.storage_offset())
    w._tt_view = (root, None)
    w._tt_seen = root._tt_version


def seed_storage(root: TracingTensor, members: list[TracingTensor]) -> None:
    """Gives the storage ``root`` of aliased arguments ``members`` their elements as its value, so that the
    gradient path of each element is its argument's (the last one covering it, the arguments that require
    grad last). An argument that does not require grad while another one does is an alias made with
    ``detach()``/``.data`` (or under ``no_grad``): updates through it are invisible to autograd, as in eager."""
    grad = [w for w in members if w._tt_value.requires_grad]
    if not grad:
        return
    for w in members:
        w._tt_nondiff = w._tt_nondiff or not w._tt_value.requires_grad
        # the program reads a copy: backward may save it, and writing back into any argument of the group
        # at the program's end changes them all (unseen by the saving pass, which knows one name per write)
        w._tt_value = w._tt_unchanged = recorded_clone(w._tt_value)
    value = root._tt_value
    for w in grad:
        value = _write_strided(root, w, w._tt_value)
        root._tt_value = value
    value.requires_grad = True
    root._tt_unchanged = value  # still the caller's elements: nothing to write back


_DETACHING = frozenset((T.detach, torch.detach, T.data.__get__))


def _changes_layout(func, w: TracingTensor, args, kwargs) -> bool:
    """Whether the metadata-changing in-place ``func`` (``t_``, ``resize_as_`` ...) changes ``w``'s layout."""
    old = shadow(w)
    new = run_on_shadows(func, (old.detach(), *args[1:]), kwargs) if callable(func) else None
    with torch._C.DisableTorchFunction():
        return new is None or (new.shape, new.stride(), new.storage_offset(), _storage_id(new)) != (
            old.shape,
            old.stride(),
            old.storage_offset(),
            _storage_id(old),
        )


def _storage_id(m: torch.Tensor) -> int:
    with torch._C.DisableTorchFunction():  # (the tracing mode may be active: this is a plain meta tensor)
        return m.untyped_storage()._cdata


def may_alias(func, mapped, fell_back: bool) -> bool:
    """Whether the result of ``func`` may alias an argument (asked of the shadows then): fallbacks,
    adapters and symbols tagged ``view`` or ``alias`` (a symbol returning its input proxy is asked too)."""
    if isinstance(func, Symbol):
        return False
    if fell_back or type(mapped) is not Symbol:
        return True
    tags = mapped.tags
    return "view" in tags or "alias" in tags


def _to_shadows(x):
    if isinstance(x, TracingTensor):
        return shadow(x)
    t = type(x)
    if t is torch.SymInt:  # shadows have the traced call's sizes
        return hint(x)
    if t is slice:
        return slice(_to_shadows(x.start), _to_shadows(x.stop), _to_shadows(x.step))
    if t is torch.Size:
        return torch.Size(hints(x))
    if t is tuple or t is list:
        return t(_to_shadows(y) for y in x)
    if t is dict:
        return {k: _to_shadows(v) for k, v in x.items()}
    if isinstance(x, torch.Tensor):
        with torch._C.DisableTorchFunction():
            return x if x.is_meta else torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


class _PendingShadows:
    """A view op's shadow run, deferred: most views are never updated in place nor asked for their layout.

    It runs when one of its outputs' shadows is needed (``shadow``), before any in-place update (which must
    know every alias of what it writes) and for the outputs read after tracing (``view_of``), on the
    arguments as they were at the call: shadows only change through in-place updates, which resolve every
    pending run first. The outputs are held weakly (each holds this record: no reference cycle).
    """

    __slots__ = ("func", "args", "kwargs", "mapped", "uargs", "ukwargs", "outputs", "container")

    def __init__(self, func, args, kwargs, mapped, uargs, ukwargs, wrapped) -> None:
        self.func, self.mapped, self.uargs, self.ukwargs = func, mapped, uargs, ukwargs
        self.args, self.kwargs = _snapshot(args), _snapshot(kwargs)  # (user code may change a list it passed)
        single = type(wrapped) is TracingTensor
        self.container = None if single else type(wrapped)
        outs = (wrapped,) if single else wrapped
        self.outputs = tuple(weakref.ref(w) for w in outs)
        for w in outs:
            w._tt_pending = self

    def resolve(self) -> None:
        refs = self.outputs
        if refs is None:
            return
        self.outputs = None
        outs = [r() for r in refs]
        for w in outs:
            if w is not None:
                w._tt_pending = None
        mout = run_on_shadows(self.func, self.args, self.kwargs)
        if mout is not None:
            wrapped = outs[0] if self.container is None else self.container(outs)
            adopt_shadows(self.func, self.mapped, False, self.args, self.uargs, self.ukwargs, wrapped, mout)


def _snapshot(x):
    t = type(x)
    if t is list:
        return [_snapshot(y) for y in x]
    if t is tuple:
        for y in x:
            if type(y) not in ATOMIC_TYPES and type(y) is not TracingTensor:
                return tuple(map(_snapshot, x))
        return x
    if t is dict:
        return {k: _snapshot(v) for k, v in x.items()}
    return x


# view ops whose eager result is never their argument itself (flatten, contiguous, conj ... may be)
_NEW_TENSOR_VIEWS = frozenset(
    """view reshape __getitem__ expand expand_as broadcast_to transpose swapaxes swapdims permute movedim narrow
    select view_as reshape_as unflatten split split_with_sizes chunk tensor_split hsplit vsplit dsplit unbind
    diagonal squeeze unsqueeze as_strided t unfold""".split()
)


def _can_defer_shadows(func, mapped: Symbol, args, wrapped) -> bool:
    """Whether a registered view op's shadow run can wait: its outputs are fresh tensors (none can be an
    argument itself, which must be known now: a view op that never returns its argument, or different
    shapes) of arguments that are not detached."""
    if "view" not in mapped.tags or func in _DETACHING:
        return False
    if type(wrapped) is TracingTensor:
        outs = (wrapped,)
    elif type(wrapped) in (tuple, list) and all(type(w) is TracingTensor for w in wrapped):
        outs = wrapped
    else:
        return False
    fresh = getattr(func, "__name__", None) in _NEW_TENSOR_VIEWS
    for a in args:
        for w in (a,) if type(a) is TracingTensor else (a if type(a) in (tuple, list) else ()):
            if type(w) is not TracingTensor:
                continue
            if w._tt_nondiff:
                return False
            if fresh:
                continue
            shape = w._tt_value.shape
            for o in outs:
                oshape = o._tt_value.shape
                if len(oshape) == len(shape) and not any(
                    type(d) is int and type(e) is int and d != e for d, e in zip(oshape, shape)
                ):
                    return False  # (the same sizes, or symbolic ones that may be)
    return True


# conversions that return their argument itself when it already has the asked dtype and device
_CONVERSIONS = frozenset(
    getattr(T, n) for n in "to float double half bfloat16 int long short bool byte char type_as cpu".split()
)


def _returns_itself_when_unchanged(func, args, kwargs) -> bool:
    return (
        func in _CONVERSIONS
        and type(args[0]) is TracingTensor
        and "memory_format" not in kwargs
        and not kwargs.get("copy", False)
        and all(type(a) is not bool for a in args[1:])  # (to(dtype, non_blocking, copy) by position)
    )


def run_on_shadows(func, args, kwargs):
    """``func`` run on the arguments' shadows (None when PyTorch cannot run it on ``meta``)."""
    enabled = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)  # cheaper than torch.no_grad() on this path (every view op)
    try:
        with torch._C.DisableTorchFunction(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's call warns itself where eager would
            return func(*_to_shadows(args), **_to_shadows(kwargs))
    except Exception:
        return None
    finally:
        torch._C._set_grad_enabled(enabled)


def adopt_shadows(func, mapped, fell_back: bool, args, uargs, ukwargs, wrapped, mout):
    """Gives ``wrapped`` (the op's result) its shadows and marks the results that alias an argument."""
    by_id: dict[int, TracingTensor] = {}
    by_storage: dict[int, TracingTensor] = {}
    for a in args:
        for w in (a,) if isinstance(a, TracingTensor) else (a if type(a) in (tuple, list) else ()):
            if isinstance(w, TracingTensor):
                m = shadow(w)
                by_id.setdefault(id(m), w)
                by_storage.setdefault(_storage_id(m), w)
    replayable = not fell_back and type(mapped) is Symbol and args and isinstance(args[0], TracingTensor)

    def match(w, m, index):
        if not isinstance(m, torch.Tensor) or isinstance(m, TracingTensor):
            return w
        p = w._tt_value
        if tuple(m.shape) != hints(p.shape) or m.dtype != p.dtype.torch_dtype:
            return w  # our metadata disagrees with PyTorch's: leave it fresh
        src = by_id.get(id(m))
        if src is not None:
            return src  # the op returned its argument itself
        w._tt_meta = m
        src = by_storage.get(_storage_id(m))
        if src is not None:
            step = (mapped, tuple(uargs[1:]), ukwargs, index) if replayable and src is args[0] else None
            _mark_view(w, src, step)
            w._tt_nondiff = src._tt_nondiff or func in _DETACHING
            if w._tt_nondiff:  # the detach() output this view comes from (its own autograd history in eager)
                w._tt_family = w if func in _DETACHING else getattr(src, "_tt_family", None)
        return w

    if isinstance(wrapped, TracingTensor):
        return match(wrapped, mout, None)
    t = type(wrapped)
    if isinstance(wrapped, (tuple, list)) and isinstance(mout, (tuple, list)) and len(wrapped) == len(mout):
        items = [match(w, m, i) if isinstance(w, TracingTensor) else w for i, (w, m) in enumerate(zip(wrapped, mout))]
        if t is tuple or t is list:
            return t(items)
    return wrapped


def _mark_view(x: TracingTensor, base: TracingTensor, step) -> None:
    root, steps = base._tt_view if base._tt_view is not None else (base, ())
    shadow(root)
    x._tt_view = (root, None if steps is None or step is None else steps + (step,))
    x._tt_seen = root._tt_version


def layout_query(func, args, kwargs):
    """``stride()``, ``is_contiguous()``, ``storage_offset()`` answered by the shadow (eager's layout)."""
    with torch._C.DisableTorchFunction():
        return func(shadow(args[0]), *args[1:], **kwargs)


def _strided_index(rm: torch.Tensor, vm: torch.Tensor, device) -> TensorProxy:
    """For each element of the view ``vm``: its index in the row-major flattening of its root ``rm``."""
    from thunder import clang
    from thunder.core import prims

    shape = tuple(vm.shape)
    pos = clang.full(shape, vm.storage_offset() - rm.storage_offset(), device=device, dtype=dtypes.int64)
    for d, (n, s) in enumerate(zip(shape, vm.stride())):
        if n > 1 and s != 0:
            step = prims.iota(n, start=0, step=s, device=device, dtype=dtypes.int64)
            pos = clang.add(pos, prims.broadcast_in_dim(step, shape, (d,)))
    if rm.is_contiguous():
        return pos
    # the root is strided itself: decompose the storage position along its dimensions, largest stride first
    contiguous = [1] * rm.ndim
    for d in range(rm.ndim - 2, -1, -1):
        contiguous[d] = contiguous[d + 1] * rm.shape[d + 1]
    dims = sorted((d for d in range(rm.ndim) if rm.shape[d] > 1), key=lambda d: -rm.stride(d))
    index = None
    for d in dims:
        q = prims.floor_divide(pos, rm.stride(d))
        pos = prims.remainder(pos, rm.stride(d))
        term = clang.mul(q, contiguous[d])
        index = term if index is None else clang.add(index, term)
    return index if index is not None else clang.full(shape, 0, device=device, dtype=dtypes.int64)


def _root_for(root: TracingTensor, view: TracingTensor, value: TensorProxy | None = None):
    """The root's value (or ``value``) and shadow in the view's element type (complex roots of real views as pairs)."""
    rm, vm = shadow(root), shadow(view)
    value = root._tt_value if value is None else value
    if rm.dtype == vm.dtype:
        return value, rm, False
    if rm.is_complex() and vm.dtype == rm.real.dtype:
        with torch._C.DisableTorchFunction():
            rm = torch.view_as_real(rm)
        return fallback_symbol(torch.view_as_real)(value), rm, "real"
    if vm.is_complex() and rm.dtype == vm.real.dtype and rm.is_contiguous() and rm.storage_offset() % 2 == 0:
        # a complex view of a real root: the root's elements as (real, imaginary) pairs
        from thunder import clang

        n = rm.numel() // 2
        with torch._C.DisableTorchFunction():
            storage = torch.empty((rm.storage_offset() // 2 + n,), dtype=vm.dtype, device="meta")
            rm = storage.as_strided((n,), (1,), rm.storage_offset() // 2)
        return fallback_symbol(torch.view_as_complex)(clang.reshape(value, (n, 2))), rm, "complex"
    raise NotImplementedError(
        f"an in-place update through a view that reinterprets {rm.dtype} as {vm.dtype} is not supported"
    )


class _recording_directly:
    """Symbols called here are recorded as they are (not as calls from user code through the tracer)."""

    def __enter__(self):
        from thunder.core.trace import get_tracectx

        self.trace = get_tracectx()
        if self.trace is None:
            raise TracingError("internal error: a view was re-derived outside of tracing")
        self.hook, self.trace.user_call_hook = self.trace.user_call_hook, None

    def __exit__(self, *exc):
        self.trace.user_call_hook = self.hook
        return False


def recorded_clone(p: TensorProxy) -> TensorProxy:
    """A copy of ``p`` recorded into the trace being traced, requiring grad as ``p`` does."""
    from thunder.core import prims

    with _recording_directly():
        copy = prims.clone(p)
    copy.requires_grad = p.requires_grad
    return copy


still_requires_grad = value_update_symbol("still_requires_grad", gradient_to_old=False)


def _still_requires_grad(trace, old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``new``'s values for a tensor that required grad and still does after an in-place update that did not
    read a tensor requiring grad (``x.fill_(1.5)``, ``x.copy_(c)``): its gradient there is zero, as in eager."""
    if still_requires_grad.executor is None:
        from thunder.executors.torchex import ex as torch_ex

        still_requires_grad.executor = torch_ex
    with _recording_directly():
        return still_requires_grad.record(trace, (old, new), {})


# in-place ops PyTorch declares non-differentiable: autograd does not record them, so the updated tensor keeps
# the gradient path it had (comparisons such as eq_ are differentiable, with a zero gradient)
_HISTORY_KEEPING_UPDATES = frozenset(("logical_not_", "logical_and_", "logical_or_", "logical_xor_"))


def _func_name_of(func) -> str | None:
    return getattr(func, "__name__", None)


def _nondifferentiable_update(trace, func, old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``new`` (a bool/int result converted to ``old``'s float dtype) as the value of a tensor that required grad:
    with ``old``'s gradient path after a logical op, with a zero gradient after any other (``eq_``, ``lt_``)."""
    if getattr(func, "__name__", None) in _HISTORY_KEEPING_UPDATES:
        return _no_grad_update(trace, old, new)
    return _still_requires_grad(trace, old, new)


def _family_gradient(view: TracingTensor, value: TensorProxy) -> TensorProxy:
    """The value of a view through ``detach()`` re-derived from its root: no gradient path, or the one its
    detached tensor got from the updates made through it (``_tt_grad``, see ``Tracer._rebind``)."""
    family = getattr(view, "_tt_family", None)
    grad = family._tt_grad if family is not None else None
    if grad is None:
        return _detached(value) if value.requires_grad else value
    if family is not view:
        grad = _derive_strided(family, view, grad)
    from thunder.core.trace import get_tracectx

    with _recording_directly():
        return _no_grad_update(get_tracectx(), grad, value)


def _detached(p: TensorProxy) -> TensorProxy:
    from thunder.core.trace import get_tracectx
    from thunder.torch import detach

    with _recording_directly():
        out = detach.record(get_tracectx(), (p,), {})
    out.requires_grad = False
    return out


def _derive_strided(root: TracingTensor, view: TracingTensor, value: TensorProxy | None = None) -> TensorProxy:
    with _recording_directly():
        return _derive_strided_impl(root, view, value)


def _write_strided(root: TracingTensor, view: TracingTensor, value: TensorProxy) -> TensorProxy:
    with _recording_directly():
        return _write_strided_impl(root, view, value)


def _derive_strided_impl(root: TracingTensor, view: TracingTensor, value: TensorProxy | None = None) -> TensorProxy:
    from thunder import clang
    from thunder.core import prims

    value, rm, _ = _root_for(root, view, value)
    vm = shadow(view)
    # the element positions come from the shadows' numbers: the sizes they depend on become numbers of the trace
    specialize(value.shape)
    specialize(view._tt_value.shape)
    idx = _strided_index(rm, vm, value.device)
    m = idx.numel()
    out = prims.take(clang.reshape(value, (value.numel(),)), clang.reshape(idx, (m,)), 0)
    out = clang.reshape(out, tuple(vm.shape))
    return fallback_symbol(torch.conj_physical)(out) if vm.is_conj() != rm.is_conj() else out


def _write_strided_impl(root: TracingTensor, view: TracingTensor, value: TensorProxy) -> TensorProxy:
    from thunder import clang
    from thunder.core import prims

    base, rm, as_pairs = _root_for(root, view)
    vm = shadow(view)
    specialize(base.shape)  # (as in _derive_strided_impl)
    specialize(value.shape)
    idx = _strided_index(rm, vm, base.device)
    n, m = base.numel(), idx.numel()
    if vm.is_conj() != rm.is_conj():  # a conjugate view (x.mH): the root holds the conjugate
        value = fallback_symbol(torch.conj_physical)(value)
    flat_val = clang.reshape(clang.expand(value, tuple(vm.shape)), (m,))
    out = prims.scatter(clang.reshape(base, (n,)), clang.reshape(idx, (m,)), flat_val, 0)
    out = clang.reshape(out, base.shape)
    if as_pairs == "real":
        return fallback_symbol(torch.view_as_complex)(out)
    if as_pairs == "complex":
        return clang.reshape(fallback_symbol(torch.view_as_real)(out), root._tt_value.shape)
    return out


def _derive_view(x: TensorProxy, steps) -> TensorProxy:
    """Applies a view's derivation steps to ``x`` (the base's current value, or an index tensor)."""
    from thunder.core.trace import get_tracectx

    trace = get_tracectx()
    if trace is None:
        raise TracingError("internal error: a view was re-derived outside of tracing")
    for sym, rest, kwargs, index in steps:
        x = sym.record(trace, (x, *rest), kwargs)
        if index is not None:
            x = x[index]
    return x


def _write_view(base: TensorProxy, steps, value: TensorProxy) -> TensorProxy:
    """``base`` with the elements a view (derived by ``steps``) selects replaced by ``value``."""
    from thunder import clang
    from thunder.core import prims

    if all(step[0].name in _SAME_ORDER_VIEWS for step in steps):
        return clang.reshape(value, base.shape)
    n = base.numel()
    # which element of the base each element of the view is: the view of an iota
    idx = clang.reshape(prims.iota(n, start=0, step=1, device=base.device, dtype=dtypes.int64), base.shape)
    vidx = _derive_view(idx, steps)
    m = vidx.numel()
    flat_idx = clang.reshape(vidx, (m,))
    flat_val = clang.reshape(clang.expand(value, vidx.shape), (m,))
    out = prims.scatter(clang.reshape(base, (n,)), flat_idx, flat_val, 0)
    return clang.reshape(out, base.shape)


def _strip_inplace(position: int, args, kwargs):
    """``args``/``kwargs`` with the ``inplace`` flag (at ``position`` or by keyword) set to False."""
    flag = False
    if "inplace" in kwargs:
        flag = bool(kwargs["inplace"])
        kwargs = {**kwargs, "inplace": False}
    elif len(args) > position:
        flag = bool(args[position])
        args = (*args[:position], False, *args[position + 1 :])
    return args, kwargs, flag


def _can_cast(src: dtypes.dtype, dst: dtypes.dtype) -> bool:
    return dtypes.kind_rank(src) <= dtypes.kind_rank(dst)


_SCALAR_TYPE_NAMES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def _dtype_title(d: dtypes.dtype) -> str:
    """PyTorch's name for a dtype in error messages (``Float``, ``Long``)."""
    name = str(d.torch_dtype).replace("torch.", "")
    return _SCALAR_TYPE_NAMES.get(name, name.capitalize())


@functools.lru_cache(maxsize=4096)
def _instructions(code):
    ins_list = list(dis.get_instructions(code))
    return {ins.offset: i for i, ins in enumerate(ins_list)}, ins_list


def _stored_name(code, lasti: int) -> str | None:
    """The variable the instruction after ``lasti`` stores to (``x = f(...)``), if any."""
    try:
        index, ins = _instructions(code)
    except Exception:
        return None
    i = index.get(lasti)
    if i is None:
        return None
    for nxt in ins[i + 1 : i + 4]:
        if nxt.opname in ("CACHE", "PRECALL", "EXTENDED_ARG", "NOP"):
            continue
        if nxt.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"):
            return nxt.argval
        return None
    return None


def interpreter_log_records(log: list[tuple]) -> list[dict[str, Any]]:
    """The tracer's log of intercepted calls as the records ``thunder.last_interpreter_log`` returns."""
    records = []
    for func, mapped, fell_back, file, line, user_file, user_line in log:
        if fell_back:
            symbol = "fallback"
        elif isinstance(mapped, Symbol):
            symbol = mapped.name
        elif type(mapped) is InplaceOp and isinstance(mapped.fn, Symbol):
            symbol = mapped.fn.name
        else:
            symbol = "adapter"
        records.append(
            {
                "kind": "symbol" if isinstance(func, Symbol) else "call",
                "fn": _func_name(func),
                "symbol": symbol,
                "file": file,
                "line": line,
                "user_file": user_file,
                "user_line": user_line,
            }
        )
    return records


def _func_name(func) -> str:
    if isinstance(func, Symbol):
        return func.name
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if name is None:
        owner = getattr(func, "__self__", None)
        name = f"Tensor.{getattr(owner, '__name__', '?')}"
    module = getattr(func, "__module__", None)
    if module and module.startswith("torch") and not name.startswith("Tensor"):
        return f"{module.replace('torch._C._nn', 'torch.nn.functional').replace('torch._C._VariableFunctions', 'torch')}.{name}"
    name = name.replace("TensorBase.", "Tensor.")
    return name if name.startswith(("Tensor", "torch")) else f"torch.{name}"


# ---------------------------------------------------------------- opaque fallback symbols

_fallback_cache: dict[Any, Symbol] = {}


def _to_meta(x, fake: bool = False):
    """Meta tensors for an opaque op's proxies; with ``fake``, fake tensors with the proxies' symbolic sizes (made
    inside the size environment's FakeTensorMode)."""
    if isinstance(x, TensorProxy):
        if fake:
            return torch.empty(x.shape, dtype=x.dtype.torch_dtype, device=x.device._torch_device)
        specialize(x.shape)  # (no symbolic sizes here: the op's output sizes are learned as numbers)
        return torch.empty(hints(x.shape), dtype=x.dtype.torch_dtype, device="meta")
    if type(x) is torch.SymInt:
        if not fake:
            specialize(x)
            return hint(x)
        return x
    if isinstance(x, (tuple, list)):
        return type(x)(_to_meta(y, fake) for y in x)
    if isinstance(x, dict):
        return {k: _to_meta(v, fake) for k, v in x.items()}
    if isinstance(x, devices.Device):
        return x._torch_device
    return x


def _result_device(args, kwargs):
    from thunder.core.symbol import flat_proxies

    for p in flat_proxies((args, kwargs)):
        if isinstance(p, TensorProxy):
            return p.device
    d = kwargs.get("device")
    if d is not None:
        return devices.to_device(d)
    return devices.to_device(torch.get_default_device())


def _from_meta(x, device):
    if isinstance(x, torch.Tensor):
        return TensorProxy(shape=x.shape, dtype=x.dtype, device=device, requires_grad=False)
    if isinstance(x, (tuple, list)):
        return (
            type(x)(_from_meta(y, device) for y in x)
            if type(x) in (tuple, list)
            else type(x)(tuple(_from_meta(y, device) for y in x))
        )
    return x


def _first_symbolic_size(x):
    """A symbolic size in ``x`` (the proxies' shapes included), or None."""
    if isinstance(x, TensorProxy):
        return next((s for s in x.shape if type(s) is torch.SymInt), None)
    if type(x) is torch.SymInt:
        return x
    if isinstance(x, (tuple, list)):
        x = iter(x)
    elif isinstance(x, dict):
        x = iter(x.values())
    else:
        return None
    for y in x:
        found = _first_symbolic_size(y)
        if found is not None:
            return found
    return None


def _is_inplace_name(name: str) -> bool:
    return (
        name.endswith("_")
        and not name.endswith("__")
        or name in ("__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__")
    )


def fallback_inplace_op(func) -> InplaceOp:
    """An in-place torch callable run opaquely: a functional copy-and-update, then the tracer rebinds."""
    sym = fallback_symbol(func, force_inplace=True)
    return InplaceOp(sym)


def _run_tracking_grad(func, margs, mkwargs):
    """Runs ``func`` on meta inputs whose floating tensors require grad, so each output's ``requires_grad``
    says whether PyTorch's autograd differentiates it (``native_layer_norm``'s statistics and ``linalg.lu``'s
    pivots it does not). None when there is no floating input or the op refuses such inputs."""
    leaves = []

    def grad_leaf(x):
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            leaf = x.detach().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        if isinstance(x, (tuple, list)):
            return type(x)(grad_leaf(y) for y in x)
        return x

    gargs = grad_leaf(margs)
    gkwargs = {k: grad_leaf(v) for k, v in mkwargs.items()}
    if not leaves:
        return None
    try:
        with torch.enable_grad():
            return func(*gargs, **gkwargs)
    except Exception:
        pass
    # the op refuses some input that requires grad (native_batch_norm's running statistics): one run per
    # input, only that one requiring grad (through a non-leaf, so in-place updates of it are allowed); an
    # output is differentiable when some run makes it require grad
    combined = template = None
    for i in range(len(leaves)):
        plain = {id(x): x.detach() for j, x in enumerate(leaves) if j != i}
        plain[id(leaves[i])] = leaves[i].clone()
        swap = lambda x: plain.get(id(x), x) if isinstance(x, torch.Tensor) else x  # noqa: E731
        try:
            with torch.enable_grad():
                result = func(*tree_map(swap, gargs), **{k: tree_map(swap, v) for k, v in gkwargs.items()})
        except Exception:
            continue
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if combined is None:
            combined, template = flat, result
        elif len(flat) == len(combined):
            combined = [r if isinstance(r, torch.Tensor) and r.requires_grad else c for c, r in zip(combined, flat)]
    if not isinstance(template, (tuple, list)):
        return combined[0] if combined else None
    return type(template)(combined)  # the structure of the op's result (tuple, list or return_types)


def _mark_nondifferentiable_outputs(result, out) -> None:
    """Marks the proxies in ``out`` whose meta counterpart in ``result`` has no gradient path."""
    flat_result = result if isinstance(result, (tuple, list)) else (result,)
    flat_out = out if isinstance(out, (tuple, list)) else (out,)
    if len(flat_result) != len(flat_out):
        return
    for r, o in zip(flat_result, flat_out):
        if isinstance(r, torch.Tensor) and isinstance(o, TensorProxy) and not r.requires_grad:
            o.nondifferentiable = True


def fallback_symbol(func, *, force_inplace: bool = False) -> Symbol:
    """An opaque symbol for a torch callable with no torch-language symbol: metadata from the meta device."""
    key = (func, force_inplace)
    sym = _fallback_cache.get(key)
    if sym is not None:
        return sym
    from thunder.executors.torchex import torch_path

    path = torch_path(func)
    raw_name = getattr(func, "__name__", None) or "op"
    inplace = force_inplace or _is_inplace_name(raw_name)
    if inplace:
        base = (path[0] if path else raw_name).replace(".", "_").replace("__", "_").strip("_")
        print_name, imports = f"functional_{base}", ()

        def run(a, *args, **kwargs):
            a = a.clone()
            func(a, *args, **kwargs)
            return a

        call_ctx = {print_name: run}
    elif path is not None:
        print_name, imports, call_ctx = path[0], (path[1],), None
    else:
        print_name = "opaque_" + "".join(c if c.isalnum() else "_" for c in raw_name)
        imports, call_ctx = (), {print_name: func}

    def meta(*args, **kwargs):
        symbolic = _first_symbolic_size((args, kwargs))
        env = size_env_of(symbolic) if symbolic is not None else None
        if env is not None:
            with env.fake_mode():
                out = _opaque_meta(args, kwargs, True)
            env.bind_data_dependent(out)
            return out
        try:
            return _opaque_meta(args, kwargs, False)
        except TracingError:
            env = current_size_env()
            if env is None:
                raise
            # no meta kernel, or sizes that depend on the values (nonzero, a boolean mask): PyTorch's fake tensors
            # give data-dependent sizes as symbols, read from the output at run time
            try:
                with env.fake_mode():
                    out = _opaque_meta(args, kwargs, True)
            except Exception:
                out = None
            if out is None:
                raise
            env.bind_data_dependent(out)
            return out

    def _opaque_meta(args, kwargs, fake: bool):
        margs, mkwargs = _to_meta(args, fake), _to_meta(kwargs, fake)
        tracked = _run_tracking_grad(func, margs, mkwargs) if not inplace and torch.is_grad_enabled() else None
        if tracked is not None:
            out = _from_meta(tracked, _result_device(args, kwargs))
            _mark_nondifferentiable_outputs(tracked, out)
            return out
        try:
            with torch.no_grad():
                if inplace:
                    target = margs[0].clone()
                    func(target, *margs[1:], **mkwargs)
                    result = target
                else:
                    result = func(*margs, **mkwargs)
        except Exception as e:
            detail = str(e).split("\n")[0]
            raise TracingError(
                f"thunder has no symbol for {print_name} and could not run it on the meta device to learn its "
                f"output's shape ({type(e).__name__}: {detail}). If its output shape depends on tensor values "
                "(nonzero, unique, boolean masks), it cannot be traced; otherwise please report it.\n"
                f"  {describe_location(user_frame(2))}"
            ) from e
        return _from_meta(result, _result_device(args, kwargs))

    sym = Symbol(
        print_name,
        meta,
        id=f"opaque::{print_name}",
        is_prim=True,
        print_name=print_name,
        imports=imports,
        call_ctx=call_ctx,
        tags=("opaque",),
    )
    sym.torch_fn = func
    sym.inplace = inplace
    from thunder.executors.torchex import ex as torch_ex

    sym.executor = torch_ex
    _fallback_cache[key] = sym
    if inplace and not force_inplace:
        torch_to_thunder.setdefault(func, InplaceOp(sym))
    return sym
