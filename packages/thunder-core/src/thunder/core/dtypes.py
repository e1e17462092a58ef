"""Thunder's dtypes: one object per element type, with conversions to and from ``torch.dtype``.

Meta functions and checkers see these; user code running under the tracer sees ``torch.dtype``.
Every function here also accepts a ``torch.dtype`` so callers never have to convert first, and a
thunder dtype compares equal (``==``, with the same hash) to the ``torch.dtype`` it stands for.
"""

from __future__ import annotations

import torch

__all__ = [
    "dtype",
    "torch_message_name",
    "message_name",
    "to_dtype",
    "to_torch_dtype",
    "is_boolean_dtype",
    "is_integer_dtype",
    "is_float_dtype",
    "is_complex_dtype",
    "is_inexact_dtype",
    "corresponding_real_dtype",
]


class dtype:
    """An element type. ``kind`` is one of ``bool``, ``int``, ``float``, ``complex``."""

    __slots__ = ("name", "short_name", "kind", "bytes", "torch_dtype", "is_signed")

    def __init__(self, name: str, short_name: str, kind: str, nbytes: int, torch_dtype: torch.dtype, signed=True):
        self.name = name
        self.short_name = short_name
        self.kind = kind
        self.bytes = nbytes
        self.torch_dtype = torch_dtype
        self.is_signed = signed

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    __str__ = __repr__

    # A checker or meta function that compares with a torch dtype (``a.dtype == torch.float32``,
    # ``a.dtype in (torch.float16, torch.bfloat16)``) means the same element type: equal, with the
    # same hash. (``a.dtype is torch.float32`` is still False: compare with ``==``.)
    def __eq__(self, other: object) -> bool:
        if isinstance(other, dtype):
            return self is other
        if isinstance(other, torch.dtype):
            return self.torch_dtype == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.torch_dtype)

    def __reduce__(self):
        return (to_dtype, (self.torch_dtype,))

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"


bool8 = dtype("bool8", "b8", "bool", 1, torch.bool, signed=False)
uint8 = dtype("uint8", "u8", "int", 1, torch.uint8, signed=False)
# PyTorch's "shell" unsigned dtypes: few kernels, no type promotion with other dtypes (torch.promote_types refuses
# it as eager does); torch.hash_tensor returns uint64
uint16 = dtype("uint16", "u16", "int", 2, torch.uint16, signed=False)
uint32 = dtype("uint32", "u32", "int", 4, torch.uint32, signed=False)
uint64 = dtype("uint64", "u64", "int", 8, torch.uint64, signed=False)
int8 = dtype("int8", "i8", "int", 1, torch.int8)
int16 = dtype("int16", "i16", "int", 2, torch.int16)
int32 = dtype("int32", "i32", "int", 4, torch.int32)
int64 = dtype("int64", "i64", "int", 8, torch.int64)
bfloat16 = dtype("bfloat16", "bf16", "float", 2, torch.bfloat16)
float16 = dtype("float16", "f16", "float", 2, torch.float16)
float32 = dtype("float32", "f32", "float", 4, torch.float32)
float64 = dtype("float64", "f64", "float", 8, torch.float64)
float8_e4m3fn = dtype("float8_e4m3fn", "f8_e4m3fn", "float", 1, torch.float8_e4m3fn)
float8_e5m2 = dtype("float8_e5m2", "f8_e5m2", "float", 1, torch.float8_e5m2)
complex32 = dtype("complex32", "c32", "complex", 4, torch.complex32)
complex64 = dtype("complex64", "c64", "complex", 8, torch.complex64)
complex128 = dtype("complex128", "c128", "complex", 16, torch.complex128)

all_dtypes = (
    bool8,
    uint8,
    uint16,
    uint32,
    uint64,
    int8,
    int16,
    int32,
    int64,
    bfloat16,
    float16,
    float32,
    float64,
    float8_e4m3fn,
    float8_e5m2,
    complex32,
    complex64,
    complex128,
)

_from_torch: dict[torch.dtype, dtype] = {d.torch_dtype: d for d in all_dtypes}
_python_types = {bool: bool8, int: int64, float: float32, complex: complex64}


def to_dtype(x) -> dtype | None:
    """Converts a ``torch.dtype``, a thunder dtype, a tensor (or proxy), or a Python number type to a thunder dtype."""
    if x is None:
        return None
    if isinstance(x, dtype):
        return x
    if isinstance(x, torch.dtype):
        try:
            return _from_torch[x]
        except KeyError:
            raise NotImplementedError(f"thunder does not support the torch dtype {x}") from None
    if isinstance(x, type) and x in _python_types:
        return _python_types[x]
    d = getattr(x, "dtype", None)
    if d is not None:
        return to_dtype(d)
    if isinstance(x, torch.SymInt):
        return _python_types[int]
    if isinstance(x, torch.SymFloat):
        return _python_types[float]
    if isinstance(x, (bool, int, float, complex)):
        return _python_types[type(x)] if type(x) in _python_types else _python_types[_python_type_of(x)]
    raise TypeError(f"cannot interpret {x!r} as a dtype")


def _python_type_of(x):
    for t in (bool, int, float, complex):
        if isinstance(x, t):
            return t
    raise TypeError(f"{x!r} is not a number")


def to_torch_dtype(x) -> torch.dtype | None:
    """Converts a thunder dtype (or a ``torch.dtype``) to a ``torch.dtype``."""
    if x is None or isinstance(x, torch.dtype):
        return x
    return to_dtype(x).torch_dtype


def is_boolean_dtype(d) -> bool:
    return to_dtype(d).kind == "bool"


def is_integer_dtype(d) -> bool:
    """True for integer dtypes, bool included (as in PyTorch's ``is_integral(include_bool=True)``)."""
    return to_dtype(d).kind in ("int", "bool")


def is_float_dtype(d) -> bool:
    return to_dtype(d).kind == "float"


def is_complex_dtype(d) -> bool:
    return to_dtype(d).kind == "complex"


def is_inexact_dtype(d) -> bool:
    return to_dtype(d).kind in ("float", "complex")


def is_low_precision_dtype(d) -> bool:
    return to_dtype(d) in (bfloat16, float16, float8_e4m3fn, float8_e5m2)


def corresponding_real_dtype(d) -> dtype:
    d = to_dtype(d)
    return {complex32: float16, complex64: float32, complex128: float64}.get(d, d)


def corresponding_complex_dtype(d) -> dtype:
    d = to_dtype(d)
    return {float16: complex32, float32: complex64, float64: complex128, bfloat16: complex64}.get(d, d)


_kind_rank = {"bool": 0, "int": 1, "float": 2, "complex": 3}


def kind_rank(d) -> int:
    return _kind_rank[to_dtype(d).kind]


# PyTorch's names for dtypes in its error messages (c10's ScalarType names)
_TORCH_MESSAGE_NAMES = {
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def torch_message_name(torch_dtype: torch.dtype) -> str | None:
    """PyTorch's name for ``torch_dtype`` in its error messages (``Float``, ``Long``), or None where it is not listed."""
    return _TORCH_MESSAGE_NAMES.get(torch_dtype)


def message_name(d) -> str:
    """PyTorch's name for a dtype (thunder's or ``torch.dtype``) in its error messages, the ``torch.dtype``'s own
    name where it is not listed."""
    t = to_torch_dtype(d)
    return _TORCH_MESSAGE_NAMES.get(t) or str(t)


# the C++ type of each dtype, as the messages of PyTorch's matrix-product kernels print it (``float != double``)
_CPP_TYPE_NAMES = {
    torch.bool: "bool",
    torch.uint8: "unsigned char",
    torch.int8: "signed char",
    torch.int16: "short int",
    torch.int32: "int",
    torch.int64: "long int",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def cpp_type_name(torch_dtype: torch.dtype) -> str:
    """The C++ type PyTorch's kernels name ``torch_dtype`` by in some messages (``float``, ``c10::Half``); the
    dtype's own name where it is not listed."""
    return _CPP_TYPE_NAMES.get(torch_dtype, str(torch_dtype))
