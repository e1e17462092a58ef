"""Which prims nvFuser takes (checkers) and how each becomes nvFuser ``FusionDefinition`` calls.

Each supported prim has a :class:`Lowering`: a checker with the prim's signature (only CUDA
tensors of dtypes nvFuser handles, plus per-prim conditions) and a function that records the
prim on a ``FusionDefinition`` through nvFuser's Python API, ``nvfuser_direct``
(``fd.define_tensor``, ``fd.define_scalar``, ``fd.ops.<op>``, ``fd.add_output``; every name and
keyword is checked against nvFuser's bindings by ``tests/test_api_names.py``).

:func:`lower_region` writes a whole region: its inputs become ``define_tensor`` /
``define_scalar`` inputs, its bound symbols are lowered in order (a torch-language symbol
through its decomposition), its outputs become ``add_output``. It takes the ``FusionDefinition``
and nvFuser's ``DataType`` as arguments, so it runs (and is tested) against a recording stand-in
without nvFuser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Number
from typing import Any

from thunder.core import dtypes, prims
from thunder.core.devices import DeviceType, to_device
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol

__all__ = [
    "Lowering",
    "LOWERINGS",
    "SUPPORTED_DTYPES",
    "nvfuser_dtype_name",
    "contiguous_descriptor",
    "LoweringContext",
    "lower_region",
    "supported_prim_names",
]

# thunder dtype -> the name of nvFuser's DataType member
_DTYPE_NAMES = {
    dtypes.bool8: "Bool",
    dtypes.int32: "Int32",
    dtypes.int64: "Int",
    dtypes.bfloat16: "BFloat16",
    dtypes.float16: "Half",
    dtypes.float32: "Float",
    dtypes.float64: "Double",
    dtypes.complex64: "ComplexFloat",
    dtypes.complex128: "ComplexDouble",
    dtypes.float8_e4m3fn: "Float8_e4m3fn",
    dtypes.float8_e5m2: "Float8_e5m2",
}
SUPPORTED_DTYPES = frozenset(_DTYPE_NAMES)
"""Tensor dtypes nvFuser takes (no int8/int16/uint8 tensors, no complex32)."""

_FP8 = frozenset({dtypes.float8_e4m3fn, dtypes.float8_e5m2})  # storage only: casts in and out


def nvfuser_dtype_name(dtype) -> str:
    """The name of nvFuser's ``DataType`` member for a thunder dtype (``float32`` -> ``"Float"``)."""
    return _DTYPE_NAMES[dtypes.to_dtype(dtype)]


def _scalar_dtype_name(value) -> str:
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Int"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, complex):
        return "ComplexDouble"
    raise TypeError(f"nvFuser cannot take the scalar {value!r} of type {type(value).__name__}")


def contiguous_descriptor(shape: Sequence[int]) -> tuple[list[bool | None], list[int]]:
    """``(contiguity, stride_order)`` of a contiguous tensor of ``shape`` as ``define_tensor`` takes them.

    Size-1 dims are broadcast dims (contiguity ``None``); ``stride_order[i]`` is dim ``i``'s rank
    from the innermost (0) outwards. nvFuser's own ``compute_tensor_descriptor`` gives these for
    any strides; this covers the contiguous case without nvFuser.
    """
    n = len(shape)
    return [None if s == 1 else True for s in shape], list(range(n - 1, -1, -1))


# ---------------------------------------------------------------- checkers


def _is_cuda_tensor(x) -> bool:
    return isinstance(x, TensorProxy) and x.device.devicetype is DeviceType.CUDA and x.dtype in SUPPORTED_DTYPES


def _is_scalar(x) -> bool:
    return isinstance(x, NumberProxy) or (isinstance(x, Number) and not isinstance(x, TensorProxy))


def _tensors_ok(*args, allow_fp8: bool = False) -> bool:
    """All tensors are CUDA tensors of supported dtypes, all other values scalars; at least one tensor."""
    seen = False
    for a in args:
        if isinstance(a, TensorProxy):
            if not _is_cuda_tensor(a) or (a.dtype in _FP8 and not allow_fp8):
                return False
            seen = True
        elif not _is_scalar(a):
            return False
    return seen


def _cuda_device(device) -> bool:
    try:
        return to_device(device).devicetype is DeviceType.CUDA
    except (TypeError, NotImplementedError, ValueError):
        return False


def _int_list(xs) -> bool:
    return isinstance(xs, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in xs)


# ---------------------------------------------------------------- lowering context


class LoweringContext:
    """The state of lowering one region: the ``FusionDefinition``, nvFuser's ``DataType`` and the values so far."""

    def __init__(self, fd: Any, datatype: Any):
        self.fd = fd
        self.DataType = datatype
        self.values: dict[str, Any] = {}  # proxy name -> nvFuser Tensor/Scalar

    def dtype(self, dtype) -> Any:
        return getattr(self.DataType, nvfuser_dtype_name(dtype))

    def scalar(self, value, dtype_name: str | None = None) -> Any:
        """A constant scalar (``fd.define_scalar(value, dtype=...)``)."""
        if isinstance(value, NumberProxy):
            if value.name in self.values:
                return self.values[value.name]
            value = value.value
        name = dtype_name or _scalar_dtype_name(value)
        return self.fd.define_scalar(value, dtype=getattr(self.DataType, name))

    def value(self, x) -> Any:
        """The nvFuser value for a tensor proxy (already defined) or a number (defined here)."""
        if isinstance(x, TensorProxy):
            return self.values[x.name]
        return self.scalar(x)


@dataclass(frozen=True)
class Lowering:
    """How one prim is lowered: ``checker(*args, **kwargs)`` and ``lower(ctx, *args, **kwargs)``.

    ``option``: the executor option that must be on for nvFuser to take the prim (``None``: always).
    """

    checker: Callable[..., bool]
    lower: Callable[..., Any]
    option: str | None = None


LOWERINGS: dict[str, Lowering] = {}
"""Prim id -> :class:`Lowering`, for every prim the nvFuser executor can take."""


def _register(prim: Symbol, checker: Callable[..., bool], *, option: str | None = None):
    def deco(fn):
        LOWERINGS[prim.id] = Lowering(checker, fn, option)
        return fn

    return deco


def supported_prim_names(options: Sequence[str] = ()) -> list[str]:
    """The names of the prims nvFuser takes with the given options switched on."""
    return sorted(
        lw_id.removeprefix("prims.") for lw_id, lw in LOWERINGS.items() if lw.option is None or lw.option in options
    )


# ---------------------------------------------------------------- elementwise

# thunder prim name -> nvFuser op name
_UNARY = {
    n: n
    for n in (
        "abs neg exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
        "sqrt rsqrt reciprocal erf erfc erfinv lgamma sign floor ceil round trunc bitwise_not "
        "isfinite isnan isinf signbit"
    ).split()
}
_BINARY = {
    **{
        n: n
        for n in (
            "add sub mul div pow maximum minimum fmod remainder atan2 bitwise_and bitwise_or bitwise_xor "
            "nextafter eq ne lt le gt ge"
        ).split()
    },
    "shift_left": "bitwise_left_shift",
    "shift_right_arithmetic": "bitwise_right_shift",
}
# prims.div truncates on integers and divides exactly on floats: nvFuser's div does the same.


def _unary_checker(a) -> bool:
    return isinstance(a, TensorProxy) and _tensors_ok(a)


def _binary_checker(a, b) -> bool:
    return _tensors_ok(a, b)


def _make_unary(op_name: str):
    def lower(ctx: LoweringContext, a):
        return getattr(ctx.fd.ops, op_name)(ctx.value(a))

    return lower


def _make_binary(op_name: str):
    def lower(ctx: LoweringContext, a, b):
        return getattr(ctx.fd.ops, op_name)(ctx.value(a), ctx.value(b))

    return lower


for _name, _op in _UNARY.items():
    _register(getattr(prims, _name), _unary_checker)(_make_unary(_op))
for _name, _op in _BINARY.items():
    _register(getattr(prims, _name), _binary_checker)(_make_binary(_op))


@_register(prims.where, lambda pred, a, b: _tensors_ok(pred, a, b))
def _where(ctx: LoweringContext, pred, a, b):
    return ctx.fd.ops.where(ctx.value(pred), ctx.value(a), ctx.value(b))


def _convert_checker(a, dtype) -> bool:
    try:
        target = dtypes.to_dtype(dtype)
    except (TypeError, NotImplementedError):
        return False
    return isinstance(a, TensorProxy) and _tensors_ok(a, allow_fp8=True) and target in SUPPORTED_DTYPES


@_register(prims.convert_element_type, _convert_checker)
def _convert_element_type(ctx: LoweringContext, a, dtype):
    return ctx.fd.ops.cast(ctx.value(a), dtype=ctx.dtype(dtype))


# ---------------------------------------------------------------- shape


def _one_tensor(a) -> bool:
    return isinstance(a, TensorProxy) and _tensors_ok(a)


@_register(prims.broadcast_in_dim, lambda a, shape, dims: _one_tensor(a) and _int_list(shape) and _int_list(dims))
def _broadcast_in_dim(ctx: LoweringContext, a, shape, broadcast_dimensions):
    return ctx.fd.ops.broadcast_in_dim(ctx.value(a), shape=list(shape), broadcast_dims=list(broadcast_dimensions))


@_register(prims.reshape, lambda a, shape: _one_tensor(a) and _int_list(shape))
def _reshape(ctx: LoweringContext, a, shape):
    return ctx.fd.ops.reshape(ctx.value(a), new_shape=list(shape))


@_register(prims.transpose, lambda a, perm: _one_tensor(a) and _int_list(perm))
def _transpose(ctx: LoweringContext, a, permutation):
    return ctx.fd.ops.permute(ctx.value(a), dims=list(permutation))


def _slice_checker(a, start, end, strides=None) -> bool:
    return _one_tensor(a) and _int_list(start) and _int_list(end) and (strides is None or _int_list(strides))


@_register(prims.slice, _slice_checker)
def _slice(ctx: LoweringContext, a, start_indices, end_indices, strides=None):
    strides = list(strides) if strides is not None else [1] * len(start_indices)
    return ctx.fd.ops.slice(
        ctx.value(a), start_indices=list(start_indices), end_indices=list(end_indices), strides=strides
    )


@_register(prims.squeeze, lambda a, dims: _one_tensor(a) and _int_list(dims))
def _squeeze(ctx: LoweringContext, a, dims):
    dims = sorted(d % a.ndim for d in dims) if a.ndim else []
    return ctx.fd.ops.squeeze(ctx.value(a), dims=dims)


def _cat_checker(tensors, dim) -> bool:
    return (
        isinstance(tensors, (tuple, list))
        and len(tensors) > 0
        and all(isinstance(t, TensorProxy) for t in tensors)
        and _tensors_ok(*tensors)
        and isinstance(dim, int)
    )


@_register(prims.cat, _cat_checker)
def _cat(ctx: LoweringContext, tensors, dim):
    ndim = tensors[0].ndim
    return ctx.fd.ops.cat([ctx.value(t) for t in tensors], dim=dim % ndim if ndim else 0)


def _pad_checker(a, padding_value, padding_config) -> bool:
    return (
        _one_tensor(a)
        and _is_scalar(padding_value)
        and all(len(c) == 3 and c[2] == 0 and c[0] >= 0 and c[1] >= 0 for c in padding_config)
    )


@_register(prims.pad, _pad_checker)
def _pad(ctx: LoweringContext, a, padding_value, padding_config):
    # nvFuser's pad widths run from the last dim backwards: [lo_last, hi_last, lo_prev, hi_prev, ...]
    widths: list[int] = []
    for lo, hi, _ in reversed(padding_config):
        widths += [lo, hi]
    value = ctx.scalar(padding_value, _pad_value_dtype(a))
    return ctx.fd.ops.pad(ctx.value(a), pad_widths=widths, value=value)


def _pad_value_dtype(a: TensorProxy) -> str:
    if dtypes.is_boolean_dtype(a.dtype):
        return "Bool"
    if dtypes.is_integer_dtype(a.dtype):
        return "Int"
    if dtypes.is_complex_dtype(a.dtype):
        return "ComplexDouble"
    return "Double"


@_register(prims.clone, _one_tensor)
def _clone(ctx: LoweringContext, a):
    return ctx.fd.ops.set(ctx.value(a))


def _take_checker(a, index, dim) -> bool:
    return (
        _one_tensor(a)
        and _one_tensor(index)
        and index.dtype in (dtypes.int32, dtypes.int64)
        and index.ndim == 1
        and a.ndim >= 1
        and isinstance(dim, int)
    )


@_register(prims.take, _take_checker)
def _take(ctx: LoweringContext, a, index, dim):
    return ctx.fd.ops.index_select(ctx.value(a), ctx.value(index), dim=dim % a.ndim)


def _take_along_axis_checker(a, index, dim) -> bool:
    return (
        _one_tensor(a)
        and _one_tensor(index)
        and index.dtype in (dtypes.int32, dtypes.int64)
        and index.ndim == a.ndim >= 1
        and isinstance(dim, int)
    )


@_register(prims.take_along_axis, _take_along_axis_checker)
def _take_along_axis(ctx: LoweringContext, a, index, dim):
    return ctx.fd.ops.take_along_axis(ctx.value(a), ctx.value(index), dim=dim % a.ndim)


# ---------------------------------------------------------------- reductions

_REDUCTIONS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}
_LOW_PRECISION = (dtypes.bfloat16, dtypes.float16)


def _reduction_checker(a, dims) -> bool:
    return _one_tensor(a) and _int_list(dims) and not dtypes.is_complex_dtype(a.dtype)


def _make_reduction(op_name: str):
    def lower(ctx: LoweringContext, a, dims):
        if not dims:  # nothing to reduce: a copy, as the torch executor does
            return ctx.fd.ops.set(ctx.value(a))
        dims = sorted({d % a.ndim for d in dims})
        op = getattr(ctx.fd.ops, op_name)
        if op_name in ("sum", "prod") and a.dtype in _LOW_PRECISION:
            # accumulate in float32, as PyTorch does, and round once at the end
            upcast = ctx.fd.ops.cast(ctx.value(a), dtype=ctx.DataType.Float)
            return ctx.fd.ops.cast(op(upcast, dims, False, ctx.DataType.Float), dtype=ctx.dtype(a.dtype))
        # the output dtype is the input's: thunder's prims don't promote
        return op(ctx.value(a), dims, False, ctx.dtype(a.dtype))

    return lower


for _name, _op in _REDUCTIONS.items():
    _register(getattr(prims, _name), _reduction_checker)(_make_reduction(_op))


def _var_checker(a, dims, *, correction) -> bool:
    return (
        _reduction_checker(a, dims)
        and len(dims) > 0
        and dtypes.is_float_dtype(a.dtype)
        and isinstance(correction, (int, float))
        and float(correction).is_integer()
    )


@_register(prims.var, _var_checker)
def _var(ctx: LoweringContext, a, dims, *, correction):
    dims = sorted({d % a.ndim for d in dims})
    return ctx.fd.ops.var(ctx.value(a), dims=dims, correction=int(correction), keepdim=False)


# ---------------------------------------------------------------- factories


def _factory_checker(shape, *, device, dtype) -> bool:
    return _int_list(shape) and _cuda_device(device) and dtypes.to_dtype(dtype) in SUPPORTED_DTYPES


def _fill_dtype(dtype) -> str:
    d = dtypes.to_dtype(dtype)
    if dtypes.is_boolean_dtype(d):
        return "Bool"
    if dtypes.is_integer_dtype(d):
        return "Int"
    if dtypes.is_complex_dtype(d):
        return "ComplexDouble"
    return "Double"


@_register(
    prims.full,
    lambda shape, fill_value, *, device, dtype: (
        _is_scalar(fill_value)
        and _factory_checker(shape, device=device, dtype=dtype)
        and dtypes.to_dtype(dtype) not in _FP8
    ),
)
def _full(ctx: LoweringContext, shape, fill_value, *, device, dtype):
    value = ctx.scalar(fill_value, _fill_dtype(dtype))
    return ctx.fd.ops.full(shape=list(shape), fill_value=value, dtype=ctx.dtype(dtype))


def _iota_checker(length, *, start, step, device, dtype) -> bool:
    d = dtypes.to_dtype(dtype)
    return (
        isinstance(length, int)
        and _is_scalar(start)
        and _is_scalar(step)
        and _cuda_device(device)
        and d in (dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64)
    )


@_register(prims.iota, _iota_checker)
def _iota(ctx: LoweringContext, length, *, start, step, device, dtype):
    kind = _fill_dtype(dtype)
    return ctx.fd.ops.iota(
        ctx.scalar(length, "Int"),
        ctx.scalar(start, kind),
        ctx.scalar(step, kind),
        dtype=ctx.dtype(dtype),
    )


def _random_checker(shape, a, b, *, device, dtype) -> bool:
    d = dtypes.to_dtype(dtype)
    return (
        _int_list(shape)
        and _is_scalar(a)
        and _is_scalar(b)
        and _cuda_device(device)
        and d in (dtypes.bfloat16, dtypes.float16, dtypes.float32, dtypes.float64)
    )


@_register(prims.uniform, _random_checker, option="random")
def _uniform(ctx: LoweringContext, shape, minval, maxval, *, device, dtype):
    return ctx.fd.ops.uniform(
        ctx.scalar(minval, "Double"), ctx.scalar(maxval, "Double"), list(shape), dtype=ctx.dtype(dtype)
    )


@_register(
    prims.randn,
    lambda shape, *, device, dtype: _random_checker(shape, 0.0, 1.0, device=device, dtype=dtype),
    option="random",
)
def _randn(ctx: LoweringContext, shape, *, device, dtype):
    return ctx.fd.ops.normal(ctx.scalar(0.0, "Double"), ctx.scalar(1.0, "Double"), list(shape), dtype=ctx.dtype(dtype))


# ---------------------------------------------------------------- matmul (behind options)

_MATMUL_DTYPES = (dtypes.bfloat16, dtypes.float16, dtypes.float32)


def _matmul_checker(a, b) -> bool:
    return _one_tensor(a) and _one_tensor(b) and a.dtype is b.dtype and a.dtype in _MATMUL_DTYPES and a.ndim >= 1


@_register(prims.matmul, _matmul_checker, option="matmul")
def _matmul(ctx: LoweringContext, a, b):
    return ctx.fd.ops.matmul(ctx.value(a), ctx.value(b))


def _linear_checker(a, w, bias) -> bool:
    return (
        _one_tensor(a)
        and _one_tensor(w)
        and a.dtype is w.dtype
        and a.dtype in _MATMUL_DTYPES
        and (bias is None or (_one_tensor(bias) and bias.dtype is a.dtype))
    )


@_register(prims.linear, _linear_checker, option="linear")
def _linear(ctx: LoweringContext, a, w, bias):
    if bias is None:
        return ctx.fd.ops.linear(ctx.value(a), ctx.value(w))
    return ctx.fd.ops.linear(ctx.value(a), ctx.value(w), ctx.value(bias))


# ---------------------------------------------------------------- regions


def _flat_outputs(output) -> list[Any]:
    if isinstance(output, (tuple, list)):
        out = []
        for o in output:
            out.extend(_flat_outputs(o))
        return out
    return [output]


def _lower_bsym(ctx: LoweringContext, bsym: BoundSymbol) -> None:
    lowering = LOWERINGS.get(bsym.sym.id)
    if lowering is None:
        if not bsym.subsymbols:
            raise NotImplementedError(f"nvFuser has no lowering for {bsym.sym.print_name or bsym.sym.name}")
        for sub in bsym.subsymbols:
            _lower_bsym(ctx, sub)
        return
    result = lowering.lower(ctx, *bsym.args, **bsym.kwargs)
    outs = [o for o in _flat_outputs(bsym.output) if isinstance(o, Proxy)]
    results = _flat_outputs(result)
    if len(outs) != len(results):  # pragma: no cover - every lowering returns one value per output
        raise RuntimeError(f"lowering {bsym.sym.name}: {len(results)} values for {len(outs)} outputs")
    for o, r in zip(outs, results):
        ctx.values[o.name] = r


def lower_region(
    fd: Any,
    region,
    datatype: Any,
    descriptors: Sequence[tuple[Sequence[bool | None], Sequence[int]] | None] | None = None,
) -> LoweringContext:
    """Records ``region`` (a :class:`thunder.executors.fusion.Region`) on the ``FusionDefinition`` ``fd``.

    Args:
        fd: an nvFuser ``FusionDefinition`` inside its ``with`` block (or a stand-in with the
            same methods).
        region: the region: its inputs become the fusion's inputs in order, its outputs the
            fusion's outputs in order.
        datatype: nvFuser's ``DataType`` enum (or a stand-in with the same member names).
        descriptors: per region input, ``(contiguity, stride_order)`` for a tensor (from
            ``nvfuser_direct.compute_tensor_descriptor`` on the actual input) or ``None``; by default
            every tensor is taken as contiguous.
    """
    ctx = LoweringContext(fd, datatype)
    for i, p in enumerate(region.inputs):
        if isinstance(p, TensorProxy):
            desc = descriptors[i] if descriptors is not None and descriptors[i] is not None else None
            contiguity, stride_order = desc if desc is not None else contiguous_descriptor(p.shape)
            ctx.values[p.name] = fd.define_tensor(
                shape=[1 if s == 1 else -1 for s in p.shape],
                contiguity=list(contiguity),
                dtype=ctx.dtype(p.dtype),
                is_cpu=False,
                stride_order=list(stride_order),
            )
        elif isinstance(p, NumberProxy):
            ctx.values[p.name] = fd.define_scalar(dtype=getattr(datatype, _scalar_dtype_name(p.value)))
        else:
            raise TypeError(f"nvFuser region input {p.name} is a {type(p).__name__}, not a tensor or number")
    for bsym in region.bound_symbols:
        _lower_bsym(ctx, bsym)
    for p in region.outputs:
        fd.add_output(ctx.values[p.name])
    return ctx
