"""The strides eager's CPU kernels give a pointwise op's result (TensorIterator's rules), where PyTorch's meta
kernels answer otherwise.

Thunder learns a result's layout by running the op's meta kernel on its arguments' shadows
(``result_layouts.py``). For pointwise ops those kernels are Python references whose layout rule is not the CPU
kernels': ``x * 2.0`` of a ``[2, 1]`` tensor with strides ``(1, 2)`` is ``(1, 2)`` on the CPU and ``(1, 1)`` on
``meta``; ``a // a.mT`` of a transposed ``a`` is ``(1, 3)`` on the CPU and ``(3, 1)`` on ``meta``. The layout
decides what ``stride()`` reads, whether a later ``view`` or overlap check refuses, and the path ``einsum`` takes.

TensorIterator (ATen's loop builder) lays out a new result so:

1. when every operand has the result's shape: contiguous if all operands are, channels-last if all are, the
   operands' strides if they are all the same, non-overlapping and dense;
2. otherwise, it orders the dimensions by the operands' strides (an insertion sort from the last dimension: the
   first operand whose strides differ on two dimensions decides, a broadcast or zero stride abstains, equal
   strides put the larger size outside) and makes the result contiguous in that order.

Only the cases this module knows are answered (``None`` otherwise, and the meta kernel's answer stands): an op of
``POINTWISE`` on the CPU, every tensor operand of one dtype (no operand is converted first) and a result of that
dtype or bool, a result with elements. ``tests/test_pointwise_layout.py`` checks the rule against eager on random
layouts.
"""

from __future__ import annotations

import torch

from thunder.tracing.storage_geometry import dense_layout

__all__ = ["POINTWISE", "pointwise_strides"]

# ops whose result TensorIterator lays out, each operand a tensor or a number (a Python number is an operand of
# its own, of no dimensions); the unary ones take one operand
_BINARY = frozenset(
    """add sub mul div true_divide floor_divide remainder fmod maximum minimum fmax fmin atan2 hypot copysign
    nextafter logaddexp logaddexp2 bitwise_and bitwise_or bitwise_xor logical_and logical_or logical_xor eq ne lt
    le gt ge __add__ __radd__ __sub__ __mul__ __rmul__ __truediv__ __floordiv__ __mod__ __and__ __rand__ __or__
    __ror__ __xor__ __rxor__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__""".split()
)
_UNARY = frozenset(
    """exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh sigmoid
    sqrt rsqrt erf erfc erfinv abs neg negative __neg__ __abs__ ceil floor trunc frac sign sgn reciprocal
    bitwise_not logical_not __invert__ isnan isinf isfinite signbit""".split()
)
POINTWISE = _BINARY | _UNARY | {"where"}


def pointwise_strides(func, args, kwargs, result: torch.Tensor) -> tuple[int, ...] | None:
    """The strides eager's CPU kernel gives ``func(*args, **kwargs)``'s ``result`` (a meta tensor of its shape and
    dtype), the arguments being shadows; None where this module does not know them."""
    name = getattr(func, "__name__", None)
    if name not in POINTWISE or result.device.type != "meta" or result.numel() == 0:
        return None
    if name in _UNARY:
        if len(args) != 1 or kwargs:
            return None
        operands = list(args)
    elif name == "where":
        if len(args) != 3 or kwargs:
            return None
        operands = list(args)
    else:
        if len(args) != 2 or kwargs:  # (an alpha= or rounding_mode= keeps eager's path; let meta answer)
            return None
        operands = list(args)
    tensors = [a for a in operands if isinstance(a, torch.Tensor)]
    if not tensors or any(not isinstance(a, (torch.Tensor, bool, int, float)) for a in operands):
        return None
    values = tensors[1:] if name == "where" else tensors  # (where's condition is read as bool, not converted)
    if len({t.dtype for t in values}) != 1 or any(t.device.type != "meta" for t in tensors):
        return None
    if result.dtype not in (values[0].dtype, torch.bool):
        return None
    if any(not isinstance(a, torch.Tensor) and _number_changes_dtype(a, values[0].dtype) for a in operands):
        return None
    shape = tuple(result.shape)
    layouts = [(tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else ((), ()) for a in operands]
    return _strides(layouts, shape)


def _number_changes_dtype(x, dtype: torch.dtype) -> bool:
    """Whether a Python number beside a tensor of ``dtype`` makes the result another dtype (the tensor converted)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return dtype is torch.bool
    return not (dtype.is_floating_point or dtype.is_complex)


def _strides(layouts: list[tuple[tuple, tuple]], shape: tuple[int, ...]) -> tuple[int, ...]:
    ndim = len(shape)
    if ndim == 0:
        return ()
    if all(s == shape for s, _ in layouts):
        if all(_contiguous(s, st) for s, st in layouts):
            return _contiguous_strides(shape)
        if ndim == 4 and all(_channels_last(s, st) for s, st in layouts):
            return _in_order(shape, [1, 3, 2, 0])
        if len({tuple(st) for _, st in layouts}) == 1 and dense_layout(shape, layouts[0][1]):
            return tuple(layouts[0][1])
    strides = []
    for s, st in layouts:
        offset = ndim - len(s)
        row = [0] * ndim
        for i, (n, k) in enumerate(zip(s, st)):
            row[offset + i] = 0 if (n == 1 and shape[offset + i] != 1) else k
        strides.append(row)

    def order(d0: int, d1: int) -> int:
        for row in strides:
            s0, s1 = row[d0], row[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # (perm[0]: the innermost dimension)
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = order(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return _in_order(shape, perm)


def _in_order(shape: tuple[int, ...], perm: list[int]) -> tuple[int, ...]:
    """Contiguous strides of ``shape`` with ``perm[0]`` the innermost dimension."""
    strides = [0] * len(shape)
    step = 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return _in_order(shape, list(range(len(shape) - 1, -1, -1)))


def _contiguous(shape, stride) -> bool:
    """ATen's is_contiguous: the size-1 dimensions' strides do not count."""
    expected = 1
    for n, k in zip(reversed(shape), reversed(stride)):
        if n != 1:
            if k != expected:
                return False
            expected *= n
    return True


def _channels_last(shape, stride) -> bool:
    """ATen's is_contiguous(memory_format=torch.channels_last) for a 4-d layout."""
    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True
