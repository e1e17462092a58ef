"""NumPy on tensors inside ``thunder.jit``: NumPy calls recorded in the program, run by NumPy or translated to torch.

``x.numpy()`` in the traced code returns a :class:`TracedArray`, an ndarray stand-in backed by the traced tensor.
NumPy hands every ufunc (``np.exp``, ``np.maximum``, ``a + b``) and every array function (``np.sum``,
``np.mean``, ``np.where``) called on it to the stand-in (NEP 13 ``__array_ufunc__`` and NEP 18
``__array_function__``), which records the operation. A ufunc, and a sum, product, mean, std, var or cumsum of an
array of sizes known as numbers (or reducing any array to one number), is recorded as an opaque call that runs NumPy
itself when the program runs (torch's kernels of the same meaning round otherwise: ``np.exp`` and NumPy's pairwise sums in float32); the other
functions (``np.where``, ``np.stack``, reshapes) as the torch operation of the same meaning. ``torch.from_numpy(a)``,
``torch.as_tensor(a)`` and ``torch.tensor(a)`` turn it back into a tensor; an array the function returns is a
real ``np.ndarray`` of the program's output, as in eager.

Dtypes and shapes are NumPy's, asked from NumPy itself: for a ufunc, ``ufunc.resolve_dtypes`` gives the dtype
each input is computed in and the result's dtype (``np.sqrt`` of int32 values is float64, ``np.exp`` of int8
values float16); for an array function, NumPy runs on a zero-strided array of each input's dtype and shape
(no memory), and the torch result is cast to what NumPy returned, its shape checked against it. Anything
else (in-place updates of an array, ``out=``, NumPy functions without a translation, reading values) is
refused, naming the user's line.
"""

from __future__ import annotations

import os
import sys
import threading

import torch

from thunder.core.pytree import register_node, tree_map
from thunder.torch.meta_rules import register_meta_rule
from thunder.tracing.errors import TracingError, describe_location
from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["TracedArray", "array_of", "tensor_of", "FROM_ARRAY", "patched_from_numpy"]

T = torch.Tensor

# torch functions that make a tensor of an array: (shares the array's memory in eager)
FROM_ARRAY = {torch.as_tensor: True, torch.asarray: True, torch.tensor: False}

# NumPy ufuncs whose torch function has another name (the others have NumPy's name: exp, maximum, add, ...)
_UFUNC_NAMES = {
    "power": "pow",
    "absolute": "abs",
    "mod": "remainder",
    "conjugate": "conj_physical",
    "invert": "bitwise_not",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
    "equal": "eq",  # (torch.equal compares whole tensors)
    "not_equal": "ne",
}


def _numpy():
    import numpy

    return numpy


def _line() -> str:
    """Where the user's code is (the innermost frame outside thunder, torch and NumPy)."""
    from thunder.tracing.errors import _THUNDER_DIR, _TORCH_DIR

    skipped = (_THUNDER_DIR, _TORCH_DIR, os.path.dirname(_numpy().__file__))
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(skipped):
        f = f.f_back
    return describe_location(f)


def _refuse(what: str) -> TracingError:
    return TracingError(
        f"thunder.jit cannot {what} on a NumPy array made from a tensor inside the jitted function: NumPy calls on "
        "such arrays are translated to torch operations, and this one has no translation\n"
        f"  {_line()}\n"
        "Use the torch function of the same meaning on the tensor (x.sum() for np.sum(x.numpy())), or move this "
        "code out of the jitted function."
    )


def _torch_dtype(np_dtype) -> torch.dtype:
    np = _numpy()
    return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype


_NUMPY_NAMES = {
    torch.bool: "bool",
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}


def _numpy_dtype(dtype: torch.dtype):
    name = _NUMPY_NAMES.get(dtype)
    if name is not None:  # (no tensor made: this may run under a fake tensor mode)
        return _numpy().dtype(name)
    with torch._C.DisableTorchFunction():
        return torch.empty(0, dtype=dtype).numpy().dtype  # (eager's TypeError for a dtype NumPy lacks)


def _resolve_dtypes(ufunc, operands) -> tuple:
    """NumPy's loop dtypes of ``ufunc`` on ``operands`` (tensors by their dtype; the result's last); TypeError where
    NumPy refuses them."""
    np = _numpy()
    described = tuple(
        _numpy_dtype(x.dtype)
        if isinstance(x, torch.Tensor)
        else type(x)
        if type(x) in (bool, int, float, complex)
        # (a Python number is a "weak" scalar for NumPy: it takes the array's dtype)
        else np.asarray(x).dtype
        for x in operands
    )
    try:
        return ufunc.resolve_dtypes(described + (None,))
    except (TypeError, np.exceptions.DTypePromotionError) as e:
        raise TypeError(str(e)) from None


def numpy_ufunc(name: str, *operands) -> torch.Tensor:
    """NumPy's ufunc ``name`` run on the values of CPU tensors (and numbers): the result eager's NumPy call gives,
    as a tensor. The program runs it opaquely; its metadata comes from the rule registered below."""
    if any(isinstance(x, torch.Tensor) and x.is_meta for x in operands):
        return _numpy_ufunc_meta(name, *operands)  # (run on the shadows: the layout NumPy gives)
    np = _numpy()
    arrays = [x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in operands]
    with np.errstate(all="ignore"):
        out = getattr(np, name)(*arrays)
    return torch.from_numpy(np.asarray(out))


@register_meta_rule(numpy_ufunc)
def _numpy_ufunc_meta(name: str, *operands) -> torch.Tensor:
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    shape = torch.broadcast_shapes(*(x.shape for x in tensors))
    dtype = _torch_dtype(_resolve_dtypes(getattr(_numpy(), name), operands)[-1])
    # NumPy lays the result out in its operands' memory order (order="K": a ufunc of a transposed array is
    # transposed), as TensorIterator does for an elementwise torch op: the layout of one on the same layouts
    with torch._C.DisableTorchFunction():
        like = [torch.empty_strided(x.shape, x.stride(), dtype=torch.float32, device="meta") for x in tensors]
        layout = like[0] if len(like) == 1 else torch.add(*like[:2])
        for x in like[2:]:
            layout = torch.add(layout, x)
        if layout.shape != shape:
            return torch.empty(shape, dtype=dtype, device="meta")
        return torch.empty_strided(
            shape, layout.stride() if len(like) > 1 else _k_order(layout), dtype=dtype, device="meta"
        )


def _k_order(t: torch.Tensor) -> tuple[int, ...]:
    """The strides NumPy gives the result of a ufunc of the one array laid out as ``t``: ``t``'s memory order, dense."""
    return torch.empty_like(t, memory_format=torch.preserve_format).stride()


# NumPy functions run by NumPy itself when the program runs, where their torch translation rounds otherwise
_RUN_BY_NUMPY = frozenset(("sum", "prod", "mean", "std", "var", "cumsum"))


def _plain(x) -> bool:
    return x is None or type(x) in (bool, int, float) or (type(x) is tuple and all(_plain(y) for y in x))


def _runs_as_numpy(func, args, kwargs, expected) -> bool:
    """Whether ``func`` on these arguments runs as NumPy when the program runs: one of ``_RUN_BY_NUMPY`` on an
    array of sizes known as numbers, or reducing to one number (sizes known as symbols too), its other arguments
    plain numbers (axis, ddof, keepdims)."""
    if func.__name__ not in _RUN_BY_NUMPY or expected is None or not args or type(args[0]) is not TracedArray:
        return False
    if not all(type(s) is int for s in args[0]._tensor.shape) and getattr(expected, "ndim", None) != 0:
        return False  # (a reduction to one number is NumPy's whatever the sizes: its shape does not depend on them)
    return all(_plain(x) for x in args[1:]) and all(_plain(v) for v in kwargs.values())


def numpy_function(name: str, a: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """NumPy's function ``name`` run on a CPU tensor's values: the result eager's NumPy call gives, as a tensor."""
    np = _numpy()
    with np.errstate(all="ignore"):
        out = getattr(np, name)(a.detach().numpy(), *args, **kwargs)
    return torch.from_numpy(np.asarray(out))


@register_meta_rule(numpy_function)
def _numpy_function_meta(name: str, a: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    np = _numpy()
    example = np.broadcast_to(np.zeros((), dtype=_numpy_dtype(a.dtype)), tuple(a.shape))
    with np.errstate(all="ignore"):
        out = np.asarray(getattr(np, name)(example, *args, **kwargs))
    return torch.empty(out.shape, dtype=_torch_dtype(out.dtype), device="meta")


class TracedArray:
    """An ``np.ndarray`` stand-in inside the traced code: its values are those of the traced tensor ``_tensor``."""

    __slots__ = ("_tensor", "_scalar")

    def __init__(self, tensor, scalar: bool = False):
        self._tensor = tensor
        self._scalar = scalar  # a NumPy scalar (np.sum(a) is an np.float32, not a 0-d array)

    # ------------------------------------------------------------ what NumPy hands over
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            raise _refuse(f"run np.{ufunc.__name__}.{method}")
        if kwargs:
            raise _refuse(f"pass {', '.join(kwargs)}= to np.{ufunc.__name__}")
        if ufunc.nout != 1 or getattr(_numpy(), ufunc.__name__, None) is not ufunc:
            raise _refuse(f"run np.{ufunc.__name__}")
        operands = [_operand(x) for x in inputs]
        try:
            _resolve_dtypes(ufunc, operands)
        except TypeError as e:
            raise TypeError(f"{e}\n  {_line()}") from None
        # run by NumPy itself when the program runs (torch's kernels of the same meaning round otherwise: exp, sqrt)
        tensors = [x for x in operands if isinstance(x, torch.Tensor)]
        out = torch.overrides.handle_torch_function(numpy_ufunc, tensors, ufunc.__name__, *operands)
        scalar = all(x._scalar for x in inputs if isinstance(x, TracedArray))
        return TracedArray(out, scalar)

    def __array_function__(self, func, types, args, kwargs):
        translate = _FUNCTIONS.get(func.__name__)
        if translate is None:
            raise _refuse(f"run np.{func.__name__}")
        np = _numpy()
        expected = _what_numpy_returns(np, func, args, kwargs)
        if _runs_as_numpy(func, args, kwargs, expected):
            # (NumPy's own summation order: torch's kernels of the same meaning round otherwise in float32)
            a = args[0]._tensor
            out = torch.overrides.handle_torch_function(numpy_function, (a,), func.__name__, a, *args[1:], **kwargs)
            return TracedArray(out, isinstance(expected, np.generic))
        result = translate(*_tree(args, _operand), **_tree(kwargs, _operand))
        if not isinstance(result, torch.Tensor):
            return result
        if expected is not None:
            if _differ(_example_shape(result.shape), expected.shape):
                raise _refuse(f"run np.{func.__name__} with these arguments (shape {tuple(expected.shape)})")
            result = result.to(_torch_dtype(expected.dtype))
        return TracedArray(result, isinstance(expected, np.generic))

    # ------------------------------------------------------------ array attributes
    @property
    def shape(self) -> tuple:
        return tuple(self._tensor.shape)

    @property
    def ndim(self) -> int:
        return self._tensor.ndim

    @property
    def size(self) -> int:
        return self._tensor.numel()

    @property
    def dtype(self):
        return _numpy_dtype(self._tensor.dtype)

    @property
    def T(self) -> TracedArray:
        return TracedArray(self._tensor.permute(*reversed(range(self._tensor.ndim))))

    def __len__(self) -> int:
        return len(self._tensor)

    def __getitem__(self, key):
        return TracedArray(self._tensor[_tree(key, _operand)])

    def astype(self, dtype, copy=True) -> TracedArray:
        return TracedArray(self._tensor.to(_torch_dtype(_numpy().dtype(dtype)), copy=copy))

    def copy(self) -> TracedArray:
        return TracedArray(self._tensor.clone())

    def reshape(self, *shape, order="C") -> TracedArray:
        if order != "C":
            raise _refuse(f"reshape with order={order!r}")
        return TracedArray(self._tensor.reshape(*shape))

    def transpose(self, *axes) -> TracedArray:
        return _numpy().transpose(self, axes[0] if len(axes) == 1 else axes or None)

    def __repr__(self) -> str:
        return f"TracedArray({self._tensor!r})"

    def __array__(self, *args, **kwargs):
        raise _refuse("make a real ndarray (the values only exist when the program runs; np.asarray, printing)")

    def __setitem__(self, key, value):
        raise _refuse("update an array in place (a[...] = v writes the tensor it was made from)")

    def _value(self, *args, **kwargs):
        raise _refuse("read an array's values as Python numbers (bool, int, float, .item(), .tolist())")

    __bool__ = __int__ = __float__ = __index__ = item = tolist = _value


def _array_method(name: str):
    def method(self, *args, **kwargs):
        return getattr(_numpy(), name)(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in "sum mean prod max min std var argmax argmin any all clip cumsum ravel squeeze".split():
    setattr(TracedArray, _name, _array_method(_name))
TracedArray.flatten = TracedArray.ravel


def _binary(ufunc_name: str, reflected: bool = False):
    def method(self, other):
        ufunc = getattr(_numpy(), ufunc_name)
        return ufunc(other, self) if reflected else ufunc(self, other)

    return method


_BINARY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "true_divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
}
for _op, _ufunc in _BINARY.items():
    setattr(TracedArray, f"__{_op}__", _binary(_ufunc))
    setattr(TracedArray, f"__r{_op}__", _binary(_ufunc, reflected=True))


def _in_place(self, other):
    raise _refuse("update an array in place (a += b writes the tensor it was made from)")


for _op in _BINARY:
    setattr(TracedArray, f"__i{_op}__", _in_place)
for _op, _ufunc in {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}.items():
    setattr(TracedArray, f"__{_op}__", _binary(_ufunc))
TracedArray.__eq__ = _binary("equal")
TracedArray.__ne__ = _binary("not_equal")
TracedArray.__hash__ = None
TracedArray.__neg__ = lambda self: _numpy().negative(self)
TracedArray.__abs__ = lambda self: _numpy().absolute(self)
TracedArray.__invert__ = lambda self: _numpy().invert(self)


# ---------------------------------------------------------------- NumPy functions as torch calls
def _dims(axis, ndim: int):
    if axis is None:
        return tuple(range(ndim))
    return axis if isinstance(axis, tuple) else (axis,)


def _reduction(torch_fn, *, float_input: bool = False):
    def translate(a, axis=None, dtype=None, out=None, keepdims=False, **rest):
        if out is not None or rest:
            raise _refuse(f"pass {', '.join(['out'] if out is not None else [] + sorted(rest))}= to a NumPy reduction")
        if float_input and not (a.is_floating_point() or a.is_complex()):
            a = a.to(torch.float64)  # (NumPy averages integers in float64)
        if dtype is not None:
            a = a.to(_torch_dtype(_numpy().dtype(dtype)))
        return torch_fn(a, _dims(axis, a.ndim), keepdims)

    return translate


def _std_var(torch_fn):
    def translate(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        if out is not None:
            raise _refuse("pass out= to a NumPy reduction")
        if not (a.is_floating_point() or a.is_complex()):
            a = a.to(torch.float64)
        return torch_fn(a, dim=_dims(axis, a.ndim), correction=ddof, keepdim=keepdims)

    return translate


def _arg_reduction(torch_fn):
    def translate(a, axis=None, out=None, keepdims=False):
        if out is not None:
            raise _refuse("pass out= to a NumPy reduction")
        if axis is None:
            result = torch_fn(a.reshape(-1), 0)
            return result.reshape((1,) * a.ndim) if keepdims else result
        return torch_fn(a, axis, keepdims)

    return translate


def _cumsum(a, axis=None, dtype=None, out=None):
    if out is not None:
        raise _refuse("pass out= to np.cumsum")
    if axis is None:
        a, axis = a.reshape(-1), 0
    return torch.cumsum(a, axis, dtype=None if dtype is None else _torch_dtype(_numpy().dtype(dtype)))


def _same(a, dtype=None, copy=None, **kwargs):
    if kwargs or dtype is not None:
        raise _refuse("convert an array with dtype= or other options")
    return a.clone() if copy else a


_FUNCTIONS = {
    "sum": _reduction(lambda a, dims, keep: torch.sum(a, dims, keepdim=keep)),
    "prod": _reduction(lambda a, dims, keep: _prod(a, dims, keep)),
    "mean": _reduction(lambda a, dims, keep: torch.mean(a, dims, keepdim=keep), float_input=True),
    "max": _reduction(lambda a, dims, keep: torch.amax(a, dims, keepdim=keep)),
    "amax": _reduction(lambda a, dims, keep: torch.amax(a, dims, keepdim=keep)),
    "min": _reduction(lambda a, dims, keep: torch.amin(a, dims, keepdim=keep)),
    "amin": _reduction(lambda a, dims, keep: torch.amin(a, dims, keepdim=keep)),
    "any": _reduction(lambda a, dims, keep: torch.any(a, dims, keepdim=keep)),
    "all": _reduction(lambda a, dims, keep: torch.all(a, dims, keepdim=keep)),
    "std": _std_var(torch.std),
    "var": _std_var(torch.var),
    "argmax": _arg_reduction(torch.argmax),
    "argmin": _arg_reduction(torch.argmin),
    "cumsum": _cumsum,
    "where": lambda condition, x, y: torch.where(condition, x, y),
    "clip": lambda a, a_min=None, a_max=None, **kw: torch.clamp(a, kw.get("min", a_min), kw.get("max", a_max)),
    "transpose": lambda a, axes=None: a.permute(*(reversed(range(a.ndim)) if axes is None else axes)),
    "reshape": lambda a, shape=None, order="C", **kw: a.reshape(kw.get("newshape", shape)),
    "ravel": lambda a, order="C": a.reshape(-1),
    "squeeze": lambda a, axis=None: a.squeeze() if axis is None else a.squeeze(axis),
    "expand_dims": lambda a, axis: a.unsqueeze(axis),
    "concatenate": lambda arrays, axis=0: torch.cat(list(arrays), axis),
    "stack": lambda arrays, axis=0: torch.stack(list(arrays), axis),
    "zeros_like": lambda a, dtype=None: torch.zeros_like(a),
    "ones_like": lambda a, dtype=None: torch.ones_like(a),
    "asarray": _same,
    "array": lambda a, dtype=None, copy=True, **kw: _same(a, dtype, copy, **kw),
}


def _prod(a, dims, keep):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, keepdim=keep)
    return a


def _operand(x):
    """An argument as the torch call takes it: the tensor of a stand-in array, a tensor of a real array."""
    if isinstance(x, TracedArray):
        return x._tensor
    np = _numpy()
    if isinstance(x, np.ndarray):
        return torch.as_tensor(x)  # (a constant of the program)
    if isinstance(x, np.generic):  # (a NumPy scalar has its own dtype, unlike a Python number)
        return torch.tensor(x.item(), dtype=_torch_dtype(x.dtype))
    return x


def _tree(x, leaf):
    """``x`` with ``leaf`` applied to its leaves, an array being one (a registered node elsewhere)."""
    return tree_map(leaf, x, is_leaf=lambda y: type(y) is TracedArray)


_RUNTIME_SIZE = (
    7919  # stands for a size known only when the program runs (nonzero's, a mask's): a prime, unlikely to meet
)


def _example_shape(shape) -> tuple[int, ...]:
    """``shape`` with each size known only when the program runs replaced by ``_RUNTIME_SIZE``."""
    out = []
    for s in shape:
        try:
            out.append(int(s))
        except Exception as e:
            if type(e).__name__ != "GuardOnDataDependentSymNode":
                raise
            out.append(_RUNTIME_SIZE)
    return tuple(out)


def _arrays(args, kwargs) -> list:
    found: list = []
    _tree((args, kwargs), lambda x: found.append(x) if isinstance(x, TracedArray) else x)
    return found


def _what_numpy_returns(np, func, args, kwargs):
    """NumPy's own result of ``func`` on zero-strided arrays of the inputs' dtypes and shapes (its dtype and shape)."""

    def example(x):
        if isinstance(x, TracedArray):
            return np.broadcast_to(np.zeros((), dtype=x.dtype), _example_shape(x.shape))
        return x

    try:
        with np.errstate(all="ignore"):
            result = func(*_tree(args, example), **_tree(kwargs, example))
    except Exception as e:
        if any(_RUNTIME_SIZE in _example_shape(x.shape) for x in _arrays(args, kwargs)):
            raise TracingError(
                f"thunder.jit cannot run np.{func.__name__} here: an array's size depends on tensor values (the "
                f"output of nonzero, a boolean mask) and is only known when the program runs, and NumPy refused the "
                f"call on a stand-in of that size ({type(e).__name__}: {e})\n  {_line()}\n"
                "Use the torch function of the same meaning on the tensor, or move this code out of the jitted "
                "function."
            ) from None
        if type(e).__module__ != "builtins":  # (another library's error keeps its own arguments and message)
            raise
        raise type(e)(f"{e}\n  {_line()}") from None
    return result if isinstance(result, (np.ndarray, np.generic)) else None


def _differ(shape: tuple, numpy_shape: tuple) -> bool:
    """Whether the translated result's shape differs from NumPy's (a size known only at run time matching any)."""
    return len(shape) != len(numpy_shape) or any(
        s != n and _RUNTIME_SIZE not in (s, n) for s, n in zip(shape, numpy_shape, strict=True)
    )


# ---------------------------------------------------------------- between tensors and arrays
def array_of(x: TracingTensor, force: bool = False) -> TracedArray:
    """``x.numpy()`` in the traced code: eager's errors, then the stand-in array (sharing ``x``'s values)."""
    if x.requires_grad and not force:
        raise RuntimeError(
            "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.\n  " + _line()
        )
    if x.device.type != "cpu" and not force:
        raise TypeError(
            f"can't convert {x.device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
            f"memory first.\n  {_line()}"
        )
    _numpy_dtype(x.dtype)  # (eager's TypeError for a dtype NumPy lacks, bfloat16)
    if force:
        x = x.detach().cpu()
    return TracedArray(x)


def tensor_of(func, array: TracedArray, kwargs) -> torch.Tensor:
    """``torch.as_tensor(a)``, ``torch.asarray(a)`` (sharing ``a``'s values) or ``torch.tensor(a)`` (a copy)."""
    t = array._tensor
    shares = FROM_ARRAY[func]
    unknown = set(kwargs) - {"dtype", "device", "copy"}
    if unknown:
        raise _refuse(f"pass {', '.join(sorted(unknown))}= to {func.__name__} of an array")
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    if shares and not kwargs.get("copy") and dtype in (None, t.dtype) and device in (None, t.device):
        return t.detach()  # a new tensor over the same values, no view (no ``_base``), as in eager
    out = t.to(dtype=dtype or t.dtype, device=device or t.device)
    return out.clone() if out is t else out


def _from_numpy(array):
    if not isinstance(array, TracedArray):
        return _original_from_numpy[0](array)
    return array._tensor.detach()  # (eager's shares the array's memory and is no view)


_original_from_numpy: list = [torch.from_numpy]


class patched_from_numpy:
    """While tracing (in this thread): ``torch.from_numpy`` of a stand-in array is its tensor (re-entrant).

    (``torch.from_numpy`` is not a torch function the tracing mode sees: it takes only ndarrays.)"""

    _depth = [0]

    def __enter__(self):
        if self._depth[0] == 0:
            original = torch.from_numpy
            _original_from_numpy[0] = original
            thread = threading.get_ident()

            def from_numpy(array):
                if threading.get_ident() != thread:  # eager code in another thread while this one traces
                    return original(array)
                return _from_numpy(array)

            from_numpy.__wrapped__ = original
            torch.from_numpy = from_numpy
        self._depth[0] += 1
        return self

    def __exit__(self, *exc):
        self._depth[0] -= 1
        if self._depth[0] == 0:
            torch.from_numpy = _original_from_numpy[0]
        return False


def _unflatten_array(scalar, children):
    (t,) = children
    if isinstance(t, torch.Tensor) and not isinstance(t, TracingTensor):
        array = t.detach().numpy()  # the program's output: eager's real ndarray (or NumPy scalar)
        return array[()] if scalar else array
    return TracedArray(t, scalar)


# an array the function returns: its tensor is an output of the program, made an ndarray after the call
register_node(TracedArray, lambda a: ([a._tensor], a._scalar), _unflatten_array)
