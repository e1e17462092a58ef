"""Views and aliasing while tracing: shadows (meta tensors with eager's layout), view derivation and write-through."""

from __future__ import annotations

import os
import warnings
import weakref

import torch

from thunder.core import dtypes
from thunder.core.aliasing import may_return_alias, returns_view_of_first_argument
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import ATOMIC_TYPES, Symbol
from thunder.core.symbolic import hint, hints, specialize
from thunder.tracing.autograd_function import _no_grad_update
from thunder.tracing.errors import (
    TracingError,
    describe_location,
    user_frame,
)
from thunder.tracing.fallback import _func_name, fallback_symbol
from thunder.tracing.inplace_grad import _detached, _recording_directly, recorded_clone
from thunder.tracing.self_copies import copies_its_own_data
from thunder.tracing.storage_geometry import positions as _positions
from thunder.tracing.storage_geometry import reads_past, spans_its_storage, storage_elements
from thunder.tracing.tracing_tensor import TracingTensor

T = torch.Tensor

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
    if m is None and w._tt_layout_pending is not None:  # (result_layouts.py)
        w._tt_layout_pending.resolve()
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
                storage = torch.empty((storage_elements(t),), dtype=t.dtype, device="meta")
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
    w._tt_grad_leaf_view = t.requires_grad and t._base is not None and t._base.is_leaf and t._base.requires_grad
    w._tt_inference = t.is_inference()
    # (whether the caller's tensor's base requires grad: a view of it made without grad requires grad exactly then)
    w._tt_base_requires_grad = (t._base if t._base is not None else t).requires_grad


_NO_GRAD_VIEW_UPDATE = (
    "A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given that this use "
    "case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the "
    "inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside (if "
    "you want the inplace to be tracked) (as in eager)"
)


def _setitem_writes_a_view(wrapper: TracingTensor, args) -> bool | None:
    """Whether eager's ``x[key] = v`` writes a view of ``x`` (an integer, a partial slice, None) or ``x`` itself
    (``...``, full slices, ``()``; a mask or index list, whose ``index_put_`` writes ``x``), which its refusal names
    ("a view of a leaf Variable" or "a leaf Variable"): asked of PyTorch, with a leaf of ``x``'s sizes on the meta
    device (None where it does not tell)."""
    if len(args) < 2:
        return None
    m = shadow(wrapper)
    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            leaf = torch.empty(m.shape, dtype=m.dtype, device="meta", requires_grad=True)
            leaf[_to_shadows(args[1])] = 0
    except RuntimeError as e:
        if "leaf Variable" in str(e):
            return str(e).startswith("a view of")
    except Exception:  # noqa: BLE001, S110  (an index PyTorch refuses on meta: the call itself reports it)
        pass
    return None


def _refuse_update_of_grad_leaf(func, wrapper: TracingTensor, args=()) -> None:
    """With grad enabled, eager refuses to update a leaf tensor that requires grad (a parameter, an input
    made with ``requires_grad=True``) or a view of one in place; so does thunder, naming the user's line."""
    if not torch.is_grad_enabled():
        return
    view = view_of(wrapper)
    if wrapper._tt_nondiff:
        return
    if view is not None and wrapper._thunder_proxy.requires_grad:
        if wrapper._tt_leaf_view:
            raise RuntimeError(_NO_GRAD_VIEW_UPDATE + "\n  " + describe_location(user_frame(3)))
        if wrapper._tt_multi_view is not None:
            raise RuntimeError(
                f"Output {wrapper._tt_multi_view[1]} of {wrapper._tt_multi_view[0]} is a view and is being modified "
                "inplace. This view is the output of a function that returns multiple views. Such functions do not "
                "allow the output views to be modified inplace. You should replace the inplace operation by an "
                f"out-of-place one (as in eager)\n  {describe_location(user_frame(3))}"
            )
    root = wrapper if view is None else view[0]
    leaf_view = wrapper._tt_grad_leaf_view or root._tt_grad_leaf_view  # (an argument viewing the caller's leaf)
    if root._tt_grad_leaf or leaf_view:
        through_view = bool(view is not None or leaf_view)
        if not through_view and getattr(func, "__name__", None) == "__setitem__":
            through_view = _setitem_writes_a_view(wrapper, args) is not False
        what = "a view of a leaf Variable" if through_view else "a leaf Variable"
        raise RuntimeError(
            f"{what} that requires grad is being used in an in-place operation "
            f"({_func_name(func)}, as in eager)\n  {describe_location(user_frame(3))}"
        )


_OVERLAP_ERROR = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)
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


def overlaps_itself(m: torch.Tensor | None) -> bool:
    """Whether two elements of the shadow ``m`` are one memory location (an expanded tensor)."""
    return _overlaps_itself(m)


def _written_region(name: str | None, w: TracingTensor, args) -> torch.Tensor | None:
    """The shadow of the elements an in-place op writes: ``x[key] = v`` writes only ``x[key]`` when that is a view."""
    m = w._tt_meta
    if name == "__setitem__" and len(args) > 1 and m is not None:
        region = run_on_shadows(T.__getitem__, (w, args[1]), {})
        if isinstance(region, torch.Tensor) and _storage_id(region) == _storage_id(m):
            return region
    return m


def _expanded_dims(m: torch.Tensor | None) -> list[int] | None:
    """The dims of stride 0 (and size > 1) of ``m`` when they alone make two of its elements one memory location
    (an expanded tensor), else None."""
    if m is None:
        return None
    dims = [d for d in range(m.ndim) if m.stride(d) == 0 and m.shape[d] > 1]
    if not dims:
        return None
    one = m
    for d in dims:
        one = one.narrow(d, 0, 1)
    return None if _overlaps_itself(one) else dims


def eager_arguments(func, args, kwargs) -> tuple[tuple, dict]:
    """The arguments to trace ``func`` with where eager's answer is not the op's on its arguments as they are:
    ``as_strided`` of an argument sharing its storage (``strided_on_shared_storage``), ``x.masked_fill_(mask, v)``
    on an expanded ``x`` (each memory location takes ``v`` when the mask holds for any of its elements: the mask
    is made the same for all of them), and so ``x[mask] = v`` with one value, which eager runs as that
    ``masked_fill_``; ``x.index_put_(..., accumulate=True)`` on an expanded ``x``
    (``expanded_updates.py``)."""
    args, kwargs = strided_on_shared_storage(func, args, kwargs)
    if func in _STORAGE_STRIDED:
        from thunder.tracing.restrided_gradients import strided_past_elements

        return strided_past_elements(func, args, kwargs)
    w = args[0] if args else None
    name = getattr(func, "__name__", None)
    if name in ("index_put_", "__setitem__"):
        from thunder.tracing.expanded_updates import index_put_on_expanded, setitem_on_expanded

        if name == "index_put_":
            return index_put_on_expanded(args, kwargs) or (args, kwargs)
        rewritten = setitem_on_expanded(args)
        if rewritten is not None:
            return rewritten, kwargs
    # (eager's x[mask] = v with a boolean mask and one value is x.masked_fill_(mask, v))
    setitem = name == "__setitem__" and is_masked_fill(args)
    if not setitem and (name != "masked_fill_" or type(w) is not TracingTensor or len(args) < 2):
        return args, kwargs
    if w._tt_view is None:
        input_shadow(w)
    dims = _expanded_dims(shadow(w))
    mask = args[1][0] if setitem and isinstance(args[1], tuple) else args[1]
    if dims is None or type(mask) is not TracingTensor:
        return args, kwargs
    if setitem:  # (x[mask] indexes x's leading dims; masked_fill_'s mask broadcasts against its trailing ones)
        mask = mask.reshape((*mask.shape, *(1,) * (w.ndim - mask.ndim)))
    mask = mask.expand(w.shape)
    for d in dims:
        mask = mask.any(d, keepdim=True)
    return (w, mask.expand(w.shape), *args[2:]), kwargs


def is_masked_fill(args) -> bool:
    """``x[mask] = v`` with a boolean ``mask`` of ``x``'s leading sizes and one value ``v``: a ``masked_fill_``."""
    if len(args) != 3 or type(args[0]) is not TracingTensor:
        return False
    w, key, value = args
    mask = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if type(mask) is not TracingTensor or mask.dtype is not torch.bool or mask.ndim > w.ndim:
        return False
    if tuple(mask.shape) != tuple(w.shape[: mask.ndim]):
        return False
    return not isinstance(value, torch.Tensor) or value.numel() == 1


def _writes_one_value_everywhere(name: str | None, args, kwargs) -> bool:
    """``zero_`` and ``fill_`` with a number: eager's only whole-tensor updates without an internal-overlap check
    (most in-place kernels call ``assert_no_internal_overlap``; ``fill_`` with a tensor runs as a ``copy_``, which
    does), and well defined on such a tensor: every memory location gets the one value."""
    if name == "zero_":
        return True
    if name != "fill_":
        return False
    value = args[1] if len(args) > 1 else kwargs.get("value")
    return not isinstance(value, torch.Tensor)


def checked_written_region(func, w: TracingTensor, args, kwargs) -> torch.Tensor | None:
    """The shadow of the elements the in-place ``func`` writes into ``w`` (see ``_written_region``); raises
    eager's error when two of them are one memory location (an expanded tensor) and ``func`` is an update eager
    refuses on such a tensor: all but ``zero_`` and ``fill_`` with a number."""
    name = getattr(func, "__name__", None)
    if w._tt_view is None:
        input_shadow(w)  # (an input's shadow has the caller's strides: made now if not yet)
    region = _written_region(name, w, args)
    if (
        _overlaps_itself(region)
        and not _writes_one_value_everywhere(name, args, kwargs)
        # (its mask made the same for the elements of one memory location: eager_arguments)
        and not ((name == "masked_fill_" or is_masked_fill(args)) and _expanded_dims(region) is not None)
        and not copies_its_own_data(name, region, args)  # (x.copy_(x), x[0] = x: each location keeps its value)
        # (index_put_ accumulating into an expanded tensor, rewritten: expanded_updates.py)
        and not (name in ("index_put_", "__setitem__") and len(args) > 1 and type(args[1]).__name__ == "EveryElement")
    ):
        raise RuntimeError(f"{_func_name(func)}: {_OVERLAP_ERROR}")
    return region


def write_into_overlapping_root(root: TracingTensor, written: torch.Tensor, value: TensorProxy) -> TensorProxy:
    """The new value of ``root``, a tensor whose elements share memory locations (an input the caller expanded),
    after ``value`` is written into the elements of ``written`` (a shadow sharing the root's storage): every
    element at a written memory location shows the write, as in eager. Runs through a stand-in of the storage."""
    from thunder import clang

    rm = shadow(root)
    old = root._tt_value
    with torch._C.DisableTorchFunction():
        n = storage_elements(rm)
        storage_meta = torch.empty((n,), dtype=rm.dtype, device="meta")
        whole_meta = storage_meta.as_strided(rm.shape, rm.stride(), rm.storage_offset())
        part_meta = storage_meta.as_strided(written.shape, written.stride(), written.storage_offset())
    with _recording_directly():
        storage = TracingTensor(clang.full((n,), 0, device=old.device, dtype=old.dtype))
    storage._tt_meta = storage_meta
    whole, part = TracingTensor(old), TracingTensor(value)
    whole._tt_meta, part._tt_meta = whole_meta, part_meta
    storage._tt_value = _write_strided(storage, whole, old)
    storage._tt_value = _write_strided(storage, part, value)
    new = _derive_strided(storage, whole)
    if old.requires_grad or value.requires_grad:
        new.requires_grad = True  # (recorded as prims, which leave the flag unset)
    return new


def alias_of_storage(w: TracingTensor, root: TracingTensor, t: torch.Tensor) -> None:
    """Makes the input stand-in ``w`` (of the real tensor ``t``) a view of ``root``, its storage as a 1-D input."""
    with torch._C.DisableTorchFunction():
        w._tt_meta = shadow(root).as_strided(t.shape, t.stride(), t.storage_offset())
    w._tt_view = (root, None)
    w._tt_seen = root._tt_version


_STORAGE_STRIDED = frozenset((torch.as_strided, T.as_strided, torch.as_strided_copy))


def strided_on_shared_storage(func, args, kwargs) -> tuple[tuple, dict]:
    """The arguments to run ``torch.as_strided(x, ...)`` with, for an argument ``x`` sharing its storage with other
    arguments where one of them requires grad: the program's value of ``x`` is then a copy of its own elements (see
    ``seed_storage``), which the sizes, strides and offset, addressing eager's storage, do not address. Where ``x``
    requires grad and the result reads only ``x``'s elements, it is taken from the storage itself (whose elements
    hold the gradient path of the arguments covering them, views of one base as ``x``); otherwise raises (eager's
    values come from the storage, its gradient reaches ``x``'s elements only)."""
    w = args[0] if args else None
    if func not in _STORAGE_STRIDED or type(w) is not TracingTensor or w._tt_view is None:
        return args, kwargs
    root, step = w._tt_view
    if not (step is None and getattr(root, "_tt_whole_storage", False) and root._tt_value.requires_grad):
        return args, kwargs
    on_root = _strided_on_root(func, w, root, args, kwargs)
    if on_root is not None:
        return on_root
    raise TracingError(
        f"thunder.jit cannot run {_func_name(func)} on an argument that shares its storage with other arguments "
        "when one of them requires grad: pass the base tensor itself, or clone the arguments\n  "
        + describe_location(user_frame(3))
    )


def _strided_layout(w: TracingTensor, args, kwargs) -> tuple | None:
    """``(size, stride, storage offset)`` of ``torch.as_strided(w, size, stride[, storage_offset])`` as plain
    integers (the offset defaults to ``w``'s own), else None."""
    if len(args) > 4 or set(kwargs) - {"size", "stride", "storage_offset"}:
        return None
    names = ("size", "stride", "storage_offset")
    given = dict(zip(names, args[1:]), **kwargs)
    if given.get("storage_offset") is None:
        given["storage_offset"] = shadow(w).storage_offset()  # (eager's default: x's own offset)
    size, stride, offset = (given.get(n) for n in names)
    if not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list)):
        return None
    if not all(type(n) is int for n in (*size, *stride, offset)):
        return None
    return tuple(size), tuple(stride), offset


def _strided_on_root(func, w: TracingTensor, root: TracingTensor, args, kwargs) -> tuple[tuple, dict] | None:
    """``(root, size, stride, offset)`` for ``torch.as_strided(w, size, stride[, offset])`` when ``w`` requires
    grad and the result's elements are among ``w``'s, else None."""
    if not w._tt_value.requires_grad:
        return None
    layout = _strided_layout(w, args, kwargs)
    if layout is None:
        return None
    size, stride, offset = layout
    wm = shadow(w)
    try:
        with torch._C.DisableTorchFunction():
            read = shadow(root).as_strided(tuple(size), tuple(stride), offset)
    except RuntimeError:
        return None
    if not _positions(read) <= _positions(wm):
        if func is not torch.as_strided_copy:
            return None  # (a view: an update through it reaches the storage, whose gradient paths stay)
        root = _storage_with_gradient_of(root, w, wm)  # (a copy: its elements past w's get no gradient)
    return (root, tuple(size), tuple(stride), offset), {}


def _storage_with_gradient_of(root: TracingTensor, w: TracingTensor, wm: torch.Tensor) -> TracingTensor:
    """A tensor of the storage ``root``'s elements in which only those of ``w`` (of shadow ``wm``) carry a gradient
    path, as eager's ``as_strided`` of ``w`` (its backward reaches ``w``'s elements only)."""
    from thunder.tracing.restrided_gradients import gradient_only_at

    with _recording_directly():
        out = TracingTensor(gradient_only_at(root._tt_value, shadow(root), (wm,)))
    out._thunder_proxy.requires_grad = True
    return out


def _refuse_write_past_root(rm: torch.Tensor, vm: torch.Tensor) -> None:
    """Raises when a view restrided past its elements (``x.as_strided_`` of a tensor over a larger storage) is updated
    in place: its root holds the tensor's former elements only, not the storage elements the update writes."""
    with torch._C.DisableTorchFunction():
        if spans_its_storage(rm):
            return
        if _positions(vm) <= _positions(rm):
            return
    raise TracingError(
        "thunder.jit cannot update in place a tensor restrided (as_strided_) to storage elements past its own: "
        "its storage is not an argument of the program; restride its base, or clone before the update\n  "
        + describe_location(user_frame(2))
    )


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


def _reinterprets_dtype(func, args, kwargs) -> bool:
    """Whether ``func`` is ``Tensor.view(dtype)``: in eager an alias autograd does not see (no ``_base``, no
    history), as ``detach()`` is, even to its own dtype."""
    if func is not T.view:
        return False
    return isinstance(kwargs.get("dtype"), torch.dtype) or (len(args) == 2 and isinstance(args[1], torch.dtype))


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
    adapters and symbols that declare it (``thunder.core.aliasing``; a symbol returning its input proxy is
    asked too)."""
    if isinstance(func, Symbol):
        return False
    if fell_back or type(mapped) is not Symbol:
        return True
    return may_return_alias(mapped)


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


class DeferredMetaRun:
    """An op's run on its arguments' shadows, made when one of its outputs first needs it: one meta run, never
    a chain of them. The outputs are held weakly (each holds this record through its ``marker`` attribute:
    no reference cycle)."""

    __slots__ = ("func", "args", "kwargs", "outputs")
    marker = ""  # the outputs' attribute that points at their pending run
    meta_run = staticmethod(lambda func, args, kwargs: run_on_shadows(func, args, kwargs))

    def _hold(self, outputs) -> None:
        self.outputs = tuple(weakref.ref(w) for w in outputs)
        for w in outputs:
            setattr(w, self.marker, self)

    def _run(self):
        """``(outputs, meta result)``, each output unmarked (None where it is gone); None if it ran already."""
        refs = self.outputs
        if refs is None:
            return None
        self.outputs = None
        outs = [r() for r in refs]
        for w in outs:
            if w is not None:
                setattr(w, self.marker, None)
        return outs, type(self).meta_run(self.func, self.args, self.kwargs)


class _PendingShadows(DeferredMetaRun):
    """A view op's shadow run, deferred: most views are never updated in place nor asked for their layout.

    It runs when one of its outputs' shadows is needed (``shadow``), before any in-place update (which must
    know every alias of what it writes) and for the outputs read after tracing (``view_of``), on the
    arguments as they were at the call: shadows only change through in-place updates, which resolve every
    pending run first. The outputs are held weakly (each holds this record: no reference cycle).
    """

    __slots__ = ("mapped", "uargs", "ukwargs", "container")
    marker = "_tt_pending"

    def __init__(self, func, args, kwargs, mapped, uargs, ukwargs, wrapped) -> None:
        self.func, self.mapped, self.uargs, self.ukwargs = func, mapped, uargs, ukwargs
        self.args, self.kwargs = _snapshot(args), _snapshot(kwargs)  # (user code may change a list it passed)
        single = type(wrapped) is TracingTensor
        self.container = None if single else type(wrapped)
        self._hold((wrapped,) if single else wrapped)

    def resolve(self) -> None:
        ran = self._run()
        if ran is None or ran[1] is None:
            return
        outs, mout = ran
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
    if not returns_view_of_first_argument(mapped) or func in _DETACHING:
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
        if src is None and m._base is None and type(mapped) is Symbol and returns_view_of_first_argument(mapped):
            w._tt_copied = True  # (a view op that copied in eager: ``reshape`` of a transposed tensor)
        if src is not None:
            step = (mapped, tuple(uargs[1:]), ukwargs, index) if replayable and src is args[0] else None
            _mark_view(w, src, step)
            w._tt_bounds = gradient_bounds(func, src, m)
            detaching = func in _DETACHING or _reinterprets_dtype(func, uargs, ukwargs)
            w._tt_nondiff = src._tt_nondiff or detaching
            if w._tt_nondiff:  # the detach() output this view comes from (its own autograd history in eager)
                w._tt_family = w if detaching else getattr(src, "_tt_family", None)
        return w

    if isinstance(wrapped, TracingTensor):
        return match(wrapped, mout, None)
    t = type(wrapped)
    if isinstance(wrapped, (tuple, list)) and isinstance(mout, (tuple, list)) and len(wrapped) == len(mout):
        items = [match(w, m, i) if isinstance(w, TracingTensor) else w for i, (w, m) in enumerate(zip(wrapped, mout))]
        if t is tuple or t is list:
            return t(items)
    return wrapped


_AS_STRIDED_VIEWS = frozenset((torch.as_strided, T.as_strided))


def gradient_bounds(func, src: TracingTensor, m: torch.Tensor) -> tuple:
    """The layouts (over the storage) bounding the gradient of a view ``m`` made by ``func`` of ``src``: ``src``'s
    own, and ``src``'s layout where ``func`` is ``torch.as_strided`` reading storage elements ``src`` does not hold
    while it requires grad (eager's ``as_strided`` backward follows ``src``'s geometry: those elements get no
    gradient). An output re-viewed from its base after the call is viewed through them (``post_call``)."""
    bounds = src._tt_bounds
    if func not in _AS_STRIDED_VIEWS or not src._tt_value.requires_grad:
        return bounds
    sm = shadow(src)
    with torch._C.DisableTorchFunction():
        layout = (tuple(sm.shape), tuple(sm.stride()), sm.storage_offset())
        if not all(type(n) is int for n in (*layout[0], *layout[1], layout[2])) or not reads_past(m, sm):
            return bounds
    return (*bounds, layout)


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
    # (a dimension of stride 0, an expanded root's, holds one storage element: coordinate 0 stands for it)
    dims = sorted((d for d in range(rm.ndim) if rm.shape[d] > 1 and rm.stride(d) != 0), key=lambda d: -rm.stride(d))
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
    _refuse_write_past_root(rm, vm)
    from thunder.tracing.restrided_gradients import refuse_update_of_bounded_view

    refuse_update_of_bounded_view(root, view)
    specialize(base.shape)  # (as in _derive_strided_impl)
    specialize(value.shape)
    idx = _strided_index(rm, vm, base.device)
    n = base.numel()
    if vm.is_conj() != rm.is_conj():  # a conjugate view (x.mH): the root holds the conjugate
        value = fallback_symbol(torch.conj_physical)(value)
    value = clang.expand(value, tuple(vm.shape))
    for d in range(vm.ndim):
        if vm.stride(d) == 0 and vm.shape[d] > 1:
            # an expanded view: its elements along this dim are one memory location, written once (from the
            # first; a scatter's gradient would reach every duplicate, counting the location's gradient n times)
            idx = clang.slice_in_dim(idx, 0, 1, dim=d)
            value = clang.slice_in_dim(value, 0, 1, dim=d)
    m = idx.numel()
    flat_val = clang.reshape(value, (m,))
    out = prims.scatter(clang.reshape(base, (n,)), clang.reshape(idx, (m,)), flat_val, 0)
    out = clang.reshape(out, base.shape)
    if as_pairs == "real":
        return fallback_symbol(torch.view_as_complex)(out)
    if as_pairs == "complex":
        return clang.reshape(fallback_symbol(torch.view_as_real)(out), root._tt_value.shape)
    return out


def _covers_root(root: TracingTensor, view: TracingTensor) -> bool:
    """Whether ``view`` is laid out exactly as its root (every element, same order): writing it writes the root."""
    rm, vm = shadow(root), shadow(view)
    return (
        rm.dtype == vm.dtype
        and rm.shape == vm.shape
        and rm.stride() == vm.stride()
        and rm.storage_offset() == vm.storage_offset()
        and rm.is_conj() == vm.is_conj()
        and rm.is_neg() == vm.is_neg()
    )


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
