"""Elementwise torch operations: math, comparisons, bitwise and logical ops, activations."""

from __future__ import annotations

import builtins
import math
from numbers import Number

import torch
import torch.nn.functional as F

from thunder import clang
from thunder.clang import TypePromotionKind as TPK
from thunder.core import devices, dtypes, prims
from thunder.core.checks import check
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.torch.registry import InplaceOp, register_torch_alias, torchsymbol

T = torch.Tensor


def _inplace(torch_fn, sym):
    register_torch_alias(torch_fn, InplaceOp(sym))


def _unary(name, prim, kind=TPK.DEFAULT, python_fn=None, extra=()):
    torch_fn = getattr(torch, name, None)
    fns = [f for f in (torch_fn, getattr(T, name, None), *extra) if f is not None]

    def impl(a):
        return clang.elementwise_unary(a, prim, kind, python_fn)

    impl.__name__ = name
    sym = torchsymbol(*fns, method_name=name)(impl)
    if hasattr(T, name + "_"):
        _inplace(getattr(T, name + "_"), sym)
    return sym


abs = _unary("abs", prims.abs, TPK.COMPLEX_TO_FLOAT, python_fn=lambda x: x.__abs__(), extra=(T.__abs__,))
neg = _unary("neg", prims.neg, python_fn=lambda x: -x, extra=(T.__neg__, torch.negative))
exp = _unary("exp", prims.exp, TPK.INT_TO_FLOAT, math.exp)
exp2 = _unary("exp2", prims.exp2, TPK.INT_TO_FLOAT)
expm1 = _unary("expm1", prims.expm1, TPK.INT_TO_FLOAT, math.expm1)
log = _unary("log", prims.log, TPK.INT_TO_FLOAT, math.log)
log1p = _unary("log1p", prims.log1p, TPK.INT_TO_FLOAT, math.log1p)
log2 = _unary("log2", prims.log2, TPK.INT_TO_FLOAT, math.log2)
log10 = _unary("log10", prims.log10, TPK.INT_TO_FLOAT, math.log10)
sin = _unary("sin", prims.sin, TPK.INT_TO_FLOAT, math.sin)
cos = _unary("cos", prims.cos, TPK.INT_TO_FLOAT, math.cos)
tan = _unary("tan", prims.tan, TPK.INT_TO_FLOAT, math.tan)
asin = _unary("asin", prims.asin, TPK.INT_TO_FLOAT, math.asin)
acos = _unary("acos", prims.acos, TPK.INT_TO_FLOAT, math.acos)
atan = _unary("atan", prims.atan, TPK.INT_TO_FLOAT, math.atan)
sinh = _unary("sinh", prims.sinh, TPK.INT_TO_FLOAT, math.sinh)
cosh = _unary("cosh", prims.cosh, TPK.INT_TO_FLOAT, math.cosh)
tanh = _unary("tanh", prims.tanh, TPK.INT_TO_FLOAT, math.tanh)
asinh = _unary("asinh", prims.asinh, TPK.INT_TO_FLOAT, math.asinh)
acosh = _unary("acosh", prims.acosh, TPK.INT_TO_FLOAT, math.acosh)
atanh = _unary("atanh", prims.atanh, TPK.INT_TO_FLOAT, math.atanh)
sqrt = _unary("sqrt", prims.sqrt, TPK.INT_TO_FLOAT, math.sqrt)
rsqrt = _unary("rsqrt", prims.rsqrt, TPK.INT_TO_FLOAT, lambda x: 1 / math.sqrt(x))
reciprocal = _unary("reciprocal", prims.reciprocal, TPK.INT_TO_FLOAT, lambda x: 1 / x)
erf = _unary("erf", prims.erf, TPK.INT_TO_FLOAT, math.erf)
erfc = _unary("erfc", prims.erfc, TPK.INT_TO_FLOAT, math.erfc)
erfinv = _unary("erfinv", prims.erfinv, TPK.INT_TO_FLOAT)
lgamma = _unary("lgamma", prims.lgamma, TPK.INT_TO_FLOAT, math.lgamma)
digamma = _unary("digamma", prims.digamma, TPK.INT_TO_FLOAT)
sign = _unary("sign", prims.sign)
floor = _unary("floor", prims.floor, python_fn=math.floor)
ceil = _unary("ceil", prims.ceil, python_fn=math.ceil)
trunc = _unary("trunc", prims.trunc, python_fn=math.trunc)
isfinite = _unary("isfinite", prims.isfinite, TPK.ALWAYS_BOOL, math.isfinite)
isnan = _unary("isnan", prims.isnan, TPK.ALWAYS_BOOL, math.isnan)
isinf = _unary("isinf", prims.isinf, TPK.ALWAYS_BOOL, math.isinf)
signbit = _unary("signbit", prims.signbit, TPK.ALWAYS_BOOL)


@torchsymbol(torch.round, T.round, method_name="round")
def round(a, decimals: int = 0):
    check(decimals == 0, "round with decimals is not supported yet", NotImplementedError)
    return clang.elementwise_unary(a, prims.round, python_fn=builtins.round)


@torchsymbol(torch.bitwise_not, T.bitwise_not, T.__invert__, method_name="bitwise_not")
def bitwise_not(a):
    check(dtypes.is_integer_dtype(a.dtype), "bitwise_not is only defined for integer and bool tensors", TypeError)
    if a.dtype is dtypes.bool8:
        return prims.eq(a, False)
    return prims.bitwise_not(a)


@torchsymbol(torch.logical_not, T.logical_not, method_name="logical_not")
def logical_not(a):
    if a.dtype is dtypes.bool8:
        return prims.eq(a, False)
    return prims.eq(a, clang.maybe_convert_to_dtype(0, a.dtype))


@torchsymbol(torch.sigmoid, T.sigmoid, F.sigmoid, torch.special.expit, method_name="sigmoid")
def sigmoid(a):
    comp, res = clang.elementwise_type_promotion(a, kind=TPK.INT_TO_FLOAT)
    a = clang.maybe_convert_to_dtype(a, comp)
    out = prims.reciprocal(prims.add(prims.exp(prims.neg(a)), 1.0))
    return clang.maybe_convert_to_dtype(out, res)


_inplace(T.sigmoid_, sigmoid)


# ---------------------------------------------------------------- binary


def _binary(name, prim, kind=TPK.DEFAULT, python_fn=None, torch_fns=(), method=True, reflected=None):
    def impl(a, b):
        return clang.elementwise_binary(a, b, prim, kind, python_fn)

    impl.__name__ = name
    sym = torchsymbol(*torch_fns, method_name=name if method else None)(impl)
    if reflected is not None:
        register_torch_alias(reflected, lambda a, b: sym(b, a))
    return sym


def _scaled(a, b, alpha):
    """``b * alpha`` as torch.add computes it: alpha is taken in the result's type (bool for bool inputs)."""
    if alpha == 1:
        return b
    if clang.result_dtype(a, b) is dtypes.bool8 and isinstance(alpha, (bool, int)):
        alpha = bool(alpha)
    return clang.mul(b, alpha)


@torchsymbol(torch.add, T.add, T.__add__, method_name="add")
def add(a, b, *, alpha=1, out=None):
    check(out is None, "out= is not supported", NotImplementedError)
    return clang.add(a, _scaled(a, b, alpha))


register_torch_alias(T.__radd__, lambda a, b: add(b, a))
register_torch_alias(T.add_, InplaceOp(add))
register_torch_alias(T.__iadd__, InplaceOp(add))


@torchsymbol(torch.sub, T.sub, T.__sub__, torch.subtract, method_name="sub")
def sub(a, b, *, alpha=1, out=None):
    check(out is None, "out= is not supported", NotImplementedError)
    _refuse_bool_subtraction(a, b)
    return clang.sub(a, _scaled(a, b, alpha))


def _is_bool(x) -> bool:
    return type(x) is bool or (isinstance(x, TensorProxy) and x.dtype is dtypes.bool8)


def _refuse_bool_subtraction(a, b) -> None:
    """Eager's kernel refuses a bool operand (its check, made here while tracing: an unused subtraction's error
    would otherwise go with it)."""
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
            "operator instead."
        )
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, "
            "use the `~` or `logical_not()` operator instead."
        )


register_torch_alias(T.__rsub__, lambda a, b: sub(b, a))
register_torch_alias(T.sub_, InplaceOp(sub))
register_torch_alias(T.__isub__, InplaceOp(sub))

mul = _binary(
    "mul",
    prims.mul,
    python_fn=lambda x, y: x * y,
    torch_fns=(torch.mul, T.mul, T.__mul__, torch.multiply),
    reflected=T.__rmul__,
)
register_torch_alias(T.mul_, InplaceOp(mul))
register_torch_alias(T.__imul__, InplaceOp(mul))

true_divide = _binary(
    "true_divide",
    prims.div,
    TPK.INT_TO_FLOAT,
    lambda x, y: x / y,
    (torch.true_divide, T.__truediv__, T.true_divide),
)
# eager's ``number / x`` and ``x.__rdiv__(y)`` are ``x.reciprocal() * y``: the reciprocal rounded in x's dtype, and its
# gradient, infinite at 0 where the quotient's is NaN
register_torch_alias(T.__rtruediv__, lambda a, b: mul(reciprocal(a), b))


@torchsymbol(torch.div, T.div, torch.divide, method_name="div")
def div(a, b, *, rounding_mode=None, out=None):
    check(out is None, "out= is not supported", NotImplementedError)
    if not isinstance(a, TensorProxy) and not isinstance(b, TensorProxy):
        # torch.div of two numbers (sizes, in Longformer: torch.div(seq_len, w, rounding_mode="trunc")) is a 0-d tensor
        a = _number_as_tensor(a)
    if rounding_mode is None:
        return true_divide(a, b)
    if rounding_mode == "trunc":
        return trunc(true_divide(a, b)) if _is_float(a, b) else clang.elementwise_binary(a, b, prims.div)
    if rounding_mode == "floor":
        return floor_divide(a, b)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")


def _number_as_tensor(x) -> TensorProxy:
    """A Python number (or a size) as the 0-d CPU tensor torch makes of it: int64, bool, or the default dtype."""
    kind = x.python_type if isinstance(x, NumberProxy) else int if isinstance(x, torch.SymInt) else type(x)
    dtype = {bool: torch.bool, int: torch.int64}.get(kind)
    if dtype is None:
        dtype = torch.get_default_dtype() if kind is float else torch.complex64
    return clang.full((), x, device=devices.cpu, dtype=dtypes.to_dtype(dtype))


def _is_float(a, b):
    return dtypes.is_inexact_dtype(clang.result_dtype(a, b))


register_torch_alias(T.div_, InplaceOp(div))
register_torch_alias(T.__itruediv__, InplaceOp(true_divide))

floor_divide = _binary(
    "floor_divide",
    prims.floor_divide,
    python_fn=lambda x, y: x // y,
    torch_fns=(torch.floor_divide, T.floor_divide, T.__floordiv__),
    reflected=T.__rfloordiv__,
)
remainder = _binary(
    "remainder",
    prims.remainder,
    python_fn=lambda x, y: x % y,
    torch_fns=(torch.remainder, T.remainder, T.__mod__),
    reflected=T.__rmod__,
)
fmod = _binary("fmod", prims.fmod, python_fn=math.fmod, torch_fns=(torch.fmod, T.fmod))
atan2 = _binary("atan2", prims.atan2, TPK.INT_TO_FLOAT, math.atan2, (torch.atan2, T.atan2))
maximum = _binary("maximum", prims.maximum, TPK.NO_OPMATH, max, (torch.maximum, T.maximum))
minimum = _binary("minimum", prims.minimum, TPK.NO_OPMATH, min, (torch.minimum, T.minimum))
copysign = _binary("copysign", prims.copysign, TPK.INT_TO_FLOAT, math.copysign, (torch.copysign, T.copysign))
eq = _binary("eq", prims.eq, TPK.ALWAYS_BOOL, lambda x, y: x == y, (torch.eq, T.eq, T.__eq__))
ne = _binary("ne", prims.ne, TPK.ALWAYS_BOOL, lambda x, y: x != y, (torch.ne, T.ne, T.__ne__, torch.not_equal))
lt = _binary("lt", prims.lt, TPK.ALWAYS_BOOL, lambda x, y: x < y, (torch.lt, T.lt, T.__lt__, torch.less))
le = _binary("le", prims.le, TPK.ALWAYS_BOOL, lambda x, y: x <= y, (torch.le, T.le, T.__le__, torch.less_equal))
gt = _binary("gt", prims.gt, TPK.ALWAYS_BOOL, lambda x, y: x > y, (torch.gt, T.gt, T.__gt__, torch.greater))
ge = _binary("ge", prims.ge, TPK.ALWAYS_BOOL, lambda x, y: x >= y, (torch.ge, T.ge, T.__ge__, torch.greater_equal))


def _bitwise(name, prim, pyfn, fns, reflected):
    def impl(a, b):
        for x in (a, b):
            if isinstance(x, TensorProxy):
                check(
                    dtypes.is_integer_dtype(x.dtype), f"{name} is only defined for integer and bool tensors", TypeError
                )
        return clang.elementwise_binary(a, b, prim, TPK.NO_OPMATH, pyfn)

    impl.__name__ = name
    sym = torchsymbol(*fns, method_name=name)(impl)
    register_torch_alias(reflected, lambda a, b: sym(b, a))
    return sym


bitwise_and = _bitwise(
    "bitwise_and", prims.bitwise_and, lambda x, y: x & y, (torch.bitwise_and, T.bitwise_and, T.__and__), T.__rand__
)
bitwise_or = _bitwise(
    "bitwise_or", prims.bitwise_or, lambda x, y: x | y, (torch.bitwise_or, T.bitwise_or, T.__or__), T.__ror__
)
bitwise_xor = _bitwise(
    "bitwise_xor", prims.bitwise_xor, lambda x, y: x ^ y, (torch.bitwise_xor, T.bitwise_xor, T.__xor__), T.__rxor__
)
register_torch_alias(T.__iand__, InplaceOp(bitwise_and))
register_torch_alias(T.__ior__, InplaceOp(bitwise_or))


def _to_bool(a):
    if isinstance(a, TensorProxy):
        return a if a.dtype is dtypes.bool8 else prims.ne(a, clang.maybe_convert_to_dtype(0, a.dtype))
    return bool(a)


@torchsymbol(torch.logical_and, T.logical_and, method_name="logical_and")
def logical_and(a, b):
    a, b = clang.maybe_broadcast(_to_bool(a), _to_bool(b))
    return prims.bitwise_and(a, b)


@torchsymbol(torch.logical_or, T.logical_or, method_name="logical_or")
def logical_or(a, b):
    a, b = clang.maybe_broadcast(_to_bool(a), _to_bool(b))
    return prims.bitwise_or(a, b)


@torchsymbol(torch.logical_xor, T.logical_xor, method_name="logical_xor")
def logical_xor(a, b):
    a, b = clang.maybe_broadcast(_to_bool(a), _to_bool(b))
    return prims.bitwise_xor(a, b)


@torchsymbol(torch.pow, T.pow, T.__pow__, method_name="pow")
def pow(a, b):
    if isinstance(a, TensorProxy) and not isinstance(b, TensorProxy) and b == 2:
        comp, res = clang.elementwise_type_promotion(a, b, kind=TPK.DEFAULT)
        ac = clang.maybe_convert_to_dtype(a, comp)
        return clang.maybe_convert_to_dtype(prims.mul(ac, ac), res)
    return clang.elementwise_binary(a, b, prims.pow, python_fn=lambda x, y: x**y)


register_torch_alias(T.__rpow__, lambda a, b: pow(b, a))
register_torch_alias(T.pow_, InplaceOp(pow))


@torchsymbol(torch.where)
def where(condition, input=None, other=None):
    check(
        input is not None and other is not None,
        "where(condition) with one argument is not supported",
        NotImplementedError,
    )
    return clang.where(condition, input, other)


# x.where(condition, y) is torch.where(condition, x, y): the tensor is the value, not the condition
register_torch_alias(T.where, lambda self, condition, other: where(condition, self, other))


@torchsymbol(torch.clamp, T.clamp, torch.clip, T.clip, method_name="clamp")
def clamp(a, min=None, max=None):
    check(min is not None or max is not None, "torch.clamp: At least one of 'min' or 'max' must not be None")
    # NaN-propagating, as torch.clamp
    if min is not None:
        a = clang.where(lt(a, min), min, a)
    if max is not None:
        a = clang.where(gt(a, max), max, a)
    return a


register_torch_alias(T.clamp_, InplaceOp(clamp))


@torchsymbol(torch.masked_fill, T.masked_fill, method_name="masked_fill")
def masked_fill(a, mask, value):
    check(
        mask.dtype is dtypes.bool8,
        lambda: (
            f"masked_fill_ only supports boolean masks, but got mask with dtype {str(mask.dtype.torch_dtype).replace('torch.', '')}"
        ),
    )
    if isinstance(value, TensorProxy):
        check(value.ndim == 0, "masked_fill only supports a 0-dimensional value tensor")
        value = clang.maybe_convert_to_dtype(value, a.dtype)
    else:
        value = clang.maybe_convert_to_dtype(value, a.dtype)
    return clang.where(mask, value, a)


register_torch_alias(T.masked_fill_, InplaceOp(masked_fill))


@torchsymbol(torch.lerp, T.lerp, method_name="lerp")
def lerp(start, end, weight):
    shapes = [x.shape for x in (start, end, weight) if isinstance(x, TensorProxy)]
    clang.compute_broadcast_shape(*shapes)
    return add(start, mul(weight, sub(end, start)))


# ---------------------------------------------------------------- activations


@torchsymbol(F.relu, torch.relu, T.relu, method_name="relu")
def relu(a, inplace: bool = False):
    # (eager's kernel checks it; checked here while tracing, so an unused relu's error stays with it)
    check(a.dtype is not dtypes.bool8, "Boolean inputs not supported for relu", RuntimeError)
    return clang.where(gt(a, 0), a, clang.maybe_convert_to_dtype(0, a.dtype))


_inplace(T.relu_, relu)
register_torch_alias(torch.relu_, InplaceOp(relu))


@torchsymbol(F.relu6)
def relu6(a, inplace: bool = False):
    return clamp(a, 0, 6)


@torchsymbol(F.silu)
def silu(a, inplace: bool = False):
    comp, res = clang.elementwise_type_promotion(a, kind=TPK.INT_TO_FLOAT)
    ac = clang.maybe_convert_to_dtype(a, comp)
    out = prims.mul(ac, prims.reciprocal(prims.add(prims.exp(prims.neg(ac)), 1.0)))
    return clang.maybe_convert_to_dtype(out, res)


@torchsymbol(F.gelu)
def gelu(a, approximate: str = "none"):
    comp, res = clang.elementwise_type_promotion(a, kind=TPK.INT_TO_FLOAT)
    x = clang.maybe_convert_to_dtype(a, comp)
    if approximate == "none":
        out = prims.mul(prims.mul(x, 0.5), prims.add(prims.erf(prims.mul(x, 1 / math.sqrt(2))), 1.0))
    elif approximate == "tanh":
        inner = prims.mul(prims.add(x, prims.mul(prims.mul(prims.mul(x, x), x), 0.044715)), math.sqrt(2 / math.pi))
        out = prims.mul(prims.mul(x, 0.5), prims.add(prims.tanh(inner), 1.0))
    else:
        raise RuntimeError("approximate argument must be either none or tanh.")
    return clang.maybe_convert_to_dtype(out, res)


@torchsymbol(F.softplus)
def softplus(a, beta: float = 1.0, threshold: float = 20.0):
    scaled = mul(a, beta)
    return where(gt(scaled, threshold), a, true_divide(log1p(exp(scaled)), beta))


@torchsymbol(F.leaky_relu)
def leaky_relu(a, negative_slope: float = 0.01, inplace: bool = False):
    return where(gt(a, 0), a, mul(a, negative_slope))


@torchsymbol(F.elu)
def elu(a, alpha: float = 1.0, inplace: bool = False):
    return where(gt(a, 0), a, mul(expm1(a), alpha))


@torchsymbol(F.hardsigmoid)
def hardsigmoid(a, inplace: bool = False):
    return true_divide(relu6(add(a, 3)), 6)


@torchsymbol(F.hardswish)
def hardswish(a, inplace: bool = False):
    check(
        dtypes.is_float_dtype(a.dtype),
        lambda: f"hardswish only supports floating point dtypes, got {a.dtype}",
        ValueError,
    )
    return true_divide(mul(a, relu6(add(a, 3))), 6)


@torchsymbol(F.mish)
def mish(a, inplace: bool = False):
    return mul(a, tanh(softplus(a)))


@torchsymbol(F.logsigmoid)
def logsigmoid(a):
    return neg(softplus(neg(a)))


@torchsymbol(F.tanh)
def nn_tanh(a):
    return tanh(a)


@torchsymbol(F.tanhshrink)
def tanhshrink(a):
    return sub(a, tanh(a))


def is_number(x) -> bool:
    return isinstance(x, (Number, torch.SymInt, torch.SymFloat))


def _times_value(name: str, t, value):
    """``t * value`` for addcmul/addcdiv's ``value``: a number, or a 0-d tensor that PyTorch reads as a number
    (no gradient reaches it; it is cast to the result's dtype, as eager casts the number)."""
    if isinstance(value, TensorProxy):
        check(
            value.ndim == 0 and not value.requires_grad,
            lambda: (
                f"{name}(): argument 'value' must be a Number or a 0-d tensor that does not require grad "
                "(PyTorch reads it as a number), not a tensor of shape "
                f"{tuple(value.shape)}{' that requires grad' if value.requires_grad else ''}"
            ),
            exception_type=TypeError,
        )
        from thunder.torch.shape import detach

        return mul(t, clang.maybe_convert_to_dtype(detach(value), t.dtype))
    return mul(t, value) if value != 1 else t


@torchsymbol(torch.addcmul, T.addcmul, method_name="addcmul")
def addcmul(a, tensor1, tensor2, *, value=1):
    if isinstance(value, Number):
        # ``value`` takes no part in type promotion: eager casts it to the tensors' result type (0.1 -> 0 for
        # integer tensors), so an integer addcmul stays integer
        value = clang.maybe_convert_to_dtype(value, clang.result_dtype(a, tensor1, tensor2))
    return add(a, _times_value("addcmul", mul(tensor1, tensor2), value))


@torchsymbol(torch.addcdiv, T.addcdiv, method_name="addcdiv")
def addcdiv(a, tensor1, tensor2, *, value=1):
    return add(a, _times_value("addcdiv", true_divide(tensor1, tensor2), value))


_inplace(T.addcmul_, addcmul)
_inplace(T.addcdiv_, addcdiv)
_inplace(T.lerp_, lerp)
_inplace(T.clamp_min_, lambda a, m: clamp(a, m, None))
_inplace(T.clamp_max_, lambda a, m: clamp(a, None, m))
_inplace(T.__ixor__, bitwise_xor)
_inplace(T.__imod__, remainder)
_inplace(T.__ifloordiv__, floor_divide)
_inplace(T.floor_divide_, floor_divide)
_inplace(T.remainder_, remainder)
_inplace(T.fmod_, fmod)
_inplace(T.logical_not_, logical_not)
_inplace(T.logical_and_, logical_and)
_inplace(T.logical_or_, logical_or)
_inplace(T.bitwise_and_, bitwise_and)
_inplace(T.bitwise_or_, bitwise_or)
_inplace(T.bitwise_xor_, bitwise_xor)
_inplace(T.bitwise_not_, bitwise_not)
_inplace(T.round_, round)
for _name in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "atan2", "copysign"):
    if hasattr(T, _name + "_"):
        _inplace(getattr(T, _name + "_"), globals()[_name])


@torchsymbol(torch.clamp_min, T.clamp_min, method_name="clamp_min")
def clamp_min(a, min):
    return clamp(a, min, None)


@torchsymbol(torch.clamp_max, T.clamp_max, method_name="clamp_max")
def clamp_max(a, max):
    return clamp(a, None, max)


@torchsymbol(torch.square, T.square, method_name="square")
def square(a):
    if isinstance(a, TensorProxy) and a.dtype is dtypes.bool8:  # eager computes pow(a, 2): bool becomes int64
        a = clang.maybe_convert_to_dtype(a, dtypes.int64)
    return mul(a, a)


@torchsymbol(torch.frac, T.frac, method_name="frac")
def frac(a):
    return sub(a, trunc(a))


@torchsymbol(torch.xlogy, T.xlogy, method_name="xlogy")
def xlogy(a, b):
    out = mul(a, log(b))
    return where(eq(a, 0), clang.maybe_convert_to_dtype(0, out.dtype), where(isnan(b), b, out))


@torchsymbol(torch.nan_to_num, T.nan_to_num, method_name="nan_to_num")
def nan_to_num(a, nan: float = 0.0, posinf=None, neginf=None):
    if not dtypes.is_float_dtype(a.dtype):
        return prims.clone(a)
    info = torch.finfo(a.dtype.torch_dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    a = where(isnan(a), nan, a)
    a = where(logical_and(isinf(a), gt(a, 0)), posinf, a)
    return where(logical_and(isinf(a), lt(a, 0)), neginf, a)


@torchsymbol(F.hardtanh)
def hardtanh(a, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    if dtypes.is_integer_dtype(a.dtype) and a.dtype is not dtypes.bool8:
        # eager's kernel converts the limits to the integer type (toward zero): the result keeps its dtype
        min_val, max_val = int(min_val), int(max_val)
        check(
            a.dtype is not dtypes.uint8 or (min_val >= 0 and max_val >= 0),
            "cannot do hardtanh on an unsigned type with negative limits",
        )
    return clamp(a, min_val, max_val)


@torchsymbol(F.selu)
def selu(a, inplace: bool = False):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return mul(where(gt(a, 0), a, mul(expm1(a), alpha)), scale)


@torchsymbol(F.celu)
def celu(a, alpha: float = 1.0, inplace: bool = False):
    return where(gt(a, 0), a, mul(expm1(true_divide(a, alpha)), alpha))


@torchsymbol(F.softsign)
def softsign(a):
    return true_divide(a, add(abs(a), 1))


@torchsymbol(F.hardshrink)
def hardshrink(a, lambd: float = 0.5):
    return where(gt(abs(a), lambd), a, clang.maybe_convert_to_dtype(0, a.dtype))


@torchsymbol(F.softshrink)
def softshrink(a, lambd: float = 0.5):
    return where(
        gt(a, lambd), sub(a, lambd), where(lt(a, -lambd), add(a, lambd), clang.maybe_convert_to_dtype(0, a.dtype))
    )


@torchsymbol(F.glu)
def glu(a, dim: int = -1):
    from thunder.core.checks import canonicalize_dim

    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim]
    check(n % 2 == 0, lambda: f"Halving dimension must be even, but dimension {dim} is size {n}")
    return mul(clang.slice_in_dim(a, 0, n // 2, 1, dim), sigmoid(clang.slice_in_dim(a, n // 2, n, 1, dim)))


@torchsymbol(F.prelu)
def prelu(a, weight):
    if weight.numel() != 1 and a.ndim >= 2:
        shape = [1] * a.ndim
        shape[1] = weight.numel()
        weight = clang.reshape(weight, shape)
    return where(gt(a, 0), a, mul(weight, a))
