"""The tracing tensor: the ``torch.Tensor`` stand-in user code sees while tracing, and wrap/unwrap."""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.symbolic import hints
from thunder.tracing.autograd_function import patch_function_apply
from thunder.tracing.errors import (
    TracingError,
)
from thunder.tracing.rng import patched_rng
from thunder.tracing.vmap import patched_vmap

T = torch.Tensor

_current_tracer: list = [None]


class TracingTensor(torch.Tensor):
    """A tensor-like stand-in seen by user code while tracing; ``_thunder_proxy`` is its current value.

    ``x.__class__`` is the class of the tensor it stands for (``torch.Tensor``; ``nn.Parameter`` for a
    parameter; the input's own class), so ``x.__class__ is torch.Tensor`` answers as in eager. ``type(x)``
    is this class, except in the traced user code, whose ``type`` answers ``x.__class__`` while tracing
    (``type_shadow.py``, docs/sharp_edges.md).
    """

    # per-instance state, with the class holding the defaults (a stand-in is made for every op's result)
    # (root wrapper, derivation steps or None) when this tensor is a view of another; steps None:
    # derived from the root through the shadows' strides (see the "views" section)
    _tt_view = None
    _tt_seen = 0  # the base's version this view's value was derived at
    _tt_version = 0  # bumped by every in-place update (views of this tensor re-derive lazily)
    _tt_meta = None  # the shadow: a meta tensor with eager's sizes, strides and storage (lazy)
    _tt_pending = None  # the view op whose shadow run is deferred until something needs it (_PendingShadows)
    _tt_layout_pending = None  # the run giving this result eager's strides, until needed (result_layouts.py)
    _tt_nondiff = False  # a view through detach()/.data: updates through it are invisible to autograd
    _tt_former = None  # its elements before an in-place op changed its sizes or strides (t_, unsqueeze_)
    _tt_grad_geometry = None  # (root, former shadows) bounding its gradient after as_strided_ (restrided_gradients.py)
    _tt_bounds = ()  # layouts bounding its gradient, of the views torch.as_strided read past (views.gradient_bounds)
    _tt_grad = None  # a detach() output updated with values that require grad: its gradient path
    _tt_layout_of = None  # an input's real tensor, until its shadow is made from it (input_shadow)
    _tt_grad_leaf = False  # an input that is a leaf requiring grad (eager refuses to update it in place)
    _tt_grad_leaf_view = False  # an input that is a view of a leaf requiring grad (likewise)
    _tt_class = torch.Tensor  # what x.__class__ answers: the class of the tensor it stands for
    _tt_counter = None  # [eager's bumps of its version counter while tracing], shared by views (version_counters)
    _tt_counter_of = None  # the arguments of the view op that made it, until its counter is decided
    _tt_leaf_view = False  # a view made without grad of a tensor requiring grad: a leaf that requires grad
    _tt_out_resize = False  # being resized as an out= tensor (by the kernel, not autograd's resize_: out_arguments.py)
    _tt_unrecorded_layout = None  # the line that changed its layout in place under no_grad, requiring grad
    _tt_multi_view = None  # (op name, output index): an output of a view op returning several views (x.unbind())
    _tt_made_leaf = None  # the user's line of the requires_grad_() that made this computed tensor a leaf requiring grad
    _tt_inference = False  # an input that is an inference tensor (updated in place under inference_mode only)
    _tt_copied = False  # a view op's result that eager made a tensor of its own (hidden_bases.py)
    _tt_uncopied = None  # an output's value before the step collecting outputs copied it (views made earlier view that)

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
                    value = _views._derive_strided(base, self, _restrided.root_value_for(self, base))
                else:
                    value = _views._derive_view(base._tt_value, view[1])
                if self._tt_nondiff:
                    value = _views._family_gradient(self, value)
                elif base._tt_value.requires_grad and value.dtype.kind in ("float", "complex"):
                    value.requires_grad = True  # (recorded as prims, which leave the flag unset)
                self._tt_value = value
                self._tt_seen = base._tt_version
                if self._tt_multi_view is not None:
                    _multi_views.note_rebased_multi_view(self, value)
        return self._tt_value

    @_thunder_proxy.setter
    def _thunder_proxy(self, value: TensorProxy) -> None:
        self._tt_value = value

    @property
    def __class__(self):
        # (a property: isinstance(x, C) reads it when the type check fails, about 0.3 us each)
        return self._tt_class

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


# type(x).__name__ in user code reads "Tensor", as for the tensor it stands for
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
        self._patches.enter_context(_numpy_arrays.patched_from_numpy())
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
    "is_mkldnn itemsize nbytes names"
).split()
_METADATA_METHODS = (
    "size dim ndimension numel nelement is_floating_point is_complex is_signed element_size get_device "
    "is_contiguous stride storage_offset __len__ __hash__ __format__ dim_order"
).split()
_METADATA = {getattr(T, n).__get__ for n in _METADATA_NAMES if hasattr(T, n)} | {
    getattr(T, n) for n in _METADATA_METHODS if hasattr(T, n)
}
_NONE_ATTRIBUTES = {T.grad.__get__}

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


# views.py and numpy_arrays.py import TracingTensor from here; TracingTensor reads views' derivations and the
# tracing mode patches torch.from_numpy (numpy_arrays) at run time (imported last, as modules, so either module
# may be imported first)
import thunder.tracing.multi_views as _multi_views  # noqa: E402
import thunder.tracing.numpy_arrays as _numpy_arrays  # noqa: E402
import thunder.tracing.restrided_gradients as _restrided  # noqa: E402
import thunder.tracing.views as _views  # noqa: E402
