"""Proxies: the values a trace computes on. ``TensorProxy`` carries a tensor's metadata.

Meta functions, checkers and transforms receive proxies; their metadata is thunder's
(``thunder.core.dtypes.dtype``, ``thunder.core.devices.Device``). Operators and methods on a
``TensorProxy`` (``a * b``, ``a.contiguous()``) dispatch to the torch language, which registers
them here through :func:`register_method` (the core layer never imports it).
"""

from __future__ import annotations

from numbers import Number
from typing import Any

from torch import SymInt

from thunder.core import devices, dtypes
from thunder.core.trace import get_tracectx

__all__ = ["Proxy", "TensorProxy", "NumberProxy", "RuntimeValueProxy", "register_method", "pyval", "is_proxy"]

_methods: dict[str, Any] = {}
_fallback_counter = [0]


def register_method(name: str, fn) -> None:
    """Makes ``TensorProxy.<name>`` call ``fn(proxy, ...)`` (used by the torch language)."""
    _methods[name] = fn


def _new_name(prefix: str) -> str:
    trace = get_tracectx()
    if trace is not None:
        return trace.make_name(prefix)
    _fallback_counter[0] += 1
    return f"{prefix}_untraced{_fallback_counter[0]}"


class Proxy:
    """A named value in a trace."""

    __slots__ = ("name",)

    def __init__(self, name: str | None = None, prefix: str = "p"):
        self.name = name if name is not None else _new_name(prefix)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def type_string(self) -> str:
        return type(self).__name__


def plain_sizes(shape: tuple) -> bool:
    """Whether every size in ``shape`` is a plain ``int`` (none symbolic)."""
    for s in shape:
        if type(s) is not int:
            return False
    return True


class TensorProxy(Proxy):
    """Stands for a tensor in a trace: ``shape``, ``dtype``, ``device``, ``requires_grad``.

    ``TensorProxy(like=x)`` copies ``x``'s metadata; keyword arguments override it.
    """

    __slots__ = ("shape", "dtype", "device", "requires_grad", "ndim", "nondifferentiable")

    def __init__(
        self,
        name: str | None = None,
        *,
        like: TensorProxy | None = None,
        shape=None,
        dtype=None,
        device=None,
        requires_grad: bool | None = None,
        prefix: str = "t",
    ):
        Proxy.__init__(self, name, prefix)
        if like is not None:
            shape = like.shape if shape is None else shape
            dtype = like.dtype if dtype is None else dtype
            device = like.device if device is None else device
            requires_grad = like.requires_grad if requires_grad is None else requires_grad
        if shape is None or dtype is None or device is None:
            raise ValueError("TensorProxy needs a shape, a dtype and a device (or like=)")
        # a dimension is an int, or a torch.SymInt when it is traced symbolically (thunder.core.symbolic)
        if type(shape) is not tuple or not plain_sizes(shape):
            shape = tuple(s if type(s) is SymInt else int(s) for s in shape)
        self.shape = shape
        self.dtype = dtypes.to_dtype(dtype)
        self.device = devices.to_device(device)
        self.requires_grad = bool(requires_grad)
        self.ndim = len(self.shape)

    def type_string(self) -> str:
        shape = self.shape
        sizes = ", ".join(map(str, shape)) if plain_sizes(shape) else ", ".join(_size_string(s) for s in shape)
        return f"{self.device} {self.dtype.short_name}[{sizes}]"

    def __repr__(self) -> str:
        return f'<TensorProxy {self.name}: "{self.type_string()}">'

    # tensor-like queries answered from metadata
    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_floating_point(self) -> bool:
        return self.dtype.kind == "float"

    def is_complex(self) -> bool:
        return self.dtype.kind == "complex"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self):
        raise RuntimeError(
            f"the value of tensor {self.name} is not known while tracing; it cannot be converted to a Python bool"
        )

    def __getattr__(self, name: str):
        fn = _methods.get(name)
        if fn is None:
            raise AttributeError(f"TensorProxy has no attribute or method {name!r}")
        return lambda *args, **kwargs: fn(self, *args, **kwargs)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(_methods["unbind"](self, 0))

    # operators
    def __add__(self, other):
        return _methods["add"](self, other)

    def __radd__(self, other):
        return _methods["add"](other, self)

    def __sub__(self, other):
        return _methods["sub"](self, other)

    def __rsub__(self, other):
        return _methods["sub"](other, self)

    def __mul__(self, other):
        return _methods["mul"](self, other)

    def __rmul__(self, other):
        return _methods["mul"](other, self)

    def __truediv__(self, other):
        return _methods["true_divide"](self, other)

    def __rtruediv__(self, other):
        return _methods["true_divide"](other, self)

    def __floordiv__(self, other):
        return _methods["floor_divide"](self, other)

    def __rfloordiv__(self, other):
        return _methods["floor_divide"](other, self)

    def __mod__(self, other):
        return _methods["remainder"](self, other)

    def __pow__(self, other):
        return _methods["pow"](self, other)

    def __rpow__(self, other):
        return _methods["pow"](other, self)

    def __matmul__(self, other):
        return _methods["matmul"](self, other)

    def __rmatmul__(self, other):
        return _methods["matmul"](other, self)

    def __neg__(self):
        return _methods["neg"](self)

    def __abs__(self):
        return _methods["abs"](self)

    def __invert__(self):
        return _methods["bitwise_not"](self)

    def __and__(self, other):
        return _methods["bitwise_and"](self, other)

    def __or__(self, other):
        return _methods["bitwise_or"](self, other)

    def __xor__(self, other):
        return _methods["bitwise_xor"](self, other)

    def __eq__(self, other):
        return _methods["eq"](self, other)

    def __ne__(self, other):
        return _methods["ne"](self, other)

    def __lt__(self, other):
        return _methods["lt"](self, other)

    def __le__(self, other):
        return _methods["le"](self, other)

    def __gt__(self, other):
        return _methods["gt"](self, other)

    def __ge__(self, other):
        return _methods["ge"](self, other)

    def __getitem__(self, key):
        return _methods["getitem"](self, key)

    __hash__ = object.__hash__

    @property
    def T(self):
        return _methods["t"](self) if self.ndim == 2 else _methods["permute"](self, *reversed(range(self.ndim)))

    @property
    def mT(self):
        return _methods["transpose"](self, -2, -1)


class NumberProxy(Proxy):
    """A Python number in a trace whose value is known (traces specialise on numbers) but named."""

    __slots__ = ("value", "python_type")

    def __init__(self, name: str | None = None, *, value: Number, prefix: str = "n"):
        Proxy.__init__(self, name, prefix)
        self.value = value
        self.python_type = type(value)

    def type_string(self) -> str:
        return f"{self.python_type.__name__} {self.value}"


# the tracer's refusal of a computation on a RuntimeValueProxy: raises its data-dependent error naming the user's
# line (set by thunder.tracing; this layer cannot import it)
_runtime_value_refusal: list = [None]


def set_runtime_value_refusal(fn) -> None:
    """``fn(proxy, what)`` raises the error for code that computes on a value known only at run time."""
    _runtime_value_refusal[0] = fn


class RuntimeValueProxy(Proxy):
    """A Python value (the ``bool`` of ``torch.equal``/``torch.allclose``) the program computes from tensor data
    when it runs: unknown while tracing, so the traced code may return it but not branch or compute on it (``if``,
    ``not``, ``int()``, arithmetic, comparisons, passing it to a torch call raise, naming the line).

    ``origin`` says which call made it (``"torch.allclose"``), ``where`` the user's line of that call."""

    __slots__ = ("python_type", "origin", "where")

    def __init__(self, name: str | None = None, *, python_type: type, origin: str, prefix: str = "r"):
        Proxy.__init__(self, name, prefix)
        self.python_type = python_type
        self.origin = origin
        self.where = None  # the user's line that made it, as the tracer describes it (set by the tracer)

    def type_string(self) -> str:
        return f"{self.python_type.__name__} (computed when the program runs)"

    def refuse(self, what: str):
        """Raises the error for ``what`` (a phrase: "convert it to a Python bool") done to this value."""
        what = f"{what} the {self.python_type.__name__} that {self.origin} returns (computed from tensor values)"
        if _runtime_value_refusal[0] is not None:
            _runtime_value_refusal[0](self, what)
        raise RuntimeError(f"cannot {what} while tracing: its value only exists when the program runs")

    def __bool__(self):
        self.refuse("branch on (an `if`, `while`, `and`/`or`, `not` or `assert` on)")

    def __index__(self):
        self.refuse("use as an index or size")

    def __int__(self):
        self.refuse("convert to int")

    def __float__(self):
        self.refuse("convert to float")

    def __complex__(self):
        self.refuse("convert to complex")

    def __eq__(self, other):
        self.refuse("compare (==)")

    def __ne__(self, other):
        self.refuse("compare (!=)")

    def __str__(self):
        self.refuse("convert to a string")

    def __format__(self, spec):
        self.refuse("format")

    __hash__ = object.__hash__


def _refuse_operator(name: str):
    def op(self, *args):
        self.refuse(f"compute with ({name})")

    op.__name__ = name
    return op


for _name in (
    "add sub mul truediv floordiv mod pow and or xor lshift rshift matmul divmod "
    "radd rsub rmul rtruediv rfloordiv rmod rpow rand ror rxor rlshift rrshift rmatmul rdivmod "
    "lt le gt ge neg pos abs invert round trunc floor ceil"
).split():
    setattr(RuntimeValueProxy, f"__{_name}__", _refuse_operator(f"__{_name}__"))
del _name


def _size_string(s) -> str:
    if type(s) is SymInt:
        from thunder.core.symbolic import print_size

        return print_size(s)
    return str(s)


def is_proxy(x) -> bool:
    return isinstance(x, Proxy)


def pyval(x):
    """The Python value of a number or number proxy."""
    return x.value if isinstance(x, NumberProxy) else x
