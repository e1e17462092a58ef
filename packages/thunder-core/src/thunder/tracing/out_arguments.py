"""``out=`` arguments: ``torch.acos(x, out=y)`` computes the result, then writes it into ``y`` as eager does.

The result is traced as the call without ``out=`` (a symbol, or the opaque fallback), and the write is an
in-place ``copy_`` of the result into ``out``, so the trace knows ``out``'s new value (an opaque call that wrote
into ``out`` behind the trace's back left the traced value stale). Eager's rules come first: no ``out=`` when
autograd would have to record the call, and a result dtype that can be cast to ``out``'s. Eager resizes an
``out`` of another shape (``resize_``, then the strides its kernel gives a resized output), and so does the trace.
"""

from __future__ import annotations

import warnings

import torch

from thunder.core.dtypes import message_name
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbolic import hints, known, same_shape
from thunder.tracing.errors import describe_location, user_frame
from thunder.tracing.storage_geometry import storage_elements
from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["call_with_out"]

T = torch.Tensor


def _requires_grad(x) -> bool:
    return isinstance(x, TracingTensor) and x._thunder_proxy.requires_grad


def _name(func) -> str:
    return getattr(func, "__name__", str(func))


def _on_meta(x):
    if not isinstance(x, TracingTensor):
        return x
    p = x._thunder_proxy
    # (the traced call's sizes: symbolic ones too, whose shape is no tuple of numbers)
    t = torch.empty(hints(p.shape), dtype=p.dtype.torch_dtype, device="meta")
    return t.requires_grad_(p.requires_grad) if t.is_floating_point() or t.is_complex() else t


def _autograd_refusal(func, args, kwargs) -> bool:
    """Eager refuses ``out=`` where autograd would record the call: which calls that is (a differentiable op
    with an argument requiring grad; not ``gt``, whose result has no gradient) is asked of PyTorch on meta
    tensors, and its error raised. True where eager instead lets ``out`` require grad with a backward that
    raises (``torch.linspace(start, end, n, out=o)`` with a ``start`` requiring grad, ``torch.expand_copy(x, size,
    out=o)``: eager has no derivative for their out= forms, whatever it has for the call without ``out=``)."""
    meta_args, meta_kwargs = tree_map(_on_meta, (args, kwargs))
    if meta_kwargs.get("device") is not None:  # (a factory's device: its tensor arguments are on meta)
        meta_kwargs["device"] = "meta"
    try:
        with torch._C.DisableTorchFunction():
            result = func(*meta_args, **meta_kwargs)
    except RuntimeError as e:
        if "don't support automatic differentiation" in str(e):
            raise RuntimeError(f"{e}\n  {describe_location(user_frame(2))}") from None
        return False
    except Exception:  # noqa: BLE001  (no meta kernel, or another error the traced call will report)
        return False
    return any(
        isinstance(r, torch.Tensor) and type(r.grad_fn).__name__ == "NotImplemented" for r in tree_flatten(result)[0]
    )


_out_calls: dict = {}


def _call_into_new_out(func, out: torch.Tensor):
    """``func`` called with ``out=`` a new empty tensor of ``out``'s dtype and device (traced as one opaque call:
    its result requires grad as eager's ``out`` does, and its backward raises eager's error)."""
    key = (func, out.dtype, str(out.device))
    call = _out_calls.get(key)
    if call is None:
        dtype, device = out.dtype, out.device

        def call(*args, **kwargs):
            return func(*args, **kwargs, out=torch.empty((0,), dtype=dtype, device=device))

        call.__name__ = f"{_name(func)}_out"
        call.__qualname__ = call.__name__
        _out_calls[key] = call
    return call


def _rebindable(o) -> bool:
    """Whether ``o`` is an empty tensor the program made (not an input, a global, a view or viewed through a
    layout change): eager's resize of it to the result's shape gives it new elements only, which nothing else
    sees (its views, if any, are empty and stay so)."""
    return _own_tensor(o) and any(known(s == 0) for s in o.shape)


def _own_tensor(o) -> bool:
    """Whether ``o`` is a tensor the program made (not an input, a global, a view or viewed through a layout
    change)."""
    return (
        isinstance(o, TracingTensor)
        and o._tt_owner is not None
        and not getattr(o, "_tt_input", False)
        and o._tt_view is None
        and o._tt_former is None
    )


def _take_value(o: TracingTensor, new: TracingTensor) -> None:
    """Makes ``o`` stand for ``new``'s value and layout (a resize of the empty ``o`` to a result, then the write
    of the result: ``torch.nonzero(x, out=torch.empty(0, 2))``, whose size is known only when the program runs)."""
    for k, v in vars(new).items():
        if k.startswith("_tt_") and k not in ("_tt_owner", "_tt_version", "_tt_counter", "_tt_class"):
            setattr(o, k, v)
    value = new._thunder_proxy
    o._tt_value = value
    # (outside inference_mode: there, assigning .data reaches the dispatcher's shallow-copy check with the stand-ins)
    with torch._C.DisableTorchFunction(), torch.inference_mode(False):
        o.data = TracingTensor(value)


def _keep_history_without_grad(o: TracingTensor, new: TracingTensor) -> None:
    """``new`` given ``o``'s gradient path where ``o`` requires grad and is resized under no_grad (eager's kernel
    resizes it below autograd: it keeps its history, see ``resized_history.py``)."""
    tracer, old = o._tt_owner, o._thunder_proxy
    if not tracer.autodiff or torch.is_grad_enabled() or not old.requires_grad or new._thunder_proxy.requires_grad:
        return
    from thunder.tracing.resized_history import resized_without_grad

    new._tt_value = resized_without_grad(tracer, old, new._thunder_proxy)


def _resize_as_eager(handle, func, args, rest, o: TracingTensor, r: TracingTensor) -> None:
    """Resizes ``o`` to the result's shape as eager's ``resize_output`` does (with its warning when ``o`` had
    elements), then gives it the strides eager's kernel gives a resized output: the result's own (TensorIterator
    restrides it to its inputs' memory order, as the call without ``out=``; other kernels leave it contiguous, as
    their results are). Refused, naming the line, when an argument shares memory with the resized ``o``: eager's
    kernel then reads elements it has written already."""
    import warnings

    from thunder.core.symbolic import hints
    from thunder.tracing.views import _positions, _storage_id, shadow

    if o.numel() != 0:
        message = (
            f"An output with one or more elements was resized since it had shape {list(o.shape)}, which does not "
            f"match the required output shape {list(r.shape)}. This behavior is deprecated, and in a future PyTorch "
            "release outputs will not be resized unless they have zero elements. You can explicitly reuse an out "
            "tensor t by resizing it, inplace, to zero elements with t.resize_(0)."
        )
        frame = user_frame(2)
        if frame is None:
            warnings.warn(message, UserWarning, stacklevel=2)
        else:  # (at the user's line, as eager's)
            warnings.warn_explicit(message, UserWarning, frame.f_code.co_filename, frame.f_lineno)
    with torch._C.DisableTorchFunction():
        om = shadow(o)
        held = storage_elements(om) - om.storage_offset()
    if r.numel() > held:
        if o._tt_view is not None or o._tt_former is not None:
            # (eager grows the storage in place: the tensors sharing it see the result, which a resize_ traced as a
            # new storage would hide from them; an argument is resized after the call, in the caller's storage)
            raise NotImplementedError(
                f"thunder.jit does not resize an out= tensor that shares its storage past that storage's end: "
                f"{_name(func)}() gives shape {tuple(r.shape)}, out= has shape {tuple(o.shape)}; allocate out= with "
                f"the result's shape\n  {describe_location(user_frame(3))}"
            )
        if _own_tensor(o):
            # (a storage of its own too small: eager gives it a new one, the result in the result's layout; no view)
            new = handle(T.to, (r, o.dtype), {"copy": True})
            _keep_history_without_grad(o, new)
            _take_value(o, new)
            return
    o._tt_out_resize = True
    try:
        handle(T.resize_, (o, tuple(r.shape)), {})
    finally:
        o._tt_out_resize = False
    with torch._C.DisableTorchFunction():
        rm = shadow(r)
        if tuple(rm.shape) == hints(r.shape) and not rm.is_contiguous():
            layout = (tuple(rm.shape), tuple(rm.stride()), shadow(o).storage_offset())
        else:
            layout = None
    if layout is not None:
        handle(T.as_strided_, (o, *layout), {})
    with torch._C.DisableTorchFunction():
        om = shadow(o)
        written = None
        for a in tree_flatten((args, rest))[0]:
            if isinstance(a, TracingTensor) and _storage_id(shadow(a)) == _storage_id(om):
                written = _positions(om) if written is None else written
                if written & _positions(shadow(a)):
                    raise NotImplementedError(
                        f"thunder.jit does not run {_name(func)}() into an out= tensor it resizes over one of its "
                        "arguments' elements (eager's kernel then reads elements it has already written); pass an "
                        f"out= tensor of the result's shape, or a new one\n  {describe_location(user_frame(3))}"
                    )


# calls whose ``dtype=``, when not given, is ``out``'s: eager computes in it (``torch.linspace(0, 10, 5, out=<int64>)``
# counts in integers, ``torch.mean(<float32>, 0, out=<float64>)`` sums in float64, ``torch.sum(x, 0, out=<int64>)``
# truncates the elements first), where the call without ``out=`` would compute in the default or the input's dtype
_DTYPE_FROM_OUT = frozenset(
    {
        torch.linspace,
        torch.logspace,
        torch.arange,
        torch.full,
        torch.zeros,
        torch.ones,
        torch.eye,
        torch.randint,
        torch.randperm,
        torch.sum,
        torch.prod,
        torch.cumsum,
        torch.cumprod,
    }
)
# the same for an ``out`` of a floating or complex dtype only (for an integer one, eager refuses the call: a float
# result cannot be cast into it, and nansum has no integer kernel)
_FLOAT_DTYPE_FROM_OUT = frozenset({torch.mean, torch.nansum})


def call_with_out(handle, func, args, kwargs):
    """``func(*args, **kwargs)`` with ``kwargs["out"]`` a tensor or a tuple of tensors; ``handle`` traces a call."""
    out = kwargs["out"]
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if rest.get("dtype") is None and isinstance(out, torch.Tensor):
        if func in _DTYPE_FROM_OUT or (
            func in _FLOAT_DTYPE_FROM_OUT and (out.dtype.is_floating_point or out.dtype.is_complex)
        ):
            rest["dtype"] = out.dtype
    untracked = False
    if torch.is_grad_enabled() and any(_requires_grad(x) for x in tree_flatten((args, rest, outs))[0]):
        untracked = _autograd_refusal(func, args, kwargs)
    if untracked and len(outs) == 1 and isinstance(outs[0], torch.Tensor):
        from thunder.tracing.views import strided_on_shared_storage

        # (as the call without out= reads them: as_strided_copy of an argument sharing its storage reads the storage)
        args, rest = strided_on_shared_storage(func, args, rest)
        result = handle(_call_into_new_out(func, outs[0]), args, rest)  # (no symbol: the opaque fallback)
    else:
        result = handle(func, args, rest)
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if (
        len(outs) == len(results) == 1
        and isinstance(outs[0], torch.Tensor)
        and isinstance(results[0], torch.Tensor)
        and not torch.can_cast(results[0].dtype, outs[0].dtype)
        and rest.get("dtype") is None
        and _computes_in_out_dtype(func, args, rest, outs[0])
    ):
        # (sum, prod, mean, cumsum, cumprod, vector_norm: eager's kernel computes in the out= tensor's dtype, its
        # arguments converted to it first, as with dtype=: a complex sum into a float64 tensor is the real parts')
        result = handle(func, args, {**rest, "dtype": outs[0].dtype})
        results = (result,)
    if len(results) != len(outs):
        raise RuntimeError(f"{_name(func)}(): expected {len(results)} out= tensors, got {len(outs)}")
    tensors = all(isinstance(x, torch.Tensor) for x in (*outs, *results))
    if tensors and any(r.dtype != o.dtype for o, r in zip(outs, results)):
        _refuse_out_dtypes_eager_refuses(func, args, rest, outs, results, isinstance(out, (tuple, list)))
    for o, r in zip(outs, results):
        if not isinstance(o, torch.Tensor) or not isinstance(r, torch.Tensor):
            raise TypeError(f"{_name(func)}(): out= must be a tensor or a tuple of tensors")
        if not torch.can_cast(r.dtype, o.dtype):
            raise RuntimeError(
                f"result type {message_name(r.dtype)} can't be cast to the desired output type {message_name(o.dtype)}"
            )
        if not same_shape(o.shape, r.shape):
            if _rebindable(o):
                _take_value(o, handle(T.to, (r, o.dtype), {"copy": True}))
                continue
            _resize_as_eager(handle, func, args, rest, o, r)
        handle(T.copy_, (o, r), {})
    if isinstance(out, (tuple, list)):
        return type(result)(outs) if type(result) not in (tuple, list) else type(out)(outs)
    return out


def _computes_in_out_dtype(func, args, rest, out: torch.Tensor) -> bool:
    """Whether ``func`` takes a ``dtype=`` argument and eager runs it into ``out``, of a dtype its result cannot be
    cast to: its kernel then computes in ``out``'s dtype (PyTorch's reductions and scans read the out= tensor's
    dtype as ``dtype``). Asked of PyTorch on one-element zeros of the arguments' dtypes."""
    from thunder.tracing.views import _to_shadows

    def zeros(t):
        return torch.zeros([min(n, 1) for n in t.shape], dtype=t.dtype) if isinstance(t, torch.Tensor) else t

    with torch._C.DisableTorchFunction():
        run_args, run_rest = tree_map(zeros, (_to_shadows(args), _to_shadows(rest)))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (casting complex values to real discards the imaginary part)
                func(*run_args, **run_rest, out=torch.empty(0, dtype=out.dtype))
                func(*run_args, **{**run_rest, "dtype": out.dtype})
        except Exception:  # noqa: BLE001 - eager refuses the out= dtype, or the op has no dtype=
            return False
    return True


# (the run on the real device, see below, reads and writes tensors of the call's sizes: past this many elements the
# meta kernels' answer stands alone)
_DEVICE_CHECK_ELEMENTS = 1 << 16


def _held(t: torch.Tensor) -> int:
    """The elements ``t``'s storage holds."""
    return t.untyped_storage().nbytes() // max(t.element_size(), 1)


def _refuse_out_dtypes_eager_refuses(func, args, rest, outs, results, as_tuple: bool) -> None:
    """Raises eager's error where ``func`` refuses out= tensors of other dtypes than its results' (most ops cast into
    them; view copies, sort, histc, nan_to_num, torch.complex and the kernels that require all operands' dtypes equal
    do not): PyTorch is asked, with the call run once with out= tensors of the user's dtypes and once with the
    results' dtypes; an error the first run raises and the second does not is eager's refusal of the dtypes. Run on
    zeros in the arguments' layouts and dtypes on the out= tensors' device; on the arguments' shadows (meta) past a few
    elements."""
    from thunder.tracing.views import _to_shadows, shadow

    def target(o):
        return shadow(o) if type(o) is TracingTensor else o

    with torch._C.DisableTorchFunction():
        meta_args, meta_rest = _to_shadows(args), _to_shadows(rest)
        tensors = [t for t in tree_flatten((meta_args, meta_rest))[0] if isinstance(t, torch.Tensor)]
        size = sum(_held(t) for t in tensors) + sum(target(o).numel() for o in outs)
        device = outs[0].device if size <= _DEVICE_CHECK_ELEMENTS else torch.device("meta")

        def zeros(t):  # (zeros in the shadow's layout over a storage of its size: as_strided_copy reads the storage)
            if not isinstance(t, torch.Tensor) or device.type == "meta" or t.device.type != "meta":
                return t
            storage = torch.zeros(_held(t), dtype=t.dtype, device=device)
            return storage.as_strided(t.shape, t.stride(), t.storage_offset())

        run_args, run_rest = tree_map(zeros, (meta_args, meta_rest))

        def run(dtypes):
            new = tuple(torch.empty(target(o).shape, dtype=d, device=device) for o, d in zip(outs, dtypes))
            try:
                func(*run_args, **run_rest, out=new if as_tuple else new[0])
            except (RuntimeError, TypeError, NotImplementedError) as e:
                return e
            except Exception:  # noqa: BLE001  (no kernel for these arguments: the dtype is not refused here)
                return None
            return None

        state = torch.get_rng_state()  # (a random op's draws are put back)
        try:
            error = run([o.dtype for o in outs])
            if error is None or run([r.dtype for r in results]) is not None:
                return
        finally:
            torch.set_rng_state(state)
    raise type(error)(f"{str(error).splitlines()[0]}\n  {describe_location(user_frame(3))}") from None
